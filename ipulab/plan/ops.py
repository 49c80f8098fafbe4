"""The library operations a transformer's layers call, on Placed tensors, as the libraries
build them: what each puts where, and its compute sets (priced by lowering.py on an Ipu).

Each function follows its library's own rules and reads its codelets' estimates:

  map_op            popops.map / map_in_place: the output like its largest input, each tile's
                    elements cut into pieces of whole vectors (poputil.pieces), the generated
                    codelet's estimate (popops.mapcodelet.map_codelet)
  layer_norm(_grad) popnn.layer_norm and layer_norm_gradients: rows where their middle
                    element lives, the row codelets' estimates; the parameter gradients a
                    product ones @ [dy·xh, dy]
  softmax(_grad)    popnn.softmax with its scale and causal mask: the row codelets' estimates
                    from the columns each row uses
  mat_mul           poplin.mat_mul and mat_mul_grouped: poplin's plan, its blocks gathered
                    from wherever the operands live, the float partials reduced
  dropout           poprand.dropout where its input lives

and slices.py (popops.multi_slice, multi_update_add), reductions.py (popops.reduce, the loss
per token, the predictions).
"""
from __future__ import annotations

import numpy as np

from ..poplar import BOOL, FLOAT, HALF, INT, UNSIGNED_INT
from ..poplar.vertices import ragged
from ..poplin import codelets as pc
from ..poplin.matmul import Blocks
from ..poplin.plan import macs_per_cycle
from ..popnn import rowcodelets as rc
from ..popops import expr as E
from ..popops.elementwise import number_fields
from ..popops.mapcodelet import map_codelet, result_dtype
from ..poprand import codelets as rnd
from ..poputil import grain_of, pieces, typed_variant
from .lowering import Field, Group
from .placed import Placed, concat, row_owners


def estimates(fn, *keys) -> np.ndarray:
    """fn(*key) for every vertex's key (columns), called once per distinct key."""
    cols = np.stack([np.asarray(k, np.int64) for k in keys], 1)
    if not cols.size:
        return np.zeros(0, np.int64)
    distinct, inverse = np.unique(cols, axis=0, return_inverse=True)
    values = np.array([fn(*map(int, row)) for row in distinct], np.int64)
    return values[inverse.ravel()]


def variant(base, dtype, attrs, suffix="Half"):
    return typed_variant(base, dtype, attrs, suffix)


def _same(a: Placed, b: Placed) -> bool:
    return a.dtype is b.dtype and a.shape == b.shape and np.array_equal(a.ids, b.ids)


def runs(work, scale: int = 1):
    """A Pieces' runs in units `scale` times smaller: (begins, ends, counts)."""
    return work.begins * scale, work.ends * scale, work.counts


def tile_field(ipu, tiles, values: int, dtype, vertex_tiles, kind="scalar") -> Field:
    """poputil.tile_constant: a copy on each of the tiles, each vertex reading its own."""
    tiles = np.unique(tiles)
    c = ipu.new_constant(tiles, values, dtype)
    row = np.searchsorted(tiles, vertex_tiles) * values
    return Field.regions(c.flatten(), row, row + values, kind=kind)


# --- popops.map ------------------------------------------------------------------------------
def map_op(ipu, name: str, expr, tensors: list, in_place: bool = False) -> Placed:
    """popops.map (a new tensor) or map_in_place (tensors[0] written) of an expression."""
    mc = ipu.mc
    expression = E.as_expr(expr)
    used = sorted(expression.placeholders())
    shape = np.broadcast_shapes(*(t.shape for t in tensors))
    out_dtype = result_dtype(expression, {n: tensors[n - 1].dtype for n in used}, name)
    if in_place:
        out = tensors[0]
    else:
        full = [t for t in tensors if t.shape == shape]
        like = max(full, key=lambda t: t.elements) if full else None
        out = mc.addr.like(like, out_dtype) if like is not None else \
            mc.addr.linear(shape, out_dtype, mc.graph.num_tiles)
    mapping, fields = number_fields(tensors, used, out, in_place, _same)
    body = E.substitute(expression, mapping)
    reads_out = in_place and 1 in body.placeholders()
    n_out = out.elements
    inputs = {k: (t.dtype, t.elements == 1 and n_out > 1) for k, t in fields}
    cls = map_codelet(body, inputs, out.dtype, reads_out, where=name)
    work = pieces(out.where.ravel(), mc.W, grain_of(out.dtype))
    regions = runs(work)
    conns = [Field.regions(out.flatten(), *regions, reads=reads_out, writes=True)]
    for k, t in fields:
        conns.append(Field.whole(t.flatten(), work.tile.size) if inputs[k][1] else
                     Field.regions(t.broadcast(shape).flatten(), *regions))
    length = np.bincount(np.repeat(np.arange(work.tile.size), work.counts),
                         weights=work.ends - work.begins, minlength=work.tile.size)
    est = estimates(lambda n: cls.cycle_estimate(out=n), length)
    ipu.execute(name, [Group(cls.__name__, work.tile, est, conns)])
    return out


