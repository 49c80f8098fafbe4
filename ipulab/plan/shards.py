"""Tensor parallelism of a transformer's layers at the small scale, as nn/megatron.py builds
it over the t1 x t2 IPUs of a stage (Megatron's heads, feed-forward and vocabulary over t1;
PopXL's hidden dimension over t2): what shard (0, 0) builds and receives.

    y = column(layer, ipu, run, part, x)        # a Linear by output columns (shard_ops.column)
    y = row(layer, ipu, run, part, x)           # by input columns, all-reduced over t1
    y = norm(layer, ipu, run, part, x)          # LayerNorm over t2 column blocks
    y = over(ipu, layer, run, "all_reduce/t1", y, 1)     # Grid.all_reduce over t1

Shard 0 (a stage's first IPU) is the one priced: the shards' compute sets are the same shapes
side by side (poplar.parallel merges them, a sync across the IPUs; their copies are steps of
their own), and shard 0 also holds weights other shards read over the IPU-Links (shared():
the norms, the row-parallel biases and the position table over t1, a column-parallel bias
over t2), whose compute sets lowering.py prices beside its own. The all-reduce is
nn/shards.py's Grid.all_reduce: a reduce-scatter (chunk j of every member's part copied to
member j, one exchange over the IPU-Links), the chunk's sum as one map where it lies, and an
all-gather of the sums (a second exchange); each copy lands in a new variable mapped
linearly on the receiving IPU. The other shards' tensors lie as shard 0's do, on their IPUs.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..machine.cost import exchange_cost
from ..nn.tensor_parallel import split_bounds
from ..poplar import types
from ..popops import expr as E
from . import ops, reductions, tokens
from .placed import VARIABLE_BITS, Placed, concat

TERMS = 9                   # popops.expr's placeholders: a sum adds up to 8 terms to its total


def copies(ipu, name: str, moves: list) -> list[Placed]:
    """One exchange (grid.copies): for each (src, ipu it is on, dst ipu) a new variable like
    src's shape mapped linearly on the destination IPU; returns those landing on shard 0 (and
    prices the superstep: shard 0's receives and sends, the IPU-Links between)."""
    mc = ipu.mc
    T, out = mc.T, []
    src, dst, starts = [], [], []
    for t, at, to in moves:
        new = mc.addr.linear(t.shape, t.dtype, T)
        if to == 0:
            out.append(new)
        src.append(t.where.ravel() + at * T)
        dst.append(new.where.ravel() + to * T)
        starts.append(t.ids.ravel())
    src, dst = np.concatenate(src), np.concatenate(dst)
    E_ = moves[0][0].nbytes
    cost = exchange_cost(mc.target, src, dst, np.full(src.size, E_, np.int64),
                         np.concatenate(starts) * E_)
    crossing = bool(cost["inter_ipu_exchange"].any())
    ipu.superstep(name + "/copy", (mc.far_sync if crossing else mc.own_sync)
                  + sum(int(cost[k].max(initial=0)) for k in
                        ("exchange", "inter_ipu_exchange", "on_tile_copy")))
    ipu.steps += int(np.unique(np.concatenate([d[d < T] for d in (dst, src)])).size)
    return out


def to_shard(ipu, name: str, x: Placed) -> Placed:
    """x copied to every shard's IPU (shard 0's own copy too): shard 0's copy."""
    n = ipu.mc.t
    return copies(ipu, name, [(x, 0, k) for k in range(n)])[0]


def all_reduce(ipu, name: str, x: Placed, n: int, stride: int = 1) -> Placed:
    """The sum over a group of n shards (IPUs 0, stride, 2·stride, ...: over t1 the stride
    is t2) of their parts like x, on shard 0 (Grid.all_reduce); x is freed by the caller."""
    if n == 1:
        return x
    flat = x.flatten()
    bounds = split_bounds(flat.elements, n)
    lo, hi = bounds[0]
    got = copies(ipu, f"{name}/reduce_scatter",
                 [(flat[a:b], j * stride if i == 0 else 0, i * stride)
                  for i, (a, b) in enumerate(bounds) for j in range(n)
                  if j != i and (i == 0 or j == 0)])
    for j, g in enumerate(got):
        ipu.hold(("shards", name, j), g)
    total = flat[lo:hi]
    terms = got
    while terms:
        more, terms = terms[:TERMS - 1], terms[TERMS - 1:]
        expr = sum((E.placeholder(k + 2) for k in range(len(more))), E._1)
        total = ops.map_op(ipu, f"{name}/add", expr, [total, *more])
    for j in range(len(got)):
        ipu.free(("shards", name, j))
    ipu.hold(("shards", name, "sum"), total)
    gathered = copies(ipu, f"{name}/all_gather",
                      [(total if i == 0 else flat[a:b], 0 if i == 0 else i * stride,
                        j * stride if i == 0 else 0)
                       for i, (a, b) in enumerate(bounds) for j in range(n)
                       if j != i and (i == 0 or j == 0)])
    ipu.free(("shards", name, "sum"))
    return concat([total, *gathered]).reshape(x.shape)


