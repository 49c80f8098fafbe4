"""What a compute set's step and a copy's step do when they run (plain data, so a compiled
executable can be stored), and how they share their work among lanes (machine/lanes.py)."""
from __future__ import annotations

from functools import partial

from ..machine import lanes
from ..machine.bsp import run_calls
from ..machine.ring import ring_all_reduce_add
from .types import round_half


class ComputeAction:
    """What running a compute set's step does: exchange in, run the batches, round HALF
    outputs, exchange out. (Plain data, so a compiled executable can be stored.)

    With several lanes (state.lanes, lanes.py) and enough work, the parts run at once: on a
    replicated graph each lane takes whole replicas through all four phases (replicas touch
    only their own memory); otherwise each phase is cut into rows or runs, a phase ending
    before the next begins. Either way every element gets the same bits as in order."""

    def __init__(self, pre: list, batches: list, half_out: dict, post: list,
                 replicas: int = 1, scratch: tuple = ()):
        self.pre, self.batches, self.half_out, self.post = pre, batches, half_out, post
        self.replicas = replicas
        self.scratch = scratch      # (arena, start, end) its exchange buffers take
        self.work = sum(p.num_elements for p, _ in pre + post) + sum(
            int(b.plan.ln.sum()) + int(b.plan.vl_len.sum()) for b in batches)
        self.timing, self.pace = lanes.Timing(), lanes.Pace()

    def __call__(self, state) -> None:
        n = lanes.lanes_for(state.lanes, self.work, self.timing, self.pace)
        if n > 1:
            lanes.run_judged(self.timing, self.pace, self._on_lanes, state, n)
        else:
            lanes.run_alone(self.timing, self._in_turn, state)

    def _on_lanes(self, state, n: int) -> None:
        """Everything on n lanes: whole replicas per lane, else each phase cut into parts."""
        self.prepare(state)
        if self.replicas > 1:
            k = lanes.parts_for(self.replicas, n)
            lanes.run([partial(self.run_replicas, state, *lanes.share(self.replicas, i, k))
                       for i in range(k)], n)
            return
        arenas = state.arenas
        k = lanes.PARTS_PER_THREAD * n
        for plans in (self.pre, None, self.post):
            if plans is None:
                lanes.run([partial(self._rows, state, i, k) for i in range(k)], n)
                self._round_half(state.arenas, 0, 1)
            elif sum(p.num_elements for p, _ in plans) >= lanes.MIN_COPY:
                lanes.run([partial(run_plans_part, plans, arenas, i, k) for i in range(k)], n)
            else:
                run_plans(plans, arenas)

    def prepare(self, state) -> None:
        """Compile the batches' drivers now, in the calling thread (see Batch.prepare)."""
        for b in self.batches:
            b.prepare(state.arenas, state.arenas_ro)

    def _in_turn(self, state) -> None:
        """Everything in this thread: the kernel calls of every replica, made once per
        engine's arenas (state.calls), so a step skips their set-up."""
        calls = state.calls.get(self)
        if calls is None:
            calls = state.calls[self] = self.replica_calls(state, 0, self.replicas)
        run_calls(calls)

    def replica_calls(self, state, lo: int, hi: int) -> list:
        """The kernel calls that do everything for replicas lo <= i < hi (all of it on an
        unreplicated graph), as (fn, args, failure) (see run_calls)."""
        arenas, r = state.arenas, self.replicas
        calls = [(*c, None) for c in (p.call(arenas[k], arenas[k], lo, hi) for p, k in self.pre)
                 if c]
        calls += [b.call_part(arenas, state.arenas_ro, lo * b.rows // r, hi * b.rows // r)
                  for b in self.batches]
        if self.half_out:
            calls.append((self._round_half, (arenas, lo, hi), None))
        return calls + [(*c, None) for c in (p.call(arenas[k], arenas[k], lo, hi)
                                              for p, k in self.post) if c]

    def run_replicas(self, state, lo: int, hi: int) -> None:
        """Everything for replicas lo <= i < hi (all of it on an unreplicated graph)."""
        run_calls(self.replica_calls(state, lo, hi))

    def _rows(self, state, i: int, n: int) -> None:
        """Lane i of n's share of every batch's vertices."""
        for b in self.batches:
            b.run_part(state.arenas, state.arenas_ro, *lanes.share(b.rows, i, n))

    def _round_half(self, arenas: dict, lo: int, hi: int) -> None:
        """HALF outputs of replicas lo <= i < hi rounded (every replica's block of the
        addresses is the same size)."""
        for key, idx in self.half_out.items():
            per = idx.size // self.replicas
            idx = idx[lo * per:hi * per]
            a = arenas[key]
            a[idx] = round_half(a[idx])


def run_plans(plans: list, arenas: dict) -> None:
    """Every copy plan, in this thread."""
    for plan, key in plans:
        plan.run(arenas[key], arenas[key])


def run_plans_part(plans: list, arenas: dict, i: int, n: int) -> None:
    """Lane i of n's share of each copy plan (its runs, or its replicas)."""
    for plan, key in plans:
        plan.run_part(arenas[key], arenas[key], *lanes.share(plan.parts, i, n))


class CopyAction:
    """Run copy plans, each in its arena (cut into parts on several lanes when they move
    enough: replicas, or runs, write disjoint elements)."""

    def __init__(self, plans: list):
        self.plans = plans
        self.work = sum(p.num_elements for p, _ in plans)
        # the replicas it can be cut into: every plan's (1 for a copy between replicas)
        counts = {p.replicas for p, _ in plans}
        self.replicas = counts.pop() if len(counts) == 1 else 1
        self.timing, self.pace = lanes.Timing(), lanes.Pace()

    def replica_calls(self, state, lo: int, hi: int) -> list:
        """The kernel calls that copy replicas lo <= i < hi of every plan, as (fn, args,
        failure) (see run_calls)."""
        return [(*c, None) for c in (p.call(state.arenas[k], state.arenas[k], lo, hi)
                                     for p, k in self.plans) if c]

    def __call__(self, state) -> None:
        n = lanes.lanes_for(state.lanes, self.work, self.timing, self.pace)
        if n > 1:
            lanes.run_judged(self.timing, self.pace, self._on_lanes, state, n)
        else:
            lanes.run_alone(self.timing, run_plans, self.plans, state.arenas)

    def _on_lanes(self, state, n: int) -> None:
        """Every plan cut into a few parts per lane (runs, or replicas)."""
        k = lanes.PARTS_PER_THREAD * n
        lanes.run([partial(run_plans_part, self.plans, state.arenas, i, k) for i in range(k)], n)


class RingAction:
    """gcl's ring all-reduce (ADD) in one kernel call: its arena, replica 0's addresses of
    flat, out, recv and mine, the replicas' stride and the chunks' sizes (machine/ring.py).
    (Cut into two lanes' halves of the chunks, it took 0.32-0.56 ms in a Pod16 step against
    0.35-0.60 ms in one call: its data come from both cores' caches either way.)"""

    def __init__(self, key: str, flat, out, recv, mine, stride: int, size):
        self.key, self.flat, self.out, self.recv, self.mine = key, flat, out, recv, mine
        self.stride, self.size = stride, size

    def __call__(self, state) -> None:
        ring_all_reduce_add(state.arenas[self.key], self.flat, self.out, self.recv, self.mine,
                            self.stride, self.size)
