"""tile_memory_heatmap: every tile as a small square on the IPU floor plan, coloured by the bytes
it holds (or by what most of them are), over-budget tiles outlined in red."""
from __future__ import annotations

import numpy as np
from bokeh.models import ColorBar, ColumnDataSource, LabelSet, LinearColorMapper, Range1d

from .base import figure, fmt_bytes, hover, plural
from .layout import IPUS_PER_ROW, tile_grid
from .palette import (BYTES_PALETTE, CATEGORY_COLORS, EMPTY_COLOR, OTHER, OVER_BUDGET_LINE,
                      TILE_LINE, ramp)

COLOR_BY = ("bytes", "category")
WIDTH = 600   # plot area (px) at most: with colour bar or legend and toolbar, fits a notebook


def _top(total: np.ndarray, high: float | None) -> float:
    """Bytes at the top of the colour scale: `high` if given, else the busiest tile."""
    return high if high else max(int(total.max(initial=0)), 1)


def tile_memory_data(profile, grid=None, color_by: str = "bytes",
                     high: float | None = None) -> dict[str, np.ndarray]:
    """The heatmap's columns, one entry per tile (see tile_memory_heatmap)."""
    if grid is None:
        grid = tile_grid(profile.num_tiles, profile.tiles_per_ipu)
    total = np.asarray(profile.memory_total, np.int64)
    keys = list(profile.memory)
    by_cat = np.stack([np.asarray(profile.memory[k], np.int64) for k in keys])
    dominant = np.argmax(by_cat, axis=0)
    category = np.asarray(keys, dtype=object)[dominant]
    empty = total == 0
    category[empty] = "empty"
    largest, largest_bytes = profile.memory_layout.largest_owner()
    if color_by == "category":
        color = np.asarray([CATEGORY_COLORS.get(k, OTHER) for k in keys], object)[dominant]
    else:
        color = ramp(total, 0, _top(total, high))
    color[empty] = EMPTY_COLOR
    over = total > profile.bytes_per_tile
    data = {"tile": grid.tile, "ipu": grid.ipu, "x": grid.x, "y": grid.y, "bytes": total,
            "fraction": total / profile.bytes_per_tile, "largest": np.asarray(largest, object),
            "largest_bytes": np.asarray(largest_bytes, np.int64), "category": category,
            "color": color, "over_budget": over,
            "line_color": np.where(over, OVER_BUDGET_LINE, TILE_LINE).astype(object),
            "line_width": np.where(over, 2.5, 0.5), "line_alpha": np.where(over, 1.0, 0.0)}
    data.update(zip(keys, by_cat))
    return data


def _label_ipus(fig, grid) -> None:
    """'IPU i' above each IPU's block of tiles, and no axis ticks (tile slots, not numbers)."""
    x0, y0 = grid.ipu_origin()
    labels = ColumnDataSource({"x": x0 + grid.cols / 2 - 0.5, "y": y0 - 0.6,
                               "text": [f"IPU {i}" for i in range(grid.num_ipus)]})
    fig.add_layout(LabelSet(x="x", y="y", text="text", source=labels, text_align="center",
                            text_baseline="bottom", text_font_size="11px"))
    fig.xaxis.major_label_text_font_size = fig.yaxis.major_label_text_font_size = "0px"
    fig.xaxis.major_tick_line_color = fig.yaxis.major_tick_line_color = None
    fig.xaxis.minor_tick_line_color = fig.yaxis.minor_tick_line_color = None
    fig.xgrid.visible = fig.ygrid.visible = False


def tile_memory_heatmap(profile, color_by: str = "bytes", *, high: float | None = None,
                        ipus_per_row: int = IPUS_PER_ROW, width: int = WIDTH):
    """Memory of every tile, laid out as IPUs of tile columns, as ONE rect renderer.

    color_by="bytes" colours by bytes held (0 .. `high`, default the busiest tile);
    color_by="category" by the category holding most of a tile's bytes. Tiles needing more
    than bytes_per_tile are outlined in red (`over_budget`). `width`: the plot area's width in
    pixels at most (a small IPU is drawn narrower: a tile square is at most 60 px).
    """
    if color_by not in COLOR_BY:
        raise ValueError(f"color_by must be one of {COLOR_BY}, not {color_by!r}")
    grid = tile_grid(profile.num_tiles, profile.tiles_per_ipu, ipus_per_row)
    data = tile_memory_data(profile, grid, color_by, high)
    total, over = data["bytes"], data["over_budget"]
    busiest = int(np.argmax(total)) if total.size else 0
    title = (f"Tile memory — {profile.arch}, {plural(profile.num_ipus, 'IPU')} × "
             f"{plural(profile.tiles_per_ipu, 'tile')}")
    detail = (f"{fmt_bytes(total.sum())} in use; busiest tile {busiest} holds "
              f"{int(total[busiest]):,} B ({100 * data['fraction'][busiest]:.2f} % of its "
              f"{profile.bytes_per_tile:,} B)")
    if over.any():
        title += f" — {plural(int(over.sum()), 'tile')} OVER BUDGET (red outline)"
    px = float(np.clip(width / max(grid.width, 1), 2, 60))   # pixels per tile slot
    top = 0.6 + 16 / px              # room above the tiles for the IPU labels, in tile rows
    # a small grid sits centred in a wider frame (room for the title)
    frame_width = max(int(grid.width * px), min(440, width))
    side = (frame_width / px - grid.width) / 2
    fig = figure(title, f"tile column (each IPU: {plural(grid.cols, 'column')} × "
                 f"{plural(grid.rows, 'row')} of tiles)",
                 "tile row", subtitle=detail, selectable=True, frame_width=frame_width,
                 frame_height=max(int((grid.height + top) * px), 80),
                 x_range=Range1d(-0.6 - side, grid.width - 0.4 + side),
                 y_range=Range1d(grid.height - 0.4, -top))
    source = ColumnDataSource(data, name="tiles")
    legend = {"legend_group": "category"} if color_by == "category" else {}
    tiles = fig.rect("x", "y", 0.9, 0.9, source=source, name="tiles_glyphs", fill_color="color",
                     line_color="line_color", line_width="line_width", line_alpha="line_alpha",
                     selection_line_color="black", selection_line_alpha=1.0,
                     nonselection_fill_alpha=0.25, **legend)
    if color_by == "category":
        fig.add_layout(fig.legend[0], "right")
        fig.legend.title = "mostly"
    else:
        mapper = LinearColorMapper(palette=BYTES_PALETTE, low=0, high=_top(total, high))
        fig.add_layout(ColorBar(color_mapper=mapper, title="bytes per tile", width=10), "right")
    _label_ipus(fig, grid)
    cats = " · ".join(f"{k} @{k}{{0,0}}" for k in profile.memory)
    hover(fig, [tiles], [("tile", "@tile (IPU @ipu)"),
                         ("memory", "@bytes{0,0} B (@fraction{0.00%} of the tile)"),
                         ("largest", "@largest (@largest_bytes{0,0} B)"),
                         ("mostly", "@category"), ("by category", cats),
                         ("over budget", "@over_budget")])
    return fig
