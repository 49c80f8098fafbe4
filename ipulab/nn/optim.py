"""SGD with optional momentum, as torch.optim.SGD (no dampening, no Nesterov):

    momentum == 0:   w -= lr * g
    momentum  > 0:   v = momentum * v + g;   w -= lr * v        (v starts at zero)

With the optimizer state off-chip (TrainConfig(optimizer_state="off-chip")) v lives in
Streaming Memory: a remote buffer per replica, copied into an on-chip tensor just before the
update and written back just after it, so the tensor is live only around the update.

With fp16 training the gradients are HALF and carry the loss scale S: the update reads them
as float, times 1 / S, into the float master weights (and velocity) in the same map.

The update is built over ALL weights at once: the weights and the gradients are each joined
into one flat view (poplar.concat, nothing copied), so an update is one popops compute set
(two with momentum), run where the weights live; gradients made elsewhere come in through the
exchange.
"""
from __future__ import annotations

from .. import popops
from ..errors import GraphError
from ..poplar import FLOAT
from ..poplar import program as prog
from ..popops.expr import _1, _2, cast


class SGD:
    """torch.optim.SGD(lr, momentum=0.0), for the Trainer."""

    def __init__(self, lr: float, momentum: float = 0.0):
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise GraphError(f"SGD: lr must be a positive number, not {lr!r}")
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or \
                not 0.0 <= momentum < 1.0:
            raise GraphError(f"SGD: momentum must be in [0, 1), not {momentum!r}")
        self.lr, self.momentum = float(lr), float(momentum)
        self.velocity = None           # the on-chip velocity tensor (with momentum)
        self.state_buffers = []        # the remote buffers of every off-chip velocity built

    def build(self, graph, weights, grads, seq, name: str = "sgd",
              grad_scale: float = 1.0, off_chip: bool = False) -> None:
        """Add the update of `weights` (a flat FLOAT tensor, e.g. a concat of every weight)
        by grad_scale * `grads` (the same shape, FLOAT or HALF) to seq. off_chip: keep the
        velocity in a remote buffer named f"{name}/velocity" (zeros at load), loaded for the
        update and stored after it."""
        if weights.shape != grads.shape:
            raise GraphError(f"SGD: weights {list(weights.shape)} and gradients "
                             f"{list(grads.shape)} differ")
        plain = grads.dtype == FLOAT and grad_scale == 1.0
        g = _2 if plain else cast(_2, FLOAT) * float(grad_scale)
        if self.momentum:
            self.velocity = v = graph.clone(weights, f"{name}/velocity")
            if off_chip:
                buffer = graph.add_remote_buffer(f"{name}/velocity", FLOAT, v.num_elements())
                self.state_buffers.append(buffer)
                seq.add(prog.Copy(buffer, v, name=f"{name}/velocity/load"))
            popops.map_in_place(graph, _1 * self.momentum + g, [v, grads], seq,
                                f"{name}/momentum")
            popops.scaled_add_to(graph, weights, v, -self.lr, seq, f"{name}/update")
            if off_chip:
                seq.add(prog.Copy(v, buffer, name=f"{name}/velocity/store"))
        elif plain:
            popops.scaled_add_to(graph, weights, grads, -self.lr, seq, f"{name}/update")
        else:
            popops.map_in_place(graph, _1 + g * -self.lr, [weights, grads], seq,
                                f"{name}/update")

    def __repr__(self) -> str:
        return f"SGD(lr={self.lr}, momentum={self.momentum})"
