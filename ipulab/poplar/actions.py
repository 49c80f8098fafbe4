"""What a compute set's step and a copy's step do when they run (plain data, so a compiled
executable can be stored), and how they share their work among lanes (machine/lanes.py)."""
from __future__ import annotations

from functools import partial

from ..machine import lanes
from .types import round_half


class ComputeAction:
    """What running a compute set's step does: exchange in, run the batches, round HALF
    outputs, exchange out. (Plain data, so a compiled executable can be stored.)

    With several lanes (state.lanes, lanes.py) and enough work, the parts run at once: on a
    replicated graph each lane takes whole replicas through all four phases (replicas touch
    only their own memory); otherwise each phase is cut into rows or runs, a phase ending
    before the next begins. Either way every element gets the same bits as in order."""

    def __init__(self, pre: list, batches: list, half_out: dict, post: list,
                 replicas: int = 1):
        self.pre, self.batches, self.half_out, self.post = pre, batches, half_out, post
        self.replicas = replicas
        self.work = sum(p.num_elements for p, _ in pre + post) + sum(
            int(b.plan.ln.sum()) + int(b.plan.vl_len.sum()) for b in batches)

    def __call__(self, state) -> None:
        n = lanes.threads(state.lanes) if self.work >= lanes.MIN_WORK else 1
        for b in self.batches if n > 1 else ():
            b.prepare(state.arenas, state.arenas_ro)
        if n > 1 and self.replicas > 1:
            k = lanes.parts_for(self.replicas, n)
            lanes.run([partial(self._replicas, state, *lanes.share(self.replicas, i, k))
                       for i in range(k)], n)
        elif n > 1:
            arenas = state.arenas
            k = lanes.PARTS_PER_THREAD * n
            for plans in (self.pre, None, self.post):
                if plans is None:
                    lanes.run([partial(self._rows, state, i, k) for i in range(k)], n)
                    self._round_half(state, 0, 1)
                elif plans:
                    lanes.run([partial(run_plans_part, plans, arenas, i, k)
                               for i in range(k)], n)
        else:
            self._in_turn(state)

    def _in_turn(self, state) -> None:
        """Everything in this thread: the kernel calls of _replicas(state, 0, replicas), made
        once per engine's arenas (state.calls), so a step skips their set-up."""
        calls = state.calls.get(self)
        if calls is None:
            calls = state.calls[self] = self._calls(state)
        pre, batches, post = calls
        for fn, args in pre:
            fn(*args)
        for b, fn, args in batches:
            try:
                fn(*args)
            except Exception as e:
                raise b.failure(e) from None
        self._round_half(state, 0, self.replicas)
        for fn, args in post:
            fn(*args)

    def _calls(self, state) -> tuple:
        """(pre, batches, post): the copies' (fn, args), the batches' (batch, fn, args)."""
        arenas = state.arenas
        pre, post = ([c for c in (p.call(arenas[k], arenas[k]) for p, k in plans) if c]
                     for plans in (self.pre, self.post))
        return pre, [(b, *b.call(arenas, state.arenas_ro)) for b in self.batches], post

    def _replicas(self, state, lo: int, hi: int) -> None:
        """Everything for replicas lo <= i < hi (all of it on an unreplicated graph)."""
        arenas, r = state.arenas, self.replicas
        for plan, key in self.pre:
            plan.run_part(arenas[key], arenas[key], *((lo, hi) if r > 1 else (0, plan.parts)))
        for b in self.batches:
            b.run_part(arenas, state.arenas_ro, lo * b.rows // r, hi * b.rows // r)
        self._round_half(state, lo, hi)
        for plan, key in self.post:
            plan.run_part(arenas[key], arenas[key], *((lo, hi) if r > 1 else (0, plan.parts)))

    def _rows(self, state, i: int, n: int) -> None:
        """Lane i of n's share of every batch's vertices."""
        for b in self.batches:
            b.run_part(state.arenas, state.arenas_ro, *lanes.share(b.rows, i, n))

    def _round_half(self, state, lo: int, hi: int) -> None:
        """HALF outputs of replicas lo <= i < hi rounded (every replica's block of the
        addresses is the same size)."""
        for key, idx in self.half_out.items():
            per = idx.size // self.replicas
            idx = idx[lo * per:hi * per]
            a = state.arenas[key]
            a[idx] = round_half(a[idx])


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

    def __call__(self, state) -> None:
        n = lanes.threads(state.lanes) if self.work >= lanes.MIN_WORK else 1
        if n > 1:
            k = lanes.PARTS_PER_THREAD * n
            lanes.run([partial(run_plans_part, self.plans, state.arenas, i, k)
                       for i in range(k)], n)
            return
        for plan, key in self.plans:
            plan.run(state.arenas[key], state.arenas[key])
