"""The question registry: every exercise question has an id, a statement, a checker, hints and
an optional par. Sets group the questions of one notebook; a set module registers its set and
questions when it is imported (bank/__init__.py imports them all), so a new set is one new
module of bank/ and its line in bank/__init__.py."""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from typing import Callable

KINDS = ("codelet", "graph", "predict", "performance", "profile", "system")
# system: operate a simulated system (a Pod's partitions, a scheduler) through its API


@dataclass(frozen=True)
class Par:
    """What a performance answer is graded against, deterministically: the simulated cycles
    (and/or the bytes on the fullest tile) of the reference solution, or simulated seconds
    (e.g. a scheduler's mean wait) where the question is not about one program, with a
    tolerance."""

    cycles: int | None = None
    memory: int | None = None
    tolerance: float = 1.2
    seconds: float | None = None

    def describe(self) -> str:
        parts = []
        if self.cycles is not None:
            parts.append(f"{self.cycles:,} cycles")
        if self.memory is not None:
            parts.append(f"{self.memory:,} B on the fullest tile")
        if self.seconds is not None:
            parts.append(f"{self.seconds:,.1f} simulated seconds")
        return " and ".join(parts) + f" (within {self.tolerance:g}×)"


@dataclass(frozen=True)
class Question:
    """One question. checker(answer) returns a success message or raises Fail/NotAnswered."""

    id: str
    title: str
    kind: str
    statement: str
    checker: Callable = field(repr=False)
    hints: tuple[str, ...] = ()
    par: Par | None = None
    prices: bool = False    # the answer's codelets price themselves: cycle_estimate is graded

    @property
    def set_id(self) -> str:
        return self.id.split(".", 1)[0]


@dataclass(frozen=True)
class ExerciseSet:
    """The questions that go with one guided notebook."""

    id: str            # "ex01"
    notebook: str      # "01_one_tile.ipynb": its name in solutions/ and exercises/
    title: str
    intro: str = ""
    guide: str = ""    # the guided notebook in notebooks/, when its name differs

    @property
    def guided(self) -> str:
        """The guided notebook's file name in notebooks/."""
        return self.guide or self.notebook


REGISTRY: dict[str, Question] = {}
SETS: dict[str, ExerciseSet] = {}


def exercise_set(set_id: str, notebook: str, title: str, intro: str = "",
                 guide: str = "") -> ExerciseSet:
    s = ExerciseSet(set_id, notebook, title, intro, guide)
    SETS[set_id] = s
    return s


def question(qid: str, *, title: str, kind: str, statement: str, hints, par: Par | None = None,
             prices: bool = False):
    """Decorator: register the decorated function as the checker of question `qid`."""
    if kind not in KINDS:
        raise ValueError(f"question {qid}: kind {kind!r} is not one of {KINDS}")
    if not 2 <= len(hints) <= 3:
        raise ValueError(f"question {qid}: give 2 or 3 tiers of hints, not {len(hints)}")

    def register(checker):
        if qid in REGISTRY:
            raise ValueError(f"question {qid} is registered twice")
        REGISTRY[qid] = Question(qid, title, kind, statement.strip(), checker, tuple(hints), par,
                                 prices)
        return checker

    return register


def _load() -> None:
    importlib.import_module(".bank", __package__)   # registers every set and its questions


def get(qid: str) -> Question:
    """The question `qid`; a KeyError names the closest ids when there is no such question."""
    _load()
    if qid in REGISTRY:
        return REGISTRY[qid]
    raise KeyError(f"no question {qid!r}; {_suggest(str(qid))}")


def _suggest(qid: str) -> str:
    """What to say about an unknown id: the closest questions of its own set (a typo in the
    name), else every question of that set, else the closest ids anywhere, else the sets."""
    set_id = qid.split(".", 1)[0]
    same = [q for q in REGISTRY if q.split(".", 1)[0] == set_id]
    if same:
        close = difflib.get_close_matches(qid, same, n=3, cutoff=0.5)
        return (f"did you mean {', '.join(close)}?" if close else
                f"did you mean one of set {set_id}'s questions: {', '.join(same)}?")
    close = difflib.get_close_matches(qid, list(REGISTRY), n=3)
    return f"did you mean {', '.join(close)}?" if close else \
        f"the sets are {', '.join(sorted(SETS))}"


def questions(set_id: str | None = None) -> list[Question]:
    """Every question, or those of one set, in registration order."""
    _load()
    return [q for q in REGISTRY.values() if set_id is None or q.set_id == set_id]


def sets() -> dict[str, ExerciseSet]:
    _load()
    return dict(SETS)


def set_for_notebook(name: str) -> ExerciseSet | None:
    """The set whose notebook has this file name (or the same two-digit prefix)."""
    _load()
    for s in SETS.values():
        if s.notebook == name:
            return s
    prefix = name[:2]
    return next((s for s in SETS.values() if s.notebook[:2] == prefix and prefix.isdigit()), None)
