"""TileExplorer: pick a tile, see its memory map, its vertices and whom it exchanges data with."""
from __future__ import annotations

import ipywidgets as W
import numpy as np
from bokeh.models import (CDSView, ColumnDataSource, GroupFilter, NumeralTickFormatter, Range1d,
                          TapTool)

from .. import viz
from ..viz.base import figure, hover, plural
from ..viz.heatmap import WIDTH
from ..viz.palette import CATEGORY_COLORS, OTHER
from ._common import (bokeh_pane, esc, first_plot, fmt_int, profile_of,
                      source_with, table, where)

MAX_ROWS = 40   # rows per table; a tile can hold thousands of allocations or vertices


class TileExplorer(W.VBox):
    """One tile of the most recent run: its allocations (address, bytes, category, owner), the
    vertices placed on it, and the tiles it sends to and receives from.

    Pick the tile with `tile` (or the slider), or click it in the memory heatmap. Works on any
    target: nothing here is built per tile. `width`: the plot areas' width in pixels.
    """

    def __init__(self, engine, tile: int = 0, heatmap: bool = True, width: int = WIDTH):
        self.profile = p = profile_of(engine, "TileExplorer")
        self.tile = W.BoundedIntText(value=0, min=0, max=p.num_tiles - 1, description="tile",
                                     layout=W.Layout(width="180px"))
        self.slider = W.IntSlider(value=0, min=0, max=p.num_tiles - 1, readout=False,
                                  continuous_update=False, layout=W.Layout(width="420px"))
        W.link((self.tile, "value"), (self.slider, "value"))
        self.header = W.HTML()
        self.memory_html, self.vertices_html, self.partners_html = W.HTML(), W.HTML(), W.HTML()
        self.memory_source = ColumnDataSource(_layout_columns([], 0), name="memory")
        categories = [k for k, per_tile in p.memory.items() if np.any(per_tile)]
        self.memory_bar = _memory_bar(self.memory_source, p.bytes_per_tile, categories, width)
        self._src, self._dst, self._bytes = p.exchange_traffic()
        self.heatmap = self._heat_source = None
        if heatmap:
            self.heatmap = viz.tile_memory_heatmap(p, width=width)
            self._wire_heatmap()
        # Fill every figure before wrapping it: a page draws a figure as it was when wrapped,
        # later changes reach only views that already exist.
        self.tile.value = tile
        self._show()
        top = [W.HBox([self.tile, self.slider])]
        if heatmap:
            top.append(bokeh_pane(self.heatmap))
        details = W.Tab(children=[
            W.VBox([bokeh_pane(self.memory_bar), self.memory_html]),
            self.vertices_html, self.partners_html])
        details.titles = ("Memory map", "Vertices", "Exchange partners")
        super().__init__(top + [self.header, details])
        self.tile.observe(self._show, "value")

    # --- clicking the heatmap --------------------------------------------------------------
    def _wire_heatmap(self) -> None:
        src = source_with(self.heatmap, "tile")
        if src is None:
            return
        plot = first_plot(self.heatmap)
        if not any(isinstance(t, TapTool) for t in plot.tools):
            plot.add_tools(TapTool())
        tiles = np.asarray(src.data["tile"], np.int64)
        self._heat_source, self._heat_tiles = src, tiles
        self._heat_row = dict(zip(tiles.tolist(), range(tiles.size)))
        src.selected.on_change("indices", self._on_pick)

    def _on_pick(self, _attr, _old, new) -> None:
        if new:
            self.tile.value = int(self._heat_tiles[new[0]])

    # --- what one tile holds ---------------------------------------------------------------
    def _show(self, _change=None) -> None:
        p, t = self.profile, int(self.tile.value)
        allocs = p.memory_layout.allocations_on(t)
        used = int(p.memory_total[t])
        self.header.value = (
            f"<b>{esc(where(p, t))}</b>: {fmt_int(used)} B of {fmt_int(p.bytes_per_tile)} B "
            f"({100 * used / p.bytes_per_tile:.2f} %) in {plural(len(allocs), 'allocation')} · "
            f"compute {plural(p.compute_cycles[t], 'cycle')} · "
            f"exchange {plural(p.exchange_cycles[t], 'cycle')}")
        self.memory_source.data = cols = _layout_columns(allocs, used)
        self.memory_bar.x_range.end = max(int(cols["right"].max(initial=0)), 64) * 1.02
        self.memory_bar.title.text = (f"{where(p, t)}: {used:,} of {p.bytes_per_tile:,} bytes "
                                      "(addresses →)")
        self.memory_html.value = table(
            ["address", "bytes", "with padding", "category", "owner"],
            [(f"0x{a:05x}", fmt_int(n), fmt_int(m), c, o)
             for (a, n, c, o), m in zip(allocs, cols["aligned"].tolist())], MAX_ROWS,
            empty="nothing allocated on this tile")
        self.vertices_html.value = self._vertices(t)
        self.partners_html.value = self._partners(t)
        if self._heat_source is not None and t in self._heat_row:
            self._heat_source.selected.indices = [self._heat_row[t]]

    def _vertices(self, t: int) -> str:
        g = self.profile.graph
        ids = g.vertices_on(t)
        rows = []
        for v in ids[:MAX_ROWS].tolist():
            conns = "; ".join(f"{field}: " + ", ".join(f"{name} ({n})" for name, n, _ in parts)
                              for field, parts in g.connections(v).items())
            rows.append((v, g.vertex_codelet[v], g.compute_sets[g.vertex_cs[v]], conns))
        return (f"<b>{plural(ids.size, 'vertex', 'vertices')}</b> on this tile"
                + table(["vertex", "codelet", "compute set", "connections"], rows, MAX_ROWS,
                        empty="no vertices on this tile", total=ids.size))

    def _partners(self, t: int) -> str:
        def side(mask, other, verb):
            order = np.argsort(-self._bytes[mask], kind="stable")
            tiles, nbytes = other[mask][order], self._bytes[mask][order]
            rows = [(where(self.profile, a), fmt_int(b)) for a, b in zip(tiles, nbytes)]
            return (f"<div style='margin-right:24px'><b>{verb} {plural(tiles.size, 'tile')}, "
                    f"{fmt_int(nbytes.sum())} B</b>"
                    + table(["tile", "bytes"], rows, MAX_ROWS, empty="none") + "</div>")

        return ("<div style='display:flex'>"
                + side(self._src == t, self._dst, "sends to")
                + side(self._dst == t, self._src, "receives from") + "</div>"
                + "<div><i>bytes over the whole run</i></div>")