# --- rows: layer norm and softmax -------------------------------------------------------------
class Rows:
    """popnn._common.Rows: t as rows of `width`, each on the tile of its middle element, a
    vertex per worker's run of a tile's rows."""

    def __init__(self, ipu, t: Placed, width: int):
        self.ipu, self.width = ipu, width
        self.owners = row_owners(t, width)
        self.work = pieces(self.owners, ipu.mc.W)

    def new(self, dtype, shape, width: int | None = None) -> Placed:
        return self.ipu.mc.addr.rows(self.owners, self.width if width is None else width,
                                     shape, dtype)

    def field(self, t: Placed, width: int | None = None, **kw) -> Field:
        w = self.width if width is None else width
        return Field.regions(t.flatten(), *runs(self.work, w), kind="vector_list", **kw)

    def rows_per_region(self) -> np.ndarray:
        return self.work.ends - self.work.begins

    def estimates(self, per_row) -> np.ndarray:
        """10 + per region 6 + its rows' cycles (per_row: cycles of each row)."""
        prefix = np.concatenate([[0], np.cumsum(per_row)])
        run = prefix[self.work.ends] - prefix[self.work.begins] + rc.REGION_CYCLES
        ends = np.cumsum(self.work.counts)
        return rc.ENTRY_CYCLES + np.add.reduceat(run, ends - self.work.counts)


def cls_name(base, dtype) -> str:
    return base.__name__ + ("Half" if dtype is HALF else "")


def layer_norm(ipu, name: str, x: Placed, gamma: Placed, beta: Placed):
    """popnn.layer_norm: (y, mean, inv_std)."""
    d = x.shape[-1]
    rows = Rows(ipu, x, d)
    y = rows.new(x.dtype, x.shape)
    mean, inv_std = (rows.new(FLOAT, x.shape[:-1], 1) for _ in range(2))
    n = rows.work.tile.size
    per_row = np.full(rows.owners.size, rc.row_cycles(d, rc.LN_FORWARD_OPS, x.dtype))
    fields = [tile_field(ipu, rows.work.tile, 1, FLOAT, rows.work.tile),
              Field.whole(gamma, n), Field.whole(beta, n), rows.field(x),
              rows.field(y, writes=True, reads=False),
              rows.field(mean, 1, writes=True, reads=False),
              rows.field(inv_std, 1, writes=True, reads=False)]
    ipu.execute(name, [Group(cls_name(rc.LayerNormRows, x.dtype), rows.work.tile,
                             rows.estimates(per_row), fields)])
    return y, mean, inv_std


def layer_norm_grad(ipu, name: str, x, dy, mean, inv_std, gamma, need_dx: bool = True):
    """popnn.layer_norm_gradients (or the parameter gradients alone): (dx or None, the
    parameter sums [2d] as one product's result)."""
    d = x.shape[-1]
    if need_dx:
        rows = Rows(ipu, x, d)
        dx, dy_xhat = rows.new(x.dtype, x.shape), rows.new(x.dtype, x.shape)
        per_row = np.full(rows.owners.size, rc.row_cycles(d, rc.LN_GRAD_OPS, x.dtype))
        n = rows.work.tile.size
        fields = [Field.whole(gamma, n), rows.field(x), rows.field(dy), rows.field(mean, 1),
                  rows.field(inv_std, 1), rows.field(dx, writes=True, reads=False),
                  rows.field(dy_xhat, writes=True, reads=False)]
        ipu.execute(name, [Group(cls_name(rc.LayerNormGradRows, x.dtype), rows.work.tile,
                                 rows.estimates(per_row), fields)])
    else:
        dx = None
        stat = x.shape[:-1] + (1,)
        expr = E.cast((E.cast(E._1, FLOAT) - E._2) * E._3 * E.cast(E._4, FLOAT), x.dtype)
        dy_xhat = map_op(ipu, f"{name}/dy_xhat", expr,
                         [x, mean.reshape(stat), inv_std.reshape(stat), dy])
    r = dy.elements // d
    both = concat([dy_xhat.reshape((r, d)), dy.reshape((r, d))], 1)
    ones = ipu.shared_constant((1, r), dy.dtype)
    sums = mat_mul(ipu, f"{name}/param_sums", ones, both)
    return dx, sums


