"""popnn.softmax: softmax over the last dimension in ONE compute set, optionally scaled and
causally masked (what attention's scores need), and its gradient, also one compute set:

    probs = popnn.softmax(g, scores, seq, scale=1 / 8, causal=True)   # scores [..., S, S]
    dscores = popnn.softmax_input_gradient(g, probs, dprobs, seq, scale=1 / 8)

softmax(x) = exp(z - max z) / sum exp(z - max z) with z = scale * x, over each row of the
last dimension. With causal=True, x is a stack of [S, S] squares (query i, key j) and row i
uses only its columns j <= i (the rest of the row gets 0): PyTorch's causal mask, -inf above
the diagonal, without building it. The gradient needs only the output (as PopLibs' softmax
gradients): dx = scale * y * (dy - sum(dy * y)); masked columns get 0.

Rows are worked on where they live (popnn._common.Rows); see rowcodelets for the arithmetic.
non_linearity("softmax_stable") computes the same values from popops maps and reductions
(three compute sets), without scale or mask.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import FLOAT, INT, Regions
from ..poplar import program as prog
from ..poputil import tile_constant, typed_variant, vertex_constants
from ._common import Rows, check_float
from .rowcodelets import (ENTRY_CYCLES, EXP_CYCLES, REGION_CYCLES, SOFTMAX_GRAD_OPS,
                          SOFTMAX_OPS, SoftmaxGradRows, SoftmaxRows, row_cycles)


def _check(graph, t, seq, scale, causal, what: str) -> None:
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    graph.check_tensor(t, what)
    check_float(t, what)
    if t.rank == 0 or t.num_elements() == 0:
        raise GraphError(f"{what}: softmax is over the last dimension; '{t.name}' "
                         f"{list(t.shape)} has no rows")
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.number)) or \
            not np.isfinite(scale) or scale == 0:
        raise GraphError(f"{what}: scale must be a finite non-zero number, not {scale!r}")
    if causal and (t.rank < 2 or t.shape[-1] != t.shape[-2]):
        raise GraphError(f"{what}: a causal softmax takes squares [..., S, S] (query, key), "
                         f"not '{t.name}' {list(t.shape)}")


def _compute_set(graph, cls, t, rows: Rows, scale: float, causal: bool, ops: int, exp: int,
                 seq, name: str, fields: dict) -> None:
    """The compute set, executed in seq: each vertex's runs of rows, the scale, [width, S or
    0], the square's row index of each run's first row, and a cycle estimate from the columns
    each row uses."""
    w, tiles, work = t.shape[-1], rows.work.tile, rows.work
    side = w if causal else 0
    row = np.arange(t.num_elements() // w, dtype=np.int64)
    used = row % side + 1 if causal else np.full(row.size, w)
    per_row = row_cycles(used, ops, t.dtype, exp, w - used)
    prefix = np.concatenate([[0], np.cumsum(per_row)])
    run = prefix[work.ends] - prefix[work.begins] + REGION_CYCLES
    vertex_end = np.cumsum(work.counts)
    estimates = ENTRY_CYCLES + np.add.reduceat(run, vertex_end - work.counts)
    cs = graph.add_compute_set(name)
    graph.add_vertices(cs, typed_variant(cls, t.dtype, tuple(fields), "Half"), tiles, {
        "scale": tile_constant(graph, FLOAT, [scale], tiles, f"{name}/scale").regions(tiles),
        "shape": tile_constant(graph, INT, [w, side], tiles, f"{name}/shape").regions(tiles),
        "first": vertex_constants(graph, INT, work.begins % max(side, 1), work.counts, tiles,
                                  f"{name}/first"),
        **fields}, estimates=estimates)
    seq.add(prog.Execute(cs))


def softmax(graph, t, seq, scale: float = 1.0, causal: bool = False, name: str = ""):
    """A new tensor like t (FLOAT or HALF), mapped by rows where they live: the softmax of
    scale * t over its last dimension; causal=True masks columns j > i of row i of each
    [S, S] square (they get 0)."""
    name = name or "softmax"
    what = f"softmax '{name}'"
    _check(graph, t, seq, scale, causal, what)
    rows = Rows(graph, t, t.shape[-1], what)
    y = rows.new(t.dtype, t.shape, f"{name}/out")
    _compute_set(graph, SoftmaxRows, t, rows, float(scale), bool(causal), SOFTMAX_OPS,
                 EXP_CYCLES, seq, name, {"x": rows.regions(t), "y": rows.regions(y)})
    return y


def softmax_input_gradient(graph, out, out_grad, seq, scale: float = 1.0,
                           causal: bool = False, name: str = ""):
    """The gradient with respect to softmax's input t, from its OUTPUT `out` and the
    gradient of the output, mapped like out's rows: scale * out * (out_grad - sum(out_grad *
    out)) over the last dimension (give softmax's scale and causal: a causal row skips its
    masked columns, whose gradient is 0 as their output is)."""
    name = name or "softmax_grad"
    what = f"softmax_input_gradient '{name}'"
    _check(graph, out, seq, scale, causal, what)
    graph.check_tensor(out_grad, what)
    if out_grad.shape != out.shape or out_grad.dtype != out.dtype:
        raise GraphError(f"{what}: out '{out.name}' {out.dtype} {list(out.shape)} and "
                         f"out_grad '{out_grad.name}' {out_grad.dtype} "
                         f"{list(out_grad.shape)} must match")
    rows = Rows(graph, out, out.shape[-1], what)
    dx = rows.new(out.dtype, out.shape, f"{name}/out")
    _compute_set(graph, SoftmaxGradRows, out, rows, float(scale), bool(causal),
                 SOFTMAX_GRAD_OPS, 0, seq, name, {"y": rows.regions(out),
                                                  "dy": rows.regions(out_grad),
                                                  "dx": rows.regions(dx)})
    return dx
