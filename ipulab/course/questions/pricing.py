"""How an answer's cycles are priced: one rule for check() in a notebook and for the class grade.

The machine prices a vertex: its codelet's cycle_estimate where ipulab wrote the codelet, else
the cost model's default per element touched. What an answer declares never decides a verdict:
estimates it fixes (set_perf_estimate, add_vertices(..., estimates=...)) are taken off the
vertices it made, and its own codelets' cycle_estimate counts only in a question about
estimates (q.prices). Locally what it declared is then reported beside the model's figures; in
the judge the wire has already dropped it, so the same rule finds nothing to take off.
"""
from __future__ import annotations

import contextlib
import contextvars
import weakref
from dataclasses import dataclass, field

import numpy as np

from ... import poplar
from ...poplar.vertex import MultiVertex, Vector, VectorList, Vertex


@dataclass
class Declared:
    """What an answer said one codelet's vertices cost: fixed estimates, or its cycle_estimate."""

    codelet: str
    vertices: list = field(default_factory=list)     # [(vertex id, tile, cycles)]
    prices_itself: bool = False


@dataclass
class Pricing:
    """The pricing of one evaluation: whether the answer's codelets price themselves, what it
    declared per graph, and the notes that report it."""

    trust_codelets: bool = False
    declared: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    notes: list = field(default_factory=list)


_NOW: contextvars.ContextVar = contextvars.ContextVar("pricing", default=None)


@contextlib.contextmanager
def pricing(priced: Pricing):
    """Within it, answers are priced as `priced` says and reported in it (evaluate())."""
    token = _NOW.set(priced)
    try:
        yield priced
    finally:
        _NOW.reset(token)


def current() -> Pricing:
    return _NOW.get() or Pricing()


def model_estimates(groups, before) -> list:
    """Vertex groups after an answer ran, given the estimates of those that were there before
    (the check's): theirs back as they were, and the estimates the answer fixed on the groups
    it added taken off. Returns what it had fixed, as [(group, estimates; -1: none)]."""
    taken = []
    for i, group in enumerate(groups):
        old = before[i] if i < len(before) else np.full(group.tiles.size, -1, np.int64)
        said = np.where(group.estimates != old, group.estimates, -1)
        if (said >= 0).any():
            taken.append((group, said))
        group.estimates = np.array(old, dtype=np.int64, copy=True)
    return taken


@contextlib.contextmanager
def answering(args):
    """Around a call of the answer's code: the graphs among `args` leave it priced by the
    machine, and what the answer fixed on them is kept to be reported."""
    states = list({id(a.state): a.state for a in args if isinstance(a, poplar.Graph)}.values())
    before = [[g.estimates.copy() for g in st.vertices.groups] for st in states]
    try:
        yield
    finally:
        now = current()
        for st, estimates in zip(states, before):
            for group, fixed in model_estimates(st.vertices.groups, estimates):
                now.declared.setdefault(st, []).append((group.codelet.__name__, group.first,
                                                        group.tiles, fixed))


def _own(cls) -> bool:
    """A codelet the answer wrote (ipulab's own price themselves by ipulab's rules)."""
    module = getattr(cls, "__module__", "") or ""
    return not (module == "ipulab" or module.startswith("ipulab."))


_MODEL_PRICED: dict = {}


def model_priced(cls) -> type:
    """The answer's codelet without a cycle_estimate: the same fields and compute, priced by
    the cost model (as the judge makes it again from its source)."""
    if cls not in _MODEL_PRICED:
        ns = {"compute": staticmethod(cls.compute), "fastmath": bool(cls.fastmath),
              "__module__": cls.__module__, "__qualname__": cls.__qualname__}
        for f in cls.fields:
            shape = f.dtype if f.kind == "scalar" else \
                (Vector if f.kind == "vector" else VectorList)[f.dtype]
            ns[f.attr] = type(f)(shape, name=f.name)
        _MODEL_PRICED[cls] = type(cls.__name__, (MultiVertex if cls.multi else Vertex,), ns)
    return _MODEL_PRICED[cls]


def by_the_machine(graph) -> dict[str, Declared]:
    """Price graph's vertices by the machine before it is compiled: each of the answer's own
    codelets that prices itself, untrusted, is replaced by its model-priced copy. Returns what
    the answer declared, by codelet name (with what answering() took off its vertices)."""
    now, st = current(), graph.state
    found: dict[str, Declared] = {}
    for name, first, tiles, fixed in now.declared.get(st, []):
        d = found.setdefault(name, Declared(name))
        d.vertices += [(first + int(i), int(tiles[i]), int(fixed[i]))
                       for i in np.flatnonzero(fixed >= 0)]
    for group in st.vertices.groups:
        cls = group.codelet
        if _own(cls) and hasattr(cls, "cycle_estimate") and not now.trust_codelets:
            graph.add_codelets(model_priced(cls))
            group.codelet = model_priced(cls)
            found.setdefault(cls.__name__, Declared(cls.__name__)).prices_itself = True
    return found


def _one(d: Declared, describe, stats: dict) -> str:
    """'you declared …; the simulator's model gives …' for one codelet."""
    count, cycles = stats.get("count", 0), stats.get("cycles", 0)
    if d.prices_itself:
        said = f"your codelet {d.codelet} prices itself (its cycle_estimate)"
    elif len(d.vertices) == 1:
        said = f"you declared {d.vertices[0][2]:,} cycles for {describe(d.vertices[0][0])}"
    else:
        said = (f"you declared {sum(c for *_, c in d.vertices):,} cycles in all for "
                f"{len(d.vertices)} vertices of {d.codelet} (the first: "
                f"{describe(d.vertices[0][0])})")
    if not d.prices_itself and count == len(d.vertices):
        return f"{said}; the simulator's model gives {'it' if count == 1 else 'them'} {cycles:,}"
    return (f"{said}; the simulator's model gives {d.codelet}'s {count:,} "
            f"{'vertex' if count == 1 else 'vertices'} {cycles:,} cycles")


def note(declared: dict[str, Declared], profile, describe) -> None:
    """Report, beside the model's figures of the run's profile, what the answer declared."""
    if declared:
        said = ";\n    ".join(_one(d, describe, profile.vertex_stats.get(d.codelet, {}))
                              for d in declared.values())
        current().notes.append(
            f"Declared costs do not count, here as in the class grade: {said}.\n  By the "
            f"simulator's model your program takes {int(profile.total_cycles):,} cycles.")
