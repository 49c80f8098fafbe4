"""GraphInspector: compute sets -> vertices -> tensors -> tiles, as the graph was compiled."""
from __future__ import annotations

import re

import ipywidgets as W
import numpy as np

from ..viz.base import plural
from ._common import esc, fmt_int, profile_of, table, tile_ranges, where

MAX_VERTICES = 500   # options in the vertex list; narrow it with the tile filter
MAX_TILE_ROWS = 64


def parse_tiles(text: str, num_tiles: int) -> np.ndarray | None:
    """'' -> None (all tiles); '7' -> [7]; '0-99' or '0:99' -> 0..99; '1, 5-6' -> [1, 5, 6]."""
    if not text.strip():
        return None
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:[-:–]\s*(\d+))?\s*", part)
        if m is None:
            raise ValueError(f"cannot read {part.strip()!r} as a tile or a range like 0-99")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if not 0 <= lo <= hi < num_tiles:
            raise ValueError(f"{'tile' if lo == hi else 'tiles'} {part.strip()} "
                             f"{'is' if lo == hi else 'are'} outside 0-{num_tiles - 1}")
        out.append(np.arange(lo, hi + 1))
    return np.concatenate(out)


class GraphInspector(W.VBox):
    """Pick a compute set, then one of its vertices (the first 500, narrowed by a tile filter),
    see the vertex's fields and the tensors connected to them, then pick a tensor to see which
    tiles hold its variable.
    """

    def __init__(self, engine):
        self.profile = profile_of(engine, "GraphInspector")
        self.graph = g = self.profile.graph
        self._variables = {v["name"]: v for v in g.variables()}
        counts = np.bincount(g.vertex_cs, minlength=len(g.compute_sets))
        self.compute_set = W.Dropdown(
            options=[(f"{name} ({plural(counts[i], 'vertex', 'vertices')})", i)
                     for i, name in enumerate(g.compute_sets)],
            value=None, description="compute set", style={"description_width": "initial"},
            layout=W.Layout(width="420px"))
        self.tile_filter = W.Text(value="", placeholder="all tiles, or 7, or 0-99",
                                  description="on tiles", continuous_update=False,
                                  layout=W.Layout(width="300px"))
        self.status = W.HTML()
        self.vertex = W.Select(options=[], rows=10, description="vertex",
                               layout=W.Layout(width="420px"))
        self.vertex_html = W.HTML()
        self.tensor = W.Select(options=[], rows=5, description="tensor",
                               layout=W.Layout(width="420px"))
        self.tensor_html = W.HTML()
        super().__init__([
            W.HTML(f"<b>{plural(len(g.compute_sets), 'compute set')}, "
                   f"{plural(g.num_vertices, 'vertex', 'vertices')}, "
                   f"{plural(len(self._variables), 'variable')}</b> (as compiled)"),
            W.HBox([self.compute_set, self.tile_filter]), self.status,
            W.HBox([self.vertex, self.vertex_html]),
            W.HBox([self.tensor, self.tensor_html])])
        self.compute_set.observe(self._list_vertices, "value")
        self.tile_filter.observe(self._list_vertices, "value")
        self.vertex.observe(self._show_vertex, "value")
        self.tensor.observe(self._show_tensor, "value")
        if g.compute_sets:
            self.compute_set.value = 0
        else:
            self.status.value = "<i>this graph has no compute sets</i>"

    # --- compute set -> vertices -------------------------------------------------------------
    def _list_vertices(self, _change=None) -> None:
        g, cs = self.graph, self.compute_set.value
        if cs is None:
            return
        ids = np.flatnonzero(g.vertex_cs == cs)
        try:
            tiles = parse_tiles(self.tile_filter.value, g.num_tiles)
        except ValueError as e:
            self.status.value = f"<span style='color:#c00'>{esc(e)}</span>"
            return
        if tiles is not None:
            ids = ids[np.isin(g.vertex_tile[ids], tiles)]
        shown = ids[:MAX_VERTICES].tolist()
        self.status.value = (plural(ids.size, "vertex", "vertices") + (f", showing the first {len(shown):,}: "
                             "narrow them with a tile filter" if len(shown) < ids.size else ""))
        self.vertex.options = [(f"{v}: {g.vertex_codelet[v]} on tile {g.vertex_tile[v]}", v)
                               for v in shown]
        self.vertex.value = shown[0] if shown else None
        if not shown:
            self._show_vertex()

    # --- vertex -> tensors -------------------------------------------------------------------
    def _show_vertex(self, _change=None) -> None:
        g, v = self.graph, self.vertex.value
        if v is None:
            self.vertex_html.value = "<i>no vertex selected</i>"
            self.tensor.options = []
            self._show_tensor()
            return
        conns = g.connections(v)
        rows, options = [], {}
        for field, parts in conns.items():
            for name, n, bases in parts:
                rows.append((field, name, fmt_int(n), ", ".join(bases) or "?"))
                for b in bases:
                    options.setdefault(b, f"{b}  ({field}: {name})")
        self.vertex_html.value = (
            f"<b>vertex {v}</b>: codelet <b>{esc(g.vertex_codelet[v])}</b> in compute set "
            f"<b>{esc(g.compute_sets[g.vertex_cs[v]])}</b> on "
            f"{esc(where(self.profile, g.vertex_tile[v]))}"
            + table(["field", "tensor", "elements", "variable"], rows, empty="no fields"))
        self.tensor.options = [(label, name) for name, label in options.items()]
        self.tensor.value = next(iter(options), None)
        if not options:
            self._show_tensor()

    # --- tensor -> tiles ---------------------------------------------------------------------
    def _show_tensor(self, _change=None) -> None:
        name = self.tensor.value
        if name is None:
            self.tensor_html.value = ""
            return
        info = self._variables[name]
        per_tile = self.graph.variable_tiles(name)
        tiles = np.fromiter(per_tile, np.int64, len(per_tile))
        rows = [(where(self.profile, t), fmt_int(n)) for t, n in per_tile.items()]
        self.tensor_html.value = (
            f"<b>{'constant' if info['constant'] else 'variable'} {esc(name)}</b>: "
            f"{esc(info['dtype'])} {esc(info['shape'])}, "
            f"{plural(sum(per_tile.values()), 'element')} on {plural(len(per_tile), 'tile')} "
            f"({esc(tile_ranges(tiles))})"
            + table(["tile", "elements"], rows, MAX_TILE_ROWS, empty="not mapped"))
