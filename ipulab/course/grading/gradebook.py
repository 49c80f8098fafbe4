"""The class's gradebook: one SQLite file with a row per student, notebook and question, and
its CSV export (the feedback pages are pages.py's).

Every change is one transaction in WAL mode, so a grading run that is killed keeps every
notebook it had recorded, and a rerun grades only what changed (`needs_grading`). The file is
untrusted input as much as the submissions are: anything but an ipulab gradebook is a
GradebookError saying so, never a traceback. Messages come from submitted code: the CSV
defuses spreadsheet formulas and the HTML escapes everything.
"""
from __future__ import annotations

import contextlib
import csv
import os
import sqlite3
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from ...errors import IpuLabError

FORMAT, VERSION = "ipulab-gradebook", "1"
UNKNOWN_SET = "?"          # the set of a notebook whose set could not be told
WHOLE = "-"                # the question of the one row about a notebook with no question
MESSAGE_CHARS = 4000       # longer messages (submitted code can raise anything) are cut
# one CSV row per student, set and question
COLUMNS = ("student", "set", "question", "status", "message", "cycles", "par", "seconds",
           "attempt", "notebook", "failure", "content_hash", "graded_at")
_DB_COLUMNS = ("student", "notebook", "set_id", "position", "question", "status", "message",
               "cycles", "par", "seconds", "attempt", "content_hash", "failure", "lost",
               "graded_at")
_SCHEMA = f"""
BEGIN;
CREATE TABLE info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO info VALUES ('format', '{FORMAT}'), ('version', '{VERSION}');
CREATE TABLE grades (
    student TEXT NOT NULL,        -- the student's folder name
    notebook TEXT NOT NULL,       -- its path inside the student's folder
    set_id TEXT NOT NULL,         -- 'ex01', ..., or '?' when it could not be told
    position INTEGER NOT NULL,    -- the question's place in its set
    question TEXT NOT NULL,       -- 'ex01.sum_squares', or '-' for the whole notebook
    status TEXT NOT NULL,         -- one of judge.STATUSES
    message TEXT NOT NULL,
    cycles INTEGER,               -- simulated cycles of the answer, where measured
    par INTEGER,                  -- the question's par, in cycles (seconds for a wait)
    seconds REAL NOT NULL,        -- grading the whole notebook took
    attempt INTEGER NOT NULL,     -- 1 for the first version of the notebook graded, then 2, ...
    content_hash TEXT NOT NULL,   -- sha256 of the notebook's bytes
    failure TEXT NOT NULL,        -- why the notebook as a whole could not be graded, or ''
    lost INTEGER NOT NULL,        -- 1: its grading task was lost; graded again on a rerun
    graded_at TEXT NOT NULL,      -- UTC, ISO 8601
    PRIMARY KEY (student, notebook, question));
COMMIT;
"""
_FORMULA = ("=", "+", "-", "@", "\t", "\r")     # what a spreadsheet would evaluate
_UNTRUSTED_TEXT = ("student", "message", "notebook", "failure")


class GradebookError(IpuLabError):
    """The gradebook file cannot be used: not SQLite, not a gradebook, corrupt, read-only."""


def check_private(path, what: str) -> None:
    """Refuse (one line: GradebookError) an output of the grader's (`what`: 'the gradebook',
    'the CSV', ...) that is not the grader's alone: in a folder anyone can write to (they could
    plant or swap it), or there already as a link, owned by another account, or writable by
    group or others (anyone could have forged it)."""
    path = Path(path).absolute()
    folder = path.parent
    try:
        mode = os.stat(folder).st_mode
    except FileNotFoundError:
        return                   # (made, 0700, by whoever writes there; or an OSError)
    if mode & stat.S_IWOTH:
        raise GradebookError(f"{what} {path} would be in {folder}, which anyone can write to "
                             f"(mode {stat.S_IMODE(mode):04o}): put it in a folder only you "
                             "can write to, or chmod o-w that folder")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise GradebookError(f"{what} {path} is a symbolic link: refused, not followed (move "
                             "it away, or name the file itself)")
    if info.st_uid != os.geteuid():
        raise GradebookError(f"{what} {path} is owned by uid {info.st_uid}, not by you (uid "
                             f"{os.geteuid()}): it may have been planted; move it away and "
                             "grade again, or name another file")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise GradebookError(f"{what} {path} is writable by group or others (mode "
                             f"{stat.S_IMODE(info.st_mode):04o}): anyone could have changed "
                             "it; check it, then chmod go-w it, or move it away")


