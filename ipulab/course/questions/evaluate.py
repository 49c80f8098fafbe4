"""evaluate(): one answer to one question, checked — what check() in a notebook and the class
grader's judge both run."""
from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np

from .messages import Fail, NotAnswered, explain

MISSING = object()          # no answer given


def evaluate(q, answer=MISSING) -> tuple[str, str, dict]:
    """(status, message, metrics) of an answer to question q: 'passed', 'failed', 'not
    answered' or 'out of memory'. Records and prints nothing (check() and the class grader's
    judge do)."""
    ok, status, metrics = False, "failed", {}
    out = io.StringIO()              # what the learner's code prints during the check
    try:
        if answer is MISSING:
            raise NotAnswered()
        with warnings.catch_warnings(), np.errstate(all="ignore"), contextlib.redirect_stdout(out):
            warnings.simplefilter("ignore")
            result = q.checker(answer)
        if isinstance(result, tuple):
            message, metrics = result
        else:
            message = result or "correct"
        status = "passed"
    except NotAnswered:
        status = "not answered"
        message = ("not answered yet — write your answer in place of `raise NotImplementedError`"
                   f" and run this cell again. Stuck? hint({q.id!r}, 1)")
    except Fail as f:
        message = str(f)
    except RecursionError:
        message = "your code recursed too deeply (RecursionError); look for a function calling itself"
    except MemoryError:
        status = "out of memory"
        message = ("checking your answer ran out of memory: does it build something far "
                   "bigger than the question needs?")
    except Exception as e:      # a bug in the learner's code that escaped the kit
        message = explain(e)
    except KeyboardInterrupt:
        message = "interrupted"
    printed = out.getvalue().strip().splitlines()
    if status == "failed" and printed:
        message += "\n  Your code printed (first lines):\n" + "\n".join(
            f"    {line}" for line in printed[:6])
    return status, message, metrics
