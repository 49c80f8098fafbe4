"""check(), hint() and hint_button(): what a learner calls in an exercise notebook."""
from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np

from .progress import record_check, record_hint
from .feedback import Fail, NotAnswered, explain
from .registry import get

_MISSING = object()


def _print(ok: bool | None, qid: str, message: str) -> None:
    mark = {True: "✓", False: "✗", None: "·"}[ok]
    lines = message.strip().splitlines() or [""]
    print(f"{mark} {qid}: {lines[0]}")
    for line in lines[1:]:
        print(f"  {line.strip()}" if not line.startswith("  ") else line)


def evaluate(q, answer=_MISSING) -> tuple[str, str, dict]:
    """(status, message, metrics) of an answer to question q: 'passed', 'failed' or 'not
    answered'. Records and prints nothing (check() and the class grader's judge do)."""
    ok, status, metrics = False, "failed", {}
    out = io.StringIO()              # what the learner's code prints during the check
    try:
        if answer is _MISSING:
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
    except Exception as e:      # a bug in the learner's code that escaped the harness
        message = explain(e)
    except KeyboardInterrupt:
        message = "interrupted"
    printed = out.getvalue().strip().splitlines()
    if status == "failed" and printed:
        message += "\n  Your code printed (first lines):\n" + "\n".join(
            f"    {line}" for line in printed[:6])
    return status, message, metrics


def check(question_id: str, answer=_MISSING, *, quiet: bool = False) -> bool:
    """Run your answer to `question_id` on the simulator, on several generated inputs.

    Prints ✓ or ✗ with what was wrong (which vertex, tile and element; which rule of the BSP
    machine), records the result in your progress file, and returns True or False. It never
    raises: a bug in your code becomes a message.
    """
    try:
        q = get(question_id)
    except KeyError as e:
        _print(False, question_id, str(e).strip("'\""))
        return False
    status, message, metrics = evaluate(q, answer)
    record_check(question_id, status, message, metrics)
    if not quiet:
        _print({"passed": True, "failed": False}.get(status), question_id, message)
        if status == "failed":
            print(f"  (hint({question_id!r}, 1) gives a hint; there are {len(q.hints)} tiers)")
    return status == "passed"


def hint(question_id: str, level: int = 1) -> str:
    """Print hint `level` (1 = a nudge … last = nearly the answer) for a question."""
    try:
        q = get(question_id)
    except KeyError as e:
        print(str(e).strip("'\""))
        return ""
    n = len(q.hints)
    level = max(1, min(int(level), n))
    record_hint(question_id, level)
    more = (f"  (hint({question_id!r}, {level + 1}) for more)" if level < n
            else "  (that was the last hint)")
    text = f"Hint {level}/{n} for {question_id} — {q.title}:\n  {q.hints[level - 1]}\n{more}"
    print(text)
    return q.hints[level - 1]


def hint_button(question_id: str):
    """A button that reveals the hints of a question one tier at a time."""
    import html

    import ipywidgets as widgets

    q = get(question_id)
    shown = widgets.HTML(value="")
    button = widgets.Button(description=f"Hint 1 of {len(q.hints)}", icon="lightbulb-o",
                            tooltip=f"reveal the next hint for {question_id}")
    state = {"level": 0}

    def reveal(_=None):
        if state["level"] >= len(q.hints):
            return
        state["level"] += 1
        level = state["level"]
        record_hint(question_id, level)
        items = "".join(f"<li>{html.escape(h)}</li>" for h in q.hints[:level])
        shown.value = f"<ol style='margin:0.3em 0'>{items}</ol>"
        if level < len(q.hints):
            button.description = f"Hint {level + 1} of {len(q.hints)}"
        else:
            button.description, button.disabled = "No more hints", True

    button.on_click(reveal)
    box = widgets.VBox([button, shown])
    box.reveal = reveal          # for tests and for driving it from code
    box.button, box.shown = button, shown
    return box
