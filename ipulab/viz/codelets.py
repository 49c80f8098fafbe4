"""codelet_summary: which codelets the run spent its vertex cycles on."""
from __future__ import annotations

import numpy as np
from bokeh.models import ColumnDataSource, NumeralTickFormatter

from .base import figure, hover, note, plural
from .palette import OTHER, SERIES

MAX_BARS = 30
MAX_LABEL = 36     # characters of a codelet's name on the axis (the tooltip has it whole), so
                   # that generated names such as Map[...]<HALF,HALF->HALF> keep the figure narrow


def _labels(names) -> list[str]:
    """Axis labels: names longer than MAX_LABEL cut with an ellipsis, kept distinct."""
    out: list[str] = []
    for name in names:
        label = name if len(name) <= MAX_LABEL else name[:MAX_LABEL - 1] + "…"
        while label in out:
            label += "·"
        out.append(label)
    return out


def codelet_data(profile, max_bars: int = MAX_BARS) -> dict[str, np.ndarray]:
    """One bar per codelet, most cycles first; beyond max_bars the rest share an 'other' bar.
    "label" is the name as the axis shows it (long generated names cut, see MAX_LABEL)."""
    stats = profile.codelet_cycles()
    names = sorted(stats, key=lambda k: (-stats[k]["cycles"], k))
    cycles = np.asarray([stats[k]["cycles"] for k in names], np.int64)
    vertices = np.asarray([stats[k]["vertices"] for k in names], np.int64)
    color = np.asarray([SERIES[i % len(SERIES)] for i in range(len(names))], object)
    if len(names) > max_bars:
        keep = max_bars - 1
        names = names[:keep] + [f"other ({plural(len(names) - keep, 'codelet')})"]
        cycles = np.append(cycles[:keep], cycles[keep:].sum())
        vertices = np.append(vertices[:keep], vertices[keep:].sum())
        color = np.append(color[:keep], OTHER)
    total = max(int(cycles.sum()), 1)
    return {"codelet": np.asarray(names, object), "label": np.asarray(_labels(names), object),
            "cycles": cycles, "vertices": vertices,
            "share": cycles / total, "per_vertex": cycles / np.maximum(vertices, 1),
            "color": color}


def codelet_summary(profile, *, max_bars: int = MAX_BARS, width: int = 560):
    """Horizontal bars: summed cycle estimates of each codelet's vertex executions over the run
    (profile.codelet_cycles()), the largest on top."""
    data = codelet_data(profile, max_bars)
    n = data["codelet"].size
    title = "Cycles by codelet over the run"
    detail = (f"{plural(data['cycles'].sum(), 'vertex cycle')} in all, from "
              f"{plural(data['vertices'].sum(), 'vertex execution')}")
    fig = figure(title, "cycles (sum of vertex estimates, worker-issue cycles)", "codelet",
                 subtitle=detail,
                 y_range=list(data["label"][::-1]), frame_width=width,
                 frame_height=int(np.clip(28 * n, 160, 700)))
    source = ColumnDataSource(data, name="codelets")
    bars = fig.hbar(y="label", right="cycles", left=0, height=0.7, source=source,
                    name="codelets_glyphs", fill_color="color", line_color=None)
    fig.xaxis.formatter = NumeralTickFormatter(format="0,0")
    fig.ygrid.visible = False
    fig.x_range.start = 0
    if not n:
        note(fig, "no codelets ran")
    hover(fig, [bars], [("codelet", "@codelet"), ("cycles", "@cycles{0,0} (@share{0.0%})"),
                        ("vertices run", "@vertices{0,0}"),
                        ("cycles per vertex", "@per_vertex{0,0.0}")])
    return fig
