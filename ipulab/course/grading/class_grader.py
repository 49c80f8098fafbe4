"""`ipulab course grade SUBMISSIONS`: a class's notebooks graded into a gradebook, on dask.

The notebooks are found by discovery.py, which reads each once. Each is one task for the judge
(watchdog.py's grade_submission: one judge process, bounded), given the bytes discovery hashed
(never the file again), on a local dask cluster or a running scheduler;
this process alone writes the gradebook, as each task ends, so an interrupted run loses nothing
graded and a rerun grades only what changed.
"""
from __future__ import annotations

import contextlib
import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from ...errors import IpuLabError, SandboxError
from ..questions.registry import questions
from .discovery import FoundNotebook, GradingError, discover
from .gradebook import Gradebook, GradebookError, check_private, write_csv
from .pages import check_feedback, write_feedback
from .sandbox import preflight
from .watchdog import grade_submission

CONNECT_SECONDS = 10           # to reach a dask scheduler given by address


class LostTask(Exception):
    """A notebook's task never finished: every worker that ran it died."""


# --- grading ------------------------------------------------------------------------------------
@dataclass
class Run:
    """What one grading run did, notebook by notebook."""

    found: int = 0
    unchanged: int = 0        # graded before with the same bytes
    graded: int = 0           # by the judge, now, every question of its set
    not_graded: int = 0       # read by the judge, but its set cannot be told
    refused: int = 0          # not read: a link, a special file, ...
    lost: int = 0             # every worker running it died; graded again next run

    def describe(self) -> str:
        return (f"{self.found} notebook(s): {self.graded} graded now, {self.unchanged} "
                f"unchanged since they were graded, {self.not_graded} not graded (its set "
                f"cannot be told), {self.refused} refused, {self.lost} lost (graded again on "
                "the next run)")


def default_grader():
    """The judge's grade_submission, once the sandbox is known to work here."""
    try:
        preflight()
    except SandboxError as e:
        raise GradingError(f"submissions cannot be sandboxed here: {e}") from None
    return grade_submission


def grade_class(submissions: list[FoundNotebook], book: Gradebook, *, grader=None,
                workers: int = 2, scheduler: str | None = None, timeout: float = 600.0,
                progress=None) -> Run:
    """Grade the submissions the gradebook does not hold yet (new, or changed since), each
    recorded as it ends. workers=0 without a scheduler grades here, one at a time, without
    dask. progress(submission, what) hears of each notebook recorded."""
    todo = [s for s in submissions if book.needs_grading(s.student, s.notebook, s.content_hash)]
    run = Run(found=len(submissions), unchanged=len(submissions) - len(todo))
    tell = progress or ProgressLine(len(todo))
    for s in todo:
        if s.refusal:
            book.record_uniform(s.student, s.notebook, s.content_hash, s.set_hint,
                                question_ids(s.set_hint), s.refusal.status, s.refusal.message,
                                lost=s.refusal.retry)
            run.refused += 1
            tell(s, s.refusal.status)
    judged = [s for s in todo if not s.refusal]
    if judged:
        grader = grader or default_grader()
        outcomes = (in_process(grader, judged, timeout) if workers == 0 and not scheduler else
                    on_dask(grader, judged, timeout, workers, scheduler))
        with contextlib.closing(outcomes):
            for s, outcome in outcomes:
                tell(s, _record(book, s, outcome, run))
    if hasattr(tell, "close"):
        tell.close()
    return run


def question_ids(set_id: str | None) -> list[str]:
    return [q.id for q in questions(set_id)] if set_id else []


def _record(book: Gradebook, s: FoundNotebook, outcome, run: Run) -> str:
    """Write one task's outcome (a result, or the exception that ended the task); says what."""
    if isinstance(outcome, IpuLabError):        # not the notebook: no sandbox here, ...
        raise GradingError(f"the judge cannot grade here: {outcome}")
    if isinstance(outcome, Exception):
        why = str(outcome) if isinstance(outcome, LostTask) else \
            f"the grader raised {type(outcome).__name__}: {outcome}"
        book.record_uniform(s.student, s.notebook, s.content_hash, s.set_hint,
                            question_ids(s.set_hint), "crashed",
                            f"this notebook could not be graded ({why}); it will be graded "
                            "again on the next run", lost=True)
        run.lost += 1
        return "crashed: its grading task was lost"
    book.record(s.student, s.notebook, outcome, s.content_hash)
    if not outcome.questions:
        run.not_graded += 1
        return f"not graded: {shortened(outcome.failure)}"
    run.graded += 1
    passed = sum(v.status == "passed" for v in outcome.questions.values())
    return f"{outcome.set_id or '?'} {passed}/{len(outcome.questions)} passed"


