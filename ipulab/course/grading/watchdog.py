"""grade_submission(path): one notebook graded by judge processes of its own, bounded in time.

Runs in a grading worker (a dask task, or the grader itself). The notebook has `timeout`
seconds in all, counted from here: starting the judge, running its cells in the sandbox (for
three quarters of the time at most) and checking every answer. A check may use an even share of
the time left (the time left over the questions left to check; what a quick check leaves passes
to the next; the judge decides the questions that need no check — no answer sent, a forgery —
before the first check, so they take no share). A check still running when its share is used
up is stopped however it runs — a program or a codelet that never ends in the judge, a call
into the submission that never returns — by killing the judge, and is recorded `timed out`; a
new judge checks the questions left, in the time left. Questions left unchecked when the time
is up are `timed out` too, so every question of the set has a status when this returns, and it
returns within about `timeout` seconds.

The judge (judge.py) also bounds itself, in case this process cannot: it dies with its parent,
and the kernel stops it at its deadline (an alarm), at its CPU time and at its address space.
Its verdicts come on a pipe the submission has no end of, one JSON line each.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..questions.registry import questions, set_for_notebook
from .discovery import Refused, read_once

STATUSES = ("passed", "failed", "not answered", "timed out", "out of memory", "crashed",
            "tampered")
JUDGE = "ipulab.course.grading.judge"
JUDGE_MEMORY = 4 * 2**30       # the judge's address space (judge.py sets it)
LINE_BYTES = 2**20             # an event line of the judge's
REPORT_SECONDS = 2.0           # what a judge past its deadline has to end
MIN_RUN_SECONDS = 1.0          # a new judge is started only with at least this much time left


@dataclass
class Verdict:
    """One question's grade."""

    status: str
    message: str
    cycles: int | None = None
    par: float | None = None


@dataclass
class SubmissionResult:
    """Every question of a notebook's set, graded."""

    set_id: str | None
    questions: dict = field(default_factory=dict)     # qid -> Verdict
    seconds: float = 0.0
    failure: str = ""


@dataclass
class JudgeRun:
    """What one judge process did: the question it was checking when it ended, and how."""

    deadline: float             # the notebook's (time.monotonic())
    checking: str | None = None
    started: float = 0.0        # when that check started
    share: float = 0.0          # the seconds that check may take
    done: bool = False          # it said so: every question it was given is decided
    stopped: bool = False       # out of time: its check's share, or the notebook's time
    error: str = ""             # why it ended otherwise (its last line on stderr)

    def limit(self) -> float:
        """When the judge is stopped: at the end of its check's share, else of the time."""
        return self.deadline if self.checking is None else \
            min(self.deadline, self.started + self.share)


def grade_submission(path, *, timeout: float = 600.0, set_id: str | None = None,
                     content: bytes | None = None) -> SubmissionResult:
    """Grade one notebook, within about `timeout` seconds; never raises for a bad submission.
    content: the notebook's bytes as discovery read them (the judge grades these, and path
    only names the notebook); without it, the file is read once here, the same way."""
    start = time.monotonic()
    result, decided = SubmissionResult(None), {}
    if content is None:
        try:
            content = read_once(Path(path), Path(path).name)
        except Refused as r:
            return _refused(Path(path), set_id, r.refusal.status, r.refusal.message)
    with tempfile.TemporaryFile() as held:      # (no name: nothing else can open it)
        held.write(content)
        held.flush()
        run = _run_judges(Path(path), (start, timeout), set_id, decided, result, held.fileno())
    return _decided(result, decided, run, timeout, start)


def _refused(path: Path, set_id: str | None, status: str, message: str) -> SubmissionResult:
    """A notebook not read (a link, too big, ...): every question of its set (as told, else
    by its name) has the refusal's status and message."""
    found = set_id or getattr(set_for_notebook(path.name), "id", None)
    return SubmissionResult(found, {q.id: Verdict(status, message) for q in questions(found)}
                            if found else {}, 0.0, message)


def _run_judges(path: Path, time_given: tuple, set_id, decided: dict, result,
                content_fd: int) -> JudgeRun:
    """Judges, one after the other, until the questions are decided or the time given
    (start, seconds) is up; the last one's run."""
    start, timeout = time_given
    while True:
        run = _run_judge(path, start + timeout, set_id, decided, result, content_fd)
        if run.checking is not None:
            decided[run.checking] = _ended_check(run, timeout)
        left = [q for q in result.questions if q not in decided]
        if run.done or run.checking is None or not left or \
                run.deadline - time.monotonic() < MIN_RUN_SECONDS:
            return run


