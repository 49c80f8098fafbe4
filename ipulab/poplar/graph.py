"""Graph: variables, constants, tile mappings, codelets, compute sets, vertices, host handles."""
from __future__ import annotations

import inspect
import types as pytypes

import numpy as np

from ..errors import GraphError
from ..target import Target
from .state import ComputeSet, DataStream, GraphState, RemoteBuffer, Variable
from .tensor import Tensor
from .types import as_type, round_half
from .vertex import Vertex, codelet_spec
from .vertices import Conn, FieldRef, Regions, SingleConn, VertexGroup, VertexRange, VertexRef


class Graph:
    """Poplar's Graph for a target (or device); create_virtual_graph gives a tile-range view.

    Graph(target, replication_factor=r) is a replicated graph: the target's tiles are cut into
    r equal consecutive ranges, one per replica, and the graph describes ONE replica (its
    `target.num_tiles` is the per-replica count, tiles numbered from 0 as in Poplar). Every
    variable exists once per replica, mapped alike, and programs run on every replica in
    lock-step. Host FIFOs and host handles move r blocks, one per replica (see Engine).
    """

    def __init__(self, target_or_device, replication_factor: int = 1, *, _state=None,
                 _tile_range=None):
        target = getattr(target_or_device, "target", target_or_device)
        if not isinstance(target, Target):
            raise GraphError(f"Graph needs a Target or a Device, not {type(target).__name__}")
        if _state is None:
            _check_replication(target, replication_factor)
            _state = GraphState(target, int(replication_factor))
        self._state = _state
        self._lo, self._hi = _tile_range or (0, _state.replica_tiles)
        if _tile_range is None and _state.replication_factor == 1:
            self.target = target
        else:
            self.target = _VirtualTarget(target, self._lo, self._hi,
                                         _state.replication_factor)

    @property
    def replication_factor(self) -> int:
        """How many replicas run this graph (1 for an ordinary graph)."""
        return self._state.replication_factor

    def get_replication_factor(self) -> int:
        return self._state.replication_factor

    @property
    def state(self) -> GraphState:
        """All the graph holds, shared with its virtual graphs (the course's pricing reads it)."""
        return self._state

    # --- tiles --------------------------------------------------------------------------------
    def _tile(self, tile) -> int:
        n = self._hi - self._lo
        if isinstance(tile, (bool, np.bool_)) or not isinstance(tile, (int, np.integer)):
            raise GraphError(f"tile must be an integer, not {tile!r}")
        if not 0 <= tile < n:
            raise self._state.target.tile_error(tile, n)
        return self._lo + int(tile)

    def create_virtual_graph(self, lo_tile: int, hi_tile: int) -> "Graph":
        """A graph over tiles [lo_tile, hi_tile) of this one, sharing its variables and vertices."""
        n = self._hi - self._lo
        if not 0 <= lo_tile < hi_tile <= n:
            raise GraphError(f"virtual graph [{lo_tile}, {hi_tile}) is not a non-empty tile range "
                             f"within 0..{n}")
        return Graph(self._state.target, _state=self._state,
                     _tile_range=(self._lo + lo_tile, self._lo + hi_tile))

    def get_top_level_graph(self) -> "Graph":
        """The whole (per-replica) graph this one is a view of (itself if it is not virtual)."""
        return Graph(self._state.target, _state=self._state)

    # --- variables ----------------------------------------------------------------------------
    def _tensor_of(self, var: Variable) -> Tensor:
        ids = np.arange(var.offset, var.offset + var.size, dtype=np.int64).reshape(var.shape)
        ids.flags.writeable = False
        return Tensor(self._state, ids, var.dtype, var.name)

    def _add(self, dtype, shape, name: str, values=None) -> Tensor:
        dtype = as_type(dtype)
        shape = tuple(int(s) for s in (shape if isinstance(shape, (list, tuple)) else [shape]))
        if any(s < 0 for s in shape):
            raise GraphError(f"variable '{name}': negative dimension in shape {list(shape)}")
        st = self._state
        name = name or f"{'constant' if values is not None else 'variable'}{len(st.variables)}"
        arena = st.arena(dtype)
        var = Variable(name, dtype, shape, 0, values)
        var.offset = arena.allocate(var.size)
        st.variables.append(var)
        return self._tensor_of(var)

    def add_variable(self, dtype, shape, name: str = "") -> Tensor:
        """A new variable of the given type and shape; map it to tiles before compiling."""
        return self._add(dtype, shape, name)

    def add_constant(self, dtype, shape, values, name: str = "") -> Tensor:
        """A constant initialised from values (a scalar is broadcast to the whole shape)."""
        dtype = as_type(dtype)
        shape = tuple(shape) if isinstance(shape, (list, tuple)) else (int(shape),)
        values = np.asarray(values)
        if values.size == int(np.prod(shape)) and values.shape != shape:
            values = values.reshape(shape)     # Poplar takes the values in flattened order
        try:
            arr = np.broadcast_to(values, shape).astype(dtype.host)
        except ValueError:
            raise GraphError(f"constant '{name}': {np.size(values)} values do not fit shape "
                             f"{list(shape)}") from None
        stored = arr.astype(dtype.storage).ravel()
        return self._add(dtype, shape, name, round_half(stored) if dtype.rounds_to_half else stored)

    def clone(self, tensor: Tensor, name: str = "") -> Tensor:
        """A new variable shaped and mapped like tensor."""
        self.check_tensor(tensor)
        t = self.add_variable(tensor.dtype, tensor.shape, name or f"{tensor.name}.clone")
        arena = self._state.arena(tensor.dtype)
        arena.tile_of[t.ids.ravel()] = arena.tile_of[tensor.ids.ravel()]
        return t

    # --- inspection ---------------------------------------------------------------------------
    def owns(self, tensor) -> bool:
        """Whether tensor is a view of this graph's variables (any virtual graph of it)."""
        return isinstance(tensor, Tensor) and tensor._graph is self._state

    def check_tensor(self, tensor, what: str = "") -> Tensor:
        """tensor, if it is a Tensor of this graph; else a GraphError (prefixed by `what`)."""
        where = f"{what}: " if what else ""
        if not isinstance(tensor, Tensor):
            raise GraphError(f"{where}expected a Tensor, got {type(tensor).__name__}")
        if tensor._graph is not self._state:
            raise GraphError(f"{where}tensor '{tensor.name}' belongs to another graph")
        return tensor

    def tiles_of(self, tensor: Tensor) -> np.ndarray:
        """The tile (this graph's numbering) of each of tensor's flattened elements; -1 for an
        element on no tile. GraphError if some element lives outside this virtual graph."""
        self.check_tensor(tensor)
        tiles = self._state.arena(tensor.dtype).tile_of[tensor.ids.ravel()].astype(np.int64)
        mapped = tiles >= 0
        outside = mapped & ((tiles < self._lo) | (tiles >= self._hi))
        if outside.any():
            raise GraphError(f"tensor '{tensor.name}' has elements on tile "
                             f"{int(tiles[outside][0])}, outside this virtual graph's tiles "
                             f"[{self._lo}, {self._hi})")
        tiles[mapped] -= self._lo
        return tiles

    def variable_regions(self, tensor: Tensor) -> list[tuple[str, int, int]]:
        """The variable regions a view covers, in the view's element order: (variable name,
        begin, end) over the variable's flattened elements, one per contiguous run."""
        self.check_tensor(tensor)
        return self._state.regions_of(tensor)

    def has_handle(self, name: str) -> bool:
        """Whether a host handle, stream or remote buffer is called name."""
        st = self._state
        return name in st.handles or name in st.streams or name in st.remote_buffers

    def get_compute_sets(self) -> list[ComputeSet]:
        return list(self._state.compute_sets)

    def num_vertices(self) -> int:
        return self._state.vertices.count

    def get_vertices(self, cs: ComputeSet | None = None) -> list[VertexRef]:
        """Every vertex of the graph, or of one compute set, in the order they were added."""
        st = self._state
        return [VertexRef(st, v) for g in st.vertices.groups if cs is None or g.cs == cs.id
                for v in range(g.first, g.first + g.n)]

    # --- mapping ------------------------------------------------------------------------------
    def set_tile_mapping(self, target, tile) -> None:
        """Map a tensor's elements (or a vertex) to a tile; or a tensor by a tile mapping list
        (per tile, [begin, end) intervals), or in bulk by a numpy array of one tile per
        flattened element."""
        if isinstance(target, VertexRef):
            group, i = self._state.group_of(target.id)
            group.tiles[i] = self._tile(tile)
            return
        self.check_tensor(target)
        tile_of = self._state.arena(target.dtype).tile_of
        if isinstance(tile, (list, tuple)):
            self._set_mapping_list(target, tile)
        elif isinstance(tile, np.ndarray):
            if tile.shape != (target.num_elements(),):
                raise GraphError(f"tensor '{target.name}': a tile array needs one tile per "
                                 f"element ({target.num_elements()}), not shape "
                                 f"{list(tile.shape)}")
            tile_of[target.ids.ravel()] = self._tiles(tile) if tile.size else tile
        else:
            tile_of[target.ids.ravel()] = self._tile(tile)

    def _set_mapping_list(self, tensor: Tensor, mapping) -> None:
        """Apply a per-tile list of intervals; checked in full first, so a bad one changes nothing."""
        flat = tensor.ids.ravel()
        moves = []
        for tile, intervals in enumerate(mapping):
            for b, e in intervals:
                if not 0 <= b <= e <= flat.size:
                    raise GraphError(f"tensor '{tensor.name}': interval [{b}, {e}) outside its "
                                     f"{flat.size} elements")
                moves.append((flat[b:e], self._tile(tile)))
        tile_of = self._state.arena(tensor.dtype).tile_of
        for ids, tile in moves:
            tile_of[ids] = tile

    def get_tile_mapping(self, tensor: Tensor) -> list[list[tuple[int, int]]]:
        """For each tile, the [begin, end) intervals of the tensor's flattened elements there."""
        tiles = self.tiles_of(tensor)
        mapping: list[list[tuple[int, int]]] = [[] for _ in range(self._hi - self._lo)]
        if tiles.size == 0:
            return mapping
        starts = np.flatnonzero(np.r_[True, tiles[1:] != tiles[:-1]])
        ends = np.r_[starts[1:], tiles.size]
        for b, e, t in zip(starts.tolist(), ends.tolist(), tiles[starts].tolist()):
            if t >= 0:
                mapping[t].append((b, e))
        return mapping

    # --- codelets and vertices ------------------------------------------------------------------
    def add_codelets(self, codelets) -> None:
        """Register codelet classes: a class, a list of them, or a module defining them."""
        if isinstance(codelets, pytypes.ModuleType):
            codelets = [c for c in vars(codelets).values() if inspect.isclass(c)
                        and issubclass(c, Vertex) and c.__module__ == codelets.__name__]
        elif not isinstance(codelets, (list, tuple)):
            codelets = [codelets]
        for cls in codelets:
            params = codelet_spec(cls)
            self._state.codelets[cls.__name__] = cls
            self._state.codelet_params[cls] = params

    def add_compute_set(self, name: str = "") -> ComputeSet:
        n = len(self._state.compute_sets)
        cs = ComputeSet(n, name or f"cs{n}", self._state)
        self._state.compute_sets.append(cs)
        return cs

    def _codelet(self, cs: ComputeSet, codelet) -> type:
        """The codelet class of a new vertex (registered now if given as a class)."""
        st = self._state
        if not isinstance(cs, ComputeSet) or cs.graph is not st:
            raise GraphError(f"{cs!r} is not a compute set of this graph")
        if isinstance(codelet, str):
            if codelet not in st.codelets:
                known = ", ".join(sorted(st.codelets)) or "none yet"
                raise GraphError(f"unknown codelet {codelet!r}: call g.add_codelets(...) first "
                                 f"(known: {known})")
            return st.codelets[codelet]
        if codelet not in st.codelet_params:
            self.add_codelets(codelet)
        return codelet

    def add_vertex(self, cs: ComputeSet, codelet, connections: dict | None = None,
                   tile: int | None = None) -> VertexRef:
        """A vertex of a codelet (name or class) in a compute set, optionally connected and mapped."""
        st = self._state
        cls = self._codelet(cs, codelet)
        vid = st.vertices.count
        group = VertexGroup(cs.id, cls, vid, np.array([-1], np.int64),
                            np.array([-1], np.int64), {}, True)
        st.vertices.add(group)
        try:
            for key, tensor in (connections or {}).items():
                self._connect(group, st.field_of(vid, key, cls), tensor)
            if tile is not None:
                group.tiles[0] = self._tile(tile)
        except GraphError:
            st.vertices.pop()
            raise
        return VertexRef(st, vid)

    def add_vertices(self, cs: ComputeSet, codelet, tiles, connections: dict,
                     estimates=None) -> VertexRange:
        """Many vertices of one codelet in one call: vertex v on tiles[v], each field
        connected as `connections` says for every vertex (a poplar.Regions, or a tensor whose
        row v vertex v takes, as connect(v[field], tensor[v]) would), with the checks and
        messages of add_vertex and connect; nothing is added if one fails. estimates: fixed
        cycle estimates (as set_perf_estimate), one per vertex. Returns the vertices made."""
        st = self._state
        cls = self._codelet(cs, codelet)
        tiles = self._tiles(tiles)
        n, vid = tiles.size, st.vertices.count
        group = VertexGroup(cs.id, cls, vid, tiles, np.full(n, -1, np.int64), {}, False)
        st.vertices.add(group)
        try:
            by_name = {f.name: f for f in cls.fields}
            for key, spec in connections.items():
                st.field_of(vid, key)
                group.conns[key] = self._bulk_conn(by_name[key], spec, n, vid)
            missing = [f.name for f in cls.fields if f.name not in group.conns]
            if missing and n:
                raise GraphError(f"add_vertices: field '{missing[0]}' of "
                                 f"{st.describe_vertex(vid)} is not connected (add_vertices "
                                 "connects every field)")
            if estimates is not None:
                group.estimates = self._estimates(estimates, n)
        except GraphError:
            st.vertices.pop()
            raise
        return VertexRange(st, vid, n)

    def _tiles(self, tiles) -> np.ndarray:
        """Tiles of this graph (an int, or one per vertex) -> top-level tile numbers."""
        t = np.atleast_1d(np.asarray(tiles))
        if t.dtype.kind not in "iu" or t.ndim != 1:
            raise GraphError(f"tiles must be integers, one per vertex, not {tiles!r}")
        n = self._hi - self._lo
        bad = np.flatnonzero((t < 0) | (t >= n))
        if bad.size:
            raise self._state.target.tile_error(int(t[bad[0]]), n)
        return t.astype(np.int64) + self._lo

    @staticmethod
    def _estimates(estimates, n: int) -> np.ndarray:
        e = np.asarray(estimates)
        if e.shape != (n,) or e.dtype.kind not in "iu" or (e < 0).any():
            raise GraphError(f"add_vertices: estimates must be {n} ints >= 0, one per vertex")
        return e.astype(np.int64)

    def _bulk_conn(self, f, spec, n: int, vid: int) -> Conn:
        """A field's bulk connection, checked as connect() checks one vertex's."""
        st = self._state
        if isinstance(spec, Tensor):
            if spec.rank == 0 or spec.shape[0] != n:
                raise GraphError(f"add_vertices: field '{f.name}' takes a tensor with one row "
                                 f"per vertex ({n}), not '{spec.name}' of shape "
                                 f"{list(spec.shape)}")
            spec = _rows(spec, f.kind == "vector_list")
        if not isinstance(spec, Regions):
            raise GraphError(f"add_vertices: field '{f.name}' takes a poplar.Regions or a "
                             f"tensor, not {type(spec).__name__}")
        t = self.check_tensor(spec.tensor)
        if spec.num_vertices != n:
            raise GraphError(f"add_vertices: field '{f.name}' has regions for "
                             f"{spec.num_vertices} vertices, not {n}")
        what = f"field '{f.name}' of {st.describe_vertex(vid)}"
        if t.dtype is not f.dtype:
            raise GraphError(f"{what} is {f.dtype} but tensor '{t.name}' is {t.dtype}")
        if f.kind == "scalar":
            sizes = spec.vertex_sizes()
            bad = np.flatnonzero(sizes != 1)
            if bad.size:
                raise GraphError(f"field '{f.name}' of {st.describe_vertex(vid + int(bad[0]))} "
                                 f"is a scalar but tensor '{t.name}' has {int(sizes[bad[0]])} "
                                 "elements")
        return Conn.bulk(spec, joined=f.kind != "vector_list")

    def connect(self, field: FieldRef, tensor) -> None:
        """Connect a vertex field to a tensor (a list of tensors or a 2-D tensor for VectorList)."""
        if not isinstance(field, FieldRef):
            raise GraphError("connect() takes a field reference v['name'] and a tensor")
        st, vid = self._state, field.vertex.id
        group, _ = st.group_of(vid)
        f = st.field_of(vid, field.field, group.codelet)
        if not group.single:
            raise GraphError(f"field '{f.name}' of {st.describe_vertex(vid)} was connected by "
                             "add_vertices, with its group")
        self._connect(group, f, tensor)

    def _connect(self, group, f, tensor) -> None:
        """Connect field f of a single vertex's group (checked; named in every message)."""
        if f.kind == "vector_list":
            parts = list(tensor) if isinstance(tensor, (list, tuple, Tensor)) else None
            if parts is None:
                raise GraphError(f"{self._what(f, group)} is a VectorList: connect a list of "
                                 "tensors or a 2-D one")
        else:
            parts = (tensor,)
        for t in parts:
            if not isinstance(t, Tensor) or t._graph is not self._state:
                self.check_tensor(t)
            if t.dtype is not f.dtype:
                raise GraphError(f"{self._what(f, group)} is {f.dtype} but tensor '{t.name}' is "
                                 f"{t.dtype}")
            if f.kind == "scalar" and t._ids.size != 1:
                raise GraphError(f"{self._what(f, group)} is a scalar but tensor '{t.name}' has "
                                 f"{t.num_elements()} elements")
        group.conns[f.name] = SingleConn(parts)

    def _what(self, f, group) -> str:
        return f"field '{f.name}' of {self._state.describe_vertex(group.first)}"

    def set_perf_estimate(self, vertex: VertexRef, cycles: int) -> None:
        """Fix a vertex's cycle estimate (worker-issue cycles), overriding its codelet's."""
        if not isinstance(vertex, VertexRef) or cycles < 0:
            raise GraphError(f"set_perf_estimate needs a vertex and cycles >= 0, got "
                             f"{vertex!r}, {cycles!r}")
        group, i = self._state.group_of(vertex.id)
        group.estimates[i] = int(cycles)

    # --- host handles and streams ----------------------------------------------------------
    def _new_handle(self, name: str) -> None:
        if self.has_handle(name):
            raise GraphError(f"handle, stream or remote buffer name {name!r} is already used")

    def create_host_write(self, handle: str, tensor: Tensor) -> None:
        self.check_tensor(tensor)
        self._new_handle(handle)
        self._state.handles[handle] = ("write", tensor)

    def create_host_read(self, handle: str, tensor: Tensor) -> None:
        self.check_tensor(tensor)
        self._new_handle(handle)
        self._state.handles[handle] = ("read", tensor)

    def _fifo(self, name: str, dtype, num_elements: int, direction: str) -> DataStream:
        self._new_handle(name)
        if num_elements < 1:
            raise GraphError(f"stream {name!r} needs at least one element per copy")
        s = DataStream(name, as_type(dtype), int(num_elements), direction, self._state)
        self._state.streams[name] = s
        return s

    def add_host_to_device_fifo(self, name: str, dtype, num_elements: int) -> DataStream:
        return self._fifo(name, dtype, num_elements, "host_to_device")

    def add_device_to_host_fifo(self, name: str, dtype, num_elements: int) -> DataStream:
        return self._fifo(name, dtype, num_elements, "device_to_host")

    # --- streaming memory ----------------------------------------------------------------------
    def add_remote_buffer(self, name: str, dtype, num_elements: int,
                          repeats: int = 1) -> RemoteBuffer:
        """A buffer of `repeats` rows of num_elements in streaming memory (one per replica).

        Move data with prog.Copy(tensor, buffer, offset) and prog.Copy(buffer, tensor, offset):
        the offset tensor (INT or UNSIGNED_INT, k elements) picks the rows, and the tensor has
        k * num_elements elements; without an offset the copy moves row 0.
        """
        self._new_handle(name)
        dtype = as_type(dtype)
        if int(num_elements) < 1 or int(repeats) < 1:
            raise GraphError(f"remote buffer {name!r} needs at least one element and one "
                             f"repeat, not {num_elements} x {repeats}")
        buf = RemoteBuffer(name, dtype, int(num_elements), int(repeats), self._state)
        st = self._state
        capacity = st.target.system.streaming_memory_bytes
        used = sum(b.num_bytes for b in st.remote_buffers.values()) + buf.num_bytes
        if capacity and used * st.replication_factor > capacity:
            raise GraphError(
                f"remote buffer {name!r}: {used * st.replication_factor:,} bytes of remote "
                f"buffers (over {st.replication_factor} replica(s)) exceed the "
                f"{capacity:,} bytes of streaming memory of {st.target.system.description}")
        st.remote_buffers[name] = buf
        return buf


