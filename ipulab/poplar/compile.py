"""Compile a graph and its programs into steps: all Python-level work happens here, once.

Lowering views to element addresses, grouping vertices into batches per codelet, deciding which
field data must cross tiles (and allocating exchange buffers for it), checking hazards,
building copy plans, precomputing cycles, and laying out tile memory. Every step also records
which variables it reads and writes, for the liveness analysis (liveness.py) that lets variables
alive at different times share tile memory.

The parts: compute sets (lower_compute.py), copies, streams and remote buffers
(lower_copies.py), replica addressing (replicas.py), memory layout (layout.py). The Compiler
holds what they share; `lower` dispatches on the program's type, once, through _LOWER.
"""
from __future__ import annotations

import numpy as np

from ..errors import EngineError, GraphError, ProgramError, TileMemoryError
from ..machine import bsp
from ..machine.cost import exchange_cost
from ..machine.memory import TileMemory
from . import lower_copies
from . import program as prog
from .layout import layout_memory
from .liveness import Liveness, VariableIndex
from .lower_compute import ComputeSetLowering
from .profile import Profile
from .replicas import Replicas
from .state import GraphState
from .summary import GraphSummary
from .tensor import Tensor


class Compiled:
    """The output of compilation: steps, program roots, memory layout and arena sizes."""

    def __init__(self):
        self.steps: list[bsp.Step] = []
        self.roots: list = []
        self.arena_sizes: dict[str, int] = {}
        self.memory: TileMemory | None = None
        self.vertex_stats: dict[str, dict] = {}
        self.traffic: dict[int, list] = {}    # step index -> [Traffic of each copy plan]
        self.streaming: dict[int, int] = {}   # remote-copy step index -> bytes (all replicas)
        self.replication_factor = 1
        self.replica_stride: dict[str, int] = {}   # per arena: V, replica i's variables at i*V
        self.liveness: Liveness | None = None


class Compiler:
    """What the lowering of one graph's programs shares: the graph, its tile mapping, the
    replicas' address spaces, per-tile totals (exchange buffers, vertex state, code) and the
    compiled steps."""

    def __init__(self, state: GraphState, mode: str):
        self.st, self.target, self.mode = state, state.target, mode
        self.T = self.target.num_tiles
        self.rep = Replicas(state)
        # replicas in lock-step on different IPUs share every barrier: syncs are external
        self.lockstep_external = self.rep.r > 1 and self.target.num_ipus > 1
        self.out = Compiled()
        self.out.replication_factor = self.rep.r
        self.out.replica_stride = dict(self.rep.V)
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
        self.code_tiles: dict[str, np.ndarray] = {}   # codelet -> the tiles it runs on
        self.vstate = np.zeros(self.T, np.int64)
        self._by_cs = None
        self.var_index = VariableIndex(state.variables)
        self.touches: dict[int, tuple] = {}   # step index -> (variables read, written)

    # --- what every lowering uses -----------------------------------------------------------
    def add_step(self, step: bsp.Step) -> int:
        step.index = len(self.out.steps)
        self.out.steps.append(step)
        return step.index

    def plan_phases(self, step: bsp.Step, plans: list) -> np.ndarray:
        """Add a sync and ONE exchange phase moving all (plan, arena key) pairs; return the
        on-tile copy cycles, which the compute phase pays."""
        if plans:
            keys = sorted({k for _, k in plans})
            # addresses of different arenas must not look alike to the multicast rule
            start = np.concatenate([p.src_start + (keys.index(k) << 40) for p, k in plans])
            cyc = exchange_cost(self.target, np.concatenate([p.src_tile for p, _ in plans]),
                                np.concatenate([p.dst_tile for p, _ in plans]),
                                np.concatenate([p.bytes for p, _ in plans]), start)
            if plans[0][0].replicas > 1:    # replica 0's runs: every replica costs the same
                cyc = {k: self.rep.per_tile(v) for k, v in cyc.items()}
        else:
            cyc = {k: np.zeros(self.T, np.int64) for k in ("exchange", "inter_ipu_exchange",
                                                           "on_tile_copy")}
        crosses = cyc["inter_ipu_exchange"].any() or self.lockstep_external
        step.add("sync", self.target.sync_cycles("external" if crosses else "internal"))
        step.add("exchange", cyc["exchange"])
        step.add("inter_ipu_exchange", cyc["inter_ipu_exchange"])
        return cyc["on_tile_copy"]

    def touch(self, step: bsp.Step, reads=(), writes=()) -> None:
        """Record the variables a step reads and writes, given as (arena key, element ids)
        or as arrays of variable indices."""
        of = (lambda parts: np.unique(np.concatenate(
            [p if isinstance(p, np.ndarray) else self.var_index.of(*p) for p in parts]
            + [np.zeros(0, np.int64)])))
        self.touches[step.index] = (of(reads), of(writes))

    def record_traffic(self, index: int, plans: list) -> None:
        if plans:
            self.out.traffic[index] = [p.traffic() for p in plans]

    def groups_of(self, cs_id: int) -> list:
        """The vertex groups of a compute set, in vertex id order."""
        if self._by_cs is None:
            self._by_cs = self.st.vertices.by_compute_set(len(self.st.compute_sets))
        return self._by_cs[cs_id]

    # --- checks --------------------------------------------------------------------------------
    def check_mapping(self) -> None:
        for v in self.st.variables:
            tiles = self.tile_of[v.dtype.storage.name][v.offset:v.offset + v.size]
            missing = np.flatnonzero(tiles < 0)
            if missing.size:
                raise GraphError(
                    f"tensor '{v.name}' has {missing.size} of {v.size} elements not mapped to a "
                    f"tile (first: element {missing[0]}); call g.set_tile_mapping(...) or "
                    "poputil.map_tensor_linearly(g, t)")

    def check_program_graph(self, p) -> None:
        """Every tensor, stream and compute set the program tree names is of this graph."""
        for x in p.parts():
            graph = x._graph if isinstance(x, Tensor) else x.graph
            if graph is not self.st:
                self.target.check_partition(graph.target, f"use {type(x).__name__} '{x.name}' of")
                raise ProgramError(f"program uses {type(x).__name__} '{x.name}' of another graph")
        for child in p.children():
            self.check_program_graph(child)

    # --- the program tree -----------------------------------------------------------------------
    def lower(self, p) -> object:
        for cls in type(p).__mro__:
            if cls in _LOWER:
                return _LOWER[cls](self, p)
        raise ProgramError(f"not a program: {p!r}")

    def execute(self, p: prog.Execute) -> bsp.Step:
        """A compute set's step: lowered once, however many times it is executed."""
        if p.cs.id not in self.cs_steps:
            self.cs_steps[p.cs.id] = ComputeSetLowering(self, p.cs,
                                                        self.groups_of(p.cs.id)).lower()
        return self.cs_steps[p.cs.id]

    def sync(self, p: prog.Sync) -> bsp.Step:
        step = bsp.Step("sync", p.name, self.T)
        step.add("sync", self.target.sync_cycles(p.sync_type.value))
        self.add_step(step)
        return step

    def predicate(self, pred: Tensor, negate: bool, name: str) -> bsp.Predicate:
        """The step that reads a one-element predicate, and how to read it at run time."""
        key, addr = pred.dtype.storage.name, int(pred.ids.ravel()[0])
        step = bsp.Step("control", name, self.T)
        step.add("sync", self.target.sync_cycles("external" if self.target.num_ipus > 1
                                                 else "internal"))
        self.add_step(step)
        self.touch(step, [(key, [addr])])
        addrs = self.rep.addrs(key, [addr])      # every replica's copy: they must agree
        return bsp.Predicate(step, PredicateRead(key, addrs, negate, name, pred.name))

    def branch(self, p: prog.If) -> bsp.Branch:
        return bsp.Branch(self.predicate(p.pred, False, p.name or f"If {p.pred.name}"),
                          self.lower(p.then), self.lower(p.else_))

    def while_loop(self, p: prog.RepeatWhileTrue) -> bsp.WhileLoop:
        name = p.name or f"While {p.pred.name}"
        return bsp.WhileLoop(self.lower(p.cond), self.predicate(p.pred, p.negate, name),
                             self.lower(p.body))


