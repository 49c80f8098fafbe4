"""A submission's process, run inside the sandbox by the judge: it runs the notebook's code cells
as a kernel would, keeps what check() is given instead of checking it, then runs the judge's
calls of the submission's functions. Nothing it says is believed: the judge checks answers
itself, and what this process notices (a forged record, a patched check) only adds a
'tampered' flag.

    python -m ipulab.course.grading.sandboxed.runner FD_IN FD_OUT   (frames: see ../wire.py)
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import traceback
import types
from pathlib import Path

import numpy as np

from .... import course
from ....poplar.program import Program
from ..wire import Handles, read_frame, submission_dumps, write_frame

_CHECK = re.compile(r"""check\(\s*["']([\w.]+)["']""")
_NONE = object()
# the checker's own modules: a submission has no reason to import them (those of questions/
# and learner/ are not even in the sandbox)
_CHECKER = ("ipulab.course.questions", "ipulab.course.learner", "ipulab.course.grading")
# what the submission may replace only to forge a result: compared before and after
_WATCHED = ("allclose", "array_equal", "isclose", "array_equiv")
PRINTED_CHARS = 64 * 1024     # of what one call prints, sent to the judge (it shows less)


class AnswerRelay:
    """Sends the judge each answer as check() is given it, and notes what looks like forgery."""

    def __init__(self, chan_out):
        self.chan_out = chan_out
        self.tampered: list[str] = []
        self.handles = Handles()
        self.stub = self.check           # the one object ipulab.course.check must stay
        self.pid = os.getpid()

    def send(self, message) -> None:
        sys.stdout.flush()
        write_frame(self.chan_out, submission_dumps(message, self.handles))

    def check(self, question_id, answer=_NONE, *args, **kwargs) -> bool:
        """Stands in for ipulab.course.check while grading: the answer goes to the judge."""
        if answer is _NONE or os.getpid() != self.pid:     # (or in a forked copy)
            return False
        try:
            data = submission_dumps(answer, self.handles)
        except Exception as e:             # an answer that cannot be sent is a wrong answer
            data = f"{type(e).__name__}: {e}"
        self.send(("answer", str(question_id), data))
        print(f"(submitted {question_id} for grading)")
        return True

    def forged(self, what: str):
        def record(*args, **kwargs):
            self.tampered.append(f"called {what}{args[:2]!r}: the grade comes from the judge, "
                                 "not from a record the notebook writes")
        return record


class _Watched:
    """The notebook's stdout, passed through; a line that looks like a passed check (which
    only the real check() prints, and it is not here) is noted as forgery."""

    _TICK = re.compile(r"(^|\n)\s*✓ ex\d+\.\w+")

    def __init__(self, stream, sub: AnswerRelay):
        self.stream, self.sub = stream, sub

    def write(self, text):
        if self._TICK.search(text) and not any("✓" in t for t in self.sub.tampered):
            self.sub.tampered.append("it printed ✓ lines as if checks had passed")
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


class CheckerImports:
    """An import finder that notes every attempt to import the checker's modules: they are
    not in the sandbox, so the attempt fails, and it is a forgery attempt."""

    def __init__(self, sub: AnswerRelay):
        self.sub = sub

    def find_spec(self, name, path=None, target=None):
        note = f"tried to import the checker's module {name}"
        if name.startswith(_CHECKER) and name not in sys.modules and note not in self.sub.tampered:
            self.sub.tampered.append(note)
        return None


def _course_stub(sub: AnswerRelay) -> types.ModuleType:
    """ipulab.course as a submission sees it while graded: check() hands the answer over,
    the other calls do nothing, and the progress record is a stand-in that notes forgery."""
    course.check = sub.stub
    course.hint = course.hint_button = course.doctor = course.progress = lambda *a, **k: None
    learner = types.ModuleType("ipulab.course.learner")
    learner.__path__ = []
    record = types.ModuleType("ipulab.course.learner.record")
    record.record_check = sub.forged("record_check")
    record.record_hint = record.progress = lambda *a, **k: None
    record.path = lambda: Path("/tmp/home/progress.json")
    learner.record = record
    sys.modules.update({learner.__name__: learner, record.__name__: record})
    return course


def _fingerprint() -> dict:
    seen = {name: getattr(np, name) for name in _WATCHED}
    seen.update({f"testing.{n}": getattr(np.testing, n) for n in dir(np.testing)
                 if n.startswith("assert_")})
    return seen


def _noticed(sub: AnswerRelay, course, before: dict) -> None:
    if course.check is not sub.stub:
        sub.tampered.append("replaced ipulab.course.check")
    for name, fn in before.items():
        owner, attr = (np.testing, name[8:]) if name.startswith("testing.") else (np, name)
        if getattr(owner, attr, None) is not fn:
            sub.tampered.append(f"replaced numpy.{name}")


def _cell_error(result) -> tuple[str, str] | None:
    err = result.error_before_exec or result.error_in_exec
    if err is None:
        return None
    return type(err).__name__, str(err)[:500]


def run_cells(cells: list[str], sub: AnswerRelay) -> list:
    """Run every cell like a kernel (an error does not stop the rest); per cell, the error
    (name, message) or None, and the questions it checks."""
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance(colors="NoColor", history_length=0)
    course = _course_stub(sub)
    sys.stdout = _Watched(sys.stdout, sub)
    sys.meta_path.insert(0, CheckerImports(sub))
    before = _fingerprint()
    outcomes, me = [], os.getpid()
    for i, source in enumerate(cells):
        sub.send(("cell", i))
        outcomes.append((_cell_error(shell.run_cell(source, store_history=False)),
                         _CHECK.findall(source)))
        if os.getpid() != me:            # a process the notebook forked: it stops here
            os._exit(0)
    _noticed(sub, course, before)
    return outcomes


def _raised(e: BaseException) -> tuple:
    """What a call raised, as data: the judge tells from its frames where in the notebook's
    code it came from."""
    cls = type(e)
    path = f"{cls.__module__}.{cls.__qualname__}"
    frames = [(f.filename, f.lineno or 0, (f.line or "")[:300])
              for f in traceback.extract_tb(e.__traceback__)[-20:]]
    return ("raised", path, cls.__name__, str(e)[:4000], frames)


def _back(args) -> tuple:
    """The arguments a call may have added to (programs, lists, dicts), to send back; None
    for the others."""
    return tuple(a if isinstance(a, (Program, list, dict)) else None for a in args)


class _Printed(io.StringIO):
    """What a call prints: its first PRINTED_CHARS characters, for the judge's feedback."""

    def write(self, text: str) -> int:
        super().write(text[:max(0, PRINTED_CHARS - self.tell())])
        return len(text)


def run_call(message, handles: Handles) -> bytes:
    """One call of the judge's, run: the reply holds the result and the graphs and programs
    the call was given, as they are after it (or what it raised), then what it printed."""
    _, handle, states, args, kwargs = message
    printed = _Printed()
    try:
        with contextlib.redirect_stdout(printed):
            result = handles.objects[handle](*args, **kwargs)
        return submission_dumps(("ok", [vars(s) for s in states], result, _back(args),
                                 dict(zip(kwargs, _back(kwargs.values()))), printed.getvalue()),
                                handles, states)
    except BaseException as e:          # SystemExit too: the judge decides what it means
        return submission_dumps(_raised(e) + (printed.getvalue(),), handles)


def serve(chan_in, chan_out, handles: Handles) -> None:
    """Run the judge's calls until it says done."""
    while True:
        message = handles.loads(read_frame(chan_in))
        if message[0] == "done":
            return
        reply = run_call(message, handles)
        sys.stdout.flush()
        write_frame(chan_out, reply)


def main(argv=None) -> None:
    fd_in, fd_out = (int(x) for x in (argv or sys.argv[1:3]))
    chan_in, chan_out = os.fdopen(fd_in, "rb"), os.fdopen(fd_out, "wb")
    sub = AnswerRelay(chan_out)
    cells = sub.handles.loads(read_frame(chan_in))
    outcomes = run_cells(cells, sub)
    sub.send(("done", outcomes, sub.tampered))
    serve(chan_in, chan_out, sub.handles)


if __name__ == "__main__":
    main()