def _rows(t: Tensor, lists: bool) -> Regions:
    """Row v of t for vertex v, as connect(v[field], t[v]) takes it: one region (a scalar or
    Vector field), or a VectorList of the row's rows (its elements if the row is 1-D)."""
    n = t.shape[0]
    if not lists:
        return Regions.rows(t)
    per = int(np.prod(t.shape[2:], dtype=np.int64)) if t.rank > 2 else 1
    k = t.shape[1] if t.rank > 1 else 1
    starts = np.arange(n * k, dtype=np.int64) * per
    return Regions(t, starts, starts + per, np.full(n, k, np.int64))


def _check_replication(target: Target, r) -> None:
    """A replication factor must cut the tiles into equal replicas, each made of whole IPUs
    or of an equal part of one IPU (so no replica straddles an IPU boundary)."""
    if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, np.integer)) or r < 1:
        raise GraphError(f"replication_factor must be a positive integer, not {r!r}")
    T, tpi = target.num_tiles, target.tiles_per_ipu
    per = T // r
    if T % r or (per % tpi if per >= tpi else tpi % per):
        raise GraphError(
            f"replication_factor {r} does not fit {target!r}: each replica needs an equal "
            f"share of the {T} tiles that is whole IPUs or an equal part of one IPU "
            f"(r must divide the {target.num_ipus} IPU(s), or be a multiple of it that "
            f"divides the {T} tiles)")


class _VirtualTarget:
    """The target seen by a virtual or replicated graph: the same machine, fewer tiles.

    For a replicated graph it also reports one replica's IPUs: num_ipus and tiles_per_ipu
    describe a replica (a replica smaller than an IPU counts as one IPU of its tiles)."""

    def __init__(self, target: Target, lo: int, hi: int, replication_factor: int = 1):
        self._target, self.tile_base, self.num_tiles = target, lo, hi - lo
        if replication_factor > 1:
            per = target.num_tiles // replication_factor
            self.tiles_per_ipu = min(target.tiles_per_ipu, per)
            self.num_ipus = per // self.tiles_per_ipu

    def __getattr__(self, name):
        if name.startswith("__") or name == "_target":    # (while unpickling: not set yet)
            raise AttributeError(name)
        return getattr(self._target, name)

    def __repr__(self) -> str:
        return f"VirtualTarget({self._target!r}, tiles [{self.tile_base}, " \
               f"{self.tile_base + self.num_tiles}))"
