"""BSPPlayer: step through the supersteps of the most recent run, one at a time or playing."""
from __future__ import annotations

import ipywidgets as W
import numpy as np
from bokeh.models import BoxAnnotation, ColumnDataSource, FactorRange, Span

from .. import viz
from ..poplar.profile import PHASES
from ..viz.base import figure, hover, plural
from ..viz.layout import tile_groups
from ..viz.palette import OTHER, PHASE_COLORS
from ..viz.trace import WIDTH
from ._common import bokeh_pane, esc, first_plot, fmt_int, profile_of, table, where

MAX_GROUPS = 128   # tile groups in the activity strip (one column per tile on small targets)
TRACE_STEPS = 500  # executed steps in the trace at a time (a Repeat can execute thousands)


class BSPPlayer(W.VBox):
    """The executed steps of the most recent run: press play or move the slider to see each
    step's name, kind and phases, which tiles compute or exchange, how data moved, and where
    the step sits in the whole BSP trace.

    Steps are numbered from 0 by their position in profile.steps: the slider's value k shows
    profile.steps[k] ("step k of n (0-based)"), whose compiled step is its `.index` (a step
    inside a Repeat is executed, and numbered, once per iteration). `width`: the plot areas'
    width in pixels.
    """

    def __init__(self, engine, step: int = 0, interval_ms: int = 600, width: int = WIDTH):
        self.profile = p = profile_of(engine, "BSPPlayer")
        self.steps = p.steps
        self.width = width
        last = max(len(self.steps) - 1, 0)
        self.slider = W.IntSlider(value=0, min=0, max=last, description="step",
                                  continuous_update=True, layout=W.Layout(width="520px"))
        self.play = W.Play(value=0, min=0, max=last, interval=interval_ms, description="play")
        W.link((self.play, "value"), (self.slider, "value"))
        self.info, self.traffic_html = W.HTML(), W.HTML()
        self._groups = tile_groups(p.num_tiles, p.tiles_per_ipu, MAX_GROUPS)
        self.kinds = phase_kinds(self.steps)     # the strip's rows: kinds that occur in the run
        self._labels = np.tile(self._groups.labels(), len(self.kinds))
        self.activity_source = ColumnDataSource(self._activity(None), name="activity")
        self.activity = _activity_figure(self.activity_source, p.num_tiles, self.kinds, width)
        self._window = self._trace_pane = None
        # Fill every figure before wrapping it: a page draws a figure as it was when wrapped,
        # later changes reach only views that already exist.
        self.slider.value = min(max(step, 0), last)
        self._draw_trace(self.slider.value)
        self._show()
        self._trace_pane = bokeh_pane(self.trace)
        controls = W.HBox([self.play, self.slider])
        super().__init__([controls, self.info, bokeh_pane(self.activity), self.traffic_html,
                          self._trace_pane])
        self.slider.observe(self._show, "value")

    def _draw_trace(self, k: int) -> None:
        """The BSP trace of the window of TRACE_STEPS executed steps holding step k, with a
        marker on step k (a long run is drawn a window at a time)."""
        window = k // TRACE_STEPS
        if window == self._window:
            return
        self._window = window
        self.trace = viz.bsp_trace(self.profile, first_step=window * TRACE_STEPS,
                                   max_steps=TRACE_STEPS, width=self.width)
        self.marker = BoxAnnotation(left=0, right=0, fill_color="black", fill_alpha=0.12,
                                    line_color="black", line_alpha=0.6)
        self.marker_line = Span(location=0, dimension="height", line_color="black",
                                line_width=2, line_alpha=0.7)
        plot = first_plot(self.trace)
        plot.add_layout(self.marker)
        plot.add_layout(self.marker_line)
        if self._trace_pane is not None:
            self._trace_pane.update_from_model(self.trace)

    @property
    def current_step(self):
        """The StepRecord on show (None if the run executed no steps)."""
        return self.steps[self.slider.value] if self.steps else None

    def _show(self, _change=None) -> None:
        rec = self.current_step
        self.activity_source.data = self._activity(rec)
        if rec is None:
            self.info.value = "<i>the run executed no steps</i>"
            self.traffic_html.value = ""
            return
        self._draw_trace(self.slider.value)
        self.info.value = self._describe(rec)
        self.traffic_html.value = self._traffic(rec)
        self.marker.left, self.marker.right = rec.start, rec.start + rec.cycles
        self.marker_line.location = rec.start

    def _describe(self, rec) -> str:
        p, k = self.profile, self.slider.value
        rows = [(kind, fmt_int(c.max()), f"{int((c > 0).sum()):,}",
                 f"{p.seconds(int(c.max())) * 1e6:.3f}") for kind, c in rec.phases]
        computing = moving = np.zeros(p.num_tiles, bool)
        for kind, c in rec.phases:
            if kind == "compute":
                computing = computing | (c > 0)
            elif kind.endswith("exchange"):
                moving = moving | (c > 0)
        return (f"<b>step {k:,} of {len(self.steps):,} (0-based; compiled step {rec.index:,}): "
                f"{esc(rec.name)}</b> ({esc(rec.kind)}) · starts at cycle {fmt_int(rec.start)} · "
                f"{plural(rec.cycles, 'cycle')} ({p.seconds(rec.cycles) * 1e6:.3f} µs)<br>"
                f"{int(computing.sum()):,} of {plural(p.num_tiles, 'tile')} compute, "
                f"{int(moving.sum()):,} exchange data"
                + table(["phase", "cycles (slowest tile)", "tiles busy", "µs"], rows,
                        empty="no phases: this step costs nothing"))

    def _traffic(self, rec) -> str:
        moved = self.profile.traffic.get(rec.index)
        if moved is None or len(moved[0]) == 0:
            return "<b>data moved:</b> <i>no tile-to-tile traffic in this step</i>"
        p = self.profile
        src, dst, nbytes = (np.asarray(a, np.int64) for a in moved)
        cross = src // p.tiles_per_ipu != dst // p.tiles_per_ipu
        top = np.argsort(-nbytes, kind="stable")[:5]
        rows = [(where(p, src[i]), where(p, dst[i]), fmt_int(nbytes[i])) for i in top]
        return (f"<b>data moved:</b> {fmt_int(nbytes.sum())} B between "
                f"{plural(src.size, 'tile pair')} ({plural(np.unique(src).size, 'sender')}, "
                f"{plural(np.unique(dst).size, 'receiver')}"
                + (f"; {fmt_int(nbytes[cross].sum())} B across IPUs" if p.num_ipus > 1 else "")
                + ")" + table(["from", "to", "bytes"], rows, total=src.size))

    def _activity(self, rec) -> dict:
        """Per phase kind of the run and tile group: the busiest tile's cycles in this step, a
        kind's phases summed (a step can exchange twice: data in, then outputs back). Each
        kind's row is shaded on its own scale: its busiest group is darkest."""
        g, n, kinds = self._groups, len(self._groups), self.kinds
        per_kind, parts = {}, {}
        for kind, c in rec.phases if rec is not None else ():
            per_kind[kind] = per_kind.get(kind, 0) + np.asarray(c, np.int64)
            parts[kind] = parts.get(kind, 0) + 1
        cycles = np.zeros((len(kinds), n), np.int64)
        for i, k in enumerate(kinds):
            if k in per_kind:
                cycles[i] = g.max(per_kind[k])
        share = cycles / np.maximum(cycles.max(axis=1, keepdims=True, initial=0), 1)
        note = [f" (sum of {parts[k]} {k} phases)" if parts.get(k, 0) > 1 else "" for k in kinds]
        lo, hi = np.tile(g.starts, len(kinds)), np.tile(g.ends, len(kinds))
        return {"x": (lo + hi) / 2, "width": hi - lo, "phase": np.repeat(kinds, n).astype(object),
                "cycles": cycles.ravel(), "tiles": self._labels, "share": share.ravel(),
                "note": np.repeat(note, n).astype(object),
                "alpha": np.where(cycles > 0, 0.25 + 0.75 * share, 0.0).ravel(),
                "color": np.repeat([PHASE_COLORS.get(k, OTHER) for k in kinds], n).astype(object)}


def phase_kinds(steps) -> list[str]:
    """The phase kinds that occur in a run, in BSP order."""
    seen = {kind for rec in steps for kind, _ in rec.phases}
    return [k for k in PHASES if k in seen] + sorted(seen.difference(PHASES))


def _activity_figure(source: ColumnDataSource, num_tiles: int, kinds, width: int):
    f = figure("This step: the busiest tile's cycles in each phase (tiles grouped →)", "tile",
               "phase", subtitle="each row on its own scale: darkest = busiest in that phase; "
               "a phase repeated in the step is summed",
               tools="xpan,xwheel_zoom,reset", frame_width=width,
               frame_height=max(24 * len(kinds), 24),
               y_range=FactorRange(*reversed(kinds)),   # BSP order, top to bottom
               x_range=(0, num_tiles))
    r = f.rect(x="x", y="phase", width="width", height=0.9, fill_color="color",
               fill_alpha="alpha", line_color=None, source=source, name="activity_glyphs")
    hover(f, [r], [("tiles", "@tiles"), ("phase", "@phase"),
                   ("cycles", "@cycles{0,0}@note (@share{0%} of the row's busiest)")])
    f.ygrid.visible = False
    return f
