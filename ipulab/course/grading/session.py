"""The judge's session with one submission: the submission's process in its sandbox, the
answers it sends, the calls the checks make into it, and each question's verdict.

A question's status: the bank's check of the answer ('passed', 'failed', 'not answered');
'timed out', 'out of memory' or 'crashed' when the submission's process ended that way before
the check could finish; 'tampered' for every question of a notebook that tried to forge its
grade (wrote the progress record, replaced check() or numpy's comparisons, imported the
checker, printed ✓ lines, or changed what a check had set up in a graph).
"""
from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from signal import SIGXCPU

from ... import errors
from ...poplar.codelet_cache import cache_dir, cache_root
from ...poplar.program import Program
from ...poplar.state import GraphState
from ..questions.evaluate import evaluate
from ..questions.kit import warm_up
from ..questions.messages import where_in
from ..questions.pricing import model_estimates
from ..questions.registry import get
from .sandbox import Limits, Sandbox
from .wire import (FRAME_LIMIT, SESSION, TOTAL_LIMIT, WireError, judge_dumps, judge_loads,
                   read_frame, write_frame)

OUTPUT_LIMIT = 2**20
CELLS_SHARE = 0.75         # of the notebook's time, for its cells (the checks have the rest)
# one wording for every question a graded notebook does not answer (check() in a notebook
# speaks to the learner instead)
NOT_ANSWERED = ("not answered: the notebook gives no answer to this question (its cell still "
                "raises NotImplementedError, or no check() of it ran)")


