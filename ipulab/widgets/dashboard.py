"""ProfileDashboard: a run's profile in tabs (summary, memory, trace, exchange, graph)."""
from __future__ import annotations

import ipywidgets as W

from .. import viz
from ..viz.base import plural
from ._common import bokeh_pane, esc, fmt_int, profile_of
from .bsp_player import BSPPlayer
from .graph_inspector import GraphInspector
from .tile_explorer import TileExplorer

TITLES = ("Summary", "Memory", "Trace", "Exchange", "Graph")


class ProfileDashboard(W.Tab):
    """Tabs over the most recent run: Summary (text report, cycles by codelet, liveness),
    Memory (heatmap + TileExplorer), Trace (BSPPlayer), Exchange (tile and IPU matrices) and
    Graph (GraphInspector). A tab's contents are built the first time it is opened, so the
    dashboard comes up at once even for a Bow-2000.
    """

    def __init__(self, engine):
        self.profile = profile_of(engine, "ProfileDashboard")
        self.pages = [W.VBox([W.HTML("<i>building…</i>")]) for _ in TITLES]
        self._built: dict[str, W.Widget] = {}
        super().__init__(children=self.pages)
        self.titles = TITLES
        self.observe(self._open, "selected_index")
        self.selected_index = 0
        self._open()

    def page(self, title: str) -> W.Widget:
        """The contents of a tab, built now if it was not opened yet."""
        if title not in self._built:
            widget = getattr(self, "_" + title.lower())()
            self._built[title] = widget
            self.pages[TITLES.index(title)].children = [widget]
        return self._built[title]

    def _open(self, _change=None) -> None:
        if self.selected_index is not None:
            self.page(TITLES[self.selected_index])

    # --- the tabs ----------------------------------------------------------------------------
    def _summary(self) -> W.Widget:
        p = self.profile
        report = W.HTML(f"<pre style='font-size:12px;line-height:1.25'>{esc(p.summary())}</pre>")
        return W.VBox([report, bokeh_pane(viz.codelet_summary(p)), bokeh_pane(viz.liveness(p))])

    def _memory(self) -> W.Widget:
        return TileExplorer(self.profile)

    def _trace(self) -> W.Widget:
        return BSPPlayer(self.profile)

    def _exchange(self) -> W.Widget:
        p = self.profile
        src, _, nbytes = p.exchange_traffic()
        note = W.HTML(f"<b>{fmt_int(nbytes.sum())} B</b> moved between "
                      f"{plural(src.size, 'pair')} of tiles over the run")
        return W.VBox([note, bokeh_pane(viz.exchange_matrix(p))])

    def _graph(self) -> W.Widget:
        return GraphInspector(self.profile)
