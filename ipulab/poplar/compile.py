"""Compile a graph and its programs into steps: all Python-level work happens here, once.

Lowering views to element addresses, grouping vertices into batches per codelet, deciding which
field data must cross tiles (and allocating exchange buffers for it), checking hazards,
building copy plans, precomputing cycles, and laying out tile memory. Every step also records
which variables it reads and writes, for the liveness analysis (liveness.py) that lets variables
alive at different times share tile memory.

Replicated graphs (replication_factor r) are compiled ONCE, for replica 0, and every plan is
then replicated by offsetting element addresses and tiles: replica i's tiles are
[i*R, (i+1)*R) (R tiles a replica), and in each storage arena replica i's copy of the
variables starts at i*V (V = the variables' size in that arena) while every exchange buffer
of n elements is allocated r times in a row (replica i's copy at +i*n). A replicated plan
is ONE plan holding all replicas' runs, so a run still makes one numba call per codelet
batch and per copy plan, however many replicas there are.
"""
from __future__ import annotations

import numpy as np

from ..errors import EngineError, GraphError, ProgramError, TileMemoryError
from ..machine import bsp
from ..machine.cost import compute_cost, default_vertex_estimate, exchange_cost
from ..machine.exchange import CopyPlan
from ..machine.kernels import first_marked, slot_runs, slots_in_place
from ..machine.memory import CATEGORY, TileMemory
from . import program as prog
from .codelet import Batch
from .graph import DataStream, GraphState, RemoteBuffer
from .liveness import Liveness, ProgramOrder, VariableIndex, assign_offsets, lifetimes, \
    tile_blocks
from .profile import Profile
from .summary import GraphSummary
from .tensor import Tensor
from .types import round_half

def first_duplicate(ids: np.ndarray):
    """An address that occurs twice in ids, or None (linear time: a count over the span)."""
    if ids.size < 2:
        return None
    lo = int(ids.min())
    counts = np.bincount(ids - lo)
    over = np.flatnonzero(counts > 1)
    return lo + int(over[0]) if over.size else None


class Compiled:
    """The output of compilation: steps, program roots, memory layout and arena sizes."""

    def __init__(self):
        self.steps: list[bsp.Step] = []
        self.roots: list = []
        self.arena_sizes: dict[str, int] = {}
        self.memory: TileMemory | None = None
        self.vertex_stats: dict[str, dict] = {}
        self.traffic: dict[int, tuple] = {}   # step index -> (src_tile, dst_tile, bytes)
        self.replication_factor = 1
        self.replica_stride: dict[str, int] = {}   # per arena: V, replica i's variables at i*V
        self.liveness: Liveness | None = None