class PredicateRead:
    """Read a one-element predicate at run time (every replica's copy, which must agree:
    replicas run in lock-step)."""

    def __init__(self, key: str, addrs, negate: bool, name: str, pred: str):
        self.key, self.addrs, self.negate, self.name, self.pred = key, addrs, negate, name, pred

    def __call__(self, state) -> bool:
        values = state.arenas[self.key][self.addrs]
        if (values != values[0]).any():
            raise EngineError(
                f"{self.name}: the replicas disagree on predicate '{self.pred}' "
                f"({values.tolist()}); replicas run in lock-step, so control flow must be the "
                "same on all of them (e.g. all-reduce the predicate)")
        return bool(values[0]) != self.negate


# One dispatch over program types (a subclass, e.g. RepeatWhileFalse, finds its base's entry).
_LOWER = {
    prog.Sequence: lambda c, p: bsp.Block(c.lower(x) for x in p.programs),
    prog.Execute: Compiler.execute,
    prog.Copy: lower_copies.copy,
    prog.CrossReplicaCopy: lower_copies.cross_replica_copy,
    prog.RingAllReduce: lower_copies.ring_all_reduce,
    prog.PrintTensor: lower_copies.print_tensor,
    prog.Sync: Compiler.sync,
    prog.Repeat: lambda c, p: bsp.Loop(p.count, c.lower(p.body)),
    prog.If: Compiler.branch,
    prog.RepeatWhileTrue: Compiler.while_loop,
}


def compile_graph(state: GraphState, programs: list, mode: str) -> Compiled:
    """Compile programs over a graph; raises before touching anything the caller owns."""
    c = Compiler(state, mode)
    c.check_mapping()
    for p in programs:
        c.check_program_graph(p)
    c.out.roots = [c.lower(p) for p in programs]
    c.out.memory = layout_memory(c)
    c.out.arena_sizes = dict(c.rep.sizes)
    c.out.graph = GraphSummary(state, c.tile_of)
    try:
        c.out.memory.check()
    except TileMemoryError as e:
        e.profile = Profile(state.target, c.out, [])   # memory only: see the overflow
        raise
    return c.out