def _softmax_cycles(rows: Rows, t: Placed, ops: int, exp: int, causal: bool) -> np.ndarray:
    w = t.shape[-1]
    row = np.arange(rows.owners.size, dtype=np.int64)
    used = row % w + 1 if causal else np.full(row.size, w)
    return rows.estimates(rc.row_cycles(used, ops, t.dtype, exp, w - used))


def _softmax_fields(ipu, rows: Rows) -> list:
    """The scale, [width, side] and each run's first row: constants on the vertices' tiles."""
    tiles, counts = rows.work.tile, rows.work.counts
    first = ipu.vertex_constant(tiles, counts, INT)
    ends = np.cumsum(counts)
    return [tile_field(ipu, tiles, 1, FLOAT, tiles),
            tile_field(ipu, tiles, 2, INT, tiles, kind="vector"),
            Field.regions(first, ends - counts, ends)]


def softmax(ipu, name: str, t: Placed, causal: bool) -> Placed:
    """popnn.softmax over the last dimension (scaled; causal: columns j > i unused)."""
    rows = Rows(ipu, t, t.shape[-1])
    y = rows.new(t.dtype, t.shape)
    fields = _softmax_fields(ipu, rows) + [rows.field(t),
                                                     rows.field(y, writes=True, reads=False)]
    ipu.execute(name, [Group(cls_name(rc.SoftmaxRows, t.dtype), rows.work.tile,
                             _softmax_cycles(rows, t, rc.SOFTMAX_OPS, rc.EXP_CYCLES, causal),
                             fields)])
    return y


def softmax_grad(ipu, name: str, y: Placed, dy: Placed, causal: bool) -> Placed:
    """popnn.softmax_input_gradient from the output and its gradient."""
    rows = Rows(ipu, y, y.shape[-1])
    dx = rows.new(y.dtype, y.shape)
    fields = _softmax_fields(ipu, rows) + [
        rows.field(y), rows.field(dy), rows.field(dx, writes=True, reads=False)]
    ipu.execute(name, [Group(cls_name(rc.SoftmaxGradRows, y.dtype), rows.work.tile,
                             _softmax_cycles(rows, y, rc.SOFTMAX_GRAD_OPS, 0, causal), fields)])
    return dx


# --- poplin ------------------------------------------------------------------------------------
def _block_rows(starts, rows, row0, stride, col0, width):
    """Regions (begins, lengths) of rows row0 .. row0 + rows - 1 (of `width` from col0) of
    matrices whose rows are `stride` apart from `starts`, item by item (poplin.matmul's)."""
    item = np.repeat(np.arange(rows.size), rows)
    return starts[item] + ragged(row0, rows) * stride + col0[item], width[item]


