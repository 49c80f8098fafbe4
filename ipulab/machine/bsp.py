"""The superstep executor: compiled steps, control flow, and the trace of what ran.

A step is one program element (an Execute, a Copy, a stream copy, a sync...). Its cost is a list
of phases in BSP order; each phase is a per-tile array of cycles and takes as long as its
slowest tile, because barriers separate phases. Running a step calls its action (a few numba
kernels) and appends its index to the trace; nothing at run time loops over tiles or vertices.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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
    """A sequence of nodes."""

    def __init__(self, nodes):
        self.nodes = list(nodes)

    def run(self, state) -> None:
        for n in self.nodes:
            n.run(state)


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
