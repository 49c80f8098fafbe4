"""The judge process: grades one submitted notebook where the submission cannot reach the grade.

    python -m ipulab.course.grading.judge NOTEBOOK --deadline T --result-fd FD --content-fd FD
                                          --parent PID [--set ID] [--skip QID]...

watchdog.py starts it and stops it. It reads the notebook as data from --content-fd: the bytes
discovery read and hashed, never the file NOTEBOOK again (NOTEBOOK names it, for its set). A
notebook that is not one gets a `failed` verdict for every question of its set, saying why.
It starts the
submission's process in a sandbox without the question bank (sandbox.py, sandboxed/), sends
it the code cells and receives what each check() was given (wire.py). Then it checks every
answer with its own bank (questions/evaluate.py): data as data, codelets compiled here from
their checked source, the submission's functions called back in the submission's process
(session.py). Events go to the watchdog, one JSON line each, on a pipe the submission has no
end of: the set and its questions, the question being checked, each verdict, done.

It bounds itself too, before it reads anything: it dies with its parent (PR_SET_PDEATHSIG), and
the kernel ends it at its deadline (an alarm left at its default action: no Python code needs
to run), at its CPU time, and at JUDGE_MEMORY of address space.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import resource
import signal
import time
from pathlib import Path

from ..questions.registry import questions, set_for_notebook, sets
from .discovery import NOTEBOOK_BYTES as MAX_NOTEBOOK_BYTES
from .sandbox import set_limit
from .session import judge_answers
from .watchdog import JUDGE_MEMORY      # (the judge of a set-10 solution peaks at 1.6 GB)

PR_SET_PDEATHSIG = 1


class NotANotebook(Exception):
    """The file cannot be graded as a notebook: says why."""


def held_content(fd: int) -> bytes:
    """The notebook's bytes from the watchdog's descriptor (read from its start, whoever read
    it before), which is then closed."""
    try:
        size = os.fstat(fd).st_size
        if size > MAX_NOTEBOOK_BYTES:
            raise NotANotebook(f"the file is {size / 2**20:,.0f} MB; a notebook may be at most "
                               f"{MAX_NOTEBOOK_BYTES // 2**20} MB")
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


def read_notebook(content: bytes) -> tuple[list[str], dict]:
    """(code cells' sources, metadata) of an untrusted notebook's bytes; NotANotebook says what
    is wrong with one that cannot be graded (not JSON, nested too deeply, cells or sources of
    the wrong types)."""
    try:
        nb = json.loads(content)
    except (ValueError, UnicodeDecodeError) as e:
        raise NotANotebook(f"the file is not a notebook (not JSON: {e})") from None
    except RecursionError:
        raise NotANotebook("the file is not a notebook (JSON nested too deeply)") from None
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise NotANotebook("the file is JSON but not a notebook (no list of cells)")
    sources = []
    for i, cell in enumerate(cells):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            src = cell.get("source", "")
            if isinstance(src, list) and all(isinstance(line, str) for line in src):
                src = "".join(src)
            if not isinstance(src, str):
                raise NotANotebook(f"the file is not a notebook: cell {i + 1}'s source is not "
                                   "text")
            sources.append(src)
    meta = nb.get("metadata")
    return sources, meta if isinstance(meta, dict) else {}


def set_of(path: Path, meta: dict, told: str | None = None) -> str | None:
    """The exercise set: as told, else from the metadata, else from the file name."""
    known = sets()
    for candidate in (told, (meta.get("ipulab") or {}).get("set")
                      if isinstance(meta.get("ipulab"), dict) else None):
        if isinstance(candidate, str) and candidate in known:
            return candidate
    found = set_for_notebook(path.name)
    return found.id if found else None


# --- the judge process -------------------------------------------------------------------------
def _emit(stream, **event) -> None:
    stream.write(json.dumps(event) + "\n")
    stream.flush()


def bound_self(deadline: float, parent: int) -> None:
    """The judge's own limits: it dies with the process that started it, and the kernel ends
    it at its deadline (plus a moment to report), at that much CPU time, and at JUDGE_MEMORY
    (or at the grader's own limits, where those are tighter: they cannot be raised)."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:          # it went while this process started
        os._exit(1)
    seconds = math.ceil(max(0.0, deadline - time.monotonic())) + 3
    set_limit(resource.RLIMIT_AS, JUDGE_MEMORY)
    set_limit(resource.RLIMIT_CPU, seconds, seconds + 5)
    set_limit(resource.RLIMIT_CORE, 0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(seconds)


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ipulab.course.grading.judge")
    p.add_argument("path")
    p.add_argument("--deadline", type=float, required=True, help="time.monotonic() to end by")
    p.add_argument("--parent", type=int, required=True)
    p.add_argument("--set")
    p.add_argument("--skip", action="append", default=[])
    p.add_argument("--result-fd", type=int, required=True)
    p.add_argument("--content-fd", type=int, required=True, help="the notebook's bytes")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = arguments(argv)
    bound_self(args.deadline, args.parent)
    out = os.fdopen(args.result_fd, "w")
    path = Path(args.path)
    try:
        cells, meta = read_notebook(held_content(args.content_fd))
        failure = ""
    except (NotANotebook, OSError) as e:
        cells, meta, failure = None, {}, str(e)
    set_id = set_of(path, meta, args.set)
    qids = [q.id for q in questions(set_id)] if set_id else []
    _emit(out, set=set_id, questions=qids,
          failure=failure or ("" if set_id else "cannot tell which exercise set this notebook "
                              "is: name it as its exercise notebook, or keep its metadata"))
    todo = [q for q in qids if q not in args.skip]
    if failure:
        for qid in todo:
            _emit(out, qid=qid, status="failed", message=failure)
    elif todo:
        for verdict in judge_answers(cells, todo, args.deadline,
                                     lambda qid: _emit(out, checking=qid)):
            _emit(out, **verdict)
    _emit(out, done=True)
    os._exit(0)              # (the watchdog has all it needs: no need to wait for a tidy exit)


if __name__ == "__main__":
    main()