def over(ipu, layer, run, name: str, x: Placed, dim: int) -> Placed:
    """x all-reduced over grid dimension dim (1: t1, 2: t2) of the run's t1 x t2 shards,
    held while it is summed."""
    t1, t2 = run.grid
    n, stride = (t1, t2) if dim == 1 else (t2, 1)
    if n == 1:
        return x
    key = ("act", run.micro_batch, layer.index, name)
    ipu.hold(key, x)
    out = all_reduce(ipu, layer.op_name(name), x, n, stride)
    ipu.free(key)
    return out


def shared(ipu, w: Placed, dim: int = 1) -> Placed:
    """A weight the shards along grid dimension dim read from shard 0's IPU (1: a norm's,
    a row-parallel bias, the position table, read by shards (i1 > 0, 0); 2: a
    column-parallel bias under 2-D, read by shards (0, i2 > 0)); lowering prices their
    compute sets beside shard 0's."""
    t1, t2 = ipu.mc.m.tensor_parallel
    readers = range(t2, t1 * t2, t2) if dim == 1 else range(1, t2)
    if len(readers):
        ipu.mc.shared[int(w.ids.flat[0]) >> VARIABLE_BITS] = tuple(readers)
    return w


# --- a Linear split by rows or by columns, on shard 0 ----------------------------------------
def _bias(layer, ipu, run, part, y: Placed, dim: int) -> Placed:
    """A split Linear's bias added after its all-reduce (a map on every shard)."""
    bias = shared(ipu, layer.weight(ipu, part.scope + "bias", (y.shape[-1],)), dim)
    return ops.map_op(ipu, layer.op_name(part.scope + "bias"), E._1 + E._2, [y, bias])


