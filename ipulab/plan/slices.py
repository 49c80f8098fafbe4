"""popops.multi_slice and multi_update_add on Placed tensors (an embedding's lookup and its
gradient), as popops builds them: multi_slice's grid of row and column blocks of least
estimate, multi_update_add's column blocks, groups of offsets and their float partials."""
from __future__ import annotations

import numpy as np

from ..popops import slicecodelets as sc

from ..poplar import FLOAT
from ..poplar.vertices import ragged
from ..poputil import grain_of
from .lowering import Field, Group
from .ops import estimates, tile_field, variant
from .placed import Placed


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
    cls = variant(sc.MultiSlice, table.dtype, ("table", "out"))
    est = estimates(lambda n, t, o: cls.cycle_estimate(n, t, o), nr[br], V * w[bc],
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

    common = [tile_field(ipu, tiles, 1, FLOAT, tiles),
              Field.regions(ids.flatten(), gb[q], gb[q + 1]), upd_field]
    if groups == 1:
        cls = variant(sc.MultiUpdateAdd, table.dtype, ("updates", "table"))
        est = estimates(lambda m, x, y: cls.cycle_estimate(1, m, x, y), n, n * w[k], V * w[k])
        ipu.execute(name, [Group(cls.__name__, tiles, est,
                                 common + [table_field(k, writes=True)])])
        return
    part_sizes = V * w[k]
    part = mc.addr.new((int(part_sizes.sum()),), np.repeat(tiles, part_sizes), FLOAT)
    ipu.transient(part)
    begin = np.cumsum(part_sizes) - part_sizes
    cls = variant(sc.MultiUpdatePartial, table.dtype, ("updates",))
    est = estimates(lambda m, x, y: cls.cycle_estimate(1, m, x, y), n, n * w[k], part_sizes)
    ipu.execute(name, [Group(cls.__name__, tiles, est, common + [
        Field.regions(part, begin, begin + part_sizes, reads=False, writes=True)])])
    blocks = np.arange(C, dtype=np.int64)
    pb = (begin[blocks[:, None] + np.arange(groups)[None, :] * C]).ravel()
    add = variant(sc.AddPartials, table.dtype, ("table",))
    est = estimates(lambda p, t_: add.cycle_estimate(p, t_), groups * V * w, V * w)
    ipu.execute(f"{name}/sum", [Group(add.__name__, blocks, est, [
        Field.regions(part, pb, pb + np.repeat(V * w, groups), np.full(C, groups)),
        table_field(blocks, writes=True)], multi=True)])