def _layout_columns(allocs, used: int) -> dict:
    """The memory bar's columns: an allocation spans its ALIGNED size, up to the next one's
    address (the last up to the tile's `used` bytes), so the bar ends at the memory total;
    `bytes` is what was asked for, `aligned` what it takes."""
    a = np.asarray([x[0] for x in allocs], np.int64)
    n = np.asarray([x[1] for x in allocs], np.int64)
    ends = np.append(a[1:], max(used, int((a + n).max(initial=0))))[:a.size]
    aligned = np.maximum(ends - a, n)
    return {"left": a, "right": a + aligned, "address": a, "bytes": n, "aligned": aligned,
            "category": [x[2] for x in allocs], "owner": [x[3] for x in allocs]}


def _memory_bar(source: ColumnDataSource, bytes_per_tile: int, categories, width: int):
    """One bar per allocation along the tile's addresses, a renderer (and legend entry) per
    memory category of the run."""
    f = figure("", "address (bytes)", "", subtitle="each allocation with its alignment padding: "
               "the bar ends at the tile's memory total", tools="xpan,xwheel_zoom,reset",
               frame_width=width, frame_height=50,
               x_range=Range1d(0, bytes_per_tile, bounds=(0, None)), y_range=Range1d(0, 1))
    bars = [f.quad(left="left", right="right", bottom=0, top=1, source=source,
                   view=CDSView(filter=GroupFilter(column_name="category", group=c)),
                   fill_color=CATEGORY_COLORS.get(c, OTHER), line_color="white", line_width=0.5,
                   legend_label=c, name=f"memory_{c}") for c in categories]
    hover(f, bars, [("owner", "@owner"), ("category", "@category"),
                    ("bytes", "@bytes{0,0} (@aligned{0,0} with padding)"),
                    ("address", "@address{0,0}")])
    if bars:
        legend = f.legend[0]
        f.add_layout(legend, "below")
        legend.orientation = "horizontal"
        legend.click_policy = "hide"
    f.xaxis.formatter = NumeralTickFormatter(format="0,0")   # 638,976, not 6.39e+5
    f.yaxis.visible = False
    f.ygrid.visible = False
    return f