def _bias_grad(layer, ipu, run, part, dy: Placed) -> None:
    """A split Linear's bias gradient: dy's sums over every row (shard_ops._column_sums)."""
    d = dy.shape[-1]
    g = reductions.reduce_rows(ipu, layer.op_name(part.scope + "bias_grad"),
                               dy.reshape((dy.elements // d, d)))
    layer.gradient_made(ipu, run, part.scope + "bias", g)


def column(layer, ipu, run, part, x: Placed) -> Placed:
    """shard_ops.column: shard 0's fout/t1 output columns (t2 > 1: from its fin/t2 input
    columns, all-reduced over t2, then the bias and the ReLU; else as one IPU builds it)."""
    t1, t2 = run.grid
    if t2 == 1:
        return replace(part, fout=part.fout // t1).forward(layer, ipu, run, x)
    y = replace(part, fin=part.fin // t2, fout=part.fout // t1, bias=False,
                relu=False).forward(layer, ipu, run, x)
    y = over(ipu, layer, run, part.scope + "all_reduce/t2", y, 2)
    key = ("act", run.micro_batch, layer.index, part.scope + "summed")
    ipu.hold(key, y)
    if part.bias:
        y = _bias(layer, ipu, run, part, y, 2)
        ipu.hold(key, y)
    if part.relu:
        y = ops.map_op(ipu, layer.op_name(part.scope + "relu"), tokens.relu_expr(), [y])
    ipu.free(key)
    return y


def column_grad(layer, ipu, run, part, dy: Placed, y, need_dx: bool):
    """shard_ops.column_grad: its weight (and bias) gradients, the input gradient
    all-reduced over t1; y its output (a ReLU's gradient reads it)."""
    t1, t2 = run.grid
    if t2 == 1:
        dx = replace(part, fout=part.fout // t1).backward(layer, ipu, run, dy, y, need_dx)
    else:
        if part.relu:
            dy = ops.map_op(ipu, layer.op_name(part.scope + "relu_grad"),
                            tokens.relu_grad_expr(), [y, dy])
        if part.bias:
            _bias_grad(layer, ipu, run, part, dy)
        dx = replace(part, fin=part.fin // t2, fout=part.fout // t1, bias=False,
                     relu=False).backward(layer, ipu, run, dy, None, need_dx)
    if dx is None:
        return None
    return over(ipu, layer, run, part.scope + "input_grad/all_reduce/t1", dx, 1)


def row(layer, ipu, run, part, x: Placed) -> Placed:
    """shard_ops.row: shard 0's fin/t1 input columns into its fout/t2 outputs, all-reduced
    over t1, then the bias."""
    t1, t2 = run.grid
    if t1 * t2 == 1:
        return part.forward(layer, ipu, run, x)
    y = replace(part, fin=part.fin // t1, fout=part.fout // t2,
                bias=False).forward(layer, ipu, run, x)
    y = over(ipu, layer, run, part.scope + "all_reduce/t1", y, 1)
    key = ("act", run.micro_batch, layer.index, part.scope + "summed")
    ipu.hold(key, y)
    out = _bias(layer, ipu, run, part, y, 1) if part.bias else y
    ipu.free(key)
    return out


def row_grad(layer, ipu, run, part, dy: Placed) -> Placed:
    """shard_ops.row_grad: its gradients, the input gradient all-reduced over t2."""
    t1, t2 = run.grid
    if t1 * t2 == 1:
        return part.backward(layer, ipu, run, dy, None, True)
    if part.bias:
        _bias_grad(layer, ipu, run, part, dy)
    dx = replace(part, fin=part.fin // t1, fout=part.fout // t2,
                 bias=False).backward(layer, ipu, run, dy, None, True)
    return over(ipu, layer, run, part.scope + "input_grad/all_reduce/t2", dx, 2)


# --- layer norm over t2 column blocks (PopXL's LayerNormDistributed) --------------------------
def _rows(t: Placed) -> Placed:
    """t [.., c] as [rows, c] (a reduction's operand over its last axis)."""
    return t.reshape((t.elements // t.shape[-1], t.shape[-1]))


def _per_row(t: Placed, like: Placed) -> Placed:
    """A statistic per row [..] as [.., 1] (a map broadcasts it along `like`'s rows)."""
    return t.reshape(like.shape[:-1] + (1,))


def norm(layer, ipu, run, part, x: Placed) -> Placed:
    """shard_ops.layer_norm over t2 > 1: each shard's row sums of its columns, all-reduced
    over t2, the mean, the centred rows, their sums of squares, all-reduced, 1/std, the
    normalised and scaled rows (maps and popops.reduce as nn builds them)."""
    sc, d, F = part.scope, part.dim, types.FLOAT
    name, dtype = layer.op_name, x.dtype
    if x.dtype is not F:
        x = ops.map_op(ipu, name(sc + "float"), E.cast(E._1, F), [x])
    layer.save(ipu, run, sc + "x", x)
    total = reductions.reduce_inner(ipu, name(sc + "sum"), _rows(x))
    total = over(ipu, layer, run, sc + "mean/all_reduce/t2", total, 2)
    mean = ops.map_op(ipu, name(sc + "mean"), E._1 / float(d), [total])
    centred = ops.map_op(ipu, name(sc + "centred"), E._1 - E._2, [x, _per_row(mean, x)])
    layer.save(ipu, run, sc + "centred", centred)
    layer.release(ipu, run, sc + "x")
    total = reductions.reduce_inner(ipu, name(sc + "square_sum"), _rows(centred), True)
    total = over(ipu, layer, run, sc + "variance/all_reduce/t2", total, 2)
    inv = ops.map_op(ipu, name(sc + "inv_std"), 1.0 / E.sqrt(E._1 / float(d) + 1e-5), [total])
    layer.save(ipu, run, sc + "inv_std", inv)
    w, b = (shared(ipu, layer.weight(ipu, sc + n, (x.shape[-1],))) for n in ("weight", "bias"))
    return ops.map_op(ipu, name(sc + "layer_norm"), E.cast(
        E._1 * E._2 * E.cast(E._3, F) + E.cast(E._4, F), dtype),
        [centred, _per_row(inv, x), w, b])


def norm_grad(layer, ipu, run, part, dy: Placed, need_dx: bool):
    """shard_ops.layer_norm_grad over t2 > 1: its weight and bias gradients per shard, the
    rows' sums of g = dy·gamma and g·xhat all-reduced over t2 as one, then dL/dx."""
    sc, d, F = part.scope, part.dim, types.FLOAT
    name = layer.op_name
    centred, inv = layer.saved(run, sc + "centred"), layer.saved(run, sc + "inv_std")
    w = layer.weight(ipu, sc + "weight", (dy.shape[-1],))
    xhat = ops.map_op(ipu, name(sc + "normalised"), E._1 * E._2, [centred, _per_row(inv, dy)])
    layer.save(ipu, run, sc + "xhat", xhat)
    g = ops.map_op(ipu, name(sc + "scaled_grad"), E.cast(E._1, F) * E.cast(E._2, F), [dy, w])
    layer.read_last(ipu, run, sc + "weight")
    layer.save(ipu, run, sc + "g", g)
    both = ops.map_op(ipu, name(sc + "scaled_grad_x"), E._1 * E._2, [g, xhat])
    layer.save(ipu, run, sc + "both", both)
    dyx = ops.map_op(ipu, name(sc + "dy_xhat"), E.cast(E.cast(E._1, F) * E._2, dy.dtype),
                     [dy, xhat])
    layer.gradient_made(ipu, run, sc + "weight",
                        reductions.reduce_rows(ipu, name(sc + "weight_grad"), _rows(dyx)))
    layer.gradient_made(ipu, run, sc + "bias",
                        reductions.reduce_rows(ipu, name(sc + "bias_grad"), _rows(dy)))
    sums = concat([reductions.reduce_inner(ipu, name(sc + "grad_sums"), _rows(t)).flatten()
                   for t in (g, both)])
    layer.release(ipu, run, sc + "both", sc + "centred")
    total = over(ipu, layer, run, sc + "grad/all_reduce/t2", sums, 2)
    if not need_dx:
        layer.release(ipu, run, sc + "xhat", sc + "g", sc + "inv_std")
        return None
    n = total.elements // 2
    a, c = (_per_row(total[i * n:(i + 1) * n], dy) for i in range(2))
    dx = ops.map_op(ipu, name(sc + "input_grad"), E.cast(
        E._1 * (E._2 - E._3 / float(d) - E._4 * (E._5 / float(d))), dy.dtype),
        [_per_row(inv, dy), g, a, xhat, c])
    layer.release(ipu, run, sc + "xhat", sc + "g", sc + "inv_std")
    return dx


# --- the vocabulary split over the shards (nn/megatron.py) -------------------------------------
def shard_ids(layer, ipu, run, ids: Placed) -> Placed:
    """The token ids on shard 0 (copied to every shard), and the map of the shards of
    other rows to their rows' numbering (priced here: the same superstep), held until the
    backward pass."""
    mine = to_shard(ipu, layer.op_name("token ids to the shards"), ids)
    if run.grid[0] > 1:
        ops.map_op(ipu, layer.op_name("local_ids"), E._1 - 1, [mine])
    layer.save(ipu, run, "ids", mine)
    return mine


def gathered(ipu, y: Placed, t: int) -> Placed:
    """A column-parallel Linear's logits gathered (a view of the shards' columns: the others'
    counted here as shard 0's)."""
    if t == 1:
        return y
    return concat([y] + [ipu.mc.addr.like(y) for _ in range(t - 1)], y.where.ndim - 1)


def columns_to_shard(layer, ipu, dy: Placed, t: int) -> Placed:
    """Each shard's columns of the logits' gradient copied to it (one exchange)."""
    if t == 1:
        return dy
    n = dy.shape[-1] // t
    return copies(ipu, layer.op_name("output_grad to the shards"),
                  [(dy[..., :n], k, k) for k in range(t)])[0]


__all__ = ["copies", "to_shard", "all_reduce", "over", "shared", "column",
           "column_grad", "row", "row_grad", "norm", "norm_grad", "shard_ids", "gathered",
           "columns_to_shard"]
