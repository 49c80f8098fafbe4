"""SGD with optional momentum and weight decay, as torch.optim.SGD (no dampening, no Nesterov):

    g = grad + weight_decay * w                                  (weight_decay > 0)
    momentum == 0:   w -= lr * g
    momentum  > 0:   v = momentum * v + g;   w -= lr * v        (v starts at zero)

The velocity v is the state (sgd/velocity): on chip, or off chip in Streaming Memory (base.py).
With fp16 training the gradients are HALF and carry the loss scale S: the update reads them
as float, times 1 / S, into the float master weights (and velocity) in the same map. One
compute set per update (two with momentum).
"""
from __future__ import annotations

from ... import popops
from ...popops.expr import _1, _2, _3
from .base import Optimizer, check_number


class SGD(Optimizer):
    """torch.optim.SGD(lr, momentum=0.0, weight_decay=0.0), for the Trainer."""

    kind = "sgd"
    state_per_parameter = 1            # with momentum (an instance without keeps 0)

    def __init__(self, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(lr, weight_decay)
        self.momentum = check_number("SGD", "momentum", momentum, lambda v: 0 <= v < 1,
                                     "in [0, 1)")
        self.state_per_parameter = 1 if self.momentum else 0
        self.velocity = None           # the velocity tensor last built (with momentum)

    def _build(self, graph, weights, grads, seq, name, grad_scale, off_chip, sizes, partial):
        g = self.gradient(_2, grads, grad_scale)
        plain = g is _2 and not self.weight_decay
        if self.momentum:
            v, store = self.state(graph, weights, f"{name}/velocity", seq, off_chip)
            self.velocity = v
            popops.map_in_place(graph, _1 * self.momentum + self.with_l2(g, _3),
                                [v, grads] + ([weights] if self.weight_decay else []), seq,
                                f"{name}/momentum")
            popops.scaled_add_to(graph, weights, v, -self.lr, seq, f"{name}/update")
            if store is not None:
                seq.add(store)
        elif plain:
            popops.scaled_add_to(graph, weights, grads, -self.lr, seq, f"{name}/update")
        else:
            popops.map_in_place(graph, _1 + self.with_l2(g, _1) * -self.lr, [weights, grads],
                                seq, f"{name}/update")

    def __repr__(self) -> str:
        decay = f", weight_decay={self.weight_decay}" if self.weight_decay else ""
        return f"SGD(lr={self.lr}, momentum={self.momentum}{decay})"


__all__ = ["SGD"]
