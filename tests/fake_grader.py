"""A stand-in for ipulab.course.grading.watchdog.grade_submission in the class grading tests: fast, no
sandbox. What it answers is read from the notebook's metadata["fake"]; it lives at module
level so that dask's worker processes can import it."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ipulab.course.grading.watchdog import SubmissionResult, Verdict
from ipulab.course.questions.registry import questions, set_for_notebook


def write_notebook(path, set_id: str | None = "ex01", **fake) -> Path:
    """A notebook file the fake grader understands: the first fake["passed"] questions pass,
    the others fail with fake["message"]; fake["die_once"] (a marker file) kills the worker
    the first time, fake["die"] every time."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"ipulab": {"set": set_id}, "fake": fake} if set_id else {"fake": fake}
    path.write_text(json.dumps({"cells": [], "metadata": meta, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


def grade(path, *, timeout: float = 600.0, set_id: str | None = None,
          content: bytes | None = None) -> SubmissionResult:
    """The fake judge's result for one notebook: of content, the bytes discovery read, as the
    judge grades them (the file only without them)."""
    try:
        nb = json.loads(Path(path).read_bytes() if content is None else content)
    except ValueError as e:
        return SubmissionResult(None, {}, 0.01, f"not a notebook: {e}")
    fake = nb["metadata"].get("fake", {})
    if fake.get("die") or (fake.get("die_once") and not os.path.exists(fake["die_once"])):
        if fake.get("die_once"):
            Path(fake["die_once"]).touch()
        os._exit(1)                                    # the worker process dies, mid-task
    if fake.get("raise"):
        raise ValueError(fake["raise"])
    told = nb["metadata"].get("ipulab", {}).get("set") or set_for_notebook(Path(path).name)
    set_id = getattr(told, "id", told)
    if set_id is None:
        return SubmissionResult(None, {}, 0.01, "cannot tell which set this notebook answers")
    verdicts = {}
    for i, q in enumerate(questions(set_id)):
        ok = i < fake.get("passed", 0)
        verdicts[q.id] = Verdict("passed" if ok else "failed",
                                 "" if ok else fake.get("message", "wrong"),
                                 cycles=1000 + i if ok else None, par=1200 if ok else None)
    return SubmissionResult(set_id, verdicts, 0.01)
