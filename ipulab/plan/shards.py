"""Tensor parallelism of a transformer's layers at the small scale, as nn/megatron.py builds
it (Megatron's split over the t IPUs of a stage): what shard 0 builds and receives.

    y = all_reduce(ipu, "2.TransformerEncoderLayer/linear2/all_reduce/t1", y, t)
    ids = to_shard(ipu, "0.Embedding/token ids to the shards", ids)

Shard 0 (a stage's first IPU) is the one priced: the shards' compute sets are the same shapes
side by side (poplar.parallel merges them, a sync across the IPUs), and shard 0 also holds the
weights every shard reads (the norms, the row-parallel biases, the position table). The
all-reduce is nn/shards.py's Grid.all_reduce: a reduce-scatter (chunk j of every shard's part
copied to shard j, one exchange over the IPU-Links), the chunk's sum as one map where it lies,
and an all-gather of the sums (a second exchange); each copy lands in a new variable mapped
linearly on the receiving IPU. The other shards' tensors lie as shard 0's do, on their IPUs.
"""
from __future__ import annotations

import numpy as np

from ..machine.cost import exchange_cost
from ..popops import expr as E
from . import ops, reductions
from .placed import VARIABLE_BITS, Placed, concat

TERMS = 9                   # popops.expr's placeholders: a sum adds up to 8 terms to its total


def split_bounds(n: int, t: int) -> list[tuple[int, int]]:
    """nn.tensor_parallel.split_bounds: [lo, hi) of each non-empty part of n split t ways."""
    base, extra = divmod(n, t)
    out, lo = [], 0
    for i in range(t):
        hi = lo + base + (i < extra)
        if hi > lo:
            out.append((lo, hi))
        lo = hi
    return out


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


def all_reduce(ipu, name: str, x: Placed, n: int) -> Placed:
    """The sum over n shards of their parts like x, on shard 0 (Grid.all_reduce); x is
    freed by the caller."""
    if n == 1:
        return x
    mc = ipu.mc
    flat = x.flatten()
    bounds = split_bounds(flat.elements, n)
    lo, hi = bounds[0]
    got = copies(ipu, f"{name}/reduce_scatter",
                 [(flat[a:b], j if i == 0 else 0, i) for i, (a, b) in enumerate(bounds)
                  for j in range(n) if j != i and (i == 0 or j == 0)])
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
                      [(total if i == 0 else flat[a:b], 0 if i == 0 else i, j if i == 0 else 0)
                       for i, (a, b) in enumerate(bounds) for j in range(n)
                       if j != i and (i == 0 or j == 0)])
    ipu.free(("shards", name, "sum"))
    return concat([total, *gathered]).reshape(x.shape)




def shared(ipu, w: Placed) -> Placed:
    """A weight every shard reads (a norm's, a row-parallel bias, the position table): on
    shard 0, read by the others over the IPU-Links (lowering prices their compute sets)."""
    if ipu.mc.t > 1:
        ipu.mc.shared.add(int(w.ids.flat[0]) >> VARIABLE_BITS)
    return w


# --- a Linear split by rows or by columns, on shard 0 ----------------------------------------
def row_bias(layer, ipu, run, scope: str, y: Placed, t: int) -> Placed:
    """A row-parallel Linear's output y (its part of the sum, no bias) all-reduced over t,
    then its bias added on every shard (shard_ops.row)."""
    key = ("act", run.micro_batch, layer.index, scope + "partial")
    ipu.hold(key, y)
    total = all_reduce(ipu, layer.op_name(scope + "all_reduce/t1"), y, t)
    ipu.hold(key, total)
    bias = shared(ipu, layer.weight(ipu, scope + "bias", (y.shape[-1],)))
    out = ops.map_op(ipu, layer.op_name(scope + "bias"), E._1 + E._2, [total, bias])
    ipu.free(key)
    return out


def row_bias_grad(layer, ipu, run, scope: str, dy: Placed) -> None:
    """A row-parallel Linear's bias gradient: dy's sums over every row (shard_ops.row_grad)."""
    d = dy.shape[-1]
    g = reductions.reduce_rows(ipu, layer.op_name(scope + "bias_grad"),
                               dy.reshape((dy.elements // d, d)))
    layer.gradient_made(ipu, run, scope + "bias", g)


def input_grad(layer, ipu, run, scope: str, dx, t: int):
    """A column-parallel Linear's input gradient (each shard's covers its columns only)
    all-reduced over t (shard_ops.column_grad)."""
    if dx is None or t == 1:
        return dx
    key = ("act", run.micro_batch, layer.index, scope + "partial_grad")
    ipu.hold(key, dx)
    out = all_reduce(ipu, layer.op_name(scope + "input_grad/all_reduce/t1"), dx, t)
    ipu.free(key)
    return out




# --- the vocabulary split over the shards (nn/megatron.py) -------------------------------------
def shard_ids(layer, ipu, run, ids: Placed) -> Placed:
    """The token ids on shard 0 (copied to every shard), and the other shards' map to their
    rows' numbering (priced here: the same superstep), held until the backward pass."""
    mine = to_shard(ipu, layer.op_name("token ids to the shards"), ids)
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


__all__ = ["split_bounds", "copies", "to_shard", "all_reduce", "shared", "row_bias", "row_bias_grad",
           "input_grad", "shard_ids", "gathered", "columns_to_shard"]
