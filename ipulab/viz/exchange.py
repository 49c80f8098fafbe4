"""exchange_matrix: who sent how many bytes to whom over the run — between blocks of tiles, and
between IPUs (where the diagonal is traffic that stayed on one chip)."""
from __future__ import annotations

import numpy as np
from bokeh.layouts import layout
from bokeh.models import (AdaptiveTicker, ColorBar, ColumnDataSource, LogColorMapper, Range1d,
                          Span)

from .base import figure, fmt_bytes, hover, note
from .layout import TileGroups, tile_groups
from .palette import BYTES_PALETTE, ramp

WIDTH = 600   # plot areas (px): with axes, colour bar and toolbar, fits a notebook column
ONE_PANEL = 480   # the square's side at most when it is the only panel (one IPU)


def block_traffic(src, dst, nbytes, groups: TileGroups):
    """(source group, destination group, bytes) for every pair of groups that exchanged data."""
    n = len(groups)
    cell = groups.of(src) * n + groups.of(dst)
    total = np.bincount(cell, weights=nbytes, minlength=n * n).astype(np.int64)
    nz = np.flatnonzero(total)
    return nz // n, nz % n, total[nz]


def _top(nbytes, high: float | None = None) -> float:
    """Bytes at the top of a (log) colour scale: `high` if given, else the largest cell."""
    return max(high, 2) if high else max(int(nbytes.max(initial=1)), 2)


def _matrix_data(src_group, dst_group, nbytes, groups: TileGroups, high=None) -> dict:
    labels = np.asarray(groups.labels(), object)
    return {"src": src_group, "dst": dst_group, "bytes": nbytes,
            "src_lo": groups.lo[src_group], "src_hi": groups.hi[src_group],
            "dst_lo": groups.lo[dst_group], "dst_hi": groups.hi[dst_group],
            # tile t is drawn over [t - 0.5, t + 0.5], so integer ticks sit on tiles
            "left": groups.lo[dst_group] - 0.5, "right": groups.ends[dst_group] - 0.5,
            "bottom": groups.lo[src_group] - 0.5, "top": groups.ends[src_group] - 0.5,
            "src_label": labels[src_group], "dst_label": labels[dst_group],
            "color": ramp(nbytes, 1, _top(nbytes, high), log=True)}


def _matrix_figure(title, detail, x_label, y_label, data, extent, size, name):
    fig = figure(title, x_label, y_label, subtitle=detail, frame_width=size, frame_height=size,
                 name=f"{name}_plot", x_range=Range1d(-0.5, extent - 0.5),
                 y_range=Range1d(extent - 0.5, -0.5))
    fig.xaxis.ticker = fig.yaxis.ticker = AdaptiveTicker(min_interval=1)
    source = ColumnDataSource(data, name=name)
    cells = fig.quad(left="left", right="right", bottom="bottom", top="top", source=source,
                     name=f"{name}_glyphs", fill_color="color", line_color=None)
    fig.grid.visible = False
    hover(fig, [cells], [("from", "@src_label"), ("to", "@dst_label"), ("bytes", "@bytes{0,0} B")])
    return fig


def exchange_matrix(profile, max_blocks: int = 64, *, high: float | None = None,
                    title: str | None = None, width: int = WIDTH, size: int | None = None):
    """Bytes sent between blocks of tiles (at most max_blocks blocks, never straddling an IPU),
    summed over the run (profile.exchange_traffic()); on a target of several IPUs, next to it
    the bytes between IPUs (a layout of two figures; one IPU: the tile figure alone).

    high: bytes at the top of the tiles' (log) colour scale, default the largest cell (give two
    runs the same `high` to compare their colours). title: the tile figure's title. width: the
    plot areas' width in pixels, both panels together (the axes, colour bar and toolbar come on
    top); size: the side of the tile panel (default: 3/5 of `width` on several IPUs; on one,
    `width` up to ONE_PANEL pixels).
    """
    src, dst, nbytes = profile.exchange_traffic()
    total = int(nbytes.sum())
    tiles = tile_groups(profile.num_tiles, profile.tiles_per_ipu, max_blocks)
    block_data = _matrix_data(*block_traffic(src, dst, nbytes, tiles), tiles, high)
    several = profile.num_ipus > 1
    side = size or (width * 3 // 5 if several else min(width, ONE_PANEL))
    fig_tiles = _matrix_figure(
        title or f"Exchange between tiles — {fmt_bytes(total)} over the run",
        f"{tiles.describe('block')}; row = sender, column = receiver",
        "destination tile", "source tile", block_data, profile.num_tiles, side, "blocks")
    mapper = LogColorMapper(palette=BYTES_PALETTE, low=1, high=_top(block_data["bytes"], high))
    fig_tiles.add_layout(ColorBar(color_mapper=mapper, title="bytes", width=10), "right")
    if not total:
        note(fig_tiles, "no exchange traffic in this run")
    if not several:
        return fig_tiles
    for k in range(1, profile.num_ipus):   # IPU boundaries on the tile matrix
        at = k * profile.tiles_per_ipu - 0.5
        fig_tiles.add_layout(Span(location=at, dimension="width", line_color="#999999"))
        fig_tiles.add_layout(Span(location=at, dimension="height", line_color="#999999"))
    return layout([[fig_tiles, _ipu_figure(profile, src, dst, nbytes, max(width - side, 200))]],
                  name="exchange_matrix")


def _ipu_figure(profile, src, dst, nbytes, size):
    """Bytes between IPUs: the diagonal is traffic that stayed on one chip."""
    ipus = tile_groups(profile.num_tiles, profile.tiles_per_ipu, profile.num_ipus)
    data = _matrix_data(*block_traffic(src, dst, nbytes, ipus), ipus)
    # The IPU matrix is drawn in IPU units, not tiles.
    data.update(left=data["dst"] - 0.5, right=data["dst"] + 0.5,
                bottom=data["src"] - 0.5, top=data["src"] + 0.5,
                src_label=np.asarray([f"IPU {i}" for i in data["src"]], object),
                dst_label=np.asarray([f"IPU {i}" for i in data["dst"]], object))
    on_chip = int(data["bytes"][data["src"] == data["dst"]].sum())
    fig = _matrix_figure(
        "Between IPUs", f"IPU-Links {fmt_bytes(int(nbytes.sum()) - on_chip)}; "
        f"on-chip {fmt_bytes(on_chip)} (diagonal)", "destination IPU", "source IPU",
        data, profile.num_ipus, size, "ipus")
    if profile.num_ipus <= 8:   # write the bytes in each IPU cell
        fig.text(x=data["dst"], y=data["src"], text=[fmt_bytes(b) for b in data["bytes"]],
                 text_align="center", text_baseline="middle", text_font_size="11px",
                 text_color="#000000", background_fill_color="#ffffff",
                 background_fill_alpha=0.7, name="ipu_bytes")
    return fig
