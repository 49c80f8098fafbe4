"""exchange_matrix: who sent how many bytes to whom over the run — between blocks of tiles, and
between IPUs (where the diagonal is traffic that stayed on one chip)."""
from __future__ import annotations

import numpy as np
from bokeh.layouts import layout
from bokeh.models import (AdaptiveTicker, ColorBar, ColumnDataSource, LogColorMapper, Range1d,
                          Span)

from .base import figure, fmt_bytes, hover, note, plural
from .layout import TileGroups, tile_groups
from .palette import BYTES_PALETTE, ramp


def block_traffic(src, dst, nbytes, groups: TileGroups):
    """(source group, destination group, bytes) for every pair of groups that exchanged data."""
    n = len(groups)
    cell = groups.of(src) * n + groups.of(dst)
    total = np.bincount(cell, weights=nbytes, minlength=n * n).astype(np.int64)
    nz = np.flatnonzero(total)
    return nz // n, nz % n, total[nz]


def _top(nbytes) -> int:
    """Bytes at the top of a (log) colour scale."""
    return max(int(nbytes.max(initial=1)), 2)


def _matrix_data(src_group, dst_group, nbytes, groups: TileGroups) -> dict:
    labels = np.asarray(groups.labels(), object)
    return {"src": src_group, "dst": dst_group, "bytes": nbytes,
            "src_lo": groups.lo[src_group], "src_hi": groups.hi[src_group],
            "dst_lo": groups.lo[dst_group], "dst_hi": groups.hi[dst_group],
            # tile t is drawn over [t - 0.5, t + 0.5], so integer ticks sit on tiles
            "left": groups.lo[dst_group] - 0.5, "right": groups.ends[dst_group] - 0.5,
            "bottom": groups.lo[src_group] - 0.5, "top": groups.ends[src_group] - 0.5,
            "src_label": labels[src_group], "dst_label": labels[dst_group],
            "color": ramp(nbytes, 1, _top(nbytes), log=True)}


def _matrix_figure(title, detail, x_label, y_label, data, extent, size, name):
    fig = figure(title, x_label, y_label, subtitle=detail, frame_width=size, frame_height=size,
                 name=f"{name}_plot", x_range=Range1d(-0.5, extent - 0.5),
                 y_range=Range1d(extent - 0.5, -0.5))
    fig.xaxis.ticker = fig.yaxis.ticker = AdaptiveTicker(min_interval=1)
    source = ColumnDataSource(data, name=name)
    cells = fig.quad(left="left", right="right", bottom="bottom", top="top", source=source,
                     name=name, fill_color="color", line_color=None)
    fig.grid.visible = False
    hover(fig, [cells], [("from", "@src_label"), ("to", "@dst_label"), ("bytes", "@bytes{0,0} B")])
    return fig


def exchange_matrix(profile, max_blocks: int = 64, *, size: int = 420):
    """Two heatmaps side by side: bytes sent between blocks of tiles (at most max_blocks blocks,
    never straddling an IPU) and between IPUs, summed over the run (profile.exchange_traffic())."""
    src, dst, nbytes = profile.exchange_traffic()
    total = int(nbytes.sum())
    tiles = tile_groups(profile.num_tiles, profile.tiles_per_ipu, max_blocks)
    ipus = tile_groups(profile.num_tiles, profile.tiles_per_ipu, profile.num_ipus)
    by_block = block_traffic(src, dst, nbytes, tiles)
    by_ipu = block_traffic(src, dst, nbytes, ipus)
    block_data = _matrix_data(*by_block, tiles)
    ipu_data = _matrix_data(*by_ipu, ipus)
    # The IPU matrix is drawn in IPU units, not tiles.
    ipu_data.update(left=ipu_data["dst"] - 0.5, right=ipu_data["dst"] + 0.5,
                    bottom=ipu_data["src"] - 0.5, top=ipu_data["src"] + 0.5,
                    src_label=np.asarray([f"IPU {i}" for i in ipu_data["src"]], object),
                    dst_label=np.asarray([f"IPU {i}" for i in ipu_data["dst"]], object))
    size_each = int(tiles.sizes.max()) if len(tiles) else 1
    fig_tiles = _matrix_figure(
        f"Exchange between tiles — {fmt_bytes(total)} over the run",
        f"{len(tiles)} blocks of up to {plural(size_each, 'tile')}; row = sender, "
        "column = receiver",
        "destination tile", "source tile", block_data, profile.num_tiles, size, "blocks")
    on_chip = int(ipu_data["bytes"][ipu_data["src"] == ipu_data["dst"]].sum())
    fig_ipus = _matrix_figure(
        "Between IPUs", f"IPU-Links: {fmt_bytes(total - on_chip)}; "
        f"on-chip (diagonal): {fmt_bytes(on_chip)}", "destination IPU", "source IPU",
        ipu_data, profile.num_ipus, max(320, size * 2 // 3), "ipus")
    if 0 < profile.num_ipus <= 8:   # write the bytes in each IPU cell
        fig_ipus.text(x=ipu_data["dst"], y=ipu_data["src"],
                      text=[fmt_bytes(b) for b in ipu_data["bytes"]], text_align="center",
                      text_baseline="middle", text_font_size="11px", text_color="#000000",
                      background_fill_color="#ffffff", background_fill_alpha=0.7,
                      name="ipu_bytes")
    for k in range(1, profile.num_ipus):   # IPU boundaries on the tile matrix
        at = k * profile.tiles_per_ipu - 0.5
        fig_tiles.add_layout(Span(location=at, dimension="width", line_color="#999999"))
        fig_tiles.add_layout(Span(location=at, dimension="height", line_color="#999999"))
    mapper = LogColorMapper(palette=BYTES_PALETTE, low=1, high=_top(block_data["bytes"]))
    fig_tiles.add_layout(ColorBar(color_mapper=mapper, title="bytes", width=10), "right")
    if not total:
        note(fig_tiles, "no exchange traffic in this run")
    return layout([[fig_tiles, fig_ipus]], name="exchange_matrix")
