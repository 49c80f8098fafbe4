"""Shared pieces of the widget apps: the profile they read, bokeh inside ipywidgets, HTML tables.

Widgets read one `Profile` (the most recent `engine.run()`) and never the machine. Everything
they show for a tile or a step is looked up on demand from whole-run numpy arrays, so a
Bow-2000 (5,888 tiles) costs the same handful of widgets as a 4-tile toy.
"""
from __future__ import annotations

import html

import ipywidgets as W
import numpy as np
from bokeh.models import ColumnDataSource, Plot
from jupyter_bokeh import BokehModel

from .. import viz
from ..errors import EngineError
from ..poplar.profile import Profile
from ..viz.base import plural


def profile_of(engine, widget: str) -> Profile:
    """The profile a widget shows: `engine.profile()` (the most recent run), or a Profile itself."""
    if isinstance(engine, Profile):
        return engine
    if not callable(getattr(engine, "profile", None)):
        raise EngineError(f"{widget} needs a poplar.Engine that has run (or its Profile), "
                          f"not {type(engine).__name__}")
    try:
        return engine.profile()
    except EngineError:
        raise EngineError(f"{widget} shows the profile of the engine's most recent run, but this "
                          "engine has not run yet: call engine.load(device) and engine.run() "
                          "first") from None


class BokehPane(BokehModel):
    """jupyter_bokeh's BokehModel (same front end), closable more than once: its close() fails
    the second time (once by Widget.close_all(), once more when garbage-collected)."""

    def close(self) -> None:
        try:
            super().close()
        except KeyError:
            pass


def toggle_buttons(options, description: str = "", **kwargs) -> W.ToggleButtons:
    """ToggleButtons with their description beside the buttons, as every other control's
    (ipywidgets 8 draws it above them): the widget laid out as a flex row."""
    layout = W.Layout(display="flex", flex_flow="row", align_items="center", width="auto")
    return W.ToggleButtons(options=options, description=description, layout=layout, **kwargs)


def bokeh_pane(model) -> BokehPane:
    """A bokeh model as an ipywidget: changes to its sources reach the page, and changes made
    in the page (a tap selecting a tile) reach Python callbacks. The page needs BokehJS to draw
    it: viz.setup() loads it into the notebook once (and does nothing outside a kernel)."""
    viz.setup()
    return BokehPane(model)


def first_plot(model) -> Plot:
    """The first plot inside a bokeh model (a figure, or a row/column holding figures)."""
    if isinstance(model, Plot):
        return model
    plots = list(model.select({"type": Plot}))
    if not plots:
        raise TypeError(f"{type(model).__name__} holds no bokeh plot")
    return plots[0]


def source_with(model, column: str) -> ColumnDataSource | None:
    """The first data source inside a bokeh model that has the given column."""
    for src in model.select({"type": ColumnDataSource}):
        if column in src.data:
            return src
    return None


def esc(x) -> str:
    return html.escape(str(x))


def fmt_int(n) -> str:
    return f"{int(n):,}"


def table(headers, rows, limit: int | None = None, empty: str = "none",
          total: int | None = None) -> str:
    """An HTML table of the first `limit` rows, and a line counting the rest of `total`."""
    rows = list(rows)
    if not rows:
        return f"<i>{esc(empty)}</i>"
    shown = rows if limit is None else rows[:limit]
    total = len(rows) if total is None else total
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td style='padding:0 8px'>{esc(c)}</td>" for c in r)
                   + "</tr>" for r in shown)
    more = f"<div><i>… and {total - len(shown):,} more</i></div>" if total > len(shown) else ""
    return (f"<table style='border-collapse:collapse;font-family:monospace;font-size:12px'>"
            f"<tr>{head}</tr>{body}</table>{more}")


def tile_ranges(tiles, limit: int = 12) -> str:
    """Sorted tile numbers as runs: '0–3, 7, 9–12' (the first `limit` runs)."""
    t = np.unique(np.asarray(tiles, np.int64))
    if t.size == 0:
        return "none"
    breaks = np.flatnonzero(np.diff(t) != 1) + 1
    starts, ends = t[np.r_[0, breaks]], t[np.r_[breaks - 1, t.size - 1]]
    runs = [f"{a}" if a == b else f"{a}–{b}" for a, b in zip(starts[:limit], ends[:limit])]
    return ", ".join(runs) + (f", … ({plural(starts.size - limit, 'more run')})"
                              if starts.size > limit else "")


def where(profile: Profile, tile: int) -> str:
    """'tile 1500 (IPU 1, tile 28 of it)' on a multi-IPU target, 'tile 3' on one IPU."""
    if profile.num_ipus == 1:
        return f"tile {tile}"
    ipu, local = divmod(int(tile), profile.tiles_per_ipu)
    return f"tile {tile} (IPU {ipu}, tile {local} of it)"
