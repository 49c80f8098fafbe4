"""grade_submission(path): one notebook graded by a judge process of its own, bounded.

Runs in a grading worker (a dask task, or the grader itself). It starts the judge
(python -m ipulab.course.grading.judge) on the notebook and reads its verdicts from a pipe the
submission has no end of.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATUSES = ("passed", "failed", "not answered", "timed out", "out of memory", "crashed",
            "tampered")
RESTARTS = 2          # judges started again after one died while checking a question


@dataclass
class Verdict:
    """One question's grade."""

    status: str
    message: str
    cycles: int | None = None
    par: int | None = None


@dataclass
class SubmissionResult:
    """Every question of a notebook's set, graded."""

    set_id: str | None
    questions: dict = field(default_factory=dict)     # qid -> Verdict
    seconds: float = 0.0
    failure: str = ""


def grade_submission(path, *, timeout: float = 600.0, set_id: str | None = None) -> SubmissionResult:
    """Grade one notebook in a judge process of its own; never raises for a bad submission."""
    start = time.perf_counter()
    path = Path(path)
    result = SubmissionResult(None)
    decided: dict[str, Verdict] = {}
    for _ in range(1 + RESTARTS):
        if _run_judge(path, timeout, set_id, decided, result) is None:
            break
    for qid in result.questions:
        if qid not in decided:
            decided[qid] = Verdict("crashed", "the judge could not finish this question")
    result.questions = {q: decided[q] for q in result.questions}
    result.seconds = time.perf_counter() - start
    return result


def _run_judge(path, timeout, set_id, decided, result) -> str | None:
    """One judge process over the questions not yet decided; None when it finished."""
    read, write = os.pipe()
    cmd = [sys.executable, "-m", "ipulab.course.grading.judge", str(path), "--timeout", str(timeout),
           "--result-fd", str(write)] + (["--set", set_id] if set_id else []) + \
        [arg for q in decided for arg in ("--skip", q)]
    env = dict(os.environ, IPULAB_CACHE_MIN_SECONDS="1e9", PYTHONHASHSEED="0")
    proc = subprocess.Popen(cmd, pass_fds=(write,), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    os.close(write)
    checking, done = None, False
    deadline = time.monotonic() + 2 * timeout + 120
    with os.fdopen(read, "r") as lines:
        for line in lines:
            event = json.loads(line)
            if "set" in event:
                result.set_id, result.failure = event["set"], event.get("failure", "")
                result.questions = {q: None for q in event["questions"]}
            elif "checking" in event:
                checking = event["checking"]
            elif "qid" in event:
                decided[event["qid"]] = Verdict(event["status"], event["message"],
                                                event.get("cycles"), event.get("par"))
                checking = None
            elif event.get("done"):
                done = True
            if time.monotonic() > deadline:
                break
    try:
        err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        err = proc.communicate()[1]
    if done:
        return None
    why = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
    if checking is not None:
        decided[checking] = Verdict("timed out" if proc.returncode in (-9, -24) else "crashed",
                                    f"checking this answer stopped the judge ({why[0][:200]})")
    elif result.set_id is None and not result.failure:
        result.failure = f"the judge failed: {why[0][:300]}"
        return None
    return why[0]




def result_to_dict(result: SubmissionResult) -> dict:
    return {"set_id": result.set_id, "seconds": result.seconds, "failure": result.failure,
            "questions": {q: asdict(v) for q, v in result.questions.items()}}
