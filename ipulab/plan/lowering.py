"""A compute set on Placed tensors, priced as poplar lowers it (poplar/lower_compute.py).

An op (ops.py) describes its vertices as the library adds them: per codelet, the vertices'
tiles and estimates and, per field, the regions of a Placed tensor each vertex connects
(poplar.Regions' index, lengths and counts). From the elements' tiles and addresses this
module decides what the compiler decides:

  in place   a slot (a Vector field's regions joined, or one region of a VectorList) whose
             elements are consecutive in one variable and on its vertex's tile is read in
             place; any other gets a buffer on the vertex's tile (read-only slots of the same
             elements on one tile share one), filled by the exchange before the compute phase
             and, for outputs, sent back after it;
  cycles     sync; the exchange in (machine.cost.exchange_cost: bytes in and out per tile,
             multicast sources counted once, the IPU-Links between IPUs); the compute phase
             (machine.cost.compute_cost: vertices dealt to the workers) plus the on-tile
             copies into buffers; outputs sent back: another sync, exchange and copies;
  memory     exchange buffers (per tile, the largest of any compute set), vertex state (a
             header, a pointer per field, an entry per VectorList region), code (each codelet
             once per tile it runs on; control code per step a tile takes part in).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np

from ..machine.cost import compute_cost, exchange_cost
from ..poplar import UNSIGNED_INT
from ..poplar.vertices import ragged
from .placed import VARIABLE_BITS, Placed

MASK = (1 << VARIABLE_BITS) - 1


@dataclass
class Field:
    """One field of a group of vertices: regions of `tensor`'s flattened elements (each
    from begins[i], lengths[i] long; counts regions per vertex), its kind ("scalar",
    "vector" or "vector_list") and whether the codelet reads and writes it."""

    tensor: Placed
    begins: np.ndarray
    lengths: np.ndarray
    counts: np.ndarray
    kind: str = "vector"
    reads: bool = True
    writes: bool = False

    @classmethod
    def regions(cls, tensor: Placed, begins, ends, counts=None, **kw) -> "Field":
        begins, ends = np.asarray(begins, np.int64), np.asarray(ends, np.int64)
        counts = np.ones(begins.size, np.int64) if counts is None else \
            np.asarray(counts, np.int64)
        return cls(tensor, begins, ends - begins, counts, **kw)

    @classmethod
    def whole(cls, tensor: Placed, n: int, **kw) -> "Field":
        """Every one of n vertices connects the whole tensor."""
        return cls(tensor, np.zeros(n, np.int64), np.full(n, tensor.elements, np.int64),
                   np.ones(n, np.int64), **kw)

    @property
    def index(self) -> np.ndarray:
        """The positions of its regions' elements, concatenated."""
        return ragged(self.begins, self.lengths)

    def slot_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(length of each slot, vertex of each slot): a VectorList's regions each a slot,
        else a vertex's regions joined."""
        vertex = np.repeat(np.arange(self.counts.size), self.counts)
        if self.kind == "vector_list":
            return self.lengths, vertex
        return np.bincount(vertex, weights=self.lengths,
                           minlength=self.counts.size).astype(np.int64), \
            np.arange(self.counts.size)


@dataclass
class Group:
    """Vertices of one codelet: their tiles, estimates, whether it is a MultiVertex (its
    estimate is every worker's), and its fields."""

    codelet: str
    tiles: np.ndarray
    estimates: np.ndarray
    fields: list
    multi: bool = False


@dataclass
class Priced:
    """What one compute set costs: cycles (the BSP sum of its phases), and per tile of the
    layer's graph its buffers, vertex state, the tiles each codelet runs on and the tiles
    taking part."""

    cycles: int
    buffers: np.ndarray
    state: np.ndarray
    code: dict = field(default_factory=dict)
    active: np.ndarray | None = None
    phases: dict = field(default_factory=dict)


