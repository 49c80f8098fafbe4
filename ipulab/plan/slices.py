"""popops.multi_slice and multi_update_add on Placed tensors (an embedding's lookup and its
gradient), as popops builds them: multi_slice's grid of row and column blocks of least
estimate, multi_update_add's column blocks, groups of offsets and their float partials."""
from __future__ import annotations

import numpy as np

from ..popops import slicecodelets as sc
from ..popops.multislice import SliceBlocks, UpdatePlan
from ..poplar import FLOAT
from ..poplar.vertices import ragged
from .lowering import Field, Group
from .ops import estimates, tile_field, variant
from .placed import Placed


# --- popops.multi_slice, multi_update_add -----------------------------------------------------
def multi_slice(ipu, name: str, table: Placed, ids: Placed) -> Placed:
    """popops.multi_slice: out [N, d], block (r, c) of its grid on tile r·pc + c."""
    mc = ipu.mc
    (V, d), N = table.shape, ids.elements
    bl = SliceBlocks(mc.graph, N, V, d, table.dtype)
    rb, cb, nr, w, sizes, start, grid = bl.rb, bl.cb, bl.nr, bl.w, bl.sizes, bl.start, bl.tile
    out = mc.addr.new((N, d), grid[bl.row[:, None], bl.col[None, :]], table.dtype,
                      order=bl.ids)
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


def multi_update_add(ipu, name: str, table: Placed, updates: Placed, ids: Placed) -> None:
    """popops.multi_update_add(table, updates, ids, 1.0) in place: column blocks of the
    table, groups of offsets (their float partials added in a second compute set)."""
    mc = ipu.mc
    (V, d), N = table.shape, ids.elements
    up = UpdatePlan(mc.graph, V, d, N, table.dtype)
    col, w, C, groups, gb = up.col, up.w, up.c.size, up.groups, up.gb
    q, k, tiles = up.q, up.k, up.tile
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