class Gradebook:
    """An open gradebook (created if the file is missing or empty, readable by its owner only,
    like the CSV and the pages; refused if it, or its folder, is not the grader's alone:
    check_private). Use as a context manager, or call close()."""

    def __init__(self, path):
        self.path = Path(path)
        for suffix in ("", "-wal", "-shm", "-journal"):     # (what SQLite reads with it)
            check_private(f"{self.path}{suffix}", "the gradebook")
        if self.path.is_dir():
            raise GradebookError(f"the gradebook {self.path} is a folder, not a file")
        try:                # SQLite gives its -wal and -shm files the database file's mode
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError:     # there already, or not to be made (sqlite3 says why)
            pass
        try:
            self._conn = sqlite3.connect(self.path, timeout=30)
        except sqlite3.Error as e:
            raise GradebookError(f"cannot open the gradebook {self.path}: {e}") from None
        try:
            with self._errors():
                self._check_or_create()
        except GradebookError:
            self._conn.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._conn.close()

    @contextlib.contextmanager
    def _errors(self):
        """Turn SQLite's errors (corrupt file, locked, read-only, ...) into a GradebookError."""
        try:
            yield
        except sqlite3.Error as e:
            raise GradebookError(f"the gradebook {self.path} cannot be used: {e}") from None

    def _check_or_create(self) -> None:
        self._conn.execute("PRAGMA journal_mode=WAL")       # 'file is not a database' is here
        tables = {name for (name,) in self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            self._conn.executescript(_SCHEMA)
            return
        problem = self._conn.execute("PRAGMA quick_check").fetchone()[0]
        if problem != "ok":
            raise GradebookError(f"the gradebook {self.path} is corrupt: {problem}")
        info = dict(self._conn.execute("SELECT key, value FROM info")) if "info" in tables else {}
        columns = tuple(r[1] for r in self._conn.execute("PRAGMA table_info(grades)"))
        if info.get("format") != FORMAT or columns != _DB_COLUMNS:
            raise GradebookError(f"{self.path} is a SQLite database but not an ipulab gradebook "
                                 f"(tables: {', '.join(sorted(tables))}); pass another "
                                 "--gradebook or move it away")
        if info.get("version") != VERSION:
            raise GradebookError(f"the gradebook {self.path} is of version "
                                 f"{info.get('version')!r}; this ipulab reads version {VERSION}")

    def needs_grading(self, student: str, notebook: str, content_hash: str) -> bool:
        """True unless this notebook, with these bytes, is already graded (and not lost)."""
        with self._errors():
            row = self._conn.execute(
                "SELECT content_hash, lost FROM grades WHERE student = ? AND notebook = ? "
                "LIMIT 1", (student, notebook)).fetchone()
        return row is None or row[0] != content_hash or bool(row[1])

    def record(self, student: str, notebook: str, result, content_hash: str) -> int:
        """Replace this student's rows for this notebook with the judge's SubmissionResult, in
        one transaction; returns the attempt (it grows when the notebook's content changed)."""
        try:
            verdicts = [(str(qid), str(v.status), v.message, _count(v.cycles), _number(v.par))
                        for qid, v in result.questions.items()]
            set_id, seconds, failure = result.set_id, result.seconds, result.failure
        except AttributeError:
            raise TypeError(f"record() takes a judge.SubmissionResult, not "
                            f"{type(result).__name__}") from None
        if not verdicts:
            verdicts = [(WHOLE, "failed", failure or "no question of any set was found in it",
                         None, None)]
        return self._replace(student, notebook, content_hash, set_id, verdicts, seconds,
                             failure, lost=False)

    def record_uniform(self, student: str, notebook: str, content_hash: str,
                       set_id: str | None, questions: list[str], status: str, message: str, *,
                       lost: bool = False) -> int:
        """Record a notebook the judge did not grade (refused, or its task lost): every question
        of its set (or one row for the notebook) with one status and message. lost=True has
        it graded again on the next run."""
        verdicts = [(q, status, message, None, None) for q in questions or [WHOLE]]
        return self._replace(student, notebook, content_hash, set_id, verdicts, 0.0, message,
                             lost=lost)

    def _replace(self, student, notebook, content_hash, set_id, verdicts, seconds, failure,
                 lost) -> int:
        for name, value in (("student", student), ("notebook", notebook),
                            ("content_hash", content_hash)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"the gradebook needs a {name} (a non-empty str), not {value!r}")
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self._errors(), self._conn:
            before = self._conn.execute(
                "SELECT attempt, content_hash FROM grades WHERE student = ? AND notebook = ? "
                "LIMIT 1", (student, notebook)).fetchone()
            attempt = 1 if before is None or not isinstance(before[0], int) else \
                before[0] + (before[1] != content_hash)
            self._conn.execute("DELETE FROM grades WHERE student = ? AND notebook = ?",
                               (student, notebook))
            self._conn.executemany(
                f"INSERT INTO grades VALUES ({', '.join('?' * len(_DB_COLUMNS))})",
                [(student, notebook, set_id or UNKNOWN_SET, i, qid, status, _cut(message),
                  cycles, par, float(seconds), attempt, content_hash, _cut(failure), int(lost),
                  now) for i, (qid, status, message, cycles, par) in enumerate(verdicts)])
        return attempt

    def rows(self) -> list[dict]:
        """The rows that count, one per student, set and question (keys: COLUMNS), sorted by
        student, set and question order. When a student handed in several notebooks of one
        set, the one with the most questions passed counts (a tie: the first by path)."""
        with self._errors():
            found = self._conn.execute(
                "SELECT student, set_id, question, status, message, cycles, par, seconds, "
                "attempt, notebook, failure, content_hash, graded_at FROM grades "
                "ORDER BY student, set_id, notebook, position").fetchall()
        by_notebook: dict[tuple, list[dict]] = {}
        for values in found:
            row = dict(zip(COLUMNS, values))
            by_notebook.setdefault((row["student"], row["set"], row["notebook"]), []).append(row)
        best: dict[tuple, list[dict]] = {}
        for (student, set_id, notebook), rows in by_notebook.items():   # notebooks in path order
            key = (student, set_id, notebook if set_id == UNKNOWN_SET else None)
            if key not in best or passed_count(rows) > passed_count(best[key]):
                best[key] = rows
        return [row for rows in best.values() for row in rows]

    def export_csv(self, path) -> Path:
        """Write rows() as CSV (written to a temporary file, then renamed into place)."""
        return write_csv(self.rows(), path)


def passed_count(rows: list[dict]) -> int:
    return sum(r["status"] == "passed" for r in rows)


def _count(value) -> int | None:
    """Cycles as plain ints (the judge may hand numpy integers)."""
    return None if value is None else int(value)


def _number(value) -> int | float | None:
    """A par as a plain number: whole cycles, or seconds."""
    if value is None:
        return None
    value = float(value)
    return int(value) if value.is_integer() else value


def _cut(text) -> str:
    text = str(text or "")
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + " [...]"


def atomic_write(path, write, what: str = "the CSV") -> Path:
    """Call write(file) on a temporary file next to `path` (mode 0600), then rename it into
    place; refused (check_private) where the file is not the grader's alone."""
    path = Path(path)
    check_private(path, what)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def _defused(column: str, value):
    """Text that came from students, with a quote before what a spreadsheet would evaluate."""
    if column in _UNTRUSTED_TEXT and isinstance(value, str) and value.startswith(_FORMULA):
        return "'" + value
    return value


def write_csv(rows: list[dict], path) -> Path:
    """rows (as Gradebook.rows gives them) as a CSV file with a header of COLUMNS."""
    def write(f):
        out = csv.writer(f)
        out.writerow(COLUMNS)
        out.writerows([_defused(c, row[c]) for c in COLUMNS] for row in rows)
    return atomic_write(path, write)