def _slots(group: Group, f: Field, T: int):
    """The field's slots: (tile, length, element tiles, element addresses, slot of each
    element, in place, key for sharing)."""
    lengths, vertex = f.slot_lengths()
    tile = group.tiles[vertex]
    where = f.tensor.where.ravel()[f.index]
    ids = f.tensor.ids.ravel()[f.index]
    slot = np.repeat(np.arange(lengths.size), lengths)
    bad = where != tile[slot]
    if ids.size > 1:
        step = np.r_[False, np.diff(ids) != 1] & np.r_[False, slot[1:] == slot[:-1]]
        bad |= step
    in_place = np.bincount(slot[bad], minlength=lengths.size) == 0
    first = np.full(lengths.size, -1, np.int64)
    nz = lengths > 0
    first[nz] = ids[np.cumsum(lengths)[nz] - lengths[nz]]
    return tile, lengths, where, ids, slot, in_place, first


_PRICED: dict = {}        # signature of a compute set -> Priced (a step repeats many)
CACHE_SIZE = 4096


def _signature(target, cs: list[Group], sync: int, far_sync: int) -> bytes:
    """What decides a compute set's price: its vertices, their estimates and regions, and
    where each element of the tensors they read is and its address up to the variables'
    numbering (an encoder layer's second copy, a micro-batch, a recomputation price alike)."""
    h = hashlib.blake2b(repr((target.chip.name, target.num_ipus, target.tiles_per_ipu,
                              target.system.name, sync, far_sync)).encode(), digest_size=20)
    number: dict = {}                   # variable -> its number by first appearance
    for g in cs:
        h.update(repr((g.codelet, g.multi, len(g.fields))).encode())
        h.update(g.tiles.tobytes()), h.update(np.asarray(g.estimates, np.int64).tobytes())
        for f in g.fields:
            ids = np.ascontiguousarray(f.tensor.ids).ravel()
            var = ids >> VARIABLE_BITS
            runs = var[np.r_[True, var[1:] != var[:-1]]] if var.size else var
            for v in runs.tolist():
                number.setdefault(v, len(number))
            distinct = np.unique(runs)
            numbers = np.array([number[v] for v in distinct.tolist()], np.int64)
            where = np.ascontiguousarray(f.tensor.where).ravel()
            starts = np.flatnonzero(np.r_[True, np.diff(ids) != 1])   # runs of addresses
            tiles = np.flatnonzero(np.r_[True, where[1:] != where[:-1]])  # and of tiles
            canon = (numbers[np.searchsorted(distinct, var[starts])] << VARIABLE_BITS) | \
                (ids[starts] & MASK)
            h.update(repr((f.kind, f.reads, f.writes, f.tensor.nbytes, ids.size)).encode())
            for x in (f.begins, f.lengths, f.counts, starts, canon, tiles, where[tiles]):
                h.update(x.tobytes())
    return h.digest()


def price(target, cs: list[Group], sync: int, far_sync: int) -> Priced:
    """The cycles and memory of a compute set of these groups on `target` (the layer's
    graph): `sync` the cycles of its syncs, `far_sync` when its exchange crosses IPUs."""
    key = _signature(target, cs, sync, far_sync)
    if key not in _PRICED:
        if len(_PRICED) >= CACHE_SIZE:
            _PRICED.clear()
        _PRICED[key] = _price(target, cs, sync, far_sync)
    return _PRICED[key]


