"""evaluate(): one answer to one question, checked — what check() in a notebook and the class
grader's judge both run: the same checks, the same pricing (pricing.py), and what the answer's
code printed kept (bounded) for check() to show under the cell and the judge in the feedback."""
from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np

from .messages import Fail, NotAnswered, explain
from .pricing import Pricing, pricing

MISSING = object()          # no answer given
PRINTED_CHARS = 2000        # of what the answer's code printed, shown (the rest is cut)


class Printed(io.TextIOBase):
    """What the answer's code prints during a check: the first PRINTED_CHARS characters kept,
    the rest counted, so an endless print loop costs no memory."""

    def __init__(self):
        self.kept, self.size = io.StringIO(), 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        room = PRINTED_CHARS - self.kept.tell()
        if room > 0:
            self.kept.write(text[:room])
        self.size += len(text)
        return len(text)

    def text(self) -> str:
        """What was printed, with '… (truncated)' where it was cut."""
        kept = self.kept.getvalue()
        if self.size > len(kept):
            kept = kept.rstrip("\n") + f"\n… (truncated: {self.size:,} characters printed)"
        return kept


def evaluate(q, answer=MISSING) -> tuple[str, str, dict, str]:
    """(status, message, metrics, printed) of an answer to question q: status 'passed',
    'failed', 'not answered' or 'out of memory'; printed: what the answer's code printed
    (bounded). Records and prints nothing (check() and the class grader's judge do)."""
    status, metrics = "failed", {}
    out, priced = Printed(), Pricing(q.prices)
    try:
        if answer is MISSING:
            raise NotAnswered()
        with warnings.catch_warnings(), np.errstate(all="ignore"), \
                contextlib.redirect_stdout(out), pricing(priced):
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
    notes = "".join(f"\n  {n}" for n in priced.notes if status != "not answered")
    return status, message + notes, metrics, out.text()
