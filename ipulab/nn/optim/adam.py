"""Adam and AdamW with torch.optim's semantics (amsgrad=False, maximize=False), on the tiles.

Per step t = 1, 2, ... and weight w with gradient g (fp16: HALF times the loss scale, taken
out as the update reads it):

    Adam:   g = g + weight_decay * w                  (L2: the decay goes into the moments)
    AdamW:  w = w * (1 - lr * weight_decay)           (decoupled, before the Adam step)
    m = lerp(m, g, 1 - beta1)                          (m + (1 - beta1) * (g - m), as torch)
    v = beta2 * v + (1 - beta2) * g * g
    w = w - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

eps is added after the square root of the bias-corrected second moment, as torch does. The
state is m and v (float32, one each per weight: adam/m, adam/v, on or off chip) and the step
count t (adam/step, one float on the tile of the first weight, always on chip). The device
counts the steps and computes the bias corrections itself, in float32 as torch.optim.Adam does
with capturable=True and PopART's Adam does (its step counter is an FP32 tensor): torch's CPU
default computes them in double on the host, so the two differ by float32 rounding (1e-5 of
the step size at the first steps, as beta2 = 0.999 is itself rounded to float32).

Compute sets per update: the moments and the step count side by side (one superstep), the two
bias-correction factors (one tile), the update.
"""
from __future__ import annotations

import math

from ... import popops
from ...errors import GraphError
from ...poplar import FLOAT, parallel
from ...poplar import program as prog
from ...popops.expr import _1, _2, _3, _4, _5, pow, sqrt
from .base import Optimizer, check_number


def check_betas(owner: str, betas) -> tuple[float, float]:
    """(beta1, beta2), each in [0, 1); GraphError otherwise."""
    try:
        if isinstance(betas, (str, bytes)):
            raise TypeError
        b1, b2 = betas
    except (TypeError, ValueError):
        raise GraphError(f"{owner}: betas must be two numbers in [0, 1), not {betas!r}") \
            from None
    ok = (lambda v: 0 <= v < 1)
    return (check_number(owner, "betas[0]", b1, ok, "in [0, 1)"),
            check_number(owner, "betas[1]", b2, ok, "in [0, 1)"))


class Adam(Optimizer):
    """torch.optim.Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0), for the
    Trainer (None: the default)."""

    kind = "adam"
    state_per_parameter = 2
    default_weight_decay, default_eps = 0.0, 1e-8
    decays_gradient = True         # Adam's weight_decay is L2 in the gradient; AdamW's is not

    def __init__(self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float | None = None,
                 weight_decay: float | None = None):
        super().__init__(lr, self.default_weight_decay if weight_decay is None else weight_decay)
        name = type(self).__name__
        self.betas = check_betas(name, (0.9, 0.999) if betas is None else betas)
        self.eps = check_number(name, "eps", self.default_eps if eps is None else eps,
                                lambda v: 0 < v < math.inf, "a positive number")

    def _build(self, graph, weights, grads, seq, name, grad_scale, off_chip, sizes, partial):
        m, store_m = self.state(graph, weights, f"{name}/m", seq, off_chip)
        v, store_v = self.state(graph, weights, f"{name}/v", seq, off_chip)
        step = graph.add_variable(FLOAT, [1], f"{name}/step")
        graph.set_tile_mapping(step, int(graph.tiles_of(weights.slice(0, 1))[0]))
        self.keep_on_chip(graph, f"{name}/step", step)
        self._moments(graph, m, v, step, weights, grads, grad_scale, seq, name)
        self._apply(graph, weights, m, v, step, seq, name, sizes, partial)
        for store in (store_m, store_v):
            if store is not None:
                seq.add(store)

    def _moments(self, graph, m, v, step, weights, grads, grad_scale, seq, name) -> None:
        """m and v from the gradient, and t = t + 1, side by side in one superstep."""
        g = self.gradient(_2, grads, grad_scale)
        if self.decays_gradient:
            g = self.with_l2(g, _3)
        b1, b2 = self.betas
        a = 1.0 - b1               # torch's lerp(m, g, a): one form for small a, one for large
        lerp = _1 + a * (g - _1) if a < 0.5 else g - (g - _1) * (1.0 - a)
        inputs = [grads] + ([weights] if self.decays_gradient and self.weight_decay else [])
        parts = [prog.Sequence(), prog.Sequence(), prog.Sequence()]
        popops.map_in_place(graph, lerp, [m, *inputs], parts[0], f"{name}/m")
        popops.map_in_place(graph, _1 * b2 + (1.0 - b2) * g * g, [v, *inputs], parts[1],
                            f"{name}/v")
        popops.map_in_place(graph, _1 + 1, [step], parts[2], f"{name}/step")
        seq.add(parallel(graph, parts, f"{name}/moments"))

    def _decayed(self, w):
        """The weight the step is taken from (AdamW: decayed first)."""
        return w

    def _apply(self, graph, weights, m, v, step, seq, name, sizes, partial) -> None:
        """The step size lr / (1 - beta1^t) and sqrt(1 - beta2^t) on the step count's tile,
        then w -= step size * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)."""
        b1, b2 = self.betas
        parts = [prog.Sequence(), prog.Sequence()]
        size = popops.map(graph, self.lr / (1.0 - pow(b1, _1)), [step], parts[0],
                          f"{name}/step_size")
        root = popops.map(graph, sqrt(1.0 - pow(b2, _1)), [step], parts[1],
                          f"{name}/bias_correction2_sqrt")
        seq.add(parallel(graph, parts, f"{name}/bias_correction"))
        popops.map_in_place(graph, self._decayed(_1) - _4 * (_2 / (sqrt(_3) / _5 + self.eps)),
                            [weights, m, v, size, root], seq, f"{name}/update")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(lr={self.lr}, betas={self.betas}, eps={self.eps}, "
                f"weight_decay={self.weight_decay})")


class AdamW(Adam):
    """torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01), for the
    Trainer: Adam with the decay decoupled from the gradient (Loshchilov & Hutter, 2019),
    w = w * (1 - lr * weight_decay) before the step."""

    kind = "adamw"
    default_weight_decay = 0.01
    decays_gradient = False

    def _decayed(self, w):
        return w * (1.0 - self.lr * self.weight_decay) if self.weight_decay else w


__all__ = ["Adam", "AdamW", "check_betas"]
