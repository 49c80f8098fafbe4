"""Vertices as columns: groups of vertices of one codelet in one compute set, each field's
connections held as arrays (element addresses, region lengths, regions per vertex).

Graph.add_vertex makes a group of one (its fields can still be connected and its tile set);
Graph.add_vertices makes a group of many in one call, with the same checks and messages, from
poplar.Regions: for every vertex, regions of one tensor's flattened elements. The compiler
reads the columns directly, so a compute set of 50,000 vertices costs a few numpy calls.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import GraphError
from .tensor import Tensor

_EMPTY = np.zeros(0, np.int64)


def ragged(begins: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions of intervals [begins[i], begins[i] + lengths[i]), concatenated."""
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(begins - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


def per_vertex(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sums of consecutive runs of values, counts[v] of them for vertex v (0 for none)."""
    total = np.concatenate([[0], np.cumsum(values)])
    ends = np.cumsum(counts)
    return total[ends] - total[ends - counts]


class Regions:
    """For each vertex of Graph.add_vertices, the regions of `tensor` (its flattened elements)
    that one field connects to. Regions(t, begins, ends): region i is [begins[i], ends[i]);
    counts[v] regions belong to vertex v, in order (default: one each). A scalar or Vector
    field joins a vertex's regions into one; a VectorList field gets them as its list."""

    __slots__ = ("tensor", "index", "lengths", "counts")

    def __init__(self, tensor: Tensor, begins, ends, counts=None):
        begins = np.asarray(begins, np.int64).ravel()
        ends = np.asarray(ends, np.int64).ravel()
        n = tensor.num_elements() if isinstance(tensor, Tensor) else 0
        if begins.shape != ends.shape or (begins.size and (begins.min() < 0 or ends.max() > n
                                                          or (ends < begins).any())):
            raise GraphError(f"Regions of '{getattr(tensor, 'name', tensor)}': each region "
                             f"needs 0 <= begin <= end <= {n}")
        self._set(tensor, ragged(begins, ends - begins), ends - begins, counts)

    @classmethod
    def from_indices(cls, tensor: Tensor, index, lengths, counts=None) -> "Regions":
        """Regions given element by element: index holds positions in tensor's flattened
        elements, cut into regions of `lengths`."""
        r = cls.__new__(cls)
        index = np.asarray(index, np.int64).ravel()
        lengths = np.asarray(lengths, np.int64).ravel()
        n = tensor.num_elements() if isinstance(tensor, Tensor) else 0
        if (lengths < 0).any() or int(lengths.sum()) != index.size or \
                (index.size and (index.min() < 0 or index.max() >= n)):
            raise GraphError(f"Regions of '{getattr(tensor, 'name', tensor)}': the index must "
                             f"hold positions below {n}, as many as the lengths add up to")
        r._set(tensor, index, lengths, counts)
        return r

    @classmethod
    def whole(cls, tensor: Tensor, n: int) -> "Regions":
        """Every one of n vertices connects the whole tensor (e.g. a shared scalar)."""
        size = tensor.num_elements()
        return cls.from_indices(tensor, np.tile(np.arange(size, dtype=np.int64), n),
                                np.full(n, size, np.int64))

    @classmethod
    def rows(cls, tensor: Tensor) -> "Regions":
        """Vertex v connects tensor[v] (flattened): one region per vertex."""
        n = tensor.shape[0] if tensor.rank else 0
        width = tensor.num_elements() // max(n, 1)
        starts = np.arange(n, dtype=np.int64) * width
        return cls(tensor, starts, starts + width)

    def _set(self, tensor, index, lengths, counts) -> None:
        counts = np.ones(lengths.size, np.int64) if counts is None else \
            np.asarray(counts, np.int64).ravel()
        if (counts < 0).any() or int(counts.sum()) != lengths.size:
            raise GraphError(f"Regions of '{getattr(tensor, 'name', tensor)}': counts must be "
                             f">= 0 and add up to the {lengths.size} regions")
        self.tensor, self.index, self.lengths, self.counts = tensor, index, lengths, counts

    @property
    def num_vertices(self) -> int:
        return int(self.counts.size)

    def vertex_sizes(self) -> np.ndarray:
        """Elements per vertex (all its regions)."""
        return per_vertex(self.lengths, self.counts)


class SingleConn:
    """One field of a vertex added alone: the tensors connected (one, or a VectorList's);
    its columns (as Conn's) are made when asked for."""

    __slots__ = ("tensors",)

    def __init__(self, parts):
        self.tensors = tuple(parts)

    @property
    def ids(self) -> np.ndarray:
        ids = [t.ids.ravel() for t in self.tensors]
        return ids[0] if len(ids) == 1 else np.concatenate(ids + [_EMPTY])

    @property
    def lengths(self) -> np.ndarray:
        return np.array([t.num_elements() for t in self.tensors], np.int64)

    @property
    def counts(self) -> np.ndarray:
        return np.array([len(self.tensors)], np.int64)

    def name(self, region: int) -> str:
        return self.tensors[region].name


class Conn(NamedTuple):
    """One field's connections in a group: every region's element addresses (concatenated),
    the regions' lengths, regions per vertex, and what was connected (for names and views):
    the tensors of a single vertex, or the base tensor and its positions for a bulk group."""

    ids: np.ndarray
    lengths: np.ndarray
    counts: np.ndarray
    tensors: tuple
    index: np.ndarray | None = None

    @classmethod
    def bulk(cls, regions: Regions, joined: bool) -> "Conn":
        """joined: a scalar or Vector field, whose regions are one per vertex."""
        ids = regions.tensor.ids.ravel()[regions.index]
        if joined:
            return cls(ids, regions.vertex_sizes(), np.ones(regions.num_vertices, np.int64),
                       (regions.tensor,), regions.index)
        return cls(ids, regions.lengths, regions.counts, (regions.tensor,), regions.index)

    def name(self, region: int) -> str:
        """The tensor a region comes from."""
        return self.tensors[region if len(self.tensors) > 1 else 0].name


@dataclass(eq=False)
class VertexGroup:
    """Vertices of one codelet in one compute set: ids first .. first + n - 1, a tile and a
    fixed estimate (-1: none) each, and a Conn per connected field (by connection name)."""

    cs: int
    codelet: type
    first: int
    tiles: np.ndarray
    estimates: np.ndarray
    conns: dict
    single: bool

    @property
    def n(self) -> int:
        return int(self.tiles.size)


class VertexRef:
    """Handle to a vertex; v["field"] names one of its fields for connect(). Its codelet,
    tile, compute set and connections can be read back (the graph inspector, the course)."""

    def __init__(self, state, vid: int):
        self._state, self.id = state, vid

    @property
    def _where(self):
        return self._state.group_of(self.id)

    @property
    def codelet(self):
        return self._where[0].codelet

    @property
    def tile(self) -> int:
        """Its tile in the top-level (per-replica) graph's numbering; -1 while unmapped."""
        group, i = self._where
        return int(group.tiles[i])

    @property
    def compute_set(self):
        return self._state.compute_sets[self._where[0].cs]

    def connections(self) -> dict:
        """{field connection name: [tensor, ...]} of the fields connected so far (one tensor
        for a scalar or Vector field, the list of regions for a VectorList)."""
        group, i = self._where
        if group.single:
            return {name: list(c.tensors) for name, c in group.conns.items()}
        return {name: self._state.region_views(c, i) for name, c in group.conns.items()}

    def __getitem__(self, field: str) -> "FieldRef":
        self._state.field_of(self.id, field)
        return FieldRef(self, field)

    def __repr__(self) -> str:
        return f"Vertex({self.id}, {self.codelet.__name__})"


@dataclass
class FieldRef:
    vertex: VertexRef
    field: str


class VertexRange:
    """The vertices one add_vertices call made: len(), [i] (a VertexRef), ids."""

    def __init__(self, state, first: int, n: int):
        self._state, self.first, self._n = state, first, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> VertexRef:
        if not -self._n <= i < self._n:
            raise IndexError(f"vertex {i} of {self._n}")
        return VertexRef(self._state, self.first + i % self._n)

    @property
    def ids(self) -> np.ndarray:
        return np.arange(self.first, self.first + self._n, dtype=np.int64)


class VertexTable:
    """The vertex groups of a graph, in id order, and the lookups on them."""

    def __init__(self):
        self.groups: list[VertexGroup] = []
        self.starts: list[int] = []
        self.count = 0
        self._of_cs: dict[int, list[VertexGroup]] = {}     # compute set -> its groups

    def add(self, group: VertexGroup) -> None:
        self.groups.append(group)
        self.starts.append(group.first)
        self.count += group.n
        self._of_cs.setdefault(group.cs, []).append(group)

    def pop(self) -> None:
        group = self.groups.pop()
        self.count -= group.n
        self.starts.pop()
        mine = self._of_cs[group.cs]
        del mine[next(i for i in range(len(mine) - 1, -1, -1) if mine[i] is group)]

    def move(self, remap: dict[int, int]) -> None:
        """Move the vertices of compute set a into compute set remap[a] (parallel() merging
        compute sets), touching only their groups."""
        for old, new in remap.items():
            if old != new:
                moved = self._of_cs.pop(old, [])
                for g in moved:
                    g.cs = new
                self._of_cs.setdefault(new, []).extend(moved)

    def group_of(self, vid: int) -> tuple[VertexGroup, int]:
        if not 0 <= vid < self.count:
            raise GraphError(f"vertex {vid} does not exist (the graph has {self.count})")
        g = self.groups[bisect_right(self.starts, vid) - 1]
        return g, vid - g.first

    def by_compute_set(self, num_compute_sets: int) -> list[list[VertexGroup]]:
        out = [[] for _ in range(num_compute_sets)]
        for g in self.groups:
            out[g.cs].append(g)
        return out

    def column(self, attr: str) -> np.ndarray:
        """A per-vertex array over all groups: 'tiles', 'estimates' or 'cs'."""
        if attr == "cs":
            return np.repeat(np.fromiter((g.cs for g in self.groups), np.int64, len(self.groups)),
                             np.fromiter((g.tiles.size for g in self.groups), np.int64,
                                         len(self.groups)))
        parts = [getattr(g, attr) for g in self.groups]
        return np.concatenate(parts) if parts else _EMPTY
