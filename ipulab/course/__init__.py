"""Coursework: exercise checks with specific feedback, tiered hints, local progress, a doctor.

In an exercise notebook::

    from ipulab.course import check, doctor, hint, hint_button, progress
    doctor()                                  # is this installation ready?
    check("ex01.sum_squares", SumSquares)     # ✓ or ✗ with what was wrong, True or False
    hint("ex01.sum_squares", 1)               # tier 1 of 2-3; hint_button(...) is a button
    progress()                                # what you have done, from the local JSON file

`ipulab course build` writes exercises/ from solutions/; `ipulab course check PATH...` checks
notebooks in a kernel of your own; `ipulab course grade SUBMISSIONS` grades a class, each
notebook in a sandbox, checked by a judge the notebook cannot reach (judge.py). Questions live
in ipulab/course/bank/ (one module per notebook). Names load on first use, so the sandboxed
runner can import parts of this package without the bank.
"""
import importlib

# the function, imported first so that the submodule of the same name never shadows it
from .progress import progress

_NAMES = {"check": "api", "hint": "api", "hint_button": "api", "doctor": "doctor",
          "questions": "registry", "sets": "registry", "get": "registry", "Par": "registry",
          "Question": "registry"}
__all__ = [*_NAMES, "progress"]


def __getattr__(name):
    if name in _NAMES:
        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ipulab.course' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
