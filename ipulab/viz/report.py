"""The report of a training run: loss and accuracy per step, the BSP trace of one training step
and the tile memory heatmap, with a table of results; saved as one offline HTML file."""
from __future__ import annotations

from html import escape
from pathlib import Path

from bokeh.embed import file_html
from bokeh.layouts import column
from bokeh.models import ColumnDataSource, Div
from bokeh.plotting import figure
from bokeh.resources import INLINE

from .heatmap import tile_memory_heatmap
from .trace import bsp_trace


def training_report(history: dict, profile, title: str, rows) -> column:
    """A bokeh layout: `title` and the (name, value) `rows` as a table, the history's loss and
    accuracy per step (a Trainer's history: lists "loss" and "accuracy"), and the BSP trace
    and memory heatmap of one step's profile."""
    steps = list(range(1, len(history["loss"]) + 1))
    src = ColumnDataSource({"step": steps, "loss": list(history["loss"]),
                            "accuracy": list(history["accuracy"])})
    loss = figure(title="Training loss (mean over the global batch)", x_axis_label="step",
                  y_axis_label="loss", width=620, height=260)
    loss.line("step", "loss", source=src)
    acc = figure(title="Training accuracy (of each global batch)", x_axis_label="step",
                 y_axis_label="accuracy", width=620, height=260, x_range=loss.x_range)
    acc.line("step", "accuracy", source=src, color="darkorange")
    table = "".join(f"<tr><td>{escape(str(k))}</td><td>{escape(str(v))}</td></tr>"
                    for k, v in rows)
    head = Div(text=f"<h2>ipulab train</h2><p>{escape(title)}</p><table>{table}</table>")
    return column(head, loss, acc, bsp_trace(profile), tile_memory_heatmap(profile))


def save_html(model, path, title: str) -> Path:
    """Write a bokeh model as a self-contained HTML page (INLINE resources: opens offline)."""
    path = Path(path)
    path.write_text(file_html(model, INLINE, title), encoding="utf-8")
    return path