class Compiler:
    def __init__(self, state: GraphState, mode: str):
        self.st, self.target, self.mode = state, state.target, mode
        self.T = self.target.num_tiles
        self.r = state.replication_factor
        self.R = self.T // self.r                     # tiles of one replica
        # replicas in lock-step on different IPUs share every barrier: syncs are external
        self.lockstep_external = self.r > 1 and self.target.num_ipus > 1
        self.out = Compiled()
        self.out.replication_factor = self.r
        self.V = {k: a.size for k, a in state.arenas.items()}
        self.out.replica_stride = dict(self.V)
        self.sizes = {k: self.r * a.size for k, a in state.arenas.items()}
        # per arena: region starts and their replica strides (the variables, then each buffer
        # of the compute set being compiled), and where its next buffer goes
        self._new_scratch()
        self.tile_of = {k: a.tile_of[:a.size].copy() for k, a in state.arenas.items()}
        self.dummy = {k: np.zeros(1, a.dtype) for k, a in state.arenas.items()}
        self.dummy_ro = {}
        for k, a in self.dummy.items():
            ro = a.view()
            ro.flags.writeable = False
            self.dummy_ro[k] = ro
        self.is_const = {k: np.zeros(a.size, bool) for k, a in state.arenas.items()}
        for v in state.variables:
            if v.is_constant:
                self.is_const[v.dtype.storage.name][v.offset:v.offset + v.size] = True
        self.cs_steps: dict[int, bsp.Step] = {}
        self.buffers = np.zeros(self.T, np.int64)   # per tile: largest exchange buffer set
        self.code_pairs: set = set()
        self.vstate = np.zeros(self.T, np.int64)
        self._vertex_groups = None
        self.var_index = VariableIndex(state.variables)
        self.touches: dict[int, tuple] = {}   # step index -> (variables read, written)

    # --- helpers ----------------------------------------------------------------------------
    def _new_scratch(self) -> None:
        """Start a compute set's exchange buffers where every compute set's start: right after
        the variables. Buffers live only during their step, so on the host they share one
        scratch space, as on the tiles (self.buffers): the arena stays the size of the
        variables and the largest buffer set, small enough for the host's caches."""
        self._scratch = {k: self.r * v for k, v in self.V.items()}
        self._regions = {k: ([0], [v]) for k, v in self.V.items()}

    def _buffer(self, key: str, n: int) -> int:
        """Replica 0's address of a new n-element buffer (allocated once per replica) in the
        current compute set's scratch space."""
        start = self._scratch[key]
        self._scratch[key] += self.r * n
        self.sizes[key] = max(self.sizes[key], self._scratch[key])
        if self.r > 1:
            self._regions[key][0].append(start)
            self._regions[key][1].append(n)
        return start

    # --- replication: replica 0's plans -> every replica's ----------------------------------
    def _strides(self, key: str, addrs: np.ndarray) -> np.ndarray:
        """Per replica-0 address: how far replica 1's copy of it is (V or a buffer's size)."""
        starts, strides = self._regions[key]
        i = np.searchsorted(np.asarray(starts, np.int64), addrs, side="right") - 1
        return np.asarray(strides, np.int64)[np.maximum(i, 0)]

    def _rep_addrs(self, key: str, addrs) -> np.ndarray:
        """Replica 0's addresses -> every replica's, replica by replica."""
        addrs = np.asarray(addrs, np.int64)
        if self.r == 1:
            return addrs
        stride = self._strides(key, addrs)
        return np.concatenate([addrs + i * stride for i in range(self.r)])

    def _rep_tiles(self, tiles) -> np.ndarray:
        tiles = np.asarray(tiles, np.int64)
        if self.r == 1:
            return tiles
        return np.concatenate([tiles + i * self.R for i in range(self.r)])

    def _rep_per_tile(self, per_tile: np.ndarray) -> np.ndarray:
        """A per-tile array of replica 0 (zero elsewhere) -> the same on every replica."""
        if self.r == 1:
            return per_tile
        return np.tile(np.asarray(per_tile)[:self.R], self.r)

    def _rep_plan(self, plan: CopyPlan, key: str) -> CopyPlan:
        """Replica 0's copy plan -> ONE plan moving the same data on every replica."""
        if self.r == 1:
            return plan
        return CopyPlan.from_runs(self.target, self._rep_addrs(key, plan.src_start),
                                  self._rep_addrs(key, plan.dst_start),
                                  np.tile(plan.length, self.r), self._rep_tiles(plan.src_tile),
                                  self._rep_tiles(plan.dst_tile), plan.elem_bytes)

    def _add_step(self, step: bsp.Step) -> int:
        step.index = len(self.out.steps)
        self.out.steps.append(step)
        return step.index

    def _plan_phases(self, step: bsp.Step, plans: list) -> np.ndarray:
        """Add a sync and ONE exchange phase moving all (plan, arena key) pairs; return the
        on-tile copy cycles, which the compute phase pays."""
        if plans:
            keys = sorted({k for _, k in plans})
            # addresses of different arenas must not look alike to the multicast rule
            start = np.concatenate([p.src_start + (keys.index(k) << 40) for p, k in plans])
            cyc = exchange_cost(self.target, np.concatenate([p.src_tile for p, _ in plans]),
                                np.concatenate([p.dst_tile for p, _ in plans]),
                                np.concatenate([p.bytes for p, _ in plans]), start)
        else:
            cyc = {k: np.zeros(self.T, np.int64) for k in ("exchange", "inter_ipu_exchange",
                                                           "on_tile_copy")}
        crosses = cyc["inter_ipu_exchange"].any() or self.lockstep_external
        step.add("sync", self.target.sync_cycles("external" if crosses else "internal"))
        step.add("exchange", cyc["exchange"])
        step.add("inter_ipu_exchange", cyc["inter_ipu_exchange"])
        return cyc["on_tile_copy"]

    def _touch(self, step: bsp.Step, reads=(), writes=()) -> None:
        """Record the variables a step reads and writes, given as (arena key, element ids)
        or as arrays of variable indices."""
        of = (lambda parts: np.unique(np.concatenate(
            [p if isinstance(p, np.ndarray) else self.var_index.of(*p) for p in parts]
            + [np.zeros(0, np.int64)])))
        self.touches[step.index] = (of(reads), of(writes))

    def _traffic(self, index: int, plans: list[CopyPlan]) -> None:
        parts = [p.traffic() for p in plans]
        if parts:
            self.out.traffic[index] = tuple(np.concatenate(x) for x in zip(*parts))

    # --- validation -------------------------------------------------------------------------
    def check_mapping(self) -> None:
        for v in self.st.variables:
            tiles = self.tile_of[v.dtype.storage.name][v.offset:v.offset + v.size]
            missing = np.flatnonzero(tiles < 0)
            if missing.size:
                raise GraphError(
                    f"tensor '{v.name}' has {missing.size} of {v.size} elements not mapped to a "
                    f"tile (first: element {missing[0]}); call g.set_tile_mapping(...) or "
                    "poputil.map_tensor_linearly(g, t)")

    # --- Execute ------------------------------------------------------------------------------
    def _vertices_of(self, cs_id: int) -> np.ndarray:
        if self._vertex_groups is None:
            v_cs = np.asarray(self.st.v_cs, np.int64)
            order = np.argsort(v_cs, kind="stable")
            bounds = np.searchsorted(v_cs[order], np.arange(len(self.st.compute_sets) + 1))
            self._vertex_groups = (order, bounds)
        order, bounds = self._vertex_groups
        return order[bounds[cs_id]:bounds[cs_id + 1]]

    def execute(self, cs) -> bsp.Step:
        if cs.id in self.cs_steps:
            return self.cs_steps[cs.id]
        st = self.st
        vids = self._vertices_of(cs.id)
        # 1. one slot per connected (vertex, field, part)
        s_vid, s_field, s_part, s_ids, s_tensor = [], [], [], [], []
        for vid in vids.tolist():
            tile, conns, cls = st.v_tile[vid], st.v_conns[vid], st.v_codelet[vid]
            if tile < 0:
                raise GraphError(f"{st.describe_vertex(vid)} is not mapped to a tile; call "
                                 "g.set_tile_mapping(v, tile)")
            for fi, f in enumerate(cls.fields):
                if f.name not in conns:
                    raise GraphError(f"field '{f.name}' of {st.describe_vertex(vid)} is not "
                                     "connected")
                parts = conns[f.name] if f.kind == "vector_list" else [conns[f.name]]
                for pi, t in enumerate(parts):
                    s_vid.append(vid), s_field.append(fi), s_part.append(pi)
                    s_ids.append(t.ids.ravel()), s_tensor.append(t)
        n_slots = len(s_vid)
        s_vid = np.asarray(s_vid, np.int64)
        s_field = np.asarray(s_field, np.int64)
        s_len = np.fromiter((a.size for a in s_ids), np.int64, n_slots)
        v_tile = np.asarray(st.v_tile, np.int64)
        s_tile = v_tile[s_vid] if n_slots else np.zeros(0, np.int64)
        fields = [st.v_codelet[v].fields[f] for v, f in zip(s_vid.tolist(), s_field.tolist())]
        s_key = [f.dtype.storage.name for f in fields]
        s_type = np.asarray([f.dtype.name for f in fields])
        s_offset = np.zeros(n_slots, np.int64)

        step = bsp.Step("execute", cs.name, self.T)
        self._new_scratch()
        pre, post, half_out, touched = [], [], {}, []
        cs_buffers = np.zeros(self.T, np.int64)
        for type_name in sorted(set(s_type.tolist())):
            sel = np.flatnonzero(s_type == type_name)
            touched.append(self._lower_slots(sel, s_ids, s_len, s_tile, fields, s_tensor, s_vid,
                                             s_offset, pre, post, half_out, cs_buffers))
        cs_buffers = self._rep_per_tile(cs_buffers)
        self.buffers = np.maximum(self.buffers, cs_buffers)
        step.temporary_bytes = cs_buffers
        half_out = {k: self._rep_addrs(k, idx) for k, idx in half_out.items()}

        # 2. batches per codelet
        batches, estimates = [], np.zeros(len(vids), np.int64)
        pos_of = {int(v): i for i, v in enumerate(vids.tolist())}
        by_codelet: dict = {}
        for vid in vids.tolist():
            by_codelet.setdefault(st.v_codelet[vid], []).append(vid)
        slot_lists = self._slots_by_vertex(s_vid)
        for cls, members in by_codelet.items():
            batches.append(self._batch(cls, np.asarray(members, np.int64), cs.name, s_field,
                                       s_offset, s_len, s_key, slot_lists))
            for vid in members:
                estimates[pos_of[vid]] = self._estimate(vid, cls, slot_lists[vid], s_field,
                                                        s_len)
            self.code_pairs.update((t, cls.__name__) for t in set(v_tile[members].tolist()))
            # every replica runs the vertices: counts and cycles cover all replicas
            stats = self.out.vertex_stats.setdefault(cls.__name__, {"count": 0, "cycles": 0})
            cycles = self.r * int(sum(estimates[pos_of[v]] for v in members))
            stats["count"] += self.r * len(members)
            stats["cycles"] += cycles
            step.vertex_cycles[cls.__name__] = (self.r * len(members), cycles)
        self._vertex_state(vids, s_vid, s_field)

        # 3. cost
        on_tile_pre = self._plan_phases(step, pre)
        tiles = v_tile[vids]
        multi = np.fromiter((st.v_codelet[v].multi for v in vids.tolist()), bool, len(vids))
        cycles, excl = compute_cost(self.target, self._rep_tiles(tiles),
                                    np.tile(estimates, self.r), np.tile(multi, self.r))
        step.add("compute", cycles + on_tile_pre)
        excluding_idle = excl + on_tile_pre
        if post:
            on_tile_post = self._plan_phases(step, post)
            step.add("compute", on_tile_post)
            excluding_idle = excluding_idle + on_tile_post
        step.compute_excluding_idle = excluding_idle

        def action(state, pre=pre, post=post, batches=batches, half_out=half_out):
            for plan, key in pre:
                plan.run(state.arenas[key], state.arenas[key])
            for b in batches:
                b.run(state.arenas, state.arenas_ro)
            for key, idx in half_out.items():
                a = state.arenas[key]
                a[idx] = round_half(a[idx])
            for plan, key in post:
                plan.run(state.arenas[key], state.arenas[key])

        # plans are stored with their arena key; cost helpers want plain plans
        step.action = action
        for b in batches:
            b.compile(self.dummy, self.dummy_ro)
        self._add_step(step)
        self._traffic(step.index, [p for p, _ in pre + post])
        self._touch(step, [r for r, _ in touched], [w for _, w in touched])
        self.cs_steps[cs.id] = step
        return step

    def _lower_slots(self, sel, s_ids, s_len, s_tile, fields, s_tensor, s_vid, s_offset,
                     pre, post, half_out, cs_buffers):
        """Place each slot's data (all of one type): in place, or in a buffer on its tile.
        Returns the variables the slots read and those they write, for liveness."""
        dtype = fields[sel[0]].dtype
        key, elem_bytes = dtype.storage.name, dtype.size
        lens = s_len[sel]
        cat = np.concatenate([s_ids[i] for i in sel]) if sel.size else np.zeros(0, np.int64)
        starts = np.cumsum(lens) - lens
        reads = np.array([fields[i].reads for i in sel], bool)
        writes = np.array([fields[i].writes for i in sel], bool)
        self._check_hazards(key, sel, cat, starts, lens, reads, writes, s_tensor, s_vid)
        direct = slots_in_place(cat, starts, lens, s_tile[sel], self.tile_of[key])
        used = direct & (lens > 0)
        s_offset[sel[used]] = cat[starts[used]]
        need = np.flatnonzero(~direct)
        if need.size:
            self._buffer_slots(key, elem_bytes, sel, need, s_ids, cat, starts, lens, s_tile,
                               reads, writes, s_offset, pre, post, cs_buffers)
        # HALF outputs are rounded where the codelet wrote them
        half = np.array([dtype.rounds_to_half and fields[i].writes for i in sel], bool)
        if half.any():
            idx = [np.arange(s_offset[i], s_offset[i] + s_len[i]) for i in sel[half]]
            half_out[key] = np.concatenate(idx + [half_out.get(key, np.zeros(0, np.int64))])
        return self.var_index.of_segments(key, cat, lens, [reads, writes])

    def _buffer_slots(self, key, elem_bytes, sel, need, s_ids, cat, starts, lens, s_tile,
                      reads, writes, s_offset, pre, post, cs_buffers):
        """Give slots that are remote or scattered a contiguous buffer on the vertex's tile,
        filled by an exchange before the compute phase and sent back after it for outputs.

        Vertices of one tile that read the same elements share one buffer: the data crosses
        the exchange once per tile, not once per vertex."""
        first_reader, aliases, own = {}, [], []
        for i in need.tolist():
            if reads[i] and not writes[i]:
                k = (int(s_tile[sel[i]]), s_ids[sel[i]].tobytes())
                if k in first_reader:
                    aliases.append((i, first_reader[k]))
                    continue
                first_reader[k] = i
            own.append(i)
        need = np.asarray(own, np.int64)
        base = self._buffer(key, int(lens[need].sum()))
        buf_start = base + np.cumsum(lens[need]) - lens[need]
        s_offset[sel[need]] = buf_start
        tiles = s_tile[sel]
        cs_buffers += np.bincount(tiles[need], weights=lens[need] * elem_bytes,
                                  minlength=self.T).astype(np.int64)
        for to_buffer, mask, plans in ((True, reads[need], pre), (False, writes[need], post)):
            pick = need[mask]
            if pick.size:
                runs = slot_runs(cat, starts[pick], lens[pick], buf_start[mask], tiles[pick],
                                 self.tile_of[key], to_buffer)
                plans.append((self._rep_plan(CopyPlan.from_runs(self.target, *runs, elem_bytes),
                                             key), key))
        for i, j in aliases:
            s_offset[sel[i]] = s_offset[sel[j]]

    def _check_hazards(self, key, sel, cat, starts, lens, reads, writes, s_tensor, s_vid):
        """Reject overlapping writes, reads of written data, and writes to constants."""
        w_slots = np.flatnonzero(writes)
        if w_slots.size == 0:
            return
        written = np.concatenate([cat[starts[i]:starts[i] + lens[i]] for i in w_slots])
        if written.size == 0:
            return
        w_seg = np.repeat(w_slots, lens[w_slots])
        dup = first_duplicate(written)
        if dup is not None:
            ia, ib = sel[w_seg[np.flatnonzero(written == dup)[:2]]]
            raise GraphError(
                f"write hazard in compute set: {self.st.describe_vertex(int(s_vid[ia]))} "
                f"writes tensor '{s_tensor[ia].name}' and "
                f"{self.st.describe_vertex(int(s_vid[ib]))} writes tensor "
                f"'{s_tensor[ib].name}', and they overlap; vertices of one compute set "
                "must write disjoint elements")
        const = self.is_const[key][written]
        if const.any():
            i = sel[w_seg[np.argmax(const)]]
            raise GraphError(f"{self.st.describe_vertex(int(s_vid[i]))} writes constant "
                             f"tensor '{s_tensor[i].name}'; constants are read-only")
        lo = int(written.min())
        mark = np.zeros(int(written.max()) - lo + 1, np.bool_)
        mark[written - lo] = True
        slot, addr = first_marked(cat, starts, lens, np.flatnonzero(reads & ~writes), mark, lo)
        if slot >= 0:
            i, w = sel[slot], sel[w_seg[np.argmax(written == addr)]]
            raise GraphError(
                f"read/write hazard: {self.st.describe_vertex(int(s_vid[i]))} reads "
                f"'{s_tensor[i].name}' as an Input while {self.st.describe_vertex(int(s_vid[w]))} "
                f"writes it ('{s_tensor[w].name}') in the same compute set; an Input is never "
                "written — use InOut in one vertex, or two compute sets")

    @staticmethod
    def _slots_by_vertex(s_vid: np.ndarray) -> dict[int, np.ndarray]:
        order = np.argsort(s_vid, kind="stable")
        vids, first = np.unique(s_vid[order], return_index=True)
        bounds = np.r_[first, order.size]
        return {int(v): order[bounds[i]:bounds[i + 1]] for i, v in enumerate(vids)}

    def _batch(self, cls, members, cs_name, s_field, s_offset, s_len, s_key, slot_lists):
        params = self.st.codelet_params[cls]
        by_attr = {f.attr: (i, f) for i, f in enumerate(cls.fields)}
        order = [by_attr[p] for p in params]
        kinds = tuple(f.kind for _, f in order)
        flat_cols = [fi for fi, f in order if f.kind != "vector_list"]
        vl_cols = [fi for fi, f in order if f.kind == "vector_list"]
        V = members.size
        off = np.zeros((V, len(flat_cols)), np.int64)
        ln = np.zeros((V, len(flat_cols)), np.int64)
        vl_first = np.zeros((V, len(vl_cols)), np.int64)
        vl_count = np.zeros((V, len(vl_cols)), np.int64)
        vl_off, vl_len, vl_key = [], [], []
        col_of = {fi: c for c, fi in enumerate(flat_cols)}
        vcol_of = {fi: c for c, fi in enumerate(vl_cols)}
        for row, vid in enumerate(members.tolist()):
            for s in slot_lists.get(vid, ()):
                fi = int(s_field[s])
                if fi in col_of:
                    off[row, col_of[fi]], ln[row, col_of[fi]] = s_offset[s], s_len[s]
                else:
                    c = vcol_of[fi]
                    if vl_count[row, c] == 0:
                        vl_first[row, c] = len(vl_off)
                    vl_count[row, c] += 1
                    vl_off.append(s_offset[s]), vl_len.append(s_len[s])
                    vl_key.append(cls.fields[fi].dtype.storage.name)
        keys = [f.dtype.storage.name for _, f in order]
        readonly = [f.direction == "input" for _, f in order]
        vl_off, vl_len = np.asarray(vl_off, np.int64), np.asarray(vl_len, np.int64)
        tiles = np.asarray(self.st.v_tile, np.int64)[members]
        if self.r > 1:   # the same vertices on every replica, in one plan
            r, nvl = self.r, vl_off.size
            stride = np.zeros_like(off)
            for c, fi in enumerate(flat_cols):
                stride[:, c] = self._strides(cls.fields[fi].dtype.storage.name, off[:, c])
            vl_stride = np.zeros_like(vl_off)
            for key in set(vl_key):
                sel = np.asarray([k == key for k in vl_key], bool)
                vl_stride[sel] = self._strides(key, vl_off[sel])
            off = np.concatenate([off + i * stride for i in range(r)])
            ln = np.tile(ln, (r, 1))
            vl_first = np.concatenate([vl_first + i * nvl for i in range(r)])
            vl_count = np.tile(vl_count, (r, 1))
            vl_off = np.concatenate([vl_off + i * vl_stride for i in range(r)])
            vl_len = np.tile(vl_len, r)
            members, tiles = np.tile(members, r), self._rep_tiles(tiles)
        return Batch(cls, params, self.mode, self.target.num_worker_contexts, members,
                     tiles, cs_name, keys, kinds, readonly, off, ln, vl_first, vl_count,
                     vl_off, vl_len, replicas=self.r)

    def _estimate(self, vid, cls, slots, s_field, s_len) -> int:
        fixed = self.st.v_estimate[vid]
        if fixed >= 0:
            return fixed
        if hasattr(cls, "cycle_estimate"):
            sizes = {}
            for s in slots:
                f = cls.fields[int(s_field[s])]
                if f.kind == "vector_list":
                    sizes[f.attr] = sizes.get(f.attr, ()) + (int(s_len[s]),)
                else:
                    sizes[f.attr] = int(s_len[s])
            try:
                return int(cls.cycle_estimate(**sizes))
            except Exception as e:
                raise GraphError(f"cycle_estimate of codelet {cls.__name__} failed for "
                                 f"{self.st.describe_vertex(vid)} with sizes {sizes}: {e}") from None
        return int(default_vertex_estimate(self.target, int(s_len[slots].sum())))

    def _vertex_state(self, vids, s_vid, s_field) -> None:
        c = self.target.cost
        for vid in vids.tolist():
            cls, conns = self.st.v_codelet[vid], self.st.v_conns[vid]
            n = c.vertex_header_bytes
            for f in cls.fields:
                if f.kind == "scalar":
                    n += c.scalar_field_bytes
                elif f.kind == "vector":
                    n += c.vector_field_bytes
                else:
                    n += c.vector_field_bytes + c.vector_list_entry_bytes * len(conns[f.name])
            self.vstate[self.st.v_tile[vid]] += n

    # --- copies, streams, control -----------------------------------------------------------
    def copy(self, p: prog.Copy) -> bsp.Step:
        src, dst = p.src, p.dst
        if isinstance(src, RemoteBuffer) or isinstance(dst, RemoteBuffer):
            return self.remote_copy(p)
        if isinstance(src, DataStream) or isinstance(dst, DataStream):
            return self.stream_copy(p)
        key = src.dtype.storage.name
        s, d = src.ids.ravel(), dst.ids.ravel()
        self._check_destination(d, key, dst, p.name)
        plan = self._rep_plan(CopyPlan(self.target, s, d, self.tile_of[key][s],
                                       self.tile_of[key][d], src.dtype.size), key)
        step = bsp.Step("copy", p.name, self.T)
        on_tile = self._plan_phases(step, [(plan, key)])
        step.add("compute", on_tile)
        step.compute_excluding_idle = on_tile
        step.action = lambda state: plan.run(state.arenas[key], state.arenas[key])
        self._add_step(step)
        self._traffic(step.index, [plan])
        self._touch(step, [(key, s)], [(key, d)])
        return step

    def _check_destination(self, d, key, dst, what) -> None:
        if first_duplicate(d) is not None:
            raise ProgramError(f"{what}: destination '{dst.name}' names some elements twice "
                               "(a broadcast view cannot be written)")
        if self.is_const[key][d].any():
            raise ProgramError(f"{what}: destination '{dst.name}' is a constant")

    def stream_copy(self, p: prog.Copy) -> bsp.Step:
        to_device = isinstance(p.src, DataStream)
        stream, tensor = (p.src, p.dst) if to_device else (p.dst, p.src)
        key = tensor.dtype.storage.name
        ids = np.ascontiguousarray(tensor.ids.ravel())
        if to_device:
            self._check_destination(ids, key, tensor, p.name)
        tiles = self._rep_tiles(self.tile_of[key][ids])
        touch = [(key, ids)]
        ids = self._rep_addrs(key, ids)   # replica i's block is the i-th of the host's r blocks
        step = bsp.Step("stream_copy", p.name, self.T)
        step.add("sync", self.target.sync_cycles("external"))
        host = np.zeros(self.T, np.int64)
        # [MODEL] every replica's block crosses the system's one host link
        host[np.unique(tiles)] = self.target.host_cycles(ids.size * tensor.dtype.size)
        step.add("host_exchange", host)
        n, name, storage = ids.size, stream.name, tensor.dtype.storage

        if to_device:
            def action(state):
                state.arenas[key][ids] = state.stream_read(name, n).astype(storage)
        else:
            def action(state):
                state.stream_write(name, state.arenas[key][ids])
        step.action = action
        self._add_step(step)
        if to_device:
            self._touch(step, writes=touch)
        else:
            self._touch(step, reads=touch)
        return step

    def print_tensor(self, p: prog.PrintTensor) -> bsp.Step:
        t = p.tensor
        key, ids = t.dtype.storage.name, t.ids
        step = bsp.Step("print", p.name, self.T)
        host = np.zeros(self.T, np.int64)
        host[np.unique(self._rep_tiles(self.tile_of[key][ids.ravel()]))] = \
            self.target.host_cycles(self.r * t.num_elements() * t.dtype.size)
        step.add("sync", self.target.sync_cycles("external"))
        step.add("host_exchange", host)
        if self.r == 1:
            step.action = lambda state: state.print(p.title,
                                                    state.arenas[key][ids].astype(t.dtype.host))
        else:   # one line (or block) per replica
            rep_ids = self._rep_addrs(key, ids.ravel()).reshape((self.r,) + ids.shape)

            def action(state):
                values = state.arenas[key][rep_ids].astype(t.dtype.host)
                for i, v in enumerate(values):
                    state.print(f"{p.title} [replica {i}]", v)
            step.action = action
        self._add_step(step)
        self._touch(step, [(key, ids)])
        return step

    def sync(self, p: prog.Sync) -> bsp.Step:
        step = bsp.Step("sync", p.name, self.T)
        step.add("sync", self.target.sync_cycles(p.sync_type.value))
        self._add_step(step)
        return step

    def predicate(self, pred: Tensor, negate: bool, name: str) -> bsp.Predicate:
        key, addr = pred.dtype.storage.name, int(pred.ids.ravel()[0])
        step = bsp.Step("control", name, self.T)
        step.add("sync", self.target.sync_cycles("external" if self.target.num_ipus > 1
                                                 else "internal"))
        self._add_step(step)
        self._touch(step, [(key, [addr])])
        if self.r > 1:   # replicas run in lock-step: they must take the same branch
            addrs = self._rep_addrs(key, [addr])

            def read(state):
                values = state.arenas[key][addrs]
                if (values != values[0]).any():
                    raise EngineError(
                        f"{name}: the replicas disagree on predicate '{pred.name}' "
                        f"({values.tolist()}); replicas run in lock-step, so control flow "
                        "must be the same on all of them (e.g. all-reduce the predicate)")
                return bool(values[0]) != negate
            return bsp.Predicate(step, read)
        if negate:
            return bsp.Predicate(step, lambda state: not state.arenas[key][addr])
        return bsp.Predicate(step, lambda state: state.arenas[key][addr])

    def cross_replica_copy(self, p: prog.CrossReplicaCopy) -> bsp.Step:
        """Copies between replicas (built by gcl): ONE exchange, over IPU-Links between
        replicas on different IPUs. Addresses and tiles are given per replica, explicitly."""
        src_all, dst_all, st_all, dt_all, reads, writes = [], [], [], [], [], []
        key, elem_bytes = None, 1
        for a, src, b, dst in p.moves:
            for x in (a, b):
                if not 0 <= x < self.r:
                    raise ProgramError(f"{p.name}: replica {x} does not exist (the graph has "
                                       f"{self.r} replica(s))")
            key, elem_bytes = src.dtype.storage.name, src.dtype.size
            s, d = src.ids.ravel(), dst.ids.ravel()
            if self.is_const[key][d].any():
                raise ProgramError(f"{p.name}: destination '{dst.name}' is a constant")
            src_all.append(s + a * self.V[key]), dst_all.append(d + b * self.V[key])
            reads.append((key, s)), writes.append((key, d))
            st_all.append(self.tile_of[key][s] + a * self.R)
            dt_all.append(self.tile_of[key][d] + b * self.R)
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
        d_all = cat(dst_all)
        if first_duplicate(d_all) is not None:
            raise ProgramError(f"{p.name}: some elements are written twice")
        plan = CopyPlan(self.target, cat(src_all), d_all, cat(st_all), cat(dt_all), elem_bytes)
        step = bsp.Step("cross_replica_copy", p.name, self.T)
        on_tile = self._plan_phases(step, [(plan, key)] if key else [])
        step.add("compute", on_tile)
        step.compute_excluding_idle = on_tile
        if key is not None:
            step.action = lambda state: plan.run(state.arenas[key], state.arenas[key])
        self._add_step(step)
        self._traffic(step.index, [plan])
        self._touch(step, reads, writes)
        return step

    def remote_copy(self, p: prog.Copy) -> bsp.Step:
        """Tensor <-> remote buffer rows, every replica its own buffer; costed on the
        streaming-memory bandwidth of each machine (shared by the machine's IPUs)."""
        to_buffer = isinstance(p.dst, RemoteBuffer)
        buf, t = (p.dst, p.src) if to_buffer else (p.src, p.dst)
        key = t.dtype.storage.name
        ids = t.ids.ravel()
        if not to_buffer:
            self._check_destination(ids, key, t, p.name)
        tiles = self._rep_tiles(self.tile_of[key][ids])
        reads, writes = ([(key, ids)], []) if to_buffer else ([], [(key, ids)])
        ids = self._rep_addrs(key, ids)
        r, n, repeats = self.r, buf.num_elements, buf.repeats
        rows_per_replica = 1 if p.offset is None else p.offset.num_elements()
        replica_of_row = np.repeat(np.arange(r, dtype=np.int64), rows_per_replica)
        cols = np.arange(n, dtype=np.int64)
        if p.offset is not None:
            okey = p.offset.dtype.storage.name
            reads.append((okey, p.offset.ids.ravel()))
            off_ids = self._rep_addrs(okey, p.offset.ids.ravel())

        step = bsp.Step("remote_copy", p.name, self.T)
        step.add("sync", self.target.sync_cycles("external"))
        machine = self.target.machine_of(tiles)
        per_machine = np.bincount(machine, minlength=self.target.system.num_machines)
        cycles = np.array([self.target.streaming_cycles(int(b) * t.dtype.size)
                           for b in per_machine], np.int64)
        host = np.zeros(self.T, np.int64)
        host[tiles] = cycles[machine]
        step.add("host_exchange", host)
        name, storage = buf.name, t.dtype.storage

        def action(state):
            if p.offset is None:
                rows = np.zeros(replica_of_row.size, np.int64)
            else:
                rows = state.arenas[okey][off_ids].astype(np.int64)
                bad = np.flatnonzero((rows < 0) | (rows >= repeats))
                if bad.size:
                    raise EngineError(
                        f"{p.name}: offset {rows[bad[0]]} (replica {replica_of_row[bad[0]]}) "
                        f"is outside remote buffer '{name}', which has rows 0 to {repeats - 1}")
            flat = ((replica_of_row * repeats + rows)[:, None] * n + cols).ravel()
            store = state.remote[name]
            if to_buffer:
                store[flat] = state.arenas[key][ids]
            else:
                state.arenas[key][ids] = store[flat].astype(storage)
        step.action = action
        self._add_step(step)
        self._touch(step, reads, writes)
        return step

    # --- program tree -------------------------------------------------------------------------
    def lower(self, p) -> object:
        if isinstance(p, prog.Sequence):
            return bsp.Block(self.lower(c) for c in p.programs)
        if isinstance(p, prog.Execute):
            return self.execute(p.cs)
        if isinstance(p, prog.Copy):
            return self.copy(p)
        if isinstance(p, prog.CrossReplicaCopy):
            return self.cross_replica_copy(p)
        if isinstance(p, prog.PrintTensor):
            return self.print_tensor(p)
        if isinstance(p, prog.Sync):
            return self.sync(p)
        if isinstance(p, prog.Repeat):
            return bsp.Loop(p.count, self.lower(p.body))
        if isinstance(p, prog.If):
            return bsp.Branch(self.predicate(p.pred, False, p.name or f"If {p.pred.name}"),
                              self.lower(p.then), self.lower(p.else_))
        if isinstance(p, prog.RepeatWhileTrue):
            name = p.name or f"While {p.pred.name}"
            return bsp.WhileLoop(self.lower(p.cond), self.predicate(p.pred, p.negate, name),
                                 self.lower(p.body))
        raise ProgramError(f"not a program: {p!r}")

    def _check_program_graph(self, p) -> None:
        for x in _parts_of(p):
            if getattr(x, "graph", getattr(x, "_graph", None)) is not self.st:
                raise ProgramError(f"program uses {type(x).__name__} '{x.name}' of another graph")

    # --- memory -------------------------------------------------------------------------------
    def liveness(self, var_tiles: list, var_bytes: list) -> dict[int, int]:
        """Find the variables that are not always live (liveness.py), their intervals in the
        program order and their offsets; keep what the memory views need as Compiled.liveness.
        var_tiles/var_bytes: per variable, the tiles holding it and its bytes there.
        Returns {variable: offset} for the variables that are not always live."""
        st, align = self.st, self.target.cost.alignment
        order = ProgramOrder(self.out.roots)
        touched, read_first, start, end = lifetimes(order, self.touches, len(st.variables))
        pinned = np.fromiter((v.is_constant for v in st.variables), bool, len(st.variables))
        for _, t in st.handles.values():
            pinned[self.var_index.of(t.dtype.storage.name, t.ids)] = True
        temp = np.flatnonzero(touched & ~read_first & ~pinned)
        tiles = [var_tiles[v] for v in temp.tolist()]
        nbytes = [-(-var_bytes[v] // align) * align for v in temp.tolist()]
        offsets = assign_offsets(start[temp], end[temp],
                                 np.array([int(b.max(initial=0)) for b in nbytes], np.int64),
                                 tile_blocks(tiles, self.T))
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
        owners = cat([np.full(t.size, v) for t, v in zip(tiles, temp.tolist())])
        self.out.liveness = Liveness(order, temp, start[temp], end[temp], cat(tiles),
                                     cat(nbytes), owners, self.T)
        return dict(zip(temp.tolist(), offsets.tolist()))

    def layout_memory(self) -> TileMemory:
        """Every allocation of every tile: variables (those that are not always live share
        addresses, see liveness()), constants, vertex state, exchange buffers and code."""
        st, c = self.st, self.target.cost
        var_tiles, var_bytes = [], []
        for v in st.variables:
            t = self.tile_of[v.dtype.storage.name][v.offset:v.offset + v.size]
            per_tile = self._rep_per_tile(np.bincount(t, minlength=self.T))
            nz = np.flatnonzero(per_tile)
            var_tiles.append(nz), var_bytes.append(per_tile[nz] * v.dtype.size)
        offset_of = self.liveness(var_tiles, var_bytes)
        tiles, sizes, cats, owners, names = [], [], [], [], []
        shared = ([], [], [], [])   # tiles, bytes, owners, offsets
        for vi, v in enumerate(st.variables):
            nz, nbytes = var_tiles[vi], var_bytes[vi]
            names.append(v.name)
            if vi in offset_of:
                for out, x in zip(shared, (nz, nbytes, np.full(nz.size, vi),
                                           np.full(nz.size, offset_of[vi]))):
                    out.append(x)
            else:
                tiles.append(nz), sizes.append(nbytes), owners.append(np.full(nz.size, vi))
                cats.append(np.full(nz.size, CATEGORY["constants" if v.is_constant
                                                      else "variables"]))
        extra = [("vertex state", "vertex_state", self._rep_per_tile(self.vstate)),
                 ("exchange buffers", "exchange_buffers", self.buffers)]
        code = np.zeros(self.T, np.int64)
        for t, _ in self.code_pairs:
            code[t] += c.codelet_code_bytes
        code = self._rep_per_tile(code)
        control = np.zeros(self.T, np.int64)
        for step in self.out.steps:
            active = np.zeros(self.T, bool)
            for kind, cyc in step.phases:
                if kind != "sync":
                    active |= cyc > 0
            control[active] += c.control_code_bytes_per_step
        extra += [("codelet code", "code", code), ("control code", "code", control)]
        for name, cat, per_tile in extra:
            nz = np.flatnonzero(per_tile)
            tiles.append(nz), sizes.append(per_tile[nz])
            cats.append(np.full(nz.size, CATEGORY[cat])), owners.append(np.full(nz.size, len(names)))
            names.append(name)
        cat_ = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
        return TileMemory(self.T, self.target.bytes_per_tile, c.alignment, cat_(tiles),
                          cat_(sizes), cat_(cats), cat_(owners), names,
                          shared=tuple(cat_(x) for x in shared))


def _parts_of(p):
    """Every tensor, stream and compute set a program tree uses."""
    if isinstance(p, prog.Sequence):
        for c in p.programs:
            yield from _parts_of(c)
    elif isinstance(p, prog.Copy):
        yield from (p.src, p.dst)
        if p.offset is not None:
            yield p.offset
    elif isinstance(p, prog.CrossReplicaCopy):
        for _, src, _, dst in p.moves:
            yield from (src, dst)
    elif isinstance(p, prog.Execute):
        yield p.cs
    elif isinstance(p, prog.PrintTensor):
        yield p.tensor
    elif isinstance(p, (prog.If, prog.RepeatWhileTrue)):
        yield p.pred
        for c in (getattr(p, "then", None), getattr(p, "else_", None), getattr(p, "cond", None),
                  getattr(p, "body", None)):
            if c is not None:
                yield from _parts_of(c)
    elif isinstance(p, prog.Repeat):
        yield from _parts_of(p.body)


def compile_graph(state: GraphState, programs: list, mode: str) -> Compiled:
    """Compile programs over a graph; raises before touching anything the caller owns."""
    c = Compiler(state, mode)
    c.check_mapping()
    for p in programs:
        c._check_program_graph(p)
    c.out.roots = [c.lower(p) for p in programs]
    c.out.memory = c.layout_memory()
    c.out.arena_sizes = dict(c.sizes)
    c.out.graph = GraphSummary(state, c.tile_of)
    try:
        c.out.memory.check()
    except TileMemoryError as e:
        e.profile = Profile(state.target, c.out, [])   # memory only: see the overflow
        raise
    return c.out
