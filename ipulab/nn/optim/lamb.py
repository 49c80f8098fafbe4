"""LAMB, as You et al. defined it and Graphcore's BERT ran it, on the tiles.

Sources: Y. You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76
Minutes", ICLR 2020 (arXiv:1904.00962, 2019), Algorithm 2 (LAMB); PopART's Adam in
AdamMode::Lamb (graphcore/popart, willow/include/popart/adam.hpp), the optimizer of Graphcore's
BERT. Per step t and weight tensor ("layer") w with gradient g:

    m = beta1 * m + (1 - beta1) * g;    v = beta2 * v + (1 - beta2) * g * g
    m^ = m / (1 - beta1^t);             v^ = v / (1 - beta2^t)        (bias correction)
    u = m^ / (sqrt(v^) + eps) + weight_decay * w
    ratio = ||w|| / ||u||   (1 where either norm is 0)      per weight tensor
    w = w - lr * ratio * u

Details of this variant: bias correction on, as PopART's Lamb mode (LambNoBias is the other);
weight decay inside u, so it is scaled by the trust ratio too (the paper's and PopART's
"decay" mode); the scaling function phi of the paper is the identity (PopART clips ||w|| at
max_weight_norm, 10 by default; not here); eps = 1e-6 by default (the paper's and PopART's);
weight_decay applies to every weight given (no groups: torch's default), 0 by default.

On the tiles: the moments and the step count as Adam's (adam.py); u as one map over every
weight; the sums of squares of w and of u, one reduction per weight tensor, all side by side
(one or two supersteps for all of them); the trust ratios, times lr, as one map over the [K]
sums; then the update, one map per tensor side by side, each reading its tensor's scale as a
scalar. With replicated tensor sharding each replica holds a slice of every tensor (sharding.py
keeps the tensor boundaries where every replica has them), so the sums of squares it makes are
partial: they are all-reduced across the replicas (gcl) before the square roots, as PopART
does.
"""
from __future__ import annotations

import numpy as np

from ... import gcl, popops
from ...errors import GraphError
from ...poplar import concat, parallel
from ...poplar import program as prog
from ...popops.expr import _1, _2, _3, _4, _5, pow, select, sqrt
from .adam import Adam


class LAMB(Adam):
    """LAMB(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0), for the Trainer (see the
    module for the variant and its sources)."""

    kind = "lamb"
    default_eps = 1e-6
    decays_gradient = False
    norms_per_tensor = True

    def _apply(self, graph, weights, m, v, step, seq, name, sizes, partial) -> None:
        if not sizes or sum(sizes) != weights.num_elements():
            raise GraphError(f"LAMB: the update needs the elements of each weight tensor "
                             f"(sizes=, summing to {weights.num_elements()}), not {sizes!r}")
        b1, b2 = self.betas
        parts = [prog.Sequence(), prog.Sequence()]
        c1 = popops.map(graph, 1.0 - pow(b1, _1), [step], parts[0], f"{name}/bias_correction1")
        c2 = popops.map(graph, 1.0 - pow(b2, _1), [step], parts[1], f"{name}/bias_correction2")
        seq.add(parallel(graph, parts, f"{name}/bias_correction"))
        u = _1 / _4 / (sqrt(_2 / _5) + self.eps)
        if self.weight_decay:
            u = u + _3 * self.weight_decay
        u = popops.map(graph, u, [m, v, weights, c1, c2], seq, f"{name}/u")
        pieces = [(int(o), int(n)) for o, n in zip(np.cumsum([0, *sizes[:-1]]), sizes)]
        sums = self._sums_of_squares(graph, weights, u, pieces, seq, name)
        if partial:
            sums = gcl.all_reduce(graph, sums, "add", seq, f"{name}/norms/all_reduce")
        has_norms = (_1 > 0) & (_2 > 0)
        ratio = select(sqrt(_1) / sqrt(select(_2, 1.0, _2 > 0)), 1.0, has_norms)
        scale = popops.map(graph, ratio * self.lr, [sums[:, 0], sums[:, 1]], seq,
                           f"{name}/trust_ratio")
        parts = []
        for k, (o, n) in enumerate(pieces):
            parts.append(prog.Sequence())
            popops.map_in_place(graph, _1 - _3 * _2, [weights.slice(o, o + n),
                                                      u.slice(o, o + n), scale[k]],
                                parts[-1], f"{name}/update/{k}")
        seq.add(parallel(graph, parts, f"{name}/update"))

    @staticmethod
    def _sums_of_squares(graph, weights, u, pieces, seq, name):
        """[K, 2]: the sums of squares of each tensor's weights and of its u, one reduction
        per tensor, all side by side."""
        parts, sums = [], []
        for k, (o, n) in enumerate(pieces):
            both = concat([weights.slice(o, o + n).reshape([1, n]),
                           u.slice(o, o + n).reshape([1, n])])
            parts.append(prog.Sequence())
            sums.append(popops.reduce(graph, both, [1], "square_add", parts[-1],
                                      f"{name}/norms/{k}").reshape([1, 2]))
        seq.add(parallel(graph, parts, f"{name}/norms"))
        return concat(sums)


__all__ = ["LAMB"]
