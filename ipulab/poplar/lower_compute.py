"""Lowering a compute set: where each vertex field's data is, the exchanges that bring it, the
batches that run it, and what it costs.

Each connected (vertex, field, region) is a *slot*. A slot whose elements are contiguous and on
its vertex's tile is used in place; any other gets a buffer on the vertex's tile, filled by an
exchange before the compute phase (and sent back after it for outputs). Then the vertices of
each codelet become one Batch (one numba call), and the step's cycles are the compute set's
compute phase plus its exchange phases.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import GraphError
from ..machine import bsp
from ..machine.cost import compute_cost, default_vertex_estimate
from ..machine.exchange import CopyPlan
from ..machine.kernels import first_marked, slot_runs, slots_in_place
from .codelet import Batch, BatchPlan
from .types import round_half


def first_duplicate(ids: np.ndarray):
    """An address that occurs twice in ids, or None (linear time: a count over the span)."""
    if ids.size < 2:
        return None
    lo = int(ids.min())
    counts = np.bincount(ids - lo)
    over = np.flatnonzero(counts > 1)
    return lo + int(over[0]) if over.size else None


@dataclass
class Slots:
    """One row per slot of a compute set: vertex, field index, element addresses (one array
    each), tensor, field, and where the vertex will find the data (offset, filled in)."""

    vid: np.ndarray
    field: np.ndarray
    ids: list
    tensor: list
    fields: list
    length: np.ndarray
    tile: np.ndarray
    key: list
    offset: np.ndarray

    @classmethod
    def of(cls, st, vids: np.ndarray, v_tile: np.ndarray) -> "Slots":
        vid, field, ids, tensor = [], [], [], []
        for v in vids.tolist():
            conns, codelet = st.v_conns[v], st.v_codelet[v]
            if v_tile[v] < 0:
                raise GraphError(f"{st.describe_vertex(v)} is not mapped to a tile; call "
                                 "g.set_tile_mapping(v, tile)")
            for fi, f in enumerate(codelet.fields):
                if f.name not in conns:
                    raise GraphError(f"field '{f.name}' of {st.describe_vertex(v)} is not "
                                     "connected")
                for t in conns[f.name] if f.kind == "vector_list" else [conns[f.name]]:
                    vid.append(v), field.append(fi), ids.append(t.ids.ravel()), tensor.append(t)
        n = len(vid)
        vid, field = np.asarray(vid, np.int64), np.asarray(field, np.int64)
        fields = [st.v_codelet[v].fields[f] for v, f in zip(vid.tolist(), field.tolist())]
        return cls(vid, field, ids, tensor, fields,
                   np.fromiter((a.size for a in ids), np.int64, n),
                   v_tile[vid] if n else np.zeros(0, np.int64),
                   [f.dtype.storage.name for f in fields], np.zeros(n, np.int64))

    def by_vertex(self) -> dict[int, np.ndarray]:
        """{vertex: its slots}."""
        order = np.argsort(self.vid, kind="stable")
        vids, first = np.unique(self.vid[order], return_index=True)
        bounds = np.r_[first, order.size]
        return {int(v): order[bounds[i]:bounds[i + 1]] for i, v in enumerate(vids)}


@dataclass
class Staging:
    """What a compute set's slots need around the compute phase: copy plans (with their arena
    key) before and after it, HALF outputs to round, bytes of buffers per tile."""

    pre: list
    post: list
    half_out: dict
    buffers: np.ndarray


class ComputeSetLowering:
    """Lowers one compute set for a Compiler `c` (its shared state: graph, tile mapping,
    replicas, steps)."""

    def __init__(self, c, cs):
        self.c, self.cs, self.st = c, cs, c.st
        self.vids = c.vertices_of(cs.id)
        self.v_tile = np.asarray(self.st.v_tile, np.int64)

    def lower(self) -> bsp.Step:
        c = self.c
        slots = Slots.of(self.st, self.vids, self.v_tile)
        step = bsp.Step("execute", self.cs.name, c.T)
        c.rep.new_scratch()
        staging = Staging([], [], {}, np.zeros(c.T, np.int64))
        types = np.asarray([f.dtype.name for f in slots.fields])
        touched = [self._place(np.flatnonzero(types == name), slots, staging)
                   for name in sorted(set(types.tolist()))]
        staging.buffers = c.rep.per_tile(staging.buffers)
        c.buffers = np.maximum(c.buffers, staging.buffers)
        step.temporary_bytes = staging.buffers
        staging.half_out = {k: c.rep.addrs(k, idx) for k, idx in staging.half_out.items()}
        batches, estimates = self._batches(slots, step)
        self._vertex_state(slots)
        self._cost(step, staging, estimates)
        step.action = _action(staging, batches)
        for b in batches:
            b.compile(c.dummy, c.dummy_ro)
        c.add_step(step)
        c.record_traffic(step.index, [p for p, _ in staging.pre + staging.post])
        c.touch(step, [r for r, _ in touched], [w for _, w in touched])
        return step

    # --- where each slot's data is --------------------------------------------------------------
    def _place(self, sel: np.ndarray, slots: Slots, staging: Staging):
        """Place each slot's data (all of one type): in place, or in a buffer on its tile.
        Returns the variables the slots read and those they write, for liveness."""
        c = self.c
        dtype = slots.fields[sel[0]].dtype
        key = dtype.storage.name
        lens = slots.length[sel]
        cat = np.concatenate([slots.ids[i] for i in sel]) if sel.size else np.zeros(0, np.int64)
        starts = np.cumsum(lens) - lens
        reads = np.array([slots.fields[i].reads for i in sel], bool)
        writes = np.array([slots.fields[i].writes for i in sel], bool)
        self._check_hazards(key, sel, cat, starts, lens, reads, writes, slots)
        direct = slots_in_place(cat, starts, lens, slots.tile[sel], c.tile_of[key])
        used = direct & (lens > 0)
        slots.offset[sel[used]] = cat[starts[used]]
        need = np.flatnonzero(~direct)
        if need.size:
            self._buffer(key, dtype.size, sel, need, slots, (cat, starts, lens, reads, writes),
                         staging)
        # HALF outputs are rounded where the codelet wrote them
        half = np.array([dtype.rounds_to_half and slots.fields[i].writes for i in sel], bool)
        if half.any():
            idx = [np.arange(slots.offset[i], slots.offset[i] + slots.length[i])
                   for i in sel[half]]
            staging.half_out[key] = np.concatenate(
                idx + [staging.half_out.get(key, np.zeros(0, np.int64))])
        return c.var_index.of_segments(key, cat, lens, [reads, writes])

    def _buffer(self, key, elem_bytes, sel, need, slots: Slots, flat, staging: Staging) -> None:
        """Give slots that are remote or scattered a contiguous buffer on the vertex's tile,
        filled by an exchange before the compute phase and sent back after it for outputs.

        Vertices of one tile that read the same elements share one buffer: the data crosses
        the exchange once per tile, not once per vertex. flat: (cat, starts, lens, reads,
        writes) of the selected slots."""
        c = self.c
        cat, starts, lens, reads, writes = flat
        first_reader, aliases, own = {}, [], []
        for i in need.tolist():
            if reads[i] and not writes[i]:
                k = (int(slots.tile[sel[i]]), slots.ids[sel[i]].tobytes())
                if k in first_reader:
                    aliases.append((i, first_reader[k]))
                    continue
                first_reader[k] = i
            own.append(i)
        need = np.asarray(own, np.int64)
        base = c.rep.buffer(key, int(lens[need].sum()))
        buf_start = base + np.cumsum(lens[need]) - lens[need]
        slots.offset[sel[need]] = buf_start
        tiles = slots.tile[sel]
        staging.buffers += np.bincount(tiles[need], weights=lens[need] * elem_bytes,
                                       minlength=c.T).astype(np.int64)
        for to_buffer, mask, plans in ((True, reads[need], staging.pre),
                                       (False, writes[need], staging.post)):
            pick = need[mask]
            if pick.size:
                runs = slot_runs(cat, starts[pick], lens[pick], buf_start[mask], tiles[pick],
                                 c.tile_of[key], to_buffer)
                plans.append((c.rep.plan(CopyPlan.from_runs(c.target, *runs, elem_bytes), key),
                              key))
        for i, j in aliases:
            slots.offset[sel[i]] = slots.offset[sel[j]]

    def _check_hazards(self, key, sel, cat, starts, lens, reads, writes, slots: Slots) -> None:
        """Reject overlapping writes, reads of written data, and writes to constants."""
        w_slots = np.flatnonzero(writes)
        if w_slots.size == 0:
            return
        written = np.concatenate([cat[starts[i]:starts[i] + lens[i]] for i in w_slots])
        if written.size == 0:
            return
        w_seg = np.repeat(w_slots, lens[w_slots])
        describe = (lambda i: self.st.describe_vertex(int(slots.vid[i])))
        dup = first_duplicate(written)
        if dup is not None:
            ia, ib = sel[w_seg[np.flatnonzero(written == dup)[:2]]]
            raise GraphError(
                f"write hazard in compute set: {describe(ia)} writes tensor "
                f"'{slots.tensor[ia].name}' and {describe(ib)} writes tensor "
                f"'{slots.tensor[ib].name}', and they overlap; vertices of one compute set "
                "must write disjoint elements")
        const = self.c.is_const[key][written]
        if const.any():
            i = sel[w_seg[np.argmax(const)]]
            raise GraphError(f"{describe(i)} writes constant tensor '{slots.tensor[i].name}'; "
                             "constants are read-only")
        lo = int(written.min())
        mark = np.zeros(int(written.max()) - lo + 1, np.bool_)
        mark[written - lo] = True
        slot, addr = first_marked(cat, starts, lens, np.flatnonzero(reads & ~writes), mark, lo)
        if slot >= 0:
            i, w = sel[slot], sel[w_seg[np.argmax(written == addr)]]
            raise GraphError(
                f"read/write hazard: {describe(i)} reads '{slots.tensor[i].name}' as an Input "
                f"while {describe(w)} writes it ('{slots.tensor[w].name}') in the same compute "
                "set; an Input is never written — use InOut in one vertex, or two compute sets")

    # --- batches and their cost -----------------------------------------------------------------
    def _batches(self, slots: Slots, step: bsp.Step):
        """One Batch per codelet, and every vertex's estimate (in self.vids order)."""
        c, st, vids = self.c, self.st, self.vids
        estimates = np.zeros(len(vids), np.int64)
        pos_of = {int(v): i for i, v in enumerate(vids.tolist())}
        by_codelet: dict = {}
        for vid in vids.tolist():
            by_codelet.setdefault(st.v_codelet[vid], []).append(vid)
        slot_lists = slots.by_vertex()
        batches = []
        for cls, members in by_codelet.items():
            batches.append(self._batch(cls, np.asarray(members, np.int64), slots, slot_lists))
            for vid in members:
                estimates[pos_of[vid]] = self._estimate(vid, cls, slot_lists[vid], slots)
            c.code_pairs.update((t, cls.__name__) for t in set(self.v_tile[members].tolist()))
            # every replica runs the vertices: counts and cycles cover all replicas
            stats = c.out.vertex_stats.setdefault(cls.__name__, {"count": 0, "cycles": 0})
            cycles = c.rep.r * int(sum(estimates[pos_of[v]] for v in members))
            stats["count"] += c.rep.r * len(members)
            stats["cycles"] += cycles
            step.vertex_cycles[cls.__name__] = (c.rep.r * len(members), cycles)
        return batches, estimates

    def _cost(self, step: bsp.Step, staging: Staging, estimates: np.ndarray) -> None:
        c, st, vids = self.c, self.st, self.vids
        on_tile_pre = c.plan_phases(step, staging.pre)
        multi = np.fromiter((st.v_codelet[v].multi for v in vids.tolist()), bool, len(vids))
        r = c.rep.r
        cycles, excl = compute_cost(c.target, c.rep.tiles(self.v_tile[vids]),
                                    np.tile(estimates, r), np.tile(multi, r))
        step.add("compute", cycles + on_tile_pre)
        excluding_idle = excl + on_tile_pre
        if staging.post:
            on_tile_post = c.plan_phases(step, staging.post)
            step.add("compute", on_tile_post)
            excluding_idle = excluding_idle + on_tile_post
        step.compute_excluding_idle = excluding_idle

    def _batch(self, cls, members, slots: Slots, slot_lists) -> Batch:
        c = self.c
        params = self.st.codelet_params[cls]
        by_attr = {f.attr: (i, f) for i, f in enumerate(cls.fields)}
        order = [by_attr[p] for p in params]
        flat_cols = [fi for fi, f in order if f.kind != "vector_list"]
        vl_cols = [fi for fi, f in order if f.kind == "vector_list"]
        V = members.size
        off = np.zeros((V, len(flat_cols)), np.int64)
        ln = np.zeros((V, len(flat_cols)), np.int64)
        vl_first = np.zeros((V, len(vl_cols)), np.int64)
        vl_count = np.zeros((V, len(vl_cols)), np.int64)
        vl_off, vl_len, vl_key = [], [], []
        col_of = {fi: k for k, fi in enumerate(flat_cols)}
        vcol_of = {fi: k for k, fi in enumerate(vl_cols)}
        for row, vid in enumerate(members.tolist()):
            for s in slot_lists.get(vid, ()):
                fi = int(slots.field[s])
                if fi in col_of:
                    off[row, col_of[fi]], ln[row, col_of[fi]] = slots.offset[s], slots.length[s]
                else:
                    k = vcol_of[fi]
                    if vl_count[row, k] == 0:
                        vl_first[row, k] = len(vl_off)
                    vl_count[row, k] += 1
                    vl_off.append(slots.offset[s]), vl_len.append(slots.length[s])
                    vl_key.append(cls.fields[fi].dtype.storage.name)
        vl_off, vl_len = np.asarray(vl_off, np.int64), np.asarray(vl_len, np.int64)
        plan = [off, ln, vl_first, vl_count, vl_off, vl_len]
        tiles = self.v_tile[members]
        if c.rep.r > 1:   # the same vertices on every replica, in one plan
            plan = self._replicate(cls, flat_cols, vl_key, plan)
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
        for key in set(vl_key):
            sel = np.asarray([k == key for k in vl_key], bool)
            vl_stride[sel] = rep.strides(key, vl_off[sel])
        return [np.concatenate([off + i * stride for i in range(r)]), np.tile(ln, (r, 1)),
                np.concatenate([vl_first + i * nvl for i in range(r)]),
                np.tile(vl_count, (r, 1)),
                np.concatenate([vl_off + i * vl_stride for i in range(r)]), np.tile(vl_len, r)]

    def _estimate(self, vid, cls, slot_ids, slots: Slots) -> int:
        fixed = self.st.v_estimate[vid]
        if fixed >= 0:
            return fixed
        if hasattr(cls, "cycle_estimate"):
            sizes = {}
            for s in slot_ids:
                f = cls.fields[int(slots.field[s])]
                if f.kind == "vector_list":
                    sizes[f.attr] = sizes.get(f.attr, ()) + (int(slots.length[s]),)
                else:
                    sizes[f.attr] = int(slots.length[s])
            try:
                return int(cls.cycle_estimate(**sizes))
            except Exception as e:
                raise GraphError(f"cycle_estimate of codelet {cls.__name__} failed for "
                                 f"{self.st.describe_vertex(vid)} with sizes {sizes}: "
                                 f"{e}") from None
        return int(default_vertex_estimate(self.c.target, int(slots.length[slot_ids].sum())))

    def _vertex_state(self, slots: Slots) -> None:
        cost, st = self.c.target.cost, self.st
        for vid in self.vids.tolist():
            cls, conns = st.v_codelet[vid], st.v_conns[vid]
            n = cost.vertex_header_bytes
            for f in cls.fields:
                if f.kind == "scalar":
                    n += cost.scalar_field_bytes
                elif f.kind == "vector":
                    n += cost.vector_field_bytes
                else:
                    n += cost.vector_field_bytes + cost.vector_list_entry_bytes * len(conns[f.name])
            self.c.vstate[st.v_tile[vid]] += n


def _action(staging: Staging, batches: list):
    """What running the step does: exchange in, run the batches, round HALF outputs,
    exchange out."""
    def action(state):
        for plan, key in staging.pre:
            plan.run(state.arenas[key], state.arenas[key])
        for b in batches:
            b.run(state.arenas, state.arenas_ro)
        for key, idx in staging.half_out.items():
            a = state.arenas[key]
            a[idx] = round_half(a[idx])
        for plan, key in staging.post:
            plan.run(state.arenas[key], state.arenas[key])
    return action
