"""Coursework: exercise checks with specific feedback, tiered hints, local progress, a doctor.

In an exercise notebook::

    from ipulab.course import check, doctor, hint, hint_button, progress
    doctor()                                  # is this installation ready?
    check("ex01.sum_squares", SumSquares)     # ✓ or ✗ with what was wrong, True or False
    hint("ex01.sum_squares", 1)               # tier 1 of 2-3; hint_button(...) is a button
    progress()                                # what you have done, from the local JSON file

The package is in three rooms, one per workflow:

- learner/    what a learner runs: check(), hints, the progress record, the doctor, the
              workspace, and `ipulab course check` (running one's own notebooks);
- questions/  the questions: the registry, the bank (one module per exercise set), the kit
              the checks are built from, their messages, and `ipulab course build`;
- grading/    `ipulab course grade`: the class grader, the gradebook and its pages, the judge,
              the wire, the source check and the sandbox; grading/sandboxed/ is what runs
              inside the sandbox, and it imports nothing of questions/.

codelets.py holds the codelets the exercises give (notebooks import them, in the sandbox too).
The names above load on first use, so that importing a module of grading/sandboxed/ (which
imports this package first) loads nothing of the question bank.
"""
import importlib

_NAMES = {"check": "learner.check", "hint": "learner.hints", "hint_button": "learner.hints",
          "progress": "learner.record", "doctor": "learner.doctor",
          "questions": "questions.registry", "sets": "questions.registry",
          "get": "questions.registry", "Par": "questions.registry",
          "Question": "questions.registry"}
__all__ = list(_NAMES)


def __getattr__(name):
    if name in _NAMES:
        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ipulab.course' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
