"""Coursework: exercise checks with specific feedback, tiered hints, local progress, a doctor.

In an exercise notebook::

    from ipulab.course import check, doctor, hint, hint_button, progress
    doctor()                                  # is this installation ready?
    check("ex01.sum_squares", SumSquares)     # ✓ or ✗ with what was wrong, True or False
    hint("ex01.sum_squares", 1)               # tier 1 of 2-3; hint_button(...) is a button
    progress()                                # what you have done, from the local JSON file

`ipulab course build` writes exercises/ from solutions/; `ipulab course check PATH...` grades
notebooks. Questions live in ipulab/course/bank/ (one module per notebook).
"""
from .api import check, hint, hint_button
from .doctor import doctor
from .progress import progress
from .registry import Par, Question, get, questions, sets

__all__ = ["check", "hint", "hint_button", "doctor", "progress", "questions", "sets", "get",
           "Par", "Question"]
