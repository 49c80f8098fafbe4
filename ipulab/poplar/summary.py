"""GraphSummary: what a compiled graph holds, for inspectors (compute sets, vertices, tensors)."""
from __future__ import annotations

import numpy as np


class GraphSummary:
    """Compute sets -> vertices -> tensors -> tiles, as compiled (later graph edits don't show)."""

    def __init__(self, state, tile_of: dict[str, np.ndarray]):
        self.num_tiles = state.target.num_tiles
        self.compute_sets = [cs.name for cs in state.compute_sets]
        self.vertex_cs = np.asarray(state.v_cs, np.int64)
        self.vertex_tile = np.asarray(state.v_tile, np.int64)
        self.vertex_codelet = [c.__name__ for c in state.v_codelet]
        self._conns = [dict(c) for c in state.v_conns]
        self._variables = {v.name: v for v in state.variables}
        self._tile_of = tile_of
        by_arena: dict[str, list] = {}
        for v in state.variables:
            by_arena.setdefault(v.dtype.storage.name, []).append((v.offset, v.name))
        self._starts = {k: (np.array([o for o, _ in vs], np.int64), [n for _, n in vs])
                        for k, vs in by_arena.items()}

    @property
    def num_vertices(self) -> int:
        return int(self.vertex_cs.size)

    def variables(self) -> list[dict]:
        """Name, type, shape and kind of every variable and constant."""
        return [{"name": v.name, "dtype": v.dtype.name, "shape": list(v.shape),
                 "constant": v.is_constant} for v in self._variables.values()]

    def vertices_in(self, compute_set: str) -> np.ndarray:
        ids = [i for i, name in enumerate(self.compute_sets) if name == compute_set]
        return np.flatnonzero(np.isin(self.vertex_cs, ids))

    def vertices_on(self, tile: int) -> np.ndarray:
        return np.flatnonzero(self.vertex_tile == tile)

    def connections(self, vertex: int) -> dict[str, list[tuple[str, int, list[str]]]]:
        """field -> [(tensor name, elements, variables it views)]; a VectorList field has
        several tensors. Variables are found by element address, not by parsing names."""
        out = {}
        for field, t in self._conns[vertex].items():
            parts = t if isinstance(t, list) else [t]
            out[field] = [(p.name, p.num_elements(), self._variables_of(p)) for p in parts]
        return out

    def _variables_of(self, tensor) -> list[str]:
        starts, names = self._starts[tensor.dtype.storage.name]
        idx = np.unique(np.searchsorted(starts, np.unique(tensor.ids), side="right") - 1)
        return [names[i] for i in idx.tolist()]

    def variable_tiles(self, name: str) -> dict[int, int]:
        """tile -> number of the variable's elements mapped there."""
        v = self._variables[name]
        tiles = self._tile_of[v.dtype.storage.name][v.offset:v.offset + v.size]
        t, n = np.unique(tiles, return_counts=True)
        return {int(a): int(b) for a, b in zip(t, n)}
