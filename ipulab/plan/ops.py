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
  multi_slice       popops.multi_slice: the grid of row and column blocks of least estimate
  multi_update_add  popops.multi_update_add: column blocks, groups of offsets and partials
  reduce_rows       popops.reduce over the leading dimension (a position embedding's gradient)
  dropout           poprand.dropout where its input lives
  token_loss        popnn.calc_loss per token: rows of logits, the sums and the mean
"""
from __future__ import annotations

import math

import numpy as np

from ..poplar import BOOL, FLOAT, HALF, INT, UNSIGNED_INT
from ..poplar.vertices import ragged
from ..poplin import codelets as pc
from ..poplin.matmul import Blocks
from ..poplin.plan import macs_per_cycle
from ..popnn import rowcodelets as rc
from ..popnn.loss import SoftmaxCrossEntropy
from ..popops import expr as E
from ..popops import slicecodelets as sc
from ..popops.mapcodelet import map_codelet, result_dtype
from ..poprand import codelets as rnd
from ..poputil import grain_of, pieces, typed_variant
from .lowering import Field, Group
from .placed import Placed, concat, row_owners


def _estimates(fn, *keys) -> np.ndarray:
    """fn(*key) for every vertex's key (columns), called once per distinct key."""
    cols = np.stack([np.asarray(k, np.int64) for k in keys], 1)
    if not cols.size:
        return np.zeros(0, np.int64)
    distinct, inverse = np.unique(cols, axis=0, return_inverse=True)
    values = np.array([fn(*map(int, row)) for row in distinct], np.int64)
    return values[inverse.ravel()]


def _variant(base, dtype, attrs, suffix="Half"):
    return typed_variant(base, dtype, attrs, suffix)


def _same(a: Placed, b: Placed) -> bool:
    return a.dtype is b.dtype and a.shape == b.shape and np.array_equal(a.ids, b.ids)


def _runs(work, scale: int = 1):
    """A Pieces' runs in units `scale` times smaller: (begins, ends, counts)."""
    return work.begins * scale, work.ends * scale, work.counts


def _tile_field(ipu, tiles, values: int, dtype, vertex_tiles, kind="scalar") -> Field:
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
    mapping, fields = {}, []
    for n in used:
        t = tensors[n - 1]
        if in_place and _same(t, out):
            mapping[n] = E.placeholder(1)
            continue
        k = next((k for k, other in fields if _same(t, other)), None)
        if k is None:
            k = len(fields) + (2 if in_place else 1)
            fields.append((k, t))
        mapping[n] = E.placeholder(k)
    body = E.substitute(expression, mapping)
    reads_out = in_place and 1 in body.placeholders()
    n_out = out.elements
    inputs = {k: (t.dtype, t.elements == 1 and n_out > 1) for k, t in fields}
    cls = map_codelet(body, inputs, out.dtype, reads_out, where=name)
    work = pieces(out.where.ravel(), mc.W, grain_of(out.dtype))
    regions = _runs(work)
    conns = [Field.regions(out.flatten(), *regions, reads=reads_out, writes=True)]
    for k, t in fields:
        conns.append(Field.whole(t.flatten(), work.tile.size) if inputs[k][1] else
                     Field.regions(t.broadcast(shape).flatten(), *regions))
    length = np.bincount(np.repeat(np.arange(work.tile.size), work.counts),
                         weights=work.ends - work.begins, minlength=work.tile.size)
    est = _estimates(lambda n: cls.cycle_estimate(out=n), length)
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
        return Field.regions(t.flatten(), *_runs(self.work, w), kind="vector_list", **kw)

    def rows_per_region(self) -> np.ndarray:
        return self.work.ends - self.work.begins

    def estimates(self, per_row) -> np.ndarray:
        """10 + per region 6 + its rows' cycles (per_row: cycles of each row)."""
        prefix = np.concatenate([[0], np.cumsum(per_row)])
        run = prefix[self.work.ends] - prefix[self.work.begins] + rc.REGION_CYCLES
        ends = np.cumsum(self.work.counts)
        return rc.ENTRY_CYCLES + np.add.reduceat(run, ends - self.work.counts)


def _cls_name(base, dtype) -> str:
    return base.__name__ + ("Half" if dtype is HALF else "")


def layer_norm(ipu, name: str, x: Placed, gamma: Placed, beta: Placed):
    """popnn.layer_norm: (y, mean, inv_std)."""
    d = x.shape[-1]
    rows = Rows(ipu, x, d)
    y = rows.new(x.dtype, x.shape)
    mean, inv_std = (rows.new(FLOAT, x.shape[:-1], 1) for _ in range(2))
    n = rows.work.tile.size
    per_row = np.full(rows.owners.size, rc.row_cycles(d, rc.LN_FORWARD_OPS, x.dtype))
    fields = [_tile_field(ipu, rows.work.tile, 1, FLOAT, rows.work.tile),
              Field.whole(gamma, n), Field.whole(beta, n), rows.field(x),
              rows.field(y, writes=True, reads=False),
              rows.field(mean, 1, writes=True, reads=False),
              rows.field(inv_std, 1, writes=True, reads=False)]
    ipu.execute(name, [Group(_cls_name(rc.LayerNormRows, x.dtype), rows.work.tile,
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
        ipu.execute(name, [Group(_cls_name(rc.LayerNormGradRows, x.dtype), rows.work.tile,
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
    return [_tile_field(ipu, tiles, 1, FLOAT, tiles),
            _tile_field(ipu, tiles, 2, INT, tiles, kind="vector"),
            Field.regions(first, ends - counts, ends)]


def softmax(ipu, name: str, t: Placed, causal: bool) -> Placed:
    """popnn.softmax over the last dimension (scaled; causal: columns j > i unused)."""
    rows = Rows(ipu, t, t.shape[-1])
    y = rows.new(t.dtype, t.shape)
    fields = _softmax_fields(ipu, rows) + [rows.field(t),
                                                     rows.field(y, writes=True, reads=False)]
    ipu.execute(name, [Group(_cls_name(rc.SoftmaxRows, t.dtype), rows.work.tile,
                             _softmax_cycles(rows, t, rc.SOFTMAX_OPS, rc.EXP_CYCLES, causal),
                             fields)])
    return y


def softmax_grad(ipu, name: str, y: Placed, dy: Placed, causal: bool) -> Placed:
    """popnn.softmax_input_gradient from the output and its gradient."""
    rows = Rows(ipu, y, y.shape[-1])
    dx = rows.new(y.dtype, y.shape)
    fields = _softmax_fields(ipu, rows) + [
        rows.field(y), rows.field(dy), rows.field(dx, writes=True, reads=False)]
    ipu.execute(name, [Group(_cls_name(rc.SoftmaxGradRows, y.dtype), rows.work.tile,
                             _softmax_cycles(rows, y, rc.SOFTMAX_GRAD_OPS, 0, causal), fields)])
    return dx


# --- poplin ------------------------------------------------------------------------------------
def _block_rows(starts, rows, row0, stride, col0, width):
    """Regions (begins, lengths) of rows row0 .. row0 + rows - 1 (of `width` from col0) of
    matrices whose rows are `stride` apart from `starts`, item by item (poplin.matmul's)."""
    item = np.repeat(np.arange(rows.size), rows)
    return starts[item] + ragged(row0, rows) * stride + col0[item], width[item]


def mat_mul(ipu, name: str, a: Placed, b: Placed, accumulate: bool = False) -> Placed:
    """poplin.mat_mul (rank 2) or mat_mul_grouped (rank 3): the result in the plan's blocks."""
    mc = ipu.mc
    grouped = len(a.shape) == 3
    a3 = a if grouped else a.reshape((1,) + a.shape)
    b3 = b if grouped else b.reshape((1,) + b.shape)
    G, M, K = a3.shape
    N = b3.shape[2]
    dtype = a.dtype
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
    a_begins, a_len = _block_rows(gg * M * K, dm[t], m0[t], K, k0[t], dk[t])
    b_begins, b_len = _block_rows(gg * K * N, dk[t], k0[t], N, n0[t], dn[t])
    out = mc.addr.product(plan, dtype, grouped)
    order = np.argsort(out.ids.ravel(), kind="stable")      # the variable, block by block
    stored = Placed(out.where.ravel()[order], out.ids.ravel()[order], dtype)
    tile_start = bl.layout(bl.m, bl.n)[1][bl.gi, bl.i, bl.j]
    pk = plan.split.k
    sizes = per_tile * dm * dn
    if pk == 1 and not accumulate and dtype is FLOAT:     # the products write C directly
        dest, starts = stored, tile_start
    else:                                                 # float partials, tile by tile
        starts = np.cumsum(sizes) - sizes
        dest = mc.addr.new((int(sizes.sum()),), np.repeat(tiles, sizes), FLOAT)
        ipu.transient(dest)
    c0 = starts[t] + (gg - g0[t]) * dm[t] * dn[t]
    dims = ipu.new_constant(tiles, 3, INT)
    cls = pc.matmul_block_codelet(dtype, macs_per_cycle(mc.graph, dtype))
    est = _estimates(lambda x, y, z: cls.cycle_estimate(3, x, y, z),
                     dm[t] * dk[t], dk[t] * dn[t], dm[t] * dn[t])
    fields = [Field.regions(dims.flatten(), 3 * t, 3 * t + 3),
              Field(a3.flatten(), a_begins, a_len, dm[t]),
              Field(b3.flatten(), b_begins, b_len, dk[t]),
              Field.regions(dest, c0, c0 + dm[t] * dn[t], reads=False, writes=True)]
    ipu.execute(f"{name}/products", [Group(cls.__name__, t, est, fields, multi=True)])
    if dest is stored:
        return out
    # chunk kk of C block (gi, i, j) summed on tile (gi, i, j, kk) from the pk partials
    kk = bl.kk
    c_lo, c_hi = kk * sizes // pk, (kk + 1) * sizes // pk
    keep = np.flatnonzero(c_hi > c_lo)
    chunk = c_hi[keep] - c_lo[keep]
    begins = (starts[(keep - kk[keep])[:, None] + np.arange(pk)] + c_lo[keep, None]).ravel()
    parts = Field.regions(dest, begins, begins + np.repeat(chunk, pk), np.full(keep.size, pk))
    out_field = Field.regions(stored, tile_start[keep] + c_lo[keep],
                              tile_start[keep] + c_hi[keep], reads=accumulate, writes=True)
    red = pc.reduce_codelet(dtype, accumulate)
    acc = (1,) if accumulate else ()
    est = _estimates(lambda p, o: red.cycle_estimate(*acc, partials=p, out=o), chunk * pk, chunk)
    fields = [parts, out_field]
    if accumulate:
        fields.insert(0, _tile_field(ipu, keep, 1, FLOAT, keep))
    ipu.execute(f"{name}/reduce", [Group(red.__name__, keep, est, fields, multi=True)])
    return out


# --- popops.multi_slice, multi_update_add -----------------------------------------------------
def _bounds(n: int, parts: int, grain: int = 1) -> np.ndarray:
    cuts = (np.arange(parts + 1, dtype=np.int64) * n // parts) // grain * grain
    cuts[-1] = n
    return cuts


def slice_grid(target, N: int, V: int, d: int, dtype) -> tuple[int, int]:
    """(row blocks, column blocks) popops.multi_slice takes: the fewest estimated cycles
    (the table's column block and the offsets received, then the copies), fewer tiles on a
    tie."""
    grain, e = grain_of(dtype), dtype.size
    setup, bpc = target.cost.exchange_setup_cycles, target.exchange_bytes_per_cycle
    best = None
    for pc_ in range(1, -(-d // grain) + 1):
        w = -(-d // pc_)
        pr = max(1, min(N, target.num_tiles // pc_))
        rows = -(-N // pr)
        receive = -(-(e * V * w + 4 * rows) // bpc) + setup
        work = 6 * (sc.ENTRY_CYCLES + -(-rows // 6) * (sc.OFFSET_CYCLES + -(-w * e // 8)))
        key = (receive + work, pr * pc_)
        if best is None or key < best[0]:
            best = (key, pr, pc_)
    return best[1], best[2]


def multi_slice(ipu, name: str, table: Placed, ids: Placed) -> Placed:
    """popops.multi_slice: out [N, d], block (r, c) of its grid on tile r·pc + c."""
    mc = ipu.mc
    (V, d), N = table.shape, ids.elements
    pr, pc_ = slice_grid(mc.graph, N, V, d, table.dtype)
    rb, cb = _bounds(N, pr), _bounds(d, pc_, grain_of(table.dtype))
    nr, w = np.diff(rb), np.diff(cb)
    sizes = nr[:, None] * w[None, :]
    start = (np.cumsum(sizes) - sizes.ravel()).reshape(sizes.shape)
    grid = np.arange(pr * pc_, dtype=np.int64).reshape(pr, pc_)
    r = np.searchsorted(rb, np.arange(N), "right") - 1
    c = np.searchsorted(cb, np.arange(d), "right") - 1
    order = start[r[:, None], c[None, :]] + (np.arange(N) - rb[r])[:, None] * w[c][None, :] + \
        (np.arange(d) - cb[c])[None, :]
    out = mc.addr.new((N, d), grid[r[:, None], c[None, :]], table.dtype, order=order)
    stored = Placed(np.repeat(grid.ravel(), sizes.ravel()), np.sort(out.ids.ravel()),
                    table.dtype)
    br, bc = np.nonzero(sizes)
    tiles = grid[br, bc]
    rows = (np.arange(V, dtype=np.int64)[None, :] * d + cb[bc][:, None]).ravel()
    cls = _variant(sc.MultiSlice, table.dtype, ("table", "out"))
    est = _estimates(lambda n, t, o: cls.cycle_estimate(n, t, o), nr[br], V * w[bc],
                     sizes[br, bc])
    fields = [Field.regions(ids.flatten(), rb[br], rb[br + 1]),
              Field.regions(table.flatten(), rows, rows + np.repeat(w[bc], V),
                            np.full(br.size, V)),
              Field.regions(stored, start[br, bc], start[br, bc] + sizes[br, bc],
                            reads=False, writes=True)]
    ipu.execute(name, [Group(cls.__name__, tiles, est, fields, multi=True)])
    return out


def update_groups(target, N: int, V: int, w: int, blocks: int, dtype) -> int:
    """The groups of offsets popops.multi_update_add cuts N into (fewest estimated cycles)."""
    e, vec = dtype.size, -(-w * dtype.size // 8)
    setup, bpc = target.cost.exchange_setup_cycles, target.exchange_bytes_per_cycle
    best = None
    for groups in range(1, max(1, min(N, target.num_tiles // blocks)) + 1):
        n = -(-N // groups)
        receive = -(-n * (4 + e * w) // bpc) + setup
        zero = 0 if groups == 1 else -(-V * w // 2)
        cycles = receive + 6 * (sc.ENTRY_CYCLES + zero + n * (sc.OFFSET_CYCLES + 2 * vec))
        if groups > 1:
            cycles += target.cost.sync_internal_cycles + setup + \
                -(-((groups - 1) * 4 * V * w + e * V * w) // bpc) + \
                6 * (sc.ENTRY_CYCLES + -(-V * w // 12) * (groups + 1))
        if best is None or cycles < best[0]:
            best = (cycles, groups)
    return best[1]


def multi_update_add(ipu, name: str, table: Placed, updates: Placed, ids: Placed) -> None:
    """popops.multi_update_add(table, updates, ids, 1.0) in place: column blocks of the
    table, groups of offsets (their float partials added in a second compute set)."""
    mc = ipu.mc
    (V, d), N = table.shape, ids.elements
    grain = grain_of(table.dtype)
    cb = _bounds(d, min(-(-d // grain), mc.graph.num_tiles), grain)
    blk = np.flatnonzero(np.diff(cb))
    col, w = cb[blk], np.diff(cb)[blk]
    C = blk.size
    groups = update_groups(mc.graph, N, V, int(w.max()), C, table.dtype)
    gb = _bounds(N, groups)
    q, k = np.divmod(np.arange(groups * C, dtype=np.int64), C)
    tiles = q * C + k
    n = np.diff(gb)[q]
    upd = ragged(gb[q], n) * d + np.repeat(col[k], n)
    upd_field = Field(updates.flatten(), upd, np.repeat(w[k], n), n)

    def table_field(blocks, **kw):
        begins = (np.arange(V, dtype=np.int64)[None, :] * d + col[blocks][:, None]).ravel()
        return Field.regions(table.flatten(), begins, begins + np.repeat(w[blocks], V),
                             np.full(len(blocks), V), **kw)

    common = [_tile_field(ipu, tiles, 1, FLOAT, tiles),
              Field.regions(ids.flatten(), gb[q], gb[q + 1]), upd_field]
    if groups == 1:
        cls = _variant(sc.MultiUpdateAdd, table.dtype, ("updates", "table"))
        est = _estimates(lambda m, x, y: cls.cycle_estimate(1, m, x, y), n, n * w[k], V * w[k])
        ipu.execute(name, [Group(cls.__name__, tiles, est,
                                 common + [table_field(k, writes=True)])])
        return
    part_sizes = V * w[k]
    part = mc.addr.new((int(part_sizes.sum()),), np.repeat(tiles, part_sizes), FLOAT)
    ipu.transient(part)
    begin = np.cumsum(part_sizes) - part_sizes
    cls = _variant(sc.MultiUpdatePartial, table.dtype, ("updates",))
    est = _estimates(lambda m, x, y: cls.cycle_estimate(1, m, x, y), n, n * w[k], part_sizes)
    ipu.execute(name, [Group(cls.__name__, tiles, est, common + [
        Field.regions(part, begin, begin + part_sizes, reads=False, writes=True)])])
    blocks = np.arange(C, dtype=np.int64)
    pb = (begin[blocks[:, None] + np.arange(groups)[None, :] * C]).ravel()
    add = _variant(sc.AddPartials, table.dtype, ("table",))
    est = _estimates(lambda p, t_: add.cycle_estimate(p, t_), groups * V * w, V * w)
    ipu.execute(f"{name}/sum", [Group(add.__name__, blocks, est, [
        Field.regions(part, pb, pb + np.repeat(V * w, groups), np.full(C, groups)),
        table_field(blocks, writes=True)], multi=True)])


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
    regions = _runs(work)
    est = _estimates(lambda r, n: 10 + 4 * r + 4 * n, work.counts,
                     np.bincount(np.repeat(np.arange(work.tile.size), work.counts),
                                 weights=work.ends - work.begins,
                                 minlength=work.tile.size).astype(np.int64))
    fields = [Field.whole(ipu.seed(), work.tile.size),
              Field.regions(meta, ends - work.counts - 2, ends),
              _tile_field(ipu, work.tile, 2, FLOAT, work.tile, kind="vector"),
              Field.regions(x.flatten(), *regions, kind="vector_list"),
              Field.regions(out.flatten(), *regions, kind="vector_list", reads=False,
                            writes=True),
              Field.regions(mask.flatten(), *regions, kind="vector_list", reads=False,
                            writes=True)]
    ipu.execute(name, [Group(cls.__name__, work.tile, est, fields)])
    return out, mask


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
    fields = [_tile_field(ipu, rows.work.tile, 1, FLOAT, rows.work.tile), rows.field(logits),
              rows.field(labels.flatten(), 1), rows.field(dlogits, reads=False, writes=True),
              rows.field(per_sample, 1, reads=False, writes=True),
              rows.field(correct, 1, reads=False, writes=True)]
    ipu.execute(f"{name}/softmax_cross_entropy",
                [Group(_cls_name(SoftmaxCrossEntropy, logits.dtype), rows.work.tile, est,
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
    ipu.execute(name, [Group(_cls_name(ArgMaxRows, logits.dtype), rows.work.tile, est, [
        rows.field(logits), rows.field(pred, 1, reads=False, writes=True)])])
    return pred
