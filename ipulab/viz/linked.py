"""linked: the tile-memory heatmap above the BSP trace, with linked selection. Select tiles in
the heatmap (tap or box select) and the trace highlights the rows holding them; select bars in
the trace and the heatmap highlights those rows' tiles. Pure bokeh CustomJS: works in a static
notebook output, no Python kernel round trip."""
from __future__ import annotations

from bokeh.layouts import layout
from bokeh.models import ColumnDataSource, CustomJS

from .heatmap import tile_memory_heatmap
from .layout import tile_groups
from .trace import bsp_trace

# `src` was selected by the user: select every item of `dst` whose row is a row of a selected
# item of `src`. The flag on dst stops dst's own callback from echoing the selection back.
_SELECT_SAME_ROWS = """
if (src.__ipulab_linking) { return; }
const rows = new Set();
for (const i of src.selected.indices) { rows.add(src.data.row[i]); }
const out = [];
const dst_rows = dst.data.row;
for (let i = 0; i < dst_rows.length; i++) { if (rows.has(dst_rows[i])) { out.push(i); } }
dst.__ipulab_linking = true;
try { dst.selected.indices = out; } finally { dst.__ipulab_linking = false; }
"""


def link_rows(a, b) -> None:
    """Link the selections of two ColumnDataSources that both have a `row` column."""
    a.selected.js_on_change("indices", CustomJS(args={"src": a, "dst": b}, code=_SELECT_SAME_ROWS))
    b.selected.js_on_change("indices", CustomJS(args={"src": b, "dst": a}, code=_SELECT_SAME_ROWS))


def linked(profile, max_rows: int = 64, color_by: str = "bytes", *, width: int | None = None):
    """tile_memory_heatmap over bsp_trace, their selections linked through trace rows (width:
    of each figure's plot area, default theirs)."""
    size = {} if width is None else {"width": width}
    heat = tile_memory_heatmap(profile, color_by, **size)
    trace = bsp_trace(profile, max_rows, **size)
    tiles = heat.select_one({"name": "tiles", "type": ColumnDataSource})
    bars = trace.select_one({"name": "phases", "type": ColumnDataSource})
    groups = tile_groups(profile.num_tiles, profile.tiles_per_ipu, max_rows)
    tiles.data["row"] = groups.of(tiles.data["tile"])
    link_rows(tiles, bars)
    return layout([[heat], [trace]], name="linked")
