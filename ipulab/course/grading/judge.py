"""The judge process: grades one submitted notebook where the submission cannot reach the grade.

    python -m ipulab.course.grading.judge NOTEBOOK --timeout S --result-fd FD [--set ID] [--skip QID]

watchdog.py starts it and bounds it. The judge reads the notebook as data (size-capped), starts the submission's
process in a sandbox with the question bank hidden (sandbox.py, sandboxed/runner.py), sends it
the code cells and receives what each check() was given (wire.py). Then it checks every answer with its
own bank (questions/evaluate.py): data as data, codelets recompiled from their source, and the
submission's functions called back in the submission's process. Verdicts go to the worker on
a pipe the submission has no end of. Statuses are STATUSES; a notebook the submission broke
(timed out, out of memory, crashed) still gets a status for every question.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..questions.registry import questions, set_for_notebook, sets
from .session import judge_answers

MAX_NOTEBOOK_BYTES = 64 * 2**20


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ipulab.course.grading.judge")
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
    qids = [q.id for q in questions(set_id)] if set_id else []
    _emit(out, set=set_id, questions=qids,
          failure=failure or ("" if set_id else "cannot tell which exercise set this notebook "
                              "is: name it as its exercise notebook, or keep its metadata"))
    todo = [q for q in qids if q not in args.skip]
    if failure:
        for qid in todo:
            _emit(out, qid=qid, status="failed", message=failure)
    elif todo:
        for verdict in judge_answers(cells, todo, args.timeout,
                                     lambda qid: _emit(out, checking=qid)):
            _emit(out, **verdict)
    _emit(out, done=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
