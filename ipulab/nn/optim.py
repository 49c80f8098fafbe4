"""SGD with optional momentum, as torch.optim.SGD (no dampening, no Nesterov):

    momentum == 0:   w -= lr * g
    momentum  > 0:   v = momentum * v + g;   w -= lr * v        (v starts at zero)

The update is built over ALL weights at once: the weights and the gradients are each joined
into one flat view (poplar.concat, nothing copied), so an update is one popops compute set
(two with momentum), run where the weights live; gradients made elsewhere come in through the
exchange.
"""
from __future__ import annotations

from .. import popops
from ..errors import GraphError
from ..popops.expr import _1, _2


class SGD:
    """torch.optim.SGD(lr, momentum=0.0), for the Trainer."""

    def __init__(self, lr: float, momentum: float = 0.0):
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise GraphError(f"SGD: lr must be a positive number, not {lr!r}")
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or \
                not 0.0 <= momentum < 1.0:
            raise GraphError(f"SGD: momentum must be in [0, 1), not {momentum!r}")
        self.lr, self.momentum = float(lr), float(momentum)
        self.velocity = None

    def build(self, graph, weights, grads, seq, name: str = "sgd") -> None:
        """Add the update of `weights` (a flat FLOAT tensor, e.g. a concat of every weight)
        by `grads` (the same shape) to seq."""
        if weights.shape != grads.shape:
            raise GraphError(f"SGD: weights {list(weights.shape)} and gradients "
                             f"{list(grads.shape)} differ")
        if self.momentum:
            self.velocity = graph.clone(weights, f"{name}/velocity")
            popops.map_in_place(graph, _1 * self.momentum + _2, [self.velocity, grads], seq,
                                f"{name}/momentum")
            step = self.velocity
        else:
            step = grads
        popops.scaled_add_to(graph, weights, step, -self.lr, seq, f"{name}/update")

    def __repr__(self) -> str:
        return f"SGD(lr={self.lr}, momentum={self.momentum})"