def _decided(result: SubmissionResult, decided: dict, run: JudgeRun, timeout: float,
             start: float) -> SubmissionResult:
    """The result, every question with a verdict (those left: timed out, or crashed)."""
    if result.set_id is None and not result.questions and not result.failure:
        result.failure = f"the judge could not grade this notebook ({run.error or 'no reason'})"
    out_of_time = run.stopped or run.deadline - time.monotonic() < MIN_RUN_SECONDS
    for qid in result.questions:
        decided.setdefault(qid, Verdict(
            "timed out", f"not checked: the notebook's {timeout:g} s were used up")
            if out_of_time else Verdict("crashed", f"not checked: the judge stopped "
                                                   f"({run.error[:200]})"))
    result.questions = {q: decided[q] for q in result.questions}
    result.seconds = time.monotonic() - start
    return result


def _ended_check(run: JudgeRun, timeout: float) -> Verdict:
    """The verdict of the question whose check ended its judge."""
    if "MemoryError" in run.error:
        return Verdict("out of memory", "checking this answer took the judge past its memory "
                                        f"({JUDGE_MEMORY // 2**30} GB of address space)")
    if run.stopped:
        return Verdict("timed out", f"checking this answer took longer than its share of the "
                                    f"notebook's time ({run.share:.0f} of {timeout:g} s): it "
                                    "was stopped")
    return Verdict("crashed", f"checking this answer stopped the judge ({run.error[:200]})")


def _judge_command(path: Path, deadline: float, set_id, decided, fd: int,
                   content_fd: int) -> list[str]:
    return [sys.executable, "-m", JUDGE, str(path), "--deadline", repr(deadline),
            "--result-fd", str(fd), "--content-fd", str(content_fd),
            "--parent", str(os.getpid())] + \
        (["--set", set_id] if set_id else []) + [a for q in decided for a in ("--skip", q)]


def _run_judge(path: Path, deadline: float, set_id, decided: dict, result,
               content_fd: int) -> JudgeRun:
    """One judge process over the questions not yet decided, until it ends or is stopped; it
    reads the notebook's bytes from content_fd."""
    read, write = os.pipe()
    env = dict(os.environ, IPULAB_CACHE_MIN_SECONDS="1e9", PYTHONHASHSEED="0")
    run = JudgeRun(deadline)
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                _judge_command(path, deadline, set_id, decided, write, content_fd),
                pass_fds=(write, content_fd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=err, env=env, start_new_session=True)
        finally:
            os.close(write)
        with os.fdopen(read, "rb") as events:
            _watch(events, decided, result, run)
        _end(proc, run)
        if not run.done:
            err.seek(max(0, err.seek(0, os.SEEK_END) - 4000))
            lines = err.read().decode(errors="replace").strip().splitlines()
            run.error = lines[-1] if lines else f"exit status {proc.returncode}"
    return run


def _watch(events, decided: dict, result, run: JudgeRun) -> None:
    """Read the judge's events until it ends, or until it is out of time (run.stopped)."""
    pending = b""
    with selectors.DefaultSelector() as sel:
        sel.register(events, selectors.EVENT_READ)
        while True:
            if not sel.select(max(0.0, run.limit() - time.monotonic())):
                run.stopped = True
                return
            chunk = os.read(events.fileno(), 65536)
            if not chunk:
                return
            *lines, pending = (pending + chunk).split(b"\n")
            if len(pending) > LINE_BYTES:
                return
            for line in lines:
                _event(line, decided, result, run)
            if run.done:
                return


def _event(line: bytes, decided: dict, result, run: JudgeRun) -> None:
    """Take one event of the judge's into the result."""
    try:
        event = json.loads(line)
    except ValueError:
        return
    if not isinstance(event, dict):
        return
    if "set" in event:
        result.set_id, result.failure = event["set"], str(event.get("failure", ""))
        result.questions = {str(q): None for q in event.get("questions", [])}
    elif "checking" in event:
        left = [q for q in result.questions if q not in decided]
        run.checking, run.started = str(event["checking"]), time.monotonic()
        run.share = max(0.0, run.deadline - run.started) / max(1, len(left))
    elif "qid" in event:
        decided[str(event["qid"])] = Verdict(str(event.get("status")), str(event.get("message")),
                                             event.get("cycles"), event.get("par"))
        run.checking = None
    elif event.get("done"):
        run.done = True


def _end(proc, run: JudgeRun) -> None:
    """Kill the judge's process group once it is done (its verdicts are all out) or out of
    time; else give it a moment to end. One its own limits ended (alarm, CPU time) was out of
    time too."""
    if run.stopped or run.done:
        _kill(proc)
    try:
        proc.wait(timeout=REPORT_SECONDS)
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.wait()
    if proc.returncode in (-signal.SIGALRM, -signal.SIGXCPU):
        run.stopped = True


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
