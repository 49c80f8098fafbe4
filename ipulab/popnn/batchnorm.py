"""Batch normalisation of [N, C, ...] per channel over the batch and positions, and its
gradients (PopLibs' popnn::bn: batchNormStatistics, batchNormalise, batchNormGradients), as
torch's BatchNorm2d:

    mean, var = popnn.batch_norm_statistics(g, x, seq)          # biased var, FLOAT [C]
    y, inv_std = popnn.batch_norm(g, x, gamma, beta, mean, var, seq, eps=1e-5)
    dx, dgamma, dbeta = popnn.batch_norm_gradients(g, x, dy, mean, inv_std, gamma, seq)
    popnn.batch_norm_running_update(g, running_mean, running_var, mean, var, count,
                                    momentum, seq)              # unbiased var, as torch

Training normalises with the batch's statistics, evaluation with the running ones (pass them
as mean and var). Every step is a popops reduce over the batch and positions or a popops map
with the [C] statistics broadcast per channel: the numbers come from codelets on the tiles.
Statistics are FLOAT whatever x's type; y and dx come in x's type, dgamma and dbeta in FLOAT.
"""
from __future__ import annotations

import numpy as np

from .. import popops
from ..errors import GraphError
from ..poplar import FLOAT
from ..poplar import program as prog
from ..popops import expr as E
from ..popops.expr import _1, _2, _3, _4, _5
from ._common import check_float


def _channels(graph, x, seq, what: str) -> int:
    """C of x [N, C, ...]; GraphError unless x is FLOAT/HALF with a batch and channels."""
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    graph.check_tensor(x, what)
    check_float(x, what)
    if x.rank < 2 or x.num_elements() == 0:
        raise GraphError(f"{what}: '{x.name}' {list(x.shape)} must be [N, C, ...] with "
                         "elements to normalise")
    return x.shape[1]


def _check_vectors(graph, c: int, what: str, *vectors) -> None:
    for v in vectors:
        graph.check_tensor(v, what)
        if v.shape != (c,):
            raise GraphError(f"{what}: '{v.name}' must be [{c}] (one per channel), not "
                             f"{list(v.shape)}")


def _per_channel(x, v):
    """v [C] as [1, C, 1, ...]: broadcast over x's batch and positions."""
    return v.reshape([1, x.shape[1]] + [1] * (x.rank - 2))


def _sum(graph, x, seq, name: str):
    """FLOAT [C]: x summed over every dimension but the channels."""
    return popops.reduce(graph, x, [0, *range(2, x.rank)], "add", seq, name)


def count(x) -> int:
    """The number of values each channel's statistics are taken over (N * positions)."""
    return x.num_elements() // x.shape[1]


def batch_norm_statistics(graph, x, seq, name: str = ""):
    """(mean, var), FLOAT [C]: each channel's mean and biased variance over the batch and
    positions, the variance of the centred values (two passes, as torch)."""
    name = name or "batch_norm_stats"
    what = f"batch_norm_statistics '{name}'"
    _channels(graph, x, seq, what)
    m = count(x)
    xf = x if x.dtype == FLOAT else popops.cast(graph, x, FLOAT, seq, f"{name}/to_float")
    mean = popops.map(graph, _1 * (1.0 / m), [_sum(graph, xf, seq, f"{name}/sum")], seq,
                      f"{name}/mean")
    sq = popops.map(graph, E.square(_1 - _2), [xf, _per_channel(x, mean)], seq,
                    f"{name}/centred_squares")
    var = popops.map(graph, _1 * (1.0 / m), [_sum(graph, sq, seq, f"{name}/sum_squares")],
                     seq, f"{name}/var")
    return mean, var


