"""The judge: grades one submitted notebook where the submission cannot reach the grade.

grade_submission(path), in a grading worker, starts the judge process on the notebook and reads
its verdicts. The judge reads the notebook as data (size-capped), starts the submission's
process in a sandbox with the question bank hidden (sandbox.py, runner.py), sends it the code
cells and receives what each check() was given (wire.py). Then it checks every answer with its
own bank (api.evaluate): data as data, codelets recompiled from their source, and the
submission's functions called back in the submission's process. Verdicts go to the worker on
a pipe the submission has no end of. Statuses are STATUSES; a notebook the submission broke
(timed out, out of memory, crashed) still gets a status for every question.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATUSES = ("passed", "failed", "not answered", "timed out", "out of memory", "crashed",
            "tampered")
MAX_NOTEBOOK_BYTES = 64 * 2**20
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


class NotANotebook(Exception):
    """The file cannot be graded as a notebook: says why."""


def read_notebook(path: Path) -> tuple[list[str], dict]:
    """(code cells' sources, metadata) of an untrusted notebook file."""
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise NotANotebook(f"the file is {size / 2**20:,.0f} MB; a notebook may be at most "
                           f"{MAX_NOTEBOOK_BYTES // 2**20} MB")
    try:
        nb = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as e:
        raise NotANotebook(f"the file is not a notebook (not JSON: {e})") from None
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise NotANotebook("the file is JSON but not a notebook (no list of cells)")
    sources = []
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            src = cell.get("source", "")
            src = "".join(src) if isinstance(src, list) else src
            if not isinstance(src, str):
                raise NotANotebook("a code cell's source is not text")
            sources.append(src)
    meta = nb.get("metadata")
    return sources, meta if isinstance(meta, dict) else {}


def set_of(path: Path, meta: dict, told: str | None = None) -> str | None:
    """The exercise set: as told, else from the metadata, else from the file name."""
    from .registry import set_for_notebook, sets
    known = sets()
    for candidate in (told, (meta.get("ipulab") or {}).get("set")
                      if isinstance(meta.get("ipulab"), dict) else None):
        if isinstance(candidate, str) and candidate in known:
            return candidate
    found = set_for_notebook(path.name)
    return found.id if found else None


# --- the worker's side -----------------------------------------------------------------------
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
    cmd = [sys.executable, "-m", "ipulab.course.judge", str(path), "--timeout", str(timeout),
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


# --- the judge process -------------------------------------------------------------------------
def _emit(stream, **event) -> None:
    stream.write(json.dumps(event) + "\n")
    stream.flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ipulab.course.judge")
    p.add_argument("path")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--set")
    p.add_argument("--skip", action="append", default=[])
    p.add_argument("--result-fd", type=int, required=True)
    args = p.parse_args(argv)
    out = os.fdopen(args.result_fd, "w")
    path = Path(args.path)
    try:
        cells, meta = read_notebook(path)
        failure = ""
    except (NotANotebook, OSError) as e:
        cells, meta, failure = None, {}, str(e)
    set_id = set_of(path, meta, args.set)
    from .registry import questions
    qids = [q.id for q in questions(set_id)] if set_id else []
    _emit(out, set=set_id, questions=qids,
          failure=failure or ("" if set_id else "cannot tell which exercise set this notebook "
                              "is: name it as its exercise notebook, or keep its metadata"))
    todo = [q for q in qids if q not in args.skip]
    if failure:
        for qid in todo:
            _emit(out, qid=qid, status="failed", message=failure)
    elif todo:
        from .session import judge_answers
        for verdict in judge_answers(cells, todo, args.timeout,
                                     lambda qid: _emit(out, checking=qid)):
            _emit(out, **verdict)
    _emit(out, done=True)
    return 0


def result_to_dict(result: SubmissionResult) -> dict:
    return {"set_id": result.set_id, "seconds": result.seconds, "failure": result.failure,
            "questions": {q: asdict(v) for q, v in result.questions.items()}}


if __name__ == "__main__":
    sys.exit(main())