class Fate(BaseException):
    """The submission's process ended (or must be treated so): a status for what depended on
    it. A BaseException, so no check mistakes it for a wrong answer."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Tampering(BaseException):
    """A forgery attempt seen while checking (e.g. a graph's set-up changed by a call)."""


RUNNER = "ipulab.course.grading.sandboxed.runner"


def sandbox_for(seconds: float) -> Sandbox:
    """The sandbox a submission runs in, for `seconds`: copies of ipulab's package without the
    question bank and of the compiled-codelet cache (numba finds its caches there; nothing
    written survives), and the executable cache off (its folder, with its signing secret, is
    not there at all)."""
    pkg = Path(__file__).resolve().parents[2]
    codelets = cache_dir()
    codelets.mkdir(parents=True, exist_ok=True)
    return Sandbox(copies=[pkg, codelets], hidden=[pkg / "course" / "questions"],
                   limits=Limits(wall_seconds=seconds, cpu_seconds=int(seconds) + 5),
                   env={"IPULAB_CACHE": "off", "IPULAB_CACHE_DIR": str(cache_root()),
                        "IPULAB_PROGRESS": "/tmp/home/progress.json", "MPLBACKEND": "Agg"})


class SandboxedRun:
    """The submission's process, started in its sandbox, and the pipes to it. It has
    `seconds` to run its cells; keep_until() then gives it until the notebook's deadline to
    answer the checks' calls."""

    def __init__(self, seconds: float):
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        try:
            self.box = sandbox_for(seconds).start(
                [sys.executable, "-m", RUNNER, str(to_r), str(from_w)], pass_fds=(to_r, from_w),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        finally:
            os.close(to_r), os.close(from_w)
        self.to, self.frm = os.fdopen(to_w, "wb"), os.fdopen(from_r, "rb")
        self.output, self.timed_out, self.cell = io.BytesIO(), False, None
        self.seconds, self.received = seconds, 0
        threading.Thread(target=self._drain, daemon=True).start()
        self.timer = threading.Timer(seconds, self._expire)
        self.timer.daemon = True
        self.timer.start()

    def _drain(self) -> None:
        for chunk in iter(lambda: self.box.stdout.read(65536), b""):
            if self.output.tell() < OUTPUT_LIMIT:
                self.output.write(chunk[:OUTPUT_LIMIT - self.output.tell()])

    def _expire(self) -> None:
        self.timed_out = True
        self.box.kill()

    def keep_until(self, deadline: float) -> None:
        """The cells have run: the process lives on until `deadline` (time.monotonic())."""
        self.timer.cancel()
        self.timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._expire)
        self.timer.daemon = True
        self.timer.start()

    def send(self, obj) -> None:
        try:
            write_frame(self.to, judge_dumps(obj))
        except (BrokenPipeError, OSError):
            raise self.fate() from None

    def receive(self, states=()):
        """The next frame from the submission, unpickled by the judge's rules; refused unread
        past FRAME_LIMIT bytes, or past TOTAL_LIMIT sent in all."""
        try:
            frame = read_frame(self.frm, min(FRAME_LIMIT, TOTAL_LIMIT - self.received))
        except EOFError:
            raise self.fate() from None
        self.received += len(frame)
        return judge_loads(frame, states)

    def fate(self) -> Fate:
        """Why the process is gone, as a status: from what the sandbox reported (a signal is
        a signal only when its first process says so), what it printed, and its limits."""
        try:
            self.box.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.box.kill()
            self.box.wait()
        status = self.box.status()
        where = f" in code cell {self.cell + 1}" if self.cell is not None else ""
        signal = status.get("signal")
        if self.timed_out:
            return Fate("timed out", f"the notebook ran out of time{where} (its cells may run "
                                     f"for {self.seconds:.0f} s: three quarters of its time)"
                        if self.cell is not None else "the notebook ran out of time")
        if signal == SIGXCPU:
            return Fate("timed out", f"the notebook used up its CPU time{where}")
        if self.box.out_of_memory() or b"MemoryError" in self.output.getvalue()[-4000:]:
            return Fate("out of memory", f"the notebook ran out of memory{where}")
        if "boot" in status:
            return Fate("crashed", f"the sandbox could not be set up: {status['boot']}")
        how = (f"killed by signal {signal}" if signal else f"exit code {status['exit']}"
               if "exit" in status else "its sandbox does not say how")
        last = self.printed().strip().splitlines()[-1:] or [""]
        return Fate("crashed", f"the notebook's process ended{where} ({how}) {last[0][:300]}")

    def printed(self) -> str:
        return self.output.getvalue().decode(errors="replace")

    def close(self) -> None:
        """End the sandbox: the checks are done, nothing in it is needed any more."""
        self.timer.cancel()
        self.box.close()

    def call(self, handle: int, args, kwargs):
        return call_through(self, handle, args, kwargs)


def call_through(channel, handle: int, args, kwargs):
    """Run the submission's function `handle` on the other side of channel (send, receive);
    graphs and programs it was given are taken back as they are after the call."""
    states = _states_in((args, kwargs))
    before = [dict(vars(s)) for s in states]
    channel.send(("call", handle, states, args, kwargs))
    reply = _shown(channel.receive(states))
    if reply[0] == "ok" and len(reply) == 5 and len(reply[1]) == len(states) and \
            len(reply[3]) == len(args) and isinstance(reply[4], dict):
        for state, old, new in zip(states, before, reply[1]):
            adopt(state, old, new)
        for mine, theirs in zip(args + tuple(kwargs.values()),
                                reply[3] + tuple(reply[4].get(k) for k in kwargs)):
            _take_back(mine, theirs)
        return reply[2]
    raise rebuilt(reply)


def _shown(reply):
    """A call's reply less what the call printed, which goes to this process's stdout: the
    check's, where evaluate() keeps it for the feedback."""
    if isinstance(reply, tuple) and len(reply) == 6 and isinstance(reply[5], str):
        sys.stdout.write(reply[5][:OUTPUT_LIMIT])
        return reply[:5]
    return reply


def _nothing():
    """What _StateFinder pickles in place of classes and functions (they hold no graph)."""


class _StateFinder(pickle.Pickler):
    """Walks a call's arguments (by pickling them to nowhere) to find the graphs they use."""

    def __init__(self, found):
        super().__init__(io.BytesIO(), protocol=5)
        self.found = found

    def persistent_id(self, obj):
        if isinstance(obj, GraphState) and all(obj is not s for s in self.found):
            self.found.append(obj)
        return None

    def reducer_override(self, obj):
        if obj is not _nothing and isinstance(obj, (type, types.FunctionType, types.MethodType,
                                                    types.BuiltinFunctionType)):
            return _nothing, ()
        return NotImplemented


def _states_in(obj) -> list:
    found: list = []
    _StateFinder(found).dump(obj)
    return found


def _take_back(mine, theirs) -> None:
    """An argument the call may have added to (a program sequence, a list or dict), as it is
    after the call."""
    if isinstance(mine, Program) and type(theirs) is type(mine):
        vars(mine).clear()
        vars(mine).update(vars(theirs))
    elif isinstance(mine, list) and isinstance(theirs, list):
        mine[:] = theirs
    elif isinstance(mine, dict) and isinstance(theirs, dict):
        mine.clear()
        mine.update(theirs)


_KEEP = ("target", "replication_factor", "replica_tiles")


def adopt(state, old: dict, new) -> None:
    """Take a graph state back from a call: it may only have grown. The target stays the
    judge's own; variables, handles and vertices the check made must be as they were."""
    try:
        _compare(old, new)
    except (KeyError, AttributeError, TypeError, ValueError, IndexError):
        raise Tampering("a call sent back a graph that is not one") from None
    model_estimates(new["vertices"].groups, [g.estimates for g in old["vertices"].groups])
    vars(state).clear()
    vars(state).update(new)
    vars(state).update({k: old[k] for k in _KEEP})


def _compare(old: dict, new: dict) -> None:
    """Tampering unless the graph state `new` holds all of `old` as it was."""
    if not isinstance(new, dict):
        raise TypeError("not a graph state")
    old_vars, new_vars = old["variables"], new.get("variables", [])
    if len(new_vars) < len(old_vars) or any(
            (a.name, a.dtype, a.shape, a.offset) != (b.name, b.dtype, b.shape, b.offset) or
            (a.values is not None and (b.values is None or not (a.values == b.values).all()))
            for a, b in zip(old_vars, new_vars)):
        raise Tampering("your function changed or removed variables the check had made")
    handles = new.get("handles", {})
    for name, (kind, tensor) in old["handles"].items():
        if name not in handles or handles[name][0] != kind or \
                not (handles[name][1].ids.shape == tensor.ids.shape and
                     (handles[name][1].ids == tensor.ids).all()):
            raise Tampering(f"your function changed the check's host handle {name!r}")
    old_groups, new_groups = old["vertices"].groups, new["vertices"].groups
    if len(new_groups) < len(old_groups) or any(
            (a.cs, a.first, a.n) != (b.cs, b.first, b.n) or a.codelet.__name__ != b.codelet.__name__
            for a, b in zip(old_groups, new_groups)):
        raise Tampering("your function changed vertices the check had made")


def rebuilt(reply) -> BaseException:
    """The exception a call raised in the submission's process, as the checks expect it."""
    if not (isinstance(reply, tuple) and len(reply) == 5 and reply[0] == "raised" and
            all(isinstance(x, str) for x in reply[1:4]) and _frames(reply[4])):
        return Tampering("the submission's process answered a call with something else")
    _, path, name, message, frames = reply
    where = where_in(frames)
    if name == "MemoryError":
        return Fate("out of memory", f"your code ran out of memory{where}")
    cls = getattr(errors, name, None) if path == f"ipulab.errors.{name}" else None
    if name == "NotImplementedError":
        e = NotImplementedError(message)
    elif isinstance(cls, type) and issubclass(cls, errors.IpuLabError):
        e = cls.__new__(cls)
        Exception.__init__(e, message)
    else:
        e = type(name if name.isidentifier() else "Error", (Exception,), {})(message)
    e.__ipulab_where__ = where
    return e


def _frames(frames) -> bool:
    """A traceback as the runner sends it: (file name, line number, source line) frames."""
    return isinstance(frames, list) and len(frames) <= 20 and all(
        isinstance(f, tuple) and len(f) == 3 and isinstance(f[0], str) and
        isinstance(f[1], int) and isinstance(f[2], str) for f in frames)


# --- the questions -------------------------------------------------------------------------------
def run_notebook(sub: SandboxedRun, cells: list[str]) -> tuple:
    """Run the cells in the sandbox: (answers by question, each cell's outcome, what was
    noted as forgery, the process's fate if it ended before the cells did)."""
    answers, outcomes, tampered, gone = {}, [], [], None
    try:
        sub.send(cells)
        while True:
            message = sub.receive()
            kind = message[0] if isinstance(message, tuple) and message else None
            if kind == "cell" and len(message) == 2 and isinstance(message[1], int):
                sub.cell = message[1]
            elif kind == "answer" and len(message) == 3 and isinstance(message[2], (bytes, str)):
                if not answers:     # there will be a check: start numba while the cells run
                    warm_up()
                answers[str(message[1])] = message[2]
            elif kind == "done" and len(message) == 3 and _outcomes(message[1]) and \
                    isinstance(message[2], list):
                outcomes, tampered = message[1], [str(t) for t in message[2]]
                break
            else:
                raise WireError("a message that is none of the runner's")
    except Fate as f:
        gone = f
    except WireError as e:
        tampered.append(f"the notebook's process sent what the judge refuses ({e})")
    return answers, outcomes, tampered, gone


def _outcomes(outcomes) -> bool:
    """Each cell's outcome as the runner sends it: (None or (error name, message), [qid])."""
    return isinstance(outcomes, list) and all(
        isinstance(o, tuple) and len(o) == 2 and isinstance(o[1], list) and
        (o[0] is None or isinstance(o[0], tuple) and len(o[0]) == 2) for o in outcomes)


def judge_answers(cells: list[str], qids: list[str], deadline: float, checking):
    """Run the submission's cells (for three quarters of the time left until `deadline`, a
    time.monotonic(): the checks share the rest), check its answers; yield one verdict dict
    per question. The verdicts that need no check (no answer, a forgery) come first, so
    that the checks' time is shared among the answers that are checked."""
    sub = SandboxedRun(max(0.5, CELLS_SHARE * (deadline - time.monotonic())))
    answers, outcomes, tampered, gone = run_notebook(sub, cells)
    sub.keep_until(deadline)
    SESSION.call = sub.call
    checked = [] if tampered else [q for q in qids if isinstance(answers.get(q), bytes)]
    try:
        for qid in [q for q in qids if q not in checked]:
            yield verdict(get(qid), answers, outcomes, tampered, gone)
        for qid in checked:
            checking(qid)
            yield verdict(get(qid), answers, outcomes, tampered, gone)
    finally:
        SESSION.call = None
        sub.close()


def verdict(q, answers, outcomes, tampered, gone) -> dict:
    """Question q's verdict (a dict for the grader) from what the submission sent."""
    par = None if q.par is None else next(
        (v for v in (q.par.cycles, q.par.seconds, q.par.memory) if v is not None), None)
    if tampered:
        return dict(qid=q.id, status="tampered", par=par,
                    message="forgery attempt detected: " + "; ".join(tampered[:3]))
    if q.id not in answers:
        status, message = _unanswered(q.id, outcomes, gone)
        return dict(qid=q.id, status=status, message=message, par=par)
    data = answers[q.id]
    if isinstance(data, str):
        return dict(qid=q.id, status="failed", par=par,
                    message=f"your answer could not be sent for grading: {data}")
    SESSION.trust_estimates, SESSION.codelets = q.prices, {}
    try:
        status, message, metrics, printed = evaluate(q, judge_loads(data))
        message += f"\n  Your code printed:\n{printed.rstrip()}" if printed.strip() else ""
    except Fate as f:
        status, message, metrics = f.status, f.message, {}
    except Tampering as t:
        status, message, metrics = "tampered", f"forgery attempt detected: {t}", {}
    except WireError as e:
        status, message, metrics = "failed", str(e), {}
    if status == "not answered":
        message = NOT_ANSWERED
    return dict(qid=q.id, status=status, message=message, par=par,
                cycles=(metrics or {}).get("cycles"))


def _unanswered(qid, outcomes, gone) -> tuple[str, str]:
    for error, checked in outcomes:
        if qid in checked and error is not None:
            name, text = error
            if name == "NotImplementedError":
                return "not answered", NOT_ANSWERED
            if name == "MemoryError":
                return "out of memory", "the cell that checks it ran out of memory"
            return "failed", f"the cell that checks it raised {name}: {text}"
    if gone is not None:
        return gone.status, gone.message
    return "not answered", NOT_ANSWERED
