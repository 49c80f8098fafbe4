"""The superstep executor: compiled steps, control flow, and the trace of what ran.

A step is one program element (an Execute, a Copy, a stream copy, a sync...). Its cost is a list
of phases in BSP order; each phase is a per-tile array of cycles and takes as long as its
slowest tile, because barriers separate phases. Running a step calls its action (a few numba
kernels) and appends its index to the trace; nothing at run time loops over tiles or vertices.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from . import lanes

PHASES = ("sync", "exchange", "inter_ipu_exchange", "host_exchange", "compute")


@dataclass
class Step:
    """One compiled program element: what it is, what it costs per tile, and how to run it."""

    kind: str
    name: str
    num_tiles: int
    action: object = None   # callable(state) or None
    phases: list = field(default_factory=list)   # [(phase kind, per-tile cycles)]
    compute_excluding_idle: np.ndarray | None = None
    temporary_bytes: np.ndarray | None = None   # per tile: memory live only during this step
    index: int = -1                               # position in the compiled step list
    vertex_cycles: dict = field(default_factory=dict)   # codelet -> (vertices, summed estimates)

    def add(self, kind: str, cycles) -> None:
        """Append a phase; a scalar means every tile spends that long (a barrier or a sync)."""
        arr = np.broadcast_to(np.asarray(cycles, np.int64), (self.num_tiles,))
        if arr.any():
            self.phases.append((kind, arr))

    @property
    def cycles(self) -> int:
        return int(sum(int(c.max()) for _, c in self.phases))

    def run(self, state) -> None:
        if self.action is not None:
            self.action(state)
        state.trace.append(self.index)


class Block:
    """A sequence of nodes (run as replica_segments() groups them)."""

    def __init__(self, nodes):
        self.nodes = list(nodes)
        self._runs = None

    def run(self, state) -> None:
        if self._runs is None:
            self._runs = replica_segments(self.nodes)
        for n in chained(self, self._runs, state):
            n.run(state)


class Chain:
    """Consecutive steps that stay on one lane for good (lanes.alone_for_good), run as one
    list of kernel calls with nothing in Python between their kernels. (Each step's own
    round of Python, its action, its lanes question, its timing, cost several us after a
    kernel had filled the caches: 1.5-2 ms of the small GPT's 116 steps.)"""

    def __init__(self, steps: list, state):
        self.indices = [s.index for s in steps]
        self.calls = [c for s in steps if s.action is not None
                      for c in s.action.replica_calls(state, 0, s.action.replicas)]

    def run(self, state) -> None:
        run_calls(self.calls)
        state.trace.extend(self.indices)


def chained(owner, nodes: list, state) -> list:
    """nodes as they run on state: each run of consecutive steps that stay on one lane for good
    made one Chain, once every step has been decided (timed alone twice, and a long one tried
    on the lanes). Kept per owner, lanes and lanes.MIN_SECONDS in state.calls."""
    key = (owner, state.lanes, lanes.MIN_SECONDS)
    plan = state.calls.get(key)
    if plan is None:
        plan = _chains(nodes, state)
        if plan is None:
            return nodes
        state.calls[key] = plan
    return plan


def _chains(nodes: list, state) -> list | None:
    """nodes with runs of steps alone for good as Chains; None while one is undecided."""
    out, run = [], []

    def close():
        if run:
            out.append(Chain(run, state))
        run.clear()
    for n in nodes:
        if _alone_for_good(n, state):
            run.append(n)
            continue
        if _kernel_step(n) and n.action.pace.hits == 0:
            return None         # not yet timed alone twice, or not yet tried on the lanes
        close()
        out.append(n)
    close()
    return out


def _kernel_step(node) -> bool:
    """A step whose action can give its kernel calls (replica_calls) and is timed."""
    return isinstance(node, Step) and hasattr(node.action, "replica_calls")


def _alone_for_good(node, state) -> bool:
    """A step with nothing to run, or whose kernel calls stay on one lane for good."""
    if _kernel_step(node):
        a = node.action
        return lanes.alone_for_good(state.lanes, a.work, a.timing, a.pace)
    return isinstance(node, Step) and node.action is None


def _replicated(node) -> int:
    """How many replicas a step's action can be cut into (replica_calls(state, lo, hi) gives
    the kernel calls of replicas lo..hi); 0 if it cannot (a copy between replicas, a host
    stream) or the node is not a step."""
    a = getattr(node, "action", None) if isinstance(node, Step) else None
    return a.replicas if hasattr(a, "replica_calls") and a.replicas > 1 else 0


def inlined(nodes):
    """The nodes with nested Blocks replaced by their own nodes (running them is the same)."""
    for n in nodes:
        if isinstance(n, Block):
            yield from inlined(n.nodes)
        else:
            yield n


def _shares_scratch(a, b) -> bool:
    """Whether two lists of (arena, start, end) intervals overlap."""
    return any(k == j and s < f and t < e for k, s, e in a for j, t, f in b)


def replica_segments(nodes) -> list:
    """The nodes to run, nested Blocks inlined, with each run of two or more consecutive
    steps that can be cut into the same replicas, and whose exchange buffers (their actions'
    `scratch`) lie apart, made one ReplicaSegment."""
    out, run, taken = [], [], []

    def close():
        out.extend([ReplicaSegment(run, _replicated(run[0]))] if len(run) > 1 else run)
        run.clear(), taken.clear()
    for n in inlined(nodes):
        r = _replicated(n)
        scratch = getattr(n.action, "scratch", ()) if r else ()
        if run and (r != _replicated(run[0]) or _shares_scratch(scratch, taken)):
            close()
        if r:
            run.append(n)
            taken.extend(scratch)
        else:
            out.append(n)
    if run:
        close()
    return out


class AtOnce:
    """Steps whose combined effect one action makes in one go (gcl's ring all-reduce, see
    machine/ring.py); the trace records every step, in order, as if each had run."""

    def __init__(self, steps: list, action):
        self.nodes, self.action = list(steps), action
        self.indices = [s.index for s in self.nodes]

    def run(self, state) -> None:
        self.action(state)
        state.trace.extend(self.indices)


class ReplicaSegment:
    """Consecutive steps that each touch every replica's memory apart (the compute sets and
    copies of a replicated graph, between two of its copies between replicas). With several
    lanes each lane takes whole replicas through all of them: one hand-over for the lot, not
    one per step. Any split gives the same bits; a failure is the one a run in order meets
    first (the earliest step, then the lowest replica)."""

    def __init__(self, steps: list, replicas: int):
        self.steps, self.replicas = list(steps), replicas
        self.work = sum(s.action.work for s in self.steps)
        self.pace, self.timing = lanes.Pace(), lanes.Timing()

    def run(self, state) -> None:
        n = lanes.lanes_for(state.lanes, self.work, self.timing, self.pace)
        if n == 1:
            lanes.run_alone(self.timing, self._in_turn, state)
            return
        lanes.run_judged(self.timing, self.pace, self._on_lanes, state, n)
        state.trace.extend(s.index for s in self.steps)

    def _on_lanes(self, state, n: int) -> None:
        """Each lane takes a share of the replicas through every step; raises the failure a
        run in order meets first."""
        k = min(n, self.replicas)     # a part per lane: each part's kernel calls cost GIL time
        parts = state.calls.get((self, k))
        if parts is None:
            parts = state.calls[(self, k)] = [self._calls(state, *lanes.share(self.replicas, i, k))
                                              for i in range(k)]
        failed = [None] * k
        lanes.run([partial(_run_part, steps, i, failed) for i, steps in enumerate(parts)], n)
        first = min((f for f in failed if f is not None), key=lambda f: f[:2], default=None)
        if first is not None:
            raise first[2]

    def _in_turn(self, state) -> None:
        for s in chained(self, self.steps, state):
            s.run(state)

    def _calls(self, state, lo: int, hi: int) -> list:
        """Per step, the kernel calls for replicas lo..hi (see run_calls)."""
        return [s.action.replica_calls(state, lo, hi) for s in self.steps]


def run_calls(calls: list) -> None:
    """Make the calls (fn, args, failure) in order; an exception e of one with a failure is
    raised as failure(e) (a batch's error naming its vertex)."""
    for fn, args, failure in calls:
        try:
            fn(*args)
        except Exception as e:
            if failure is None:
                raise
            raise failure(e) from None


def _run_part(steps: list, i: int, failed: list) -> None:
    """Part i's calls, step by step; a failure is kept in failed[i] as (step position, part,
    error) for run() to raise once every part has stopped."""
    for j, calls in enumerate(steps):
        try:
            run_calls(calls)
        except Exception as e:
            failed[i] = (j, i, e)
            return


class Loop:
    """Run body count times."""

    def __init__(self, count: int, body):
        self.count, self.body = count, body

    def run(self, state) -> None:
        for _ in range(self.count):
            self.body.run(state)


class Branch:
    """Evaluate a predicate step (it records its own cost), then run one of two nodes."""

    def __init__(self, predicate, then, otherwise):
        self.predicate, self.then, self.otherwise = predicate, then, otherwise

    def run(self, state) -> None:
        (self.then if self.predicate.evaluate(state) else self.otherwise).run(state)


class WhileLoop:
    """Run cond, test the predicate, run body; repeat while the predicate is true."""

    def __init__(self, cond, predicate, body):
        self.cond, self.predicate, self.body = cond, predicate, body

    def run(self, state) -> None:
        while True:
            self.cond.run(state)
            if not self.predicate.evaluate(state):
                return
            self.body.run(state)


class Predicate:
    """Read a one-element tensor as the branch condition; costs the step that broadcasts it."""

    def __init__(self, step: Step, read):
        self.step, self.read = step, read

    def evaluate(self, state) -> bool:
        self.step.run(state)
        return bool(self.read(state))


def summarize(steps: list[Step], trace: list[int], num_tiles: int) -> dict:
    """BSP totals of a trace: per-tile sums per phase, and the sum over steps of phase maxima."""
    counts = np.bincount(np.asarray(trace, np.int64), minlength=len(steps))
    per_tile = {k: np.zeros(num_tiles, np.int64) for k in PHASES}
    excluding_idle = np.zeros(num_tiles, np.int64)
    total = 0
    for i in np.flatnonzero(counts):
        n, step = int(counts[i]), steps[i]
        for kind, cycles in step.phases:
            per_tile[kind] += n * cycles
        if step.compute_excluding_idle is not None:
            excluding_idle += n * step.compute_excluding_idle
        total += n * step.cycles
    return {"total": total, "per_tile": per_tile, "compute_excluding_idle": excluding_idle}
