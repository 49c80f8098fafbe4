"""liveness: bytes in use after each executed step — always-live data (code, constants,
always-live variables, vertex state), the variables that are not always live and are live at that
step (first write to last read), and the exchange buffers a step needs only while it runs."""
from __future__ import annotations

import numpy as np
from bokeh.models import (AdaptiveTicker, ColumnDataSource, DataRange1d, LinearAxis,
                          NumeralTickFormatter, Range1d)
from bokeh.transform import stack

from .base import figure, fmt_bytes, hover, note, plural
from .palette import SERIES

MAX_POINTS = 5000
_VALUES = ("total", "always_live", "not_always_live", "peak_tile")


def liveness_data(profile, max_points: int = MAX_POINTS) -> dict[str, np.ndarray]:
    """One entry per executed step; above max_points, consecutive steps are binned and each bin
    shows its maximum (a peak is never hidden)."""
    live = profile.liveness()
    steps = profile.steps
    data = {"step": np.arange(len(steps)), "index": np.asarray([r.index for r in steps], np.int64),
            "name": np.asarray([r.name for r in steps], object),
            "kind": np.asarray([r.kind for r in steps], object),
            "start": np.asarray([r.start for r in steps], np.int64),
            "total": live["total"], "always_live": live["always_live"],
            "not_always_live": live["not_always_live"], "peak_tile": live["peak_tile"]}
    n = len(steps)
    if n > max_points:
        edges = np.linspace(0, n, max_points + 1).astype(np.int64)
        starts = np.unique(edges[:-1])
        data = {k: (np.maximum.reduceat(v, starts) if k in _VALUES else v[starts])
                for k, v in data.items()}
        sizes = np.diff(np.append(starts, n))
        data["name"] = np.asarray([f"{a} (+{plural(s - 1, 'step')})" if s > 1 else a
                                   for a, s in zip(data["name"], sizes)], object)
    data["peak_fraction"] = data["peak_tile"] / profile.bytes_per_tile
    return data


def liveness(profile, *, max_points: int = MAX_POINTS, width: int = 620):
    """Memory in use over the executed steps: all tiles together (left axis) and the fullest
    tile (right axis), from profile.liveness(). The band above the always-live line is the
    variables that are not always live, at the steps where they are live."""
    data = liveness_data(profile, max_points)
    peak = int(data["peak_tile"].max(initial=0))
    title = "Memory in use over the run"
    detail = (f"at most {fmt_bytes(data['total'].max(initial=0))} on all tiles; the fullest tile "
              f"held {peak:,} B of its {profile.bytes_per_tile:,} B "
              f"({100 * peak / profile.bytes_per_tile:.2f} %)")
    fig = figure(title, "executed step", "bytes in use, all tiles", subtitle=detail,
                 frame_width=width, frame_height=260, y_range=DataRange1d(start=0))
    source = ColumnDataSource(data, name="liveness")
    total = fig.line("step", "total", source=source, name="total", line_width=2,
                     color=SERIES[0], legend_label="all tiles (incl. exchange buffers)")
    fig.line("step", "always_live", source=source, name="always_live", line_dash="dashed",
             color=SERIES[0], legend_label="all tiles, always live")
    fig.varea("step", y1="always_live", y2=stack("always_live", "not_always_live"),
              source=source, name="not_always_live", color=SERIES[0], fill_alpha=0.25,
              legend_label="all tiles, variables live at the step")
    fig.extra_y_ranges = {"tile": Range1d(0, max(peak, 1) * 1.1)}
    fig.add_layout(LinearAxis(y_range_name="tile", axis_label="bytes on the fullest tile"), "right")
    fig.line("step", "peak_tile", source=source, name="peak_tile", y_range_name="tile",
             line_width=2, color=SERIES[1], legend_label="fullest tile (right axis)")
    fig.yaxis.formatter = NumeralTickFormatter(format="0,0")
    fig.xaxis.ticker = AdaptiveTicker(min_interval=1)   # steps are whole numbers
    fig.add_layout(fig.legend[0], "below")       # under the plot, never over its lines
    fig.legend.ncols = 2 if width >= 560 else 1      # two columns need ~560 px
    fig.legend.label_text_font_size = "11px"
    if not data["step"].size:
        note(fig, "no steps were executed")
    hover(fig, [total], [("step", "@step: @name (@kind)"), ("all tiles", "@total{0,0} B"),
                         ("always live", "@always_live{0,0} B"),
                         ("not always live", "@not_always_live{0,0} B"),
                         ("fullest tile", "@peak_tile{0,0} B (@peak_fraction{0.00%} of a tile)")],
          mode="vline")
    return fig