def in_process(grader, submissions: list[FoundNotebook], timeout: float):
    """(submission, result or exception), grading one notebook after the other here."""
    for s in submissions:
        try:
            outcome = grader(str(s.path), timeout=timeout, content=s.content)
        except Exception as e:        # Ctrl-C (KeyboardInterrupt) goes through
            outcome = e
        yield s, outcome


def on_dask(grader, submissions: list[FoundNotebook], timeout: float, workers: int,
            scheduler: str | None):
    """(submission, result or exception) as each dask task ends: one task per notebook,
    retried on an error, and elsewhere when its worker dies (results are fetched as soon as
    they are ready, so a worker dying later does not lose them)."""
    from distributed import KilledWorker, as_completed

    with dask_client(workers, scheduler) as client:
        tasks = {client.submit(grader, str(s.path), timeout=timeout, content=s.content,
                               pure=False, retries=2): s for s in submissions}
        for future, value in as_completed(tasks, with_results=True, raise_errors=False):
            if future.status == "cancelled":
                raise GradingError(f"the dask scheduler cancelled the grading of "
                                   f"{tasks[future].path} ({value!r}): did it stop?")
            if future.status == "error":                # value: (type, exception, traceback)
                value = value[1]
            if isinstance(value, KilledWorker):
                value = LostTask(f"the worker process grading it died each of the "
                                 f"{value.allowed_failures + 1} times it ran")
            future.release()
            yield tasks.pop(future), value


@contextlib.contextmanager
def dask_client(workers: int, scheduler: str | None):
    """A client of the scheduler at this address, or of a new local cluster of `workers`
    single-threaded processes on 127.0.0.1 (closed on exit), whose HTTP server takes any free
    port (none fixed: another dask may hold 8787). The local cluster's log is silenced: what
    matters (a task lost) is in the gradebook."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler, timeout=CONNECT_SECONDS)
        except (OSError, ValueError, TypeError) as e:      # refused, timed out, bad address
            raise GradingError(f"cannot reach the dask scheduler at {scheduler}: {e}") from None
        with client:
            yield client
        return
    with contextlib.ExitStack() as stack:
        try:
            # one task at a time per worker: a notebook that kills its worker takes no other
            # notebook's task down with it
            stack.enter_context(dask.config.set({"distributed.scheduler.worker-saturation": 1.0}))
            cluster = stack.enter_context(LocalCluster(       # (no fixed dashboard port)
                n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address="127.0.0.1:0", silence_logs=logging.CRITICAL))
            client = stack.enter_context(Client(cluster))
        except (RuntimeError, OSError) as e:       # a worker that cannot start, no port, ...
            raise GradingError(f"cannot start {workers} local dask worker(s): {e}") from None
        yield client


def printable(text) -> str:
    """Text from a folder name, safe for a terminal (no escape sequences)."""
    return "".join(c if c.isprintable() else "?" for c in str(text))


def shortened(text, limit: int = 200) -> str:
    """Text on one line, printable, cut at a word (with …) if over `limit` characters."""
    line = " ".join(printable(" ".join(str(text).split())).split())
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0] + " …"


class ProgressLine:
    """`[ 37/200] alice/01_one_tile.ipynb: ex01 3/4 passed` on stderr, redrawn in place on a
    terminal, a line each in a log."""

    def __init__(self, total: int, stream=None):
        self.total, self.done, self.width = total, 0, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()

    def __call__(self, s: FoundNotebook, what: str) -> None:
        self.done += 1
        line = (f"[{self.done:>{len(str(self.total))}}/{self.total}] "
                f"{printable(s.student)}/{printable(s.notebook)}: {what}")
        if self.tty:
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.done:
            self.stream.write("\n")


# --- the command --------------------------------------------------------------------------------
def summary_table(rows: list[dict]) -> str:
    """Students x sets: questions passed of the set's questions (e.g. 3/4), and in all."""
    sets = sorted({str(r["set"]) for r in rows})
    counts: dict[str, dict[str, list[int]]] = {}
    for r in rows:
        c = counts.setdefault(printable(r["student"]), {}).setdefault(str(r["set"]), [0, 0])
        c[0] += r["status"] == "passed"
        c[1] += 1
    table = [["student", *sets, "passed"]]
    for student, by_set in counts.items():
        total = [sum(c[i] for c in by_set.values()) for i in (0, 1)]
        table.append([student, *(f"{by_set[s][0]}/{by_set[s][1]}" if s in by_set else "-"
                                 for s in sets), f"{total[0]}/{total[1]}"])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    table.insert(1, ["-" * w for w in widths])
    return "\n".join("  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in
                                                             zip(row[1:], widths[1:])]).rstrip()
                     for row in table)


