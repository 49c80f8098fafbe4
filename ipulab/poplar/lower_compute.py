"""Lowering a compute set: where each vertex field's data is, the exchanges that bring it, the
batches that run it, and what it costs, from the graph's vertex columns (vertices.py).

Each connected (vertex, field, region) is a *slot*. A slot whose elements are contiguous and on
its vertex's tile is used in place; any other gets a buffer on the vertex's tile, filled by an
exchange before the compute phase (and sent back after it for outputs; the host copies only
the reads it must, _runtime_reads). Then the vertices of each codelet become one Batch (one
numba call), and the step's cycles are the compute set's compute phase plus its exchange
phases. Everything here works on arrays of slots and vertices: no Python per vertex.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import GraphError
from ..machine import bsp
from ..machine.cost import compute_cost, default_vertex_estimate
from ..machine.exchange import CopyPlan
from ..machine.kernels import alias_slots, contiguous_slots, first_marked, first_repeat, frozen, \
    row_hashes, slot_runs, slots_in_place
from .actions import ComputeAction
from .codelet import Batch, BatchPlan
from .vertices import per_vertex, ragged

_EMPTY = np.zeros(0, np.int64)


def first_duplicate(ids: np.ndarray):
    """An address that occurs twice in ids, or None (linear time: a mark over the span)."""
    found = first_repeat(frozen(np.ascontiguousarray(ids, np.int64)))
    return None if found < 0 else int(found)


@dataclass
class Vertices:
    """The vertices of a compute set in id order: id, batch (its codelet's position in
    `codelets`), tile and fixed estimate (-1: none)."""

    vid: np.ndarray
    batch: np.ndarray
    tile: np.ndarray
    fixed: np.ndarray
    codelets: list


@dataclass
class Slots:
    """One row per slot of a compute set, vertex-major (then field, then region): vertex,
    batch, field position in its codelet, region number, tile, where its element addresses
    start in `ids`, its length, and where the vertex will find the data (offset, filled in).
    conns[conn[s]] is the connection a slot came from, for messages."""

    vid: np.ndarray
    batch: np.ndarray
    field: np.ndarray
    region: np.ndarray
    tile: np.ndarray
    conn: np.ndarray
    start: np.ndarray
    length: np.ndarray
    ids: np.ndarray
    conns: list
    offset: np.ndarray

    def elements(self, sel: np.ndarray) -> np.ndarray:
        """The element addresses of the selected slots, concatenated."""
        return self.ids[ragged(self.start[sel], self.length[sel])]

    def name(self, s: int) -> str:
        return self.conns[int(self.conn[s])].name(int(self.region[s]))


_VERTEX = ("vid", "batch", "tile", "fixed")
_SLOT = ("vid", "batch", "field", "region", "tile", "conn", "length")


class _Collector:
    """The vertex and slot columns of a compute set's groups, as arrays per codelet and field:
    groups of many as add_vertices checked and stored them, groups of one vertex gathered
    codelet by codelet (a pass per field over them, not a Python call per vertex)."""

    def __init__(self, st):
        self.st = st
        self.v_parts, self.s_parts = [], []
        self.ids = []           # element addresses, each flattened by result()
        self.conns, self.codelets, self._fields = [], [], {}

    def _batch(self, cls) -> tuple[int, list]:
        if cls not in self._fields:
            self.codelets.append(cls)
            self._fields[cls] = (len(self.codelets) - 1, [f.name for f in cls.fields])
        return self._fields[cls]

    def _slots(self, vids, b, fi, tiles, counts, lengths, ids, conns, conn_of_region) -> None:
        m = lengths.size
        region = np.arange(m) - np.repeat(np.cumsum(counts) - counts, counts)
        self.s_parts.append(np.stack([np.repeat(vids, counts), np.full(m, b), np.full(m, fi),
                                      region, np.repeat(tiles, counts),
                                      len(self.conns) + conn_of_region, lengths], 1))
        self.ids.extend(ids)
        self.conns.extend(conns)

    def bulk(self, g) -> None:
        b, names = self._batch(g.codelet)
        vids = np.arange(g.first, g.first + g.n, dtype=np.int64)
        self.v_parts.append(np.stack([vids, np.full(g.n, b), g.tiles, g.estimates], 1))
        for fi, name in enumerate(names):
            c = g.conns[name]
            self._slots(vids, b, fi, g.tiles, c.counts, c.lengths, [c.ids], [c],
                        np.zeros(c.lengths.size, np.int64))

    def singles(self, cls, gs: list):
        """Groups of one vertex each, all of codelet cls, in id order. Returns the first of
        them not mapped or with a field not connected (None: all are)."""
        b, names = self._batch(cls)
        n = len(gs)
        vids = np.fromiter((g.first for g in gs), np.int64, n)
        tiles = np.fromiter((g.tiles[0] for g in gs), np.int64, n)
        bad = tiles < 0
        for name in names:
            bad |= ~np.fromiter((name in g.conns for g in gs), bool, n)
        if bad.any():
            return gs[int(np.argmax(bad))]
        self.v_parts.append(np.stack(
            [vids, np.full(n, b), tiles, np.fromiter((g.estimates[0] for g in gs), np.int64, n)],
            1))
        for fi, (name, f) in enumerate(zip(names, cls.fields)):
            conns = [g.conns[name] for g in gs]
            if f.kind == "vector_list":
                counts = np.fromiter((len(c.tensors) for c in conns), np.int64, n)
                ids = [t._ids for c in conns for t in c.tensors]
            else:
                counts = np.ones(n, np.int64)
                ids = [c.tensors[0]._ids for c in conns]
            lengths = np.fromiter((x.size for x in ids), np.int64, len(ids))
            self._slots(vids, b, fi, tiles, counts, lengths, ids, conns,
                        np.repeat(np.arange(n), counts))
        return None

    def result(self) -> tuple[Vertices, Slots]:
        v = np.concatenate(self.v_parts) if self.v_parts else np.zeros((0, len(_VERTEX)), np.int64)
        v = v[np.argsort(v[:, 0], kind="stable")]
        s = np.concatenate(self.s_parts) if self.s_parts else np.zeros((0, len(_SLOT)), np.int64)
        length = s[:, 6]
        start = np.cumsum(length) - length
        order = np.lexsort((s[:, 3], s[:, 2], s[:, 0]))
        s = s[order]
        return (Vertices(*(v[:, i].copy() for i in range(len(_VERTEX))), self.codelets),
                Slots(*(s[:, i].copy() for i in range(6)), start[order], s[:, 6].copy(),
                      np.concatenate(self.ids, axis=None) if self.ids else _EMPTY, self.conns,
                      np.zeros(order.size, np.int64)))


def collect(st, groups) -> tuple[Vertices, Slots]:
    """The vertex and slot columns of a compute set's groups; GraphError for the first vertex
    (in id order) that is not mapped or has a field not connected."""
    c = _Collector(st)
    singles: dict = {}
    for g in groups:
        if g.single:
            singles.setdefault(g.codelet, []).append(g)
        else:
            c.bulk(g)
    bad = [g for g in (c.singles(cls, gs) for cls, gs in singles.items()) if g is not None]
    if bad:
        g = min(bad, key=lambda g: g.first)
        what = st.describe_vertex(g.first)
        if g.tiles[0] < 0:
            raise GraphError(f"{what} is not mapped to a tile; call g.set_tile_mapping(v, tile)")
        missing = next(f.name for f in g.codelet.fields if f.name not in g.conns)
        raise GraphError(f"field '{missing}' of {what} is not connected")
    return c.result()


@dataclass
class Staging:
    """What a compute set's slots need around the compute phase: copy plans (with their arena
    key) before and after it, HALF outputs to round, bytes of buffers per tile."""

    pre: list
    post: list
    half_out: dict
    buffers: np.ndarray
    pre_cost: list


class ComputeSetLowering:
    """Lowers one compute set for a Compiler `c` (graph, tile mapping, replicas, steps)."""

    def __init__(self, c, cs, groups):
        self.c, self.cs, self.st = c, cs, c.st
        self.v, self.slots = collect(c.st, groups)
        # field objects per slot: by (batch, field position)
        self.fields = [codelet.fields for codelet in self.v.codelets]

    def _per_slot(self, value, sel=None) -> np.ndarray:
        """value(field) of every slot's field (or of the selected slots')."""
        width = max((len(f) for f in self.fields), default=0)
        table = np.zeros((len(self.fields), max(width, 1)), np.int64)
        for b, fields in enumerate(self.fields):
            for fi, f in enumerate(fields):
                table[b, fi] = value(f)
        s = self.slots
        return table[s.batch, s.field] if sel is None else table[s.batch[sel], s.field[sel]]

    def lower(self) -> bsp.Step:
        c = self.c
        step = bsp.Step("execute", self.cs.name, c.T)
        c.rep.new_scratch()
        staging = Staging([], [], {}, np.zeros(c.T, np.int64), [])
        types = self._type_codes()
        touched = [self._place(np.flatnonzero(types == k), staging)
                   for k in range(len(self._types))]
        staging.buffers = c.rep.per_tile(staging.buffers)
        c.buffers = np.maximum(c.buffers, staging.buffers)
        step.temporary_bytes = staging.buffers
        staging.half_out = {k: c.rep.addrs(k, idx) for k, idx in staging.half_out.items()}
        batches, estimates = self._batches(step)
        self._vertex_state()
        self._cost(step, staging, estimates)
        step.action = ComputeAction(staging.pre, batches, staging.half_out, staging.post, c.rep.r,
                                    c.rep.scratch_used())
        for b in batches:
            b.compile(c.dummy, c.dummy_ro)
        c.add_step(step)
        c.record_traffic(step.index, [p for p, _ in staging.pre_cost + staging.post])
        c.touch(step, [r for r, _ in touched], [w for _, w in touched])
        return step

    def _type_codes(self) -> np.ndarray:
        """Per slot: the position of its field's type among the compute set's types (sorted by
        name, as the slots of each type are placed in that order)."""
        self._types = sorted({f.dtype.name for fields in self.fields for f in fields})
        return self._per_slot(lambda f: self._types.index(f.dtype.name))

    # --- where each slot's data is --------------------------------------------------------------
    def _place(self, sel: np.ndarray, staging: Staging):
        """Place each slot's data (all of one type): in place, or in a buffer on its tile.
        Returns the variables the slots read and those they write, for liveness."""
        c, slots = self.c, self.slots
        if sel.size == 0:
            return _EMPTY, _EMPTY
        dtype = self.fields[slots.batch[sel[0]]][slots.field[sel[0]]].dtype
        key = dtype.storage.name
        lens = slots.length[sel]
        cat = slots.elements(sel)
        starts = np.cumsum(lens) - lens
        reads = self._per_slot(lambda f: f.reads, sel).astype(bool)
        writes = self._per_slot(lambda f: f.writes, sel).astype(bool)
        self._check_hazards(key, sel, cat, starts, lens, reads, writes)
        direct = slots_in_place(cat, starts, lens, slots.tile[sel], c.tile_of[key])
        used = direct & (lens > 0)
        slots.offset[sel[used]] = cat[starts[used]]
        need = np.flatnonzero(~direct)
        if need.size:
            self._buffer(key, dtype.size, sel, need, (cat, starts, lens, reads, writes), staging)
        if dtype.rounds_to_half and writes.any():      # HALF outputs: rounded where written
            w = sel[writes]
            staging.half_out[key] = np.concatenate([
                ragged(slots.offset[w], slots.length[w]),
                staging.half_out.get(key, _EMPTY)])
        return c.var_index.of_segments(key, cat, lens, [reads, writes])

    def _buffer(self, key, elem_bytes, sel, need, flat, staging: Staging) -> None:
        """Give slots that are remote or scattered a contiguous buffer on the vertex's tile,
        filled by an exchange before the compute phase and sent back after it for outputs.

        Vertices of one tile that read the same elements share one buffer: the data crosses
        the exchange once per tile, not once per vertex. flat: (cat, starts, lens, reads,
        writes) of the selected slots."""
        c, slots = self.c, self.slots
        cat, starts, lens, reads, writes = flat
        tiles = slots.tile[sel]
        read_only = need[reads[need] & ~writes[need]]
        alias = alias_slots(cat, starts, lens, tiles, read_only)
        shared = np.zeros(sel.size, np.int64) - 1
        shared[read_only[alias >= 0]] = read_only[alias[alias >= 0]]
        need = need[shared[need] < 0]
        base = c.rep.buffer(key, int(lens[need].sum()))
        buf_start = base + np.cumsum(lens[need]) - lens[need]
        slots.offset[sel[need]] = buf_start
        staging.buffers += np.bincount(tiles[need], weights=lens[need] * elem_bytes,
                                       minlength=c.T).astype(np.int64)
        for to_buffer, mask, plans in ((True, reads[need], staging.pre_cost),
                                       (False, writes[need], staging.post)):
            pick = need[mask]
            if pick.size:
                runs = slot_runs(cat, starts[pick], lens[pick], buf_start[mask], tiles[pick],
                                 c.tile_of[key], to_buffer)
                plans.append((c.rep.plan(CopyPlan.from_runs(c.target, *runs, elem_bytes), key),
                              key))
        self._runtime_reads(key, elem_bytes, sel, need, buf_start, flat, staging)
        aliased = np.flatnonzero(shared >= 0)
        slots.offset[sel[aliased]] = slots.offset[sel[shared[aliased]]]

    def _runtime_reads(self, key, elem_bytes, sel, need, buf_start, flat, staging) -> None:
        """What the run copies before the compute phase (the cost and buffers above are every
        tile's, as on the IPU): a read-only slot that is one range of the arena is read where
        it is, and read-only slots of the same elements share the first one's buffer."""
        c, slots = self.c, self.slots
        cat, starts, lens, reads, writes = flat
        pick = need[reads[need]]
        if pick.size == 0:
            return
        ro = pick[~writes[pick]]
        flat_ro = contiguous_slots(cat, starts[ro], lens[ro])
        slots.offset[sel[ro[flat_ro]]] = cat[starts[ro[flat_ro]]]
        rest = np.flatnonzero(~flat_ro)
        alias = alias_slots(cat, starts, lens, np.zeros(sel.size, np.int64), ro[rest])
        same = rest[alias >= 0]
        slots.offset[sel[ro[same]]] = buf_start[np.searchsorted(need, ro[rest[alias[alias >= 0]]])]
        copy = np.setdiff1d(pick, np.concatenate([ro[flat_ro], ro[same]]), assume_unique=True)
        if copy.size:
            runs = slot_runs(cat, starts[copy], lens[copy], buf_start[np.searchsorted(need, copy)],
                             slots.tile[sel][copy], c.tile_of[key], True)
            staging.pre.append((c.rep.plan(CopyPlan.from_runs(c.target, *runs, elem_bytes), key),
                                key))

    def _check_hazards(self, key, sel, cat, starts, lens, reads, writes) -> None:
        """Reject overlapping writes, reads of written data, and writes to constants."""
        w_slots = np.flatnonzero(writes)
        written = cat[np.repeat(writes, lens)]
        if written.size == 0:
            return
        w_seg = np.repeat(w_slots, lens[w_slots])
        slots = self.slots
        describe = (lambda i: self.st.describe_vertex(int(slots.vid[i])))
        dup = first_duplicate(written)
        if dup is not None:
            ia, ib = sel[w_seg[np.flatnonzero(written == dup)[:2]]]
            raise GraphError(
                f"write hazard in compute set: {describe(ia)} writes tensor '{slots.name(ia)}' "
                f"and {describe(ib)} writes tensor '{slots.name(ib)}', and they overlap; "
                "vertices of one compute set must write disjoint elements")
        const = self.c.is_const[key][written]
        if const.any():
            i = sel[w_seg[np.argmax(const)]]
            raise GraphError(f"{describe(i)} writes constant tensor '{slots.name(i)}'; "
                             "constants are read-only")
        lo = int(written.min())
        mark = np.zeros(int(written.max()) - lo + 1, np.bool_)
        mark[written - lo] = True
        slot, addr = first_marked(cat, starts, lens, np.flatnonzero(reads & ~writes), mark, lo)
        if slot >= 0:
            i, w = sel[slot], sel[w_seg[np.argmax(written == addr)]]
            raise GraphError(
                f"read/write hazard: {describe(i)} reads '{slots.name(i)}' as an Input while "
                f"{describe(w)} writes it ('{slots.name(w)}') in the same compute set; an Input "
                "is never written — use InOut in one vertex, or two compute sets")

    # --- batches and their cost -----------------------------------------------------------------
    def _batches(self, step: bsp.Step):
        """One Batch per codelet, and every vertex's estimate (in vertex order)."""
        c, v = self.c, self.v
        estimates = np.zeros(v.vid.size, np.int64)
        batches = []
        for b, cls in enumerate(v.codelets):
            rows = np.flatnonzero(v.batch == b)
            table = self._batch_table(b, rows)
            estimates[rows] = self._estimates(b, rows, table)
            batches.append(self._batch(cls, v.vid[rows], v.tile[rows], table))
            c.code_tiles.setdefault(cls.__name__, np.zeros(c.T, bool))[v.tile[rows]] = True
            # every replica runs the vertices: counts and cycles cover all replicas
            stats = c.out.vertex_stats.setdefault(cls.__name__, {"count": 0, "cycles": 0})
            cycles = c.rep.r * int(estimates[rows].sum())
            stats["count"] += c.rep.r * rows.size
            stats["cycles"] += cycles
            step.vertex_cycles[cls.__name__] = (c.rep.r * rows.size, cycles)
        return batches, estimates

    def _batch_table(self, b: int, rows: np.ndarray) -> dict:
        """Per field position of codelet b: (slot offsets, lengths, regions per vertex) of the
        batch's vertices, in vertex order (one slot per vertex unless a VectorList)."""
        s = self.slots
        mine = np.flatnonzero(s.batch == b)
        vids = self.v.vid[rows]
        out = {}
        for fi, f in enumerate(self.fields[b]):
            sl = mine[s.field[mine] == fi]
            counts = np.bincount(np.searchsorted(vids, s.vid[sl]), minlength=rows.size)
            out[fi] = (s.offset[sl], s.length[sl], counts)
        return out

    def _cost(self, step: bsp.Step, staging: Staging, estimates: np.ndarray) -> None:
        c, v = self.c, self.v
        on_tile_pre = c.plan_phases(step, staging.pre_cost)
        multi = np.array([cls.multi for cls in v.codelets], bool)[v.batch] if v.vid.size \
            else np.zeros(0, bool)
        r = c.rep.r
        cycles, excl = compute_cost(c.target, c.rep.tiles(v.tile), np.tile(estimates, r),
                                    np.tile(multi, r))
        step.add("compute", cycles + on_tile_pre)
        excluding_idle = excl + on_tile_pre
        if staging.post:
            on_tile_post = c.plan_phases(step, staging.post)
            step.add("compute", on_tile_post)
            excluding_idle = excluding_idle + on_tile_post
        step.compute_excluding_idle = excluding_idle

    def _batch(self, cls, members, tiles, table: dict) -> Batch:
        c = self.c
        params = self.st.codelet_params[cls]
        position = {f.attr: fi for fi, f in enumerate(cls.fields)}
        order = [position[p] for p in params]
        flat = [fi for fi in order if cls.fields[fi].kind != "vector_list"]
        lists = [fi for fi in order if cls.fields[fi].kind == "vector_list"]
        V = members.size
        off = np.stack([table[fi][0] for fi in flat], 1) if flat else np.zeros((V, 0), np.int64)
        ln = np.stack([table[fi][1] for fi in flat], 1) if flat else np.zeros((V, 0), np.int64)
        vl_first, vl_count, vl_off, vl_len, vl_key, base = [], [], [], [], [], 0
        for fi in lists:
            o, n, counts = table[fi]
            vl_first.append(base + np.cumsum(counts) - counts)
            vl_count.append(counts)
            vl_off.append(o), vl_len.append(n)
            vl_key += [cls.fields[fi].dtype.storage.name] * o.size
            base += o.size
        stack = (lambda xs: np.stack(xs, 1) if xs else np.zeros((V, 0), np.int64))
        cat = (lambda xs: np.concatenate(xs) if xs else _EMPTY)
        plan = [off, ln, stack(vl_first), stack(vl_count), cat(vl_off), cat(vl_len)]
        if c.rep.r > 1:   # the same vertices on every replica, in one plan
            plan = self._replicate(cls, flat, vl_key, plan)
            members, tiles = np.tile(members, c.rep.r), c.rep.tiles(tiles)
        return Batch(cls, params, c.mode, c.target.num_worker_contexts, members, tiles,
                     self.cs.name, BatchPlan(*plan), replicas=c.rep.r)

    def _replicate(self, cls, flat_cols, vl_key, plan) -> list:
        """A batch plan of replica 0 -> every replica's, replica by replica."""
        rep = self.c.rep
        off, ln, vl_first, vl_count, vl_off, vl_len = plan
        r, nvl = rep.r, vl_off.size
        stride = np.zeros_like(off)
        for k, fi in enumerate(flat_cols):
            stride[:, k] = rep.strides(cls.fields[fi].dtype.storage.name, off[:, k])
        vl_stride = np.zeros_like(vl_off)
        keys = np.asarray(vl_key, object)
        for key in set(vl_key):
            sel = keys == key
            vl_stride[sel] = rep.strides(key, vl_off[sel])
        return [np.concatenate([off + i * stride for i in range(r)]), np.tile(ln, (r, 1)),
                np.concatenate([vl_first + i * nvl for i in range(r)]),
                np.tile(vl_count, (r, 1)),
                np.concatenate([vl_off + i * vl_stride for i in range(r)]), np.tile(vl_len, r)]

    def _estimates(self, b: int, rows: np.ndarray, table: dict) -> np.ndarray:
        """The vertices' estimates: fixed ones, else the codelet's cycle_estimate (called once
        per distinct set of field sizes), else the default per element touched."""
        cls, v = self.v.codelets[b], self.v
        est = v.fixed[rows].copy()
        need = np.flatnonzero(est < 0)
        if need.size == 0:
            return est
        if not hasattr(cls, "cycle_estimate"):
            total = np.zeros(rows.size, np.int64)
            for _, lengths, counts in table.values():
                total += per_vertex(lengths, counts)
            est[need] = default_vertex_estimate(self.c.target, total[need])
            return est
        fields = self.fields[b]
        lists = {fi for fi, f in enumerate(fields) if f.kind == "vector_list"}
        signature = np.stack([table[fi][1] if fi not in lists else row_hashes(*table[fi][1:])
                              for fi in table] + [table[fi][2] for fi in lists], 1)[need]
        _, first, inverse = np.unique(signature, axis=0, return_index=True,
                                      return_inverse=True)
        values = np.array([self._estimate_of(b, rows, table, int(need[i]))
                           for i in sorted(first.tolist())], np.int64)
        rank = np.argsort(np.argsort(first))      # distinct signatures by first occurrence
        est[need] = values[rank[inverse.ravel()]]
        return est

    def _estimate_of(self, b: int, rows: np.ndarray, table: dict, k: int) -> int:
        """The codelet's cycle_estimate for the k-th vertex of batch b."""
        cls = self.v.codelets[b]
        sizes = {}
        for fi, f in enumerate(self.fields[b]):
            _, lengths, counts = table[fi]
            first = int(counts[:k].sum())
            mine = tuple(int(n) for n in lengths[first:first + counts[k]])
            sizes[f.attr] = mine if f.kind == "vector_list" else mine[0]
        try:
            return int(cls.cycle_estimate(**sizes))
        except Exception as e:
            raise GraphError(f"cycle_estimate of codelet {cls.__name__} failed for "
                             f"{self.st.describe_vertex(int(self.v.vid[rows[k]]))} with sizes "
                             f"{sizes}: {e}") from None

    def _vertex_state(self) -> None:
        """Vertex state bytes per tile: a header, a pointer (and size) per field, an entry per
        VectorList region."""
        cost, v, s = self.c.target.cost, self.v, self.slots
        per_kind = {"scalar": cost.scalar_field_bytes, "vector": cost.vector_field_bytes,
                    "vector_list": cost.vector_field_bytes}
        fixed = np.array([cost.vertex_header_bytes + sum(per_kind[f.kind] for f in fields)
                          for fields in self.fields], np.int64)
        in_list = self._per_slot(lambda f: f.kind == "vector_list").astype(bool)
        entries = np.bincount(s.tile[in_list], minlength=self.c.T) * cost.vector_list_entry_bytes
        self.c.vstate += np.bincount(v.tile, weights=fixed[v.batch],
                                     minlength=self.c.T).astype(np.int64) + entries
