"""check(): what a learner calls in an exercise notebook to have an answer checked."""
from __future__ import annotations

from ..questions.evaluate import MISSING, evaluate
from ..questions.registry import get
from .record import record_check


def show(ok: bool | None, qid: str, message: str) -> None:
    """Print a check's result: ✓, ✗ or · then the message, continuation lines indented."""
    mark = {True: "✓", False: "✗", None: "·"}[ok]
    lines = message.strip().splitlines() or [""]
    print(f"{mark} {qid}: {lines[0]}")
    for line in lines[1:]:
        print(f"  {line.strip()}" if not line.startswith("  ") else line)


def check(question_id: str, answer=MISSING, *, quiet: bool = False) -> bool:
    """Run your answer to `question_id` on the simulator, on several generated inputs.

    Prints what your code printed while it was checked, then ✓ or ✗ with what was wrong (which
    vertex, tile and element; which rule of the BSP machine), records the result in your
    progress file, and returns True or False. It never raises: a bug in your code becomes a
    message. Cycles are the simulator's, as in the class grade: an estimate you declare
    (set_perf_estimate, your codelet's cycle_estimate) is reported beside them, never used.
    """
    try:
        q = get(question_id)
    except KeyError as e:
        show(False, question_id, str(e).strip("'\""))
        return False
    status, message, metrics, printed = evaluate(q, answer)
    record_check(question_id, status, message, metrics)
    if not quiet:
        if printed.strip():
            print(printed.rstrip("\n"))
        show({"passed": True, "not answered": None}.get(status, False), question_id, message)
        if status not in ("passed", "not answered"):
            print(f"  (hint({question_id!r}, 1) gives a hint; there are {len(q.hints)} tiers)")
    return status == "passed"