def default_gradebook(submissions) -> Path:
    """gradebook.sqlite next to the SUBMISSIONS folder (SUBMISSIONS/../gradebook.sqlite)."""
    return Path(submissions).resolve().parent / "gradebook.sqlite"


def _options(timeout, workers) -> None:
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise GradingError(f"--timeout must be a number of seconds above 0, not {timeout!r}")
    if not isinstance(workers, int) or workers < 0:
        raise GradingError(f"--workers must be 0 (grade here, without dask) or more, "
                           f"not {workers!r}")


def outputs(book_path: Path, csv_path, feedback) -> tuple[Path, Path]:
    """Where the CSV (default: the gradebook's name with .csv) and the feedback pages (default:
    feedback/ next to the CSV) go, checked before grading: the grader's alone (check_private),
    as the gradebook is."""
    csv_file = Path(csv_path) if csv_path else book_path.with_suffix(".csv")
    pages = Path(feedback) if feedback else csv_file.parent / "feedback"
    check_private(csv_file, "the CSV")
    check_feedback(pages)
    return csv_file, pages


def _exports(rows: list[dict], csv_file: Path, pages: Path) -> int:
    """Write the CSV and the feedback pages; returns how many pages."""
    try:
        write_csv(rows, csv_file)
        written = write_feedback(rows, pages)
    except OSError as e:
        raise GradingError(f"cannot write {e.filename or csv_file}: {e.strerror or e}") from None
    return len(written)


def where_written(submissions, book: Path, csv_file: Path, pages: Path, count: int) -> str:
    """Where the outputs went: one folder named once when they share it (by default the
    folder SUBMISSIONS is in), else each in full."""
    book, csv_file, pages = (p.absolute() for p in (book, csv_file, pages))
    folder = book.parent
    many = f"{count} page{'' if count == 1 else 's'}"
    names = f"{book.name} (the gradebook), {csv_file.name}, {pages.name}/ ({many})"
    if csv_file.parent != folder or pages.parent != folder:
        return f"gradebook: {book}\ncsv: {csv_file}\nfeedback: {pages}/ ({many})"
    submissions = Path(submissions).absolute()
    if submissions.parent == folder:
        return f"written next to {printable(submissions.name)}/, in {printable(folder)}: {names}"
    return f"written in {printable(folder)}: {names}"


def main(submissions, *, gradebook=None, csv_path=None, feedback=None, timeout: float = 600.0,
         workers: int = 2, scheduler: str | None = None, grader=None, out=None) -> int:
    """Grade into the gradebook (default: gradebook.sqlite next to SUBMISSIONS), write the CSV
    and the feedback pages, print students x sets. Exit code 0 when every notebook has a
    status, 2 on a usage error, 130 on Ctrl-C."""
    out = out or sys.stdout
    book_path = Path(gradebook) if gradebook else default_gradebook(submissions)

    def warn(message):
        print(f"ipulab course grade: {printable(message)}", file=sys.stderr)
    try:
        _options(timeout, workers)
        csv_file, pages = outputs(book_path, csv_path, feedback)
        found = discover(submissions, warn)
        with Gradebook(book_path) as book:
            run = grade_class(found, book, grader=grader, workers=workers,
                              scheduler=scheduler, timeout=timeout)
            rows = book.rows()
        count = _exports(rows, csv_file, pages)
    except (GradingError, GradebookError) as e:
        warn(str(e))
        return 2
    except KeyboardInterrupt:
        warn(f"interrupted: what was graded is kept in {book_path}; run again to grade the rest")
        return 130
    print(summary_table(rows), file=out)
    print(f"\n{run.describe()}\n{where_written(submissions, book_path, csv_file, pages, count)}",
          file=out)
    return 0
