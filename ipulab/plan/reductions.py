"""popops.reduce on Placed tensors, as its plans cut the work (a position embedding's gradient
over the batch, the sums of LAMB's norms and of the loss), and popnn.calc_loss per token and
popnn.arg_max, which sum and pick where the rows live."""
from __future__ import annotations

import numpy as np

from ..popops import expr as E
from ..popnn.loss import SoftmaxCrossEntropy

from ..poplar import FLOAT, HALF, INT
from ..poplar.vertices import ragged
from ..poputil import grain_of, pieces
from .lowering import Field, Group
from .ops import Rows, cls_name, map_op, tile_field
from .placed import Placed


# --- popops.reduce over the leading dimension ----------------------------------------------------
def reduce_rows(ipu, name: str, t: Placed) -> Placed:
    """popops.reduce(t, [0], "add") of t [B, ...] as its outer cut does it: each tile adds
    its elements into float partials of the outputs it holds some of (up to a vertex per
    worker, each a slice of the tile's partials), then the output, mapped linearly, combines
    the partials of every tile that made one (a single partial per output is the output)."""
    mc = ipu.mc
    B = t.shape[0]
    q = t.elements // B
    T = mc.graph.num_tiles
    where = t.where.reshape(B, q)
    holds = np.zeros((T, q), bool)
    holds[where, np.arange(q)[None, :]] = True
    partials = holds.sum(axis=1)
    base = np.cumsum(partials) - partials
    work = pieces(t.where.ravel(), mc.W)
    vt = work.tile
    k = np.bincount(vt, minlength=T)[vt]                  # vertices on each vertex's tile
    j = np.arange(vt.size) - np.searchsorted(vt, vt)      # its index among them
    lo, hi = base[vt] + j * partials[vt] // k, base[vt] + (j + 1) * partials[vt] // k
    length = np.bincount(np.repeat(np.arange(vt.size), work.counts),
                         weights=work.ends - work.begins, minlength=vt.size).astype(np.int64)
    regions = work.counts + length // max(q, 1)
    est = 10 + 4 * regions + -(-length // 2) + 2 * -(-(hi - lo) // 2)
    single = bool((holds.sum(axis=0) == 1).all())
    part = mc.addr.new((int(partials.sum()),), np.repeat(np.arange(T), partials), FLOAT)
    fields = [Field.regions(t.flatten(), work.begins, work.ends, work.counts,
                            kind="vector_list"),
              ipu_constant_field(ipu, vt, regions),
              Field.regions(part, lo, hi, reads=False, writes=True)]
    ipu.execute(name if single else f"{name}/partials", [Group("ReduceOuterAdd", vt, est,
                                                               fields)])
    if single:
        return mc.addr.new(t.shape[1:], t.where[0].ravel(), t.dtype)
    ipu.transient(part)
    out = mc.addr.linear(t.shape[1:], t.dtype, T)
    fin = pieces(out.where.ravel(), mc.W, grain_of(t.dtype))
    contrib = holds.sum(axis=0)                           # partials of each output
    src = np.concatenate([[0], np.cumsum(contrib)])
    size = fin.ends - fin.begins
    gathered = src[fin.ends] - src[fin.begins]
    est = 10 + 4 * -(-gathered // np.maximum(size, 1)) + -(-gathered // 2) + 2 * -(-size // 2)
    tile_of = np.nonzero(holds.T)[1]            # (output, tile) pairs in output order
    gathered_t = Placed(tile_of, part.ids[_partial_positions(holds)], FLOAT)
    ipu.execute(f"{name}/final", [Group("ReduceOuterAddFinal", fin.tile, est, [
        Field.regions(gathered_t, src[fin.begins], src[fin.ends], kind="vector_list"),
        ipu_constant_field(ipu, fin.tile, -(-gathered // np.maximum(size, 1))),
        Field.regions(out.flatten(), fin.begins, fin.ends, reads=False, writes=True)])])
    return out


def _partial_positions(holds: np.ndarray) -> np.ndarray:
    """For every (output, tile) with a partial, in output order: its position in the
    partials (stored tile after tile, each tile's outputs in order)."""
    tile_major = np.cumsum(holds.ravel()).reshape(holds.shape) - 1   # tile-major rank
    out_tile = np.nonzero(holds.T)
    return tile_major[out_tile[1], out_tile[0]]


def ipu_constant_field(ipu, tiles, sizes) -> Field:
    """A vertex's own INT constants (reduce's dst offsets), sizes[v] on tiles[v]."""
    sizes = np.asarray(sizes, np.int64)
    c = ipu.vertex_constant(tiles, sizes, INT)
    ends = np.cumsum(sizes)
    return Field.regions(c, ends - sizes, ends)


def reduce_inner(ipu, name: str, t: Placed, square: bool = False) -> Placed:
    """popops.reduce of t [P, R] over its rows (add, or square_add), as its inner cut does
    it: each tile's elements of a row in a unit (split in a few when it holds many), a float
    partial each, the units of a tile dealt to up to a vertex per worker; then the output
    [P], mapped linearly a vector a tile, each element adding its row's partials (none when
    each row's only partial is on one tile)."""
    mc = ipu.mc
    T = mc.graph.num_tiles
    P, R = t.shape
    where = t.where.reshape(P, R)
    counts = np.zeros((T, P), np.int64)
    np.add.at(counts, (where, np.broadcast_to(np.arange(P)[:, None], (P, R))), 1)
    tiles_of_p = (counts > 0).sum(axis=0)
    share = np.maximum(32, -(-counts.sum(axis=1) // mc.W))[:, None]
    k = np.where(counts > 0, np.maximum(1, np.minimum(
        -(-counts // share), np.sqrt(counts / np.maximum(tiles_of_p, 1)).astype(np.int64))), 0)
    units = k.sum(axis=1)                                  # per tile
    used = np.flatnonzero(units)
    width = 2 if t.dtype in (FLOAT, HALF) else 1
    cost = 2 if square else 1
    acc = FLOAT if width == 2 else t.dtype
    parts = np.zeros(T, np.int64)
    parts[used] = np.minimum(units[used], mc.W)
    reads, vt = _pieces_field(t.flatten(), parts)
    per_unit = -(-counts.sum(axis=1) // np.maximum(units, 1))
    est = 10 + (-(-units // np.maximum(parts, 1)) * (4 + -(-per_unit * cost // width)))[vt]
    part = mc.addr.new((int(units.sum()),), np.repeat(np.arange(T), units), acc)
    fields = [reads, Field.regions(part, *_slices(units[used], parts[used]), reads=False,
                                   writes=True)]
    single = bool((k.sum(axis=0) <= 1).all())
    kind = f"ReduceAdd{'Square' * square}{acc.name}"
    ipu.execute(name if single else f"{name}/partials", [Group(kind, vt, est, fields)])
    if single:
        return mc.addr.new((P,), np.argmax(counts, axis=0), t.dtype)
    ipu.transient(part)
    out = mc.addr.linear((P,), t.dtype, T, grain_of(t.dtype), grain_of(t.dtype))
    fin = pieces(out.where, mc.W)
    per_p = k.sum(axis=0)
    src = np.concatenate([[0], np.cumsum(per_p)])
    est = 10 + (src[fin.ends] - src[fin.begins]) // width + 4 * (fin.ends - fin.begins)
    p_of, tile_of = np.nonzero(k.T > 0)                  # (row, tile) pairs, by row
    gathered = Placed(np.repeat(tile_of, k[tile_of, p_of]), part.ids[_unit_positions(k)], acc)
    ipu.execute(f"{name}/final", [Group(f"ReduceAdd{acc.name}", fin.tile, est, [
        Field.regions(gathered, src[fin.begins], src[fin.ends], kind="vector_list"),
        Field.regions(out, fin.begins, fin.ends, reads=False, writes=True)])])
    return out


def _unit_positions(k: np.ndarray) -> np.ndarray:
    """For every unit in output order (p, then tile): its position in the partials (stored
    tile after tile, each tile's units in order of p)."""
    T, P = k.shape
    start = (np.cumsum(k.ravel()) - k.ravel()).reshape(T, P)   # first unit of (tile, p)
    tile_p = np.nonzero(k.T > 0)                                # (p, tile) pairs, by p
    first = start[tile_p[1], tile_p[0]]
    return ragged(first, k[tile_p[1], tile_p[0]])


def reduce_all(ipu, name: str, t: Placed) -> Placed:
    """popops.reduce of a tensor to one element (reduce_inner of one row)."""
    return reduce_inner(ipu, name, t.reshape((1, t.elements)))


def _pieces_field(flat: Placed, parts: np.ndarray) -> tuple[Field, np.ndarray]:
    """A VectorList field of each tile's elements cut into parts[tile] pieces (poputil's
    even cut), and the tile of each piece."""
    index, lengths, counts, tiles = [], [], [], []
    for k in np.unique(parts[parts > 0]):
        idx = np.flatnonzero(parts[flat.where] == k)
        work = pieces(flat.where[idx], int(k))
        index.append(idx[ragged(work.begins, work.ends - work.begins)])
        lengths.append(work.ends - work.begins), counts.append(work.counts)
        tiles.append(work.tile)
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
    tiles = cat(tiles)
    order = np.argsort(tiles, kind="stable")
    counts_all, lengths_all, index_all = cat(counts), cat(lengths), cat(index)
    keep_runs = ragged((np.cumsum(counts_all) - counts_all)[order], counts_all[order])
    starts = np.cumsum(lengths_all) - lengths_all
    index_all = index_all[ragged(starts[keep_runs], lengths_all[keep_runs])]
    ends = np.cumsum(lengths_all[keep_runs])
    gathered = Placed(flat.where[index_all], flat.ids[index_all], flat.dtype)
    return Field(gathered, ends - lengths_all[keep_runs], lengths_all[keep_runs],
                 counts_all[order],
                 kind="vector_list"), tiles[order]


def _slices(units, vertices):
    """Each tile's partials (stored tile after tile) cut into its vertices' slices."""
    base = np.cumsum(units) - units
    v = np.repeat(np.arange(units.size), vertices)
    j = np.arange(v.size) - np.repeat(np.cumsum(vertices) - vertices, vertices)
    return base[v] + j * units[v] // vertices[v], base[v] + (j + 1) * units[v] // vertices[v]


# --- popnn.calc_loss per token ------------------------------------------------------------------
def token_loss(ipu, name: str, logits: Placed, labels: Placed, grad: bool = True) -> Placed:
    """popnn.calc_loss of logits [N, C] against labels [N]: a vertex per worker's run of rows
    where they live, then the sums of the loss and of the correct answers and the mean.
    Returns the gradient of the logits (mapped like their rows)."""
    N, C = logits.shape
    rows = Rows(ipu, logits, C)
    dlogits = rows.new(logits.dtype, (N, C))
    per_sample, correct = rows.new(FLOAT, (N,), 1), rows.new(INT, (N,), 1)
    per_row = 8 + 12 * C
    est = rows.estimates(np.full(N, per_row))
    fields = [tile_field(ipu, rows.work.tile, 1, FLOAT, rows.work.tile), rows.field(logits),
              rows.field(labels.flatten(), 1), rows.field(dlogits, reads=False, writes=True),
              rows.field(per_sample, 1, reads=False, writes=True),
              rows.field(correct, 1, reads=False, writes=True)]
    ipu.execute(f"{name}/softmax_cross_entropy",
                [Group(cls_name(SoftmaxCrossEntropy, logits.dtype), rows.work.tile, est,
                       fields)])
    total = reduce_all(ipu, f"{name}/sum", per_sample)
    map_op(ipu, f"{name}/mean", E._1 / float(N), [total])
    reduce_all(ipu, f"{name}/num_correct", correct)
    return dlogits


def arg_max(ipu, name: str, logits: Placed) -> Placed:
    """popnn.arg_max: a vertex per worker's run of rows where they live."""
    from ..popnn.argmax import ArgMaxRows
    N, C = logits.shape
    rows = Rows(ipu, logits, C)
    pred = rows.new(INT, (N,), 1)
    est = rows.estimates(np.full(N, C))
    ipu.execute(name, [Group(cls_name(ArgMaxRows, logits.dtype), rows.work.tile, est, [
        rows.field(logits), rows.field(pred, 1, reads=False, writes=True)])])
    return pred
