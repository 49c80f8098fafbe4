"""What a graph holds: the storage arenas, variables, compute sets, vertices, streams and
buffers (GraphState, shared by a graph and its virtual graphs), and the handles that name them."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import GraphError
from ..target import Target
from .tensor import Tensor
from .types import Type
from .vertices import Conn, VertexTable


class Arena:
    """Address space of one storage dtype: which tile holds each element."""

    def __init__(self, dtype: np.dtype):
        self.dtype, self.size = dtype, 0
        self.tile_of = np.full(1024, -1, np.int32)

    def allocate(self, n: int) -> int:
        start, self.size = self.size, self.size + n
        if self.size > self.tile_of.size:
            grown = np.full(max(self.size, 2 * self.tile_of.size), -1, np.int32)
            grown[:start] = self.tile_of[:start]
            self.tile_of = grown
        return start


@dataclass
class Variable:
    """A fixed-size typed array of the graph; constants carry their values."""

    name: str
    dtype: Type
    shape: tuple
    offset: int
    values: np.ndarray | None = None   # constants only (storage dtype, flattened)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_constant(self) -> bool:
        return self.values is not None


@dataclass
class ComputeSet:
    """A set of vertices that run in parallel in one compute phase."""

    id: int
    name: str
    graph: object = field(default=None, repr=False, compare=False)


@dataclass
class DataStream:
    """A host FIFO: host_to_device or device_to_host, num_elements per copy (per replica)."""

    name: str
    dtype: Type
    num_elements: int
    direction: str
    graph: object = field(default=None, repr=False, compare=False)


@dataclass
class RemoteBuffer:
    """Poplar's RemoteBuffer: `repeats` rows of `num_elements` in streaming memory (off-chip,
    per replica). Copy(tensor, buffer, offset) writes rows, Copy(buffer, tensor, offset) reads
    them; the contents persist across runs of an engine."""

    name: str
    dtype: Type
    num_elements: int
    repeats: int
    graph: object = field(default=None, repr=False, compare=False)

    @property
    def num_bytes(self) -> int:
        """Bytes of one replica's buffer (all its repeats)."""
        return self.repeats * self.num_elements * self.dtype.size


_FIELDS: dict = {}      # codelet -> {connection name: field}


class GraphState:
    """Everything a graph holds; shared by a graph and its virtual graphs."""

    def __init__(self, target: Target, replication_factor: int = 1):
        self.target = target
        self.replication_factor = replication_factor
        self.replica_tiles = target.num_tiles // replication_factor   # tiles of one replica
        self.arenas: dict[str, Arena] = {}
        self.variables: list[Variable] = []
        self.codelets: dict[str, type] = {}
        self.codelet_params: dict[type, list[str]] = {}
        self.compute_sets: list[ComputeSet] = []
        self.vertices = VertexTable()
        self.handles: dict[str, tuple[str, Tensor]] = {}
        self.streams: dict[str, DataStream] = {}
        self.remote_buffers: dict[str, RemoteBuffer] = {}

    def arena(self, dtype: Type) -> Arena:
        key = dtype.storage.name
        if key not in self.arenas:
            self.arenas[key] = Arena(dtype.storage)
        return self.arenas[key]

    def group_of(self, vid: int):
        """(the vertex group holding vertex vid, its position in the group)."""
        return self.vertices.group_of(vid)

    def field_of(self, vid: int, key: str, cls=None):
        """Field `key` of vertex vid's codelet (cls, if the caller knows it)."""
        cls = cls or self.group_of(vid)[0].codelet
        by_name = _FIELDS.get(cls)
        if by_name is None:
            by_name = _FIELDS[cls] = {f.name: f for f in cls.fields}
        if key in by_name:
            return by_name[key]
        names = ", ".join(repr(f.name) for f in cls.fields)
        raise GraphError(f"codelet {cls.__name__} has no field {key!r} (vertex {vid}); "
                         f"its fields are {names}")

    def regions_of(self, tensor: Tensor) -> list[tuple[str, int, int]]:
        """(variable name, begin, end) runs of a view's elements, in its element order."""
        ids = tensor.ids.ravel()
        if ids.size == 0:
            return []
        key = tensor.dtype.storage.name
        own = [v for v in self.variables if v.dtype.storage.name == key]
        starts = np.fromiter((v.offset for v in own), np.int64, len(own))
        var = np.searchsorted(starts, ids, side="right") - 1
        breaks = np.flatnonzero((np.diff(ids) != 1) | (np.diff(var) != 0)) + 1
        first, last = np.r_[0, breaks], np.r_[breaks - 1, ids.size - 1]
        return [(own[v].name, int(ids[a] - starts[v]), int(ids[b] - starts[v] + 1))
                for v, a, b in zip(var[first].tolist(), first.tolist(), last.tolist())]

    def describe_vertex(self, vid: int) -> str:
        group, i = self.group_of(vid)
        tile = int(group.tiles[i])
        cs = self.compute_sets[group.cs].name
        where = f"tile {tile}" if tile >= 0 else "no tile"
        return f"vertex {vid} ({group.codelet.__name__}, {where}, compute set '{cs}')"

    def region_views(self, conn: Conn, i: int) -> list[Tensor]:
        """The regions vertex i of a bulk group connects, as 1-D views of the base tensor."""
        base = conn.tensors[0]
        first = int(conn.counts[:i].sum())
        starts = np.cumsum(conn.lengths) - conn.lengths
        return [Tensor(self, conn.ids[starts[r]:starts[r] + conn.lengths[r]], base.dtype,
                       f"{base.name}[vertex {i} region {r - first}]")
                for r in range(first, first + int(conn.counts[i]))]
