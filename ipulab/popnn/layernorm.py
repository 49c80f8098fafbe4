"""Layer normalisation over the last dimension and its gradients (PopLibs' popnn::ln:
layerNormalise, layerNormGradients, layerNormParamGradients), as PyTorch's nn.LayerNorm:

    y, mean, inv_std = popnn.layer_norm(g, x, gamma, beta, seq, eps=1e-5)
    dx, dgamma, dbeta = popnn.layer_norm_gradients(g, x, dy, mean, inv_std, gamma, seq)
    dgamma, dbeta = popnn.layer_norm_param_gradients(g, x, dy, mean, inv_std, seq)

Rows of d = x.shape[-1] elements are worked on where they live (popnn._common.Rows): the
forward pass is ONE compute set computing y and each row's mean and 1 / sqrt(var + eps)
(FLOAT, kept for the backward pass, mapped with their rows). layer_norm_gradients is ONE
compute set computing dx and dy * xh (xh: the normalised x) row by row (the formulas are in
rowcodelets); then dgamma = sum(dy * xh) and dbeta = sum(dy) over the rows are column sums,
computed as one matrix product ones @ [dy * xh, dy] that poplin splits over the rows (its
partials summed in float32). The parameter gradients come in x's type.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import FLOAT, Regions, concat
from ..poplar import program as prog
from .. import poplin, popops
from ..popops import expr as E
from ..popops.expr import _1, _2, _3, _4
from ..poputil import shared_constant, tile_constant, typed_variant
from ._common import Rows, check_float
from .rowcodelets import LayerNormGradRows, LayerNormRows



def _check(graph, seq, what: str, x, *vectors) -> int:
    """The row width d; GraphError unless x is FLOAT/HALF of rank >= 1 and every vector is
    a tensor of x's type and shape [d]."""
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    graph.check_tensor(x, what)
    check_float(x, what)
    if x.rank == 0 or x.num_elements() == 0:
        raise GraphError(f"{what}: '{x.name}' {list(x.shape)} has no rows to normalise")
    d = x.shape[-1]
    for v in vectors:
        graph.check_tensor(v, what)
        if v.shape != (d,) or v.dtype != x.dtype:
            raise GraphError(f"{what}: '{v.name}' must be {x.dtype} [{d}] (the last dimension "
                             f"of '{x.name}' {list(x.shape)}), not {v.dtype} {list(v.shape)}")
    return d


def _check_stats(graph, x, dy, mean, inv_std, what: str) -> None:
    graph.check_tensor(dy, what)
    if dy.shape != x.shape or dy.dtype != x.dtype:
        raise GraphError(f"{what}: the gradient '{dy.name}' {dy.dtype} {list(dy.shape)} must "
                         f"match '{x.name}' {x.dtype} {list(x.shape)}")
    for s in (mean, inv_std):
        graph.check_tensor(s, what)
        if s.shape != x.shape[:-1] or s.dtype != FLOAT:
            raise GraphError(f"{what}: '{s.name}' must be FLOAT {list(x.shape[:-1])} (from "
                             f"layer_norm), not {s.dtype} {list(s.shape)}")


def layer_norm(graph, x, gamma, beta, seq, eps: float = 1e-5, name: str = ""):
    """(y, mean, inv_std): x normalised over its last dimension, times gamma plus beta (both
    [d], x's type); y like x, mean and inv_std FLOAT of x's shape without the last dimension,
    each mapped with its row where the row lives."""
    name = name or "layer_norm"
    what = f"layer_norm '{name}'"
    d = _check(graph, seq, what, x, gamma, beta)
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.number)) or not eps > 0:
        raise GraphError(f"{what}: eps must be a positive number, not {eps!r}")
    rows = Rows(graph, x, d, what)
    y = rows.new(x.dtype, x.shape, f"{name}/out")
    mean = rows.new(FLOAT, x.shape[:-1], f"{name}/mean", 1)
    inv_std = rows.new(FLOAT, x.shape[:-1], f"{name}/inv_std", 1)
    tiles = rows.work.tile
    cls = typed_variant(LayerNormRows, x.dtype, ("gamma", "beta", "x", "y"), "Half")
    cs = graph.add_compute_set(name)
    graph.add_vertices(cs, cls, tiles, {
        "eps": tile_constant(graph, FLOAT, [eps], tiles, f"{name}/eps").regions(tiles),
        "gamma": Regions.whole(gamma, tiles.size), "beta": Regions.whole(beta, tiles.size),
        "x": rows.regions(x), "y": rows.regions(y), "mean": rows.regions(mean, 1),
        "inv_std": rows.regions(inv_std, 1)})
    seq.add(prog.Execute(cs))
    return y, mean, inv_std


