"""GraphSummary: what a compiled graph holds, for inspectors (compute sets, vertices, tensors)."""
from __future__ import annotations

import numpy as np

from .vertices import VertexRef


class GraphSummary:
    """Compute sets -> vertices -> tensors -> tiles, as compiled. Vertex columns are copied;
    connections are read from the graph's vertex groups when asked for."""

    def __init__(self, state, tile_of: dict[str, np.ndarray]):
        self.num_tiles = state.target.num_tiles
        self.compute_sets = [cs.name for cs in state.compute_sets]
        table = state.vertices
        self.vertex_cs = table.column("cs")
        self.vertex_tile = table.column("tiles").copy()
        self._codelet_names = np.asarray([g.codelet.__name__ for g in table.groups], object)
        self._group_of_vertex = np.repeat(np.arange(len(table.groups)),
                                          [g.tiles.size for g in table.groups])
        self._state = state
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

    @property
    def vertex_codelet(self) -> np.ndarray:
        """The codelet's name of every vertex."""
        return self._codelet_names[self._group_of_vertex]

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
        return {field: [(p.name, p.num_elements(), self._variables_of(p)) for p in parts]
                for field, parts in VertexRef(self._state, int(vertex)).connections().items()}

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