class _Staging:
    """What a compute set's vertices and slots add up to before it is priced: per tile its
    buffers, vertex state and codelets, and the element moves into buffers (pre) and back
    (post)."""

    def __init__(self, target):
        self.T, self.cost = target.num_tiles, target.cost
        self.buffers = np.zeros(self.T, np.int64)
        self.state = np.zeros(self.T, np.int64)
        self.pre, self.post = ([], [], [], []), ([], [], [], [])   # src, dst, bytes, address
        self.code: dict = {}
        self.shared: set = set()      # (tile, first address, length) of read-only buffers
        self.vertices = ([], [], [])  # tiles, estimates, multi

    def group(self, g: Group) -> None:
        T, c = self.T, self.cost
        size = {"scalar": c.scalar_field_bytes, "vector": c.vector_field_bytes,
                "vector_list": c.vector_field_bytes}
        for out, x in zip(self.vertices, (g.tiles, g.estimates, np.full(g.tiles.size, g.multi))):
            out.append(x)
        header = c.vertex_header_bytes + sum(size[f.kind] for f in g.fields)
        self.state += np.bincount(g.tiles, minlength=T) * header
        mark = np.zeros(T, bool)
        mark[g.tiles] = True
        self.code[g.codelet] = self.code.get(g.codelet, np.zeros(T, bool)) | mark
        for f in g.fields:
            self.field(g, f)

    def field(self, g: Group, f: Field) -> None:
        T = self.T
        tile, lengths, where, ids, slot, in_place, first = _slots(g, f, T)
        if f.kind == "vector_list":
            self.state += np.bincount(tile, minlength=T) * self.cost.vector_list_entry_bytes
        need = ~in_place & (lengths > 0)
        if f.reads and not f.writes:      # read-only copies of one region share a buffer
            for s in np.flatnonzero(need):
                key = (int(tile[s]), int(first[s]), int(lengths[s]))
                need[s] = key not in self.shared
                self.shared.add(key)
        self.buffers += np.bincount(tile[need], weights=lengths[need] * f.tensor.nbytes,
                                    minlength=T).astype(np.int64)
        moved = need[slot]
        for wanted, out in ((f.reads, self.pre), (f.writes, self.post)):
            if wanted and moved.any():
                src, dst = where[moved], tile[slot[moved]]
                if out is self.post:
                    src, dst = dst, src
                out[0].append(src), out[1].append(dst)
                out[2].append(np.full(src.size, f.tensor.nbytes, np.int64))
                out[3].append(ids[moved] * f.tensor.nbytes)


def _price(target, cs: list[Group], sync: int, far_sync: int) -> Priced:
    T = target.num_tiles
    st = _Staging(target)
    for g in cs:
        if g.tiles.size:
            st.group(g)
    tiles, est, multi = (np.concatenate(x) if x else np.zeros(0, np.int64)
                         for x in st.vertices)
    ex_pre = _exchange(target, st.pre, T)
    busy, _ = compute_cost(target, tiles, est, multi.astype(bool))
    compute = busy + ex_pre["on_tile_copy"]
    phases = {"exchange": int(ex_pre["exchange"].max(initial=0)),
              "inter_ipu_exchange": int(ex_pre["inter_ipu_exchange"].max(initial=0)),
              "compute": int(compute.max(initial=0))}
    crosses = (lambda ex: far_sync if ex["inter_ipu_exchange"].any() else sync)
    cycles = crosses(ex_pre) + sum(phases.values())
    active = (ex_pre["exchange"] > 0) | (ex_pre["inter_ipu_exchange"] > 0) | (compute > 0)
    if st.post[0]:
        ex_post = _exchange(target, st.post, T)
        phases["post"] = crosses(ex_post) + sum(int(ex_post[k].max(initial=0)) for k in (
            "exchange", "inter_ipu_exchange", "on_tile_copy"))
        cycles += phases["post"]
        active |= (ex_post["exchange"] > 0) | (ex_post["on_tile_copy"] > 0)
    return Priced(int(cycles), st.buffers, st.state, st.code, active, phases)


def _on_other_shards(groups: list[Group], shared: dict, T: int) -> list | None:
    """The compute set as the other shards of a stage build it beside shard 0's (tensor
    sharding): each one's vertices and tensors on its own IPU (k), the weights it reads
    from shard 0 (shared: variable -> the shards reading it) on shard 0's; None when no
    shard reads any of them."""
    read = {int(v) for g in groups for f in g.fields
            for v in np.unique(f.tensor.ids >> VARIABLE_BITS) if int(v) in shared}
    readers = sorted({k for v in read for k in shared[v]})
    out = []
    for k in readers:
        remote = [v for v in read if k in shared[v]]
        out += [replace(g, tiles=g.tiles + k * T, fields=[replace(f, tensor=Placed(
            f.tensor.where + k * T * np.isin(f.tensor.ids >> VARIABLE_BITS, remote,
                                             invert=True), f.tensor.ids, f.tensor.dtype))
            for f in g.fields]) for g in groups]
    return out or None