def _column_sums(graph, dy_xhat, dy, seq, name: str):
    """(dgamma, dbeta) in dy's type: the column sums of dy * xh and dy over every row, as
    ONE product ones [1, rows] @ [dy * xh, dy] [rows, 2d] (poplin plans its split over the
    rows and the reduce of the partials)."""
    d = dy.shape[-1]
    rows = dy.num_elements() // d
    both = concat([dy_xhat.reshape([rows, d]), dy.reshape([rows, d])], 1)
    ones = shared_constant(graph, dy.dtype, [1, rows], 1.0, f"{name}/ones")
    sums = poplin.mat_mul(graph, ones, both, seq, f"{name}/param_sums").reshape([2 * d])
    return sums.slice(0, d), sums.slice(d, 2 * d)


def layer_norm_gradients(graph, x, dy, mean, inv_std, gamma, seq, name: str = ""):
    """(dx, dgamma, dbeta) from the forward input x, the output's gradient dy, layer_norm's
    mean and inv_std, and gamma: dx mapped like x's rows, the parameter gradients [d] in x's
    type (PopLibs' layerNormGradients and layerNormParamGradients in one pass over the rows)."""
    name = name or "layer_norm_grad"
    what = f"layer_norm_gradients '{name}'"
    d = _check(graph, seq, what, x, gamma)
    _check_stats(graph, x, dy, mean, inv_std, what)
    rows = Rows(graph, x, d, what)
    dx = rows.new(x.dtype, x.shape, f"{name}/dx")
    dy_xhat = rows.new(x.dtype, x.shape, f"{name}/dy_xhat")
    cls = typed_variant(LayerNormGradRows, x.dtype, ("gamma", "x", "dy", "dx", "dy_xhat"),
                        "Half")
    cs = graph.add_compute_set(name)
    graph.add_vertices(cs, cls, rows.work.tile, {
        "gamma": Regions.whole(gamma, rows.work.tile.size), "x": rows.regions(x),
        "dy": rows.regions(dy), "mean": rows.regions(mean, 1),
        "inv_std": rows.regions(inv_std, 1), "dx": rows.regions(dx),
        "dy_xhat": rows.regions(dy_xhat)})
    seq.add(prog.Execute(cs))
    return (dx, *_column_sums(graph, dy_xhat, dy, seq, name))


def layer_norm_param_gradients(graph, x, dy, mean, inv_std, seq, name: str = ""):
    """(dgamma, dbeta) only, in x's type, when the input gradient is not needed: dy * xh as
    one popops map, then the column sums."""
    name = name or "layer_norm_param_grad"
    what = f"layer_norm_param_gradients '{name}'"
    _check(graph, seq, what, x)
    _check_stats(graph, x, dy, mean, inv_std, what)
    stat = list(x.shape[:-1]) + [1]
    dy_xhat = popops.map(graph, E.cast((E.cast(_1, FLOAT) - _2) * _3 * E.cast(_4, FLOAT),
                                       x.dtype),
                         [x, mean.reshape(stat), inv_std.reshape(stat), dy], seq,
                         f"{name}/dy_xhat")
    return _column_sums(graph, dy_xhat, dy, seq, name)