def batch_norm(graph, x, gamma, beta, mean, var, seq, eps: float = 1e-5, name: str = ""):
    """(y, inv_std): y = (x - mean) * inv_std * gamma + beta per channel, in x's type, with
    inv_std = 1 / sqrt(var + eps) (FLOAT [C], kept for the gradients)."""
    name = name or "batch_norm"
    what = f"batch_norm '{name}'"
    c = _channels(graph, x, seq, what)
    _check_vectors(graph, c, what, gamma, beta, mean, var)
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.number)) or not eps > 0:
        raise GraphError(f"{what}: eps must be a positive number, not {eps!r}")
    inv_std = popops.map(graph, 1.0 / E.sqrt(E.cast(_1, FLOAT) + float(eps)), [var], seq,
                         f"{name}/inv_std")
    ch = [_per_channel(x, v) for v in (mean, inv_std, gamma, beta)]
    y = popops.map(graph, E.cast((E.cast(_1, FLOAT) - _2) * _3 * E.cast(_4, FLOAT)
                                 + E.cast(_5, FLOAT), x.dtype), [x, *ch], seq, f"{name}/out")
    return y, inv_std


def batch_norm_gradients(graph, x, dy, mean, inv_std, gamma, seq, name: str = "",
                         input_gradient: bool = True):
    """(dx, dgamma, dbeta) of training-mode batch_norm (statistics of this batch), torch's
    formula: dbeta = sum(dy), dgamma = sum(dy * xh), dx = gamma * inv_std * (dy - dbeta / M -
    xh * dgamma / M), sums over the batch and positions, xh the normalised x. dx is None
    without input_gradient (a first layer needs only its weights' gradients)."""
    name = name or "batch_norm_grad"
    what = f"batch_norm_gradients '{name}'"
    c = _channels(graph, x, seq, what)
    graph.check_tensor(dy, what)
    if dy.shape != x.shape or dy.dtype != x.dtype:
        raise GraphError(f"{what}: the gradient '{dy.name}' {dy.dtype} {list(dy.shape)} must "
                         f"match '{x.name}' {x.dtype} {list(x.shape)}")
    _check_vectors(graph, c, what, mean, inv_std, gamma)
    mu, inv = _per_channel(x, mean), _per_channel(x, inv_std)
    xh = popops.map(graph, (E.cast(_1, FLOAT) - _2) * _3, [x, mu, inv], seq, f"{name}/xhat")
    dyf = dy if dy.dtype == FLOAT else popops.cast(graph, dy, FLOAT, seq, f"{name}/to_float")
    dbeta = _sum(graph, dyf, seq, f"{name}/dbeta")
    dgamma = _sum(graph, popops.map(graph, _1 * _2, [dyf, xh], seq, f"{name}/dy_xhat"), seq,
                  f"{name}/dgamma")
    if not input_gradient:
        return None, dgamma, dbeta
    m = 1.0 / count(x)
    scale = popops.map(graph, E.cast(_1, FLOAT) * _2, [gamma, inv_std], seq, f"{name}/scale")
    dx = popops.map(graph, E.cast(_1 * (_2 - _3 * m - _4 * _5 * m), x.dtype),
                    [_per_channel(x, scale), dyf, _per_channel(x, dbeta), xh,
                     _per_channel(x, dgamma)], seq, f"{name}/dx")
    return dx, dgamma, dbeta


def batch_norm_running_update(graph, running_mean, running_var, mean, var, n: int,
                              momentum: float, seq, name: str = "") -> None:
    """running = (1 - momentum) * running + momentum * batch, in place, as torch: the mean,
    and the variance made unbiased (var * n / (n - 1), n values per channel)."""
    name = name or "batch_norm_running"
    what = f"batch_norm_running_update '{name}'"
    _check_vectors(graph, mean.shape[0] if mean.rank == 1 else -1, what, running_mean,
                   running_var, mean, var)
    if n < 2:
        raise GraphError(f"{what}: the unbiased variance needs at least 2 values per channel, "
                         f"not {n}")
    mo = float(momentum)
    popops.map_in_place(graph, _1 * (1.0 - mo) + _2 * mo, [running_mean, mean], seq,
                        f"{name}/mean")
    popops.map_in_place(graph, _1 * (1.0 - mo) + _2 * (mo * n / (n - 1)), [running_var, var],
                        seq, f"{name}/var")


__all__ = ["batch_norm_statistics", "batch_norm", "batch_norm_gradients",
           "batch_norm_running_update", "count"]