def _exchange(target, moves, T: int) -> dict:
    """machine.cost.exchange_cost of element moves (src, dst, bytes, address), consecutive
    elements between the same two tiles joined into runs (as poplar's copy plans join them:
    a source run counts once however many tiles receive it)."""
    if not moves[0]:
        zero = np.zeros(T, np.int64)
        return {"exchange": zero, "inter_ipu_exchange": zero, "on_tile_copy": zero}
    src, dst, nbytes, start = (np.concatenate(x) for x in moves)
    new = np.ones(src.size, bool)
    new[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1]) | \
        (start[1:] != start[:-1] + nbytes[:-1]) | (nbytes[1:] != nbytes[:-1])
    first = np.flatnonzero(new)
    length = np.diff(np.append(first, src.size))
    return exchange_cost(target, src[first], dst[first], nbytes[first] * length, start[first])


class Placing:
    """What an Ipu (tiles.py) does with placed tensors: their compute sets (price), side by
    side as poplar.parallel merges them, and the constants the libraries add."""

    def side_by_side(self, name: str, programs) -> None:
        """poplar.parallel: programs (callables adding compute sets) run side by side, the
        k-th compute set of each merged into one ('<name>/<k>')."""
        captured = []
        for build in programs:
            self._capture = []
            build()
            captured.append(self._capture)
        self._capture = None
        for k in range(max((len(c) for c in captured), default=0)):
            self.execute(f"{name}/{k}", [g for c in captured if k < len(c) for g in c[k]])

    def repeat_last(self, times: int) -> None:
        """The last superstep runs `times` times in all (a compute set in a loop)."""
        if self.clock and times > 1:
            self.clock.extend([self.clock[-1]] * (times - 1))

    def execute(self, name: str, groups: list[Group]) -> None:
        """A compute set of placed tensors (lowering.price): its superstep, exchange
        buffers, vertex state, code and control code on this IPU's tiles."""
        if self._capture is not None:
            self._capture.append(groups)
            return
        mc = self.mc
        p = price(mc.graph, groups, mc.own_sync, mc.far_sync)
        other = _on_other_shards(groups, mc.shared, mc.T) if mc.shared else None
        self.superstep(name, p.cycles if other is None else max(p.cycles, price(
            mc.shards_graph, other, mc.own_sync, mc.far_sync).cycles))
        T = mc.T
        self.buffers = np.maximum(self.buffers, p.buffers[:T])
        self.state += int(p.state[:T].sum())
        for codelet, tiles in p.code.items():
            self.code_tiles[codelet] = self.code_tiles.get(codelet, np.zeros(T, bool)) | \
                tiles[:T]
        self.steps += int(p.active[:T].sum())

    def _constant(self, t: Placed) -> Placed:
        per = t.bytes_on(self.mc.T, self.cost.alignment)
        self.constants += int(per.sum())
        return t

    def new_constant(self, tiles, values: int, dtype) -> Placed:
        """poputil.tile_constant: `values` elements on each of the tiles."""
        return self._constant(self.mc.addr.on_tiles(tiles, values, dtype))

    def vertex_constant(self, tiles, sizes, dtype) -> Placed:
        """poputil.vertex_constants: sizes[v] elements for vertex v, on its tile (flat)."""
        sizes = np.asarray(sizes, np.int64)
        return self._constant(self.mc.addr.new((int(sizes.sum()),),
                                               np.repeat(np.asarray(tiles, np.int64), sizes),
                                               dtype))

    def seed(self) -> Placed:
        """The step's dropout seed: UNSIGNED_INT [2] on tile 0."""
        return self.mc.once("seed", lambda: self.mc.addr.new((2,), np.zeros(2, np.int64),
                                                               UNSIGNED_INT))

    def shared_constant(self, shape, dtype) -> Placed:
        """poputil.shared_constant: one per shape and type on the graph, mapped linearly."""
        key = ("shared", tuple(shape), dtype.name)
        if key not in self.shared_placed:
            self.shared_placed[key] = self._constant(
                self.mc.addr.linear(shape, dtype, self.mc.graph.num_tiles))
        return self.shared_placed[key]
