"""A shared Pod drawn for its administrator: which IPUs belong to which partition and owner
(pod_partitions), and a day of scheduled jobs as a Gantt chart of IPUs over time (ipu_gantt).

Both are pure functions of plain data (lists and dicts), so viz knows nothing of the V-IPU
controller or the scheduler: ipulab.vipu hands them the columns.
"""
from __future__ import annotations

import numpy as np
from bokeh.models import BasicTicker, ColumnDataSource, Range1d

from .base import figure, hover, note, plural
from .palette import EMPTY_COLOR, SERIES

MAX_WIDTH = 1100


def owner_colors(names) -> dict[str, str]:
    """A colour per name (sorted, so the same names always get the same colours)."""
    return {n: SERIES[i % len(SERIES)] for i, n in enumerate(sorted(set(names)))}


def partition_data(num_ipus: int, partitions, ipus_per_machine: int = 4,
                   color_by: str = "user") -> dict[str, np.ndarray]:
    """One cell per IPU: its machine (row) and place in the machine (column), the partition and
    owner holding it ('' when free) and its colour by `color_by` ('user' or 'partition')."""
    if color_by not in ("user", "partition"):
        raise ValueError(f"color_by is 'user' or 'partition', not {color_by!r}")
    part = np.full(num_ipus, "", object)
    user = np.full(num_ipus, "", object)
    for p in partitions:
        part[list(p["ipus"])] = p["name"]
        user[list(p["ipus"])] = p.get("user", "")
    key = user if color_by == "user" else part
    colors = owner_colors([k for k in key if k])
    ipu = np.arange(num_ipus)
    return {"ipu": ipu, "machine": ipu // ipus_per_machine, "slot": ipu % ipus_per_machine,
            "partition": part, "user": user,
            "label": np.asarray([f"{i}\n{p}" if p else str(i) for i, p in zip(ipu, part)], object),
            "color": np.asarray([colors.get(k, EMPTY_COLOR) for k in key], object)}


def integer_ticks(*axes) -> None:
    """Ticks on whole numbers only (an IPU, a machine: never 0.5), without minor ticks."""
    for axis in axes:
        axis.ticker = BasicTicker(min_interval=1)
        axis.minor_tick_line_color = None


def pod_partitions(num_ipus: int, partitions, *, ipus_per_machine: int = 4,
                   color_by: str = "user", title: str = "The Pod's IPUs",
                   color_name: str | None = None):
    """The Pod as a grid: a row per machine, a square per IPU, coloured by owner (or partition)
    and labelled with its partition. `partitions`: dicts with name, ipus (global indices) and
    user. color_name: what the colours stand for, when the "user" key carries something
    else (a pipeline stage, say)."""
    data = partition_data(num_ipus, partitions, ipus_per_machine, color_by)
    machines = int(data["machine"].max()) + 1 if num_ipus else 0
    free = int((data["partition"] == "").sum())
    shown = color_name or color_by
    fig = figure(title, "IPU in its machine", "machine",
                 subtitle=f"{plural(len(partitions), 'partition')}, {free} of {num_ipus} IPUs "
                          f"free; colour = {shown}",
                 frame_width=min(MAX_WIDTH, 90 * ipus_per_machine),
                 frame_height=int(np.clip(40 * machines, 120, 700)),
                 x_range=Range1d(-0.5, ipus_per_machine - 0.5),
                 y_range=Range1d(machines - 0.5, -0.5))
    source = ColumnDataSource(data, name="ipus")
    cells = fig.rect(x="slot", y="machine", width=0.92, height=0.86, source=source,
                     fill_color="color", line_color="#ffffff", name="ipu_cells")
    fig.text(x="slot", y="machine", text="label", source=source, text_align="center",
             text_baseline="middle", text_font_size="10px")
    fig.xgrid.visible = fig.ygrid.visible = False
    integer_ticks(fig.xaxis, fig.yaxis)
    hover(fig, [cells], [("IPU", "@ipu (machine @machine)"), ("partition", "@partition"),
                         (color_name or "owner", "@user")])
    return fig


def gantt_data(jobs: dict) -> dict[str, np.ndarray]:
    """The Gantt chart's columns from plain columns (name, user, first_ipu, ipus, start, end,
    wait in seconds): quads in hours over IPU rows, a colour per user."""
    colors = owner_colors(jobs["user"])
    first = np.asarray(jobs["first_ipu"], np.int64)
    return {"name": np.asarray(jobs["name"], object), "user": np.asarray(jobs["user"], object),
            "left": np.asarray(jobs["start"], float) / 3600,
            "right": np.asarray(jobs["end"], float) / 3600,
            "bottom": first - 0.5, "top": first + np.asarray(jobs["ipus"]) - 0.5,
            "ipus": np.asarray(jobs["ipus"], np.int64), "first_ipu": first,
            "wait": np.asarray(jobs["wait"], float) / 60,
            "color": np.asarray([colors[u] for u in jobs["user"]], object)}


def ipu_gantt(jobs: dict, num_ipus: int, *, title: str = "Jobs on the Pod's IPUs",
              subtitle: str = "", reservations: dict | None = None):
    """A Gantt chart of IPUs over time: one box per job across its IPUs from its start to its
    end, coloured by user; `reservations` ({job: (seconds, first IPU, IPUs)}) are drawn as
    dashed outlines where a blocked job was promised its block."""
    data = gantt_data(jobs)
    fig = figure(title, "time (hours)", "IPU", subtitle=subtitle, sizing_mode="stretch_width",
                 height=int(np.clip(22 * num_ipus, 260, 700)),
                 y_range=Range1d(num_ipus - 0.5, -0.5))
    source = ColumnDataSource(data, name="jobs")
    boxes = fig.quad(left="left", right="right", bottom="bottom", top="top", source=source,
                     fill_color="color", fill_alpha=0.8, line_color="#ffffff", name="job_boxes",
                     legend_field="user")
    if reservations:
        at = np.asarray([v[0] for v in reservations.values()], float) / 3600
        first = np.asarray([v[1] for v in reservations.values()], float)
        size = np.asarray([v[2] for v in reservations.values()], float)
        fig.quad(left=at, right=at + 0.05, bottom=first - 0.5, top=first + size - 0.5,
                 fill_color="#000000", line_color=None, name="reservations",
                 legend_label="reservation (backfill)")
    if not data["name"].size:
        note(fig, "no jobs")
    if fig.legend:                        # beside the chart, never over a job
        fig.add_layout(fig.legend[0], "right")
        fig.legend.click_policy = "hide"
    integer_ticks(fig.yaxis)
    hover(fig, [boxes], [("job", "@name (@user)"), ("IPUs", "@ipus from IPU @first_ipu"),
                         ("runs", "@left{0.00} h to @right{0.00} h"),
                         ("waited", "@wait{0.0} min")])
    return fig