def mat_mul(ipu, name: str, a: Placed, b: Placed) -> Placed:
    """poplin.mat_mul (rank 2) or mat_mul_grouped (rank 3): the result in the plan's blocks."""
    mc = ipu.mc
    grouped = len(a.shape) == 3
    a3 = a if grouped else a.reshape((1,) + a.shape)
    b3 = b if grouped else b.reshape((1,) + b.shape)
    G, M, K = a3.shape
    N = b3.shape[2]
    plan = mc.plan(M, K, N, G)
    bl = Blocks(plan)
    g0, g1 = bl.g[bl.gi], bl.g[bl.gi + 1]
    m0, dm = bl.m[bl.i], np.diff(bl.m)[bl.i]
    k0, dk = bl.k[bl.kk], np.diff(bl.k)[bl.kk]
    n0, dn = bl.n[bl.j], np.diff(bl.n)[bl.j]
    tiles = np.arange(bl.gi.size, dtype=np.int64)
    per_tile = g1 - g0
    t = np.repeat(tiles, per_tile)                          # a vertex per tile and group
    gg = g0[t] + ragged(np.zeros(tiles.size, np.int64), per_tile)
    out = mc.addr.product(plan, a.dtype, grouped)
    order = np.argsort(out.ids.ravel(), kind="stable")      # the variable, block by block
    stored = Placed(out.where.ravel()[order], out.ids.ravel()[order], a.dtype)
    tile_start = bl.layout(bl.m, bl.n)[1][bl.gi, bl.i, bl.j]
    sizes = per_tile * dm * dn
    if plan.split.k == 1 and a.dtype is FLOAT:            # the products write C directly
        dest, starts = stored, tile_start
    else:                                                 # float partials, tile by tile
        starts = np.cumsum(sizes) - sizes
        dest = mc.addr.new((int(sizes.sum()),), np.repeat(tiles, sizes), FLOAT)
        ipu.transient(dest)
    c0 = starts[t] + (gg - g0[t]) * dm[t] * dn[t]
    dims = ipu.new_constant(tiles, 3, INT)
    cls = pc.matmul_block_codelet(a.dtype, macs_per_cycle(mc.graph, a.dtype))
    est = estimates(lambda x, y, z: cls.cycle_estimate(3, x, y, z),
                    dm[t] * dk[t], dk[t] * dn[t], dm[t] * dn[t])
    fields = [Field.regions(dims.flatten(), 3 * t, 3 * t + 3),
              Field(a3.flatten(), *_block_rows(gg * M * K, dm[t], m0[t], K, k0[t], dk[t]),
                    dm[t]),
              Field(b3.flatten(), *_block_rows(gg * K * N, dk[t], k0[t], N, n0[t], dn[t]),
                    dk[t]),
              Field.regions(dest, c0, c0 + dm[t] * dn[t], reads=False, writes=True)]
    ipu.execute(f"{name}/products", [Group(cls.__name__, t, est, fields, multi=True)])
    if dest is not stored:
        _reduce_partials(ipu, name, bl.kk, plan.split.k, sizes, dest, starts, stored, tile_start)
    return out


def _reduce_partials(ipu, name, kk, pk, sizes, partials, starts, stored, tile_start) -> None:
    """The product's second compute set: chunk kk of C block (gi, i, j) summed on tile
    (gi, i, j, kk) from the pk partials (stored from starts[tile]) into its place."""
    c_lo, c_hi = kk * sizes // pk, (kk + 1) * sizes // pk
    keep = np.flatnonzero(c_hi > c_lo)
    chunk = c_hi[keep] - c_lo[keep]
    begins = (starts[(keep - kk[keep])[:, None] + np.arange(pk)] + c_lo[keep, None]).ravel()
    red = pc.reduce_codelet(stored.dtype, False)
    est = estimates(lambda p, o: red.cycle_estimate(partials=p, out=o), chunk * pk, chunk)
    ipu.execute(f"{name}/reduce", [Group(red.__name__, keep, est, [
        Field.regions(partials, begins, begins + np.repeat(chunk, pk), np.full(keep.size, pk)),
        Field.regions(stored, tile_start[keep] + c_lo[keep], tile_start[keep] + c_hi[keep],
                      reads=False, writes=True)], multi=True)])


# --- poprand.dropout --------------------------------------------------------------------------
def dropout(ipu, name: str, x: Placed) -> tuple[Placed, Placed]:
    """poprand.dropout: (out, mask) mapped like x, a vertex per worker's piece of each tile,
    the seed (on tile 0) read by every vertex."""
    mc = ipu.mc
    out, mask = mc.addr.like(x), mc.addr.like(x, BOOL)
    work = pieces(out.where.ravel(), mc.W, grain_of(out.dtype))
    cls = typed_variant(rnd.Dropout, x.dtype, rnd.DATA_FIELDS[rnd.Dropout], x.dtype.name.title())
    meta = ipu.vertex_constant(work.tile, work.counts + 2, UNSIGNED_INT)
    ends = np.cumsum(work.counts + 2)
    regions = runs(work)
    est = estimates(lambda r, n: 10 + 4 * r + 4 * n, work.counts,
                     np.bincount(np.repeat(np.arange(work.tile.size), work.counts),
                                 weights=work.ends - work.begins,
                                 minlength=work.tile.size).astype(np.int64))
    fields = [Field.whole(ipu.seed(), work.tile.size),
              Field.regions(meta, ends - work.counts - 2, ends),
              tile_field(ipu, work.tile, 2, FLOAT, work.tile, kind="vector"),
              Field.regions(x.flatten(), *regions, kind="vector_list"),
              Field.regions(out.flatten(), *regions, kind="vector_list", reads=False,
                            writes=True),
              Field.regions(mask.flatten(), *regions, kind="vector_list", reads=False,
                            writes=True)]
    ipu.execute(name, [Group(cls.__name__, work.tile, est, fields)])
    return out, mask
