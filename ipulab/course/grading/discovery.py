"""Finding a class's notebooks: SUBMISSIONS/STUDENT/**/*.ipynb, or nbgrader's
SUBMISSIONS/submitted/STUDENT/ASSIGNMENT/*.ipynb (SUBMISSIONS may be `submitted` itself).

Students are named by their folders; hidden files and folders (.ipynb_checkpoints) are skipped.
Nothing outside SUBMISSIONS is read: symbolic links and special files are refused unread. A
notebook is read once (read_once): its bytes are hashed and kept, and the judge grades those
bytes, never the file again (which may have changed since: a link to a solution). Its content
is not trusted; its set is read from its metadata or name, for naming only (the judge decides
the set it grades). A name that is not UTF-8 is kept with its
odd bytes written as \\xNN (text the gradebook, CSV and pages can hold).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ...errors import IpuLabError
from ..questions.registry import set_for_notebook, sets

NOTEBOOK_BYTES = 64 * 2**20    # a notebook may be at most this big (a larger one is not read)
FOLDER = "(folder)"            # the notebook key of a refused student folder


class GradingError(IpuLabError):
    """Grading cannot start or go on: no such folder, no notebooks, the dask scheduler out of
    reach, or the judge cannot run here."""


@dataclass(frozen=True)
class Refusal:
    """Why a notebook is not graded (it is not read either); retry: try again next run."""

    status: str
    message: str
    retry: bool = False


@dataclass(frozen=True)
class FoundNotebook:
    """One notebook of one student, as found (its content is not trusted, only hashed)."""

    student: str
    notebook: str                  # its path inside the student's folder, with '/'
    path: Path
    content_hash: str              # sha256 of its bytes (of the refusal when refused)
    set_hint: str | None = None    # the set its metadata or name tells: for naming only
    refusal: Refusal | None = None
    content: bytes | None = field(default=None, repr=False)   # the bytes hashed (None: refused)


class Refused(Exception):
    """A file that is not read as a notebook (read_once): refusal says why."""

    def __init__(self, refusal: Refusal):
        super().__init__(refusal.message)
        self.refusal = refusal


def students_folder(root: Path) -> Path:
    """The folder holding a folder per student: nbgrader's submitted/ if there is one."""
    nbgrader = root / "submitted"
    return nbgrader if nbgrader.is_dir() and not nbgrader.is_symlink() else root


def discover(submissions, warn=None) -> list[FoundNotebook]:
    """Every notebook of every student under `submissions`, sorted by student and path.
    warn(message) hears of notebooks that belong to no student's folder."""
    root = Path(submissions)
    if not root.is_dir():
        raise GradingError(f"{root}: no such folder")
    base = students_folder(root.absolute())
    try:
        entries = sorted(os.scandir(base), key=lambda e: e.name)
    except OSError as e:
        raise GradingError(f"{base} cannot be listed: {e.strerror}") from None
    found = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_symlink():
            found.append(_refused(entry.name, FOLDER, Path(entry.path), Refusal(
                "tampered", f"the folder {entry.name} is a symbolic link: refused, not "
                "followed (copy the student's work into SUBMISSIONS)")))
        elif entry.is_dir():
            found.extend(_inspect(entry.name, key, path, refusal)
                         for key, path, refusal in notebooks_under(Path(entry.path)))
        elif entry.name.endswith(".ipynb") and warn:
            warn(f"{entry.path}: in no student's folder, not graded")
    if not found:
        raise GradingError(f"no notebooks in {root}: a folder per student is expected "
                           "(STUDENT/*.ipynb, or nbgrader's submitted/STUDENT/ASSIGNMENT/*.ipynb)")
    return sorted(found, key=lambda s: (s.student, s.notebook))


def notebooks_under(folder: Path):
    """(key, path, refusal or None) of every notebook under a student's folder, where key is
    its path inside it: links are not followed but refused, like files that are not regular."""
    stack = [PurePosixPath()]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(folder / rel))
        except OSError as e:
            yield str(rel), folder / rel, Refusal("crashed", f"the folder {rel} cannot be "
                                                  f"listed: {e.strerror}", retry=True)
            continue
        for entry in entries:
            key = rel / entry.name
            if entry.name.startswith("."):
                continue
            if entry.is_symlink():
                if entry.name.endswith(".ipynb") or os.path.isdir(entry.path):
                    yield str(key), Path(entry.path), Refusal("tampered", f"{key} is a symbolic "
                                                              "link: refused, not read (hand "
                                                              "in the notebook itself)")
            elif entry.is_dir(follow_symlinks=False):
                stack.append(key)
            elif entry.name.endswith(".ipynb"):
                yield str(key), Path(entry.path), None


def as_text(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (which Python keeps as lone surrogates,
    which no UTF-8 file or database takes) written as \\xNN."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _refused(student: str, key: str, path: Path, refusal: Refusal) -> FoundNotebook:
    student, key = as_text(student), as_text(key)
    refusal = Refusal(refusal.status, as_text(refusal.message), refusal.retry)
    digest = hashlib.sha256(f"{refusal.status}: {refusal.message}".encode()).hexdigest()
    return FoundNotebook(student, key, path, digest, set_hint_of(None, path.name), refusal)


def _inspect(student: str, key: str, path: Path, refusal: Refusal | None) -> FoundNotebook:
    """The submission with its bytes, their hash and its set hint; or refused."""
    try:
        if refusal:
            raise Refused(refusal)
        content = read_once(path, key)
    except Refused as r:
        return _refused(student, key, path, r.refusal)
    return FoundNotebook(as_text(student), as_text(key), path,
                         hashlib.sha256(content).hexdigest(), set_hint_of(content, path.name),
                         content=content)


def read_once(path: Path, name: str) -> bytes:
    """The bytes of the notebook at path (called name in messages), read once through a
    descriptor that follows no link and never blocks on a pipe, from a regular file of at most
    NOTEBOOK_BYTES; Refused says why it is not read."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        with open(os.open(path, flags), "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise Refused(Refusal("tampered", f"{name} is not a regular file: refused, "
                                                  "not read"))
            content = f.read(NOTEBOOK_BYTES + 1)
    except OSError as e:
        raise Refused(Refusal("tampered", f"{name} is a symbolic link: refused, not read")
                      if e.errno == errno.ELOOP else
                      Refusal("crashed", f"{name} cannot be read: {e.strerror}", retry=True)
                      ) from None
    if len(content) > NOTEBOOK_BYTES:
        raise Refused(Refusal("failed", f"{name} is {info.st_size / 2**20:,.0f} MB; a notebook "
                                        f"may be at most {NOTEBOOK_BYTES // 2**20} MB"))
    return content


def set_hint_of(content: bytes | None, name: str) -> str | None:
    """The set a notebook's metadata names (if it is a known set), else its file name's."""
    told = None
    if content is not None:
        try:
            told = json.loads(content)
        except (ValueError, RecursionError):      # not JSON, not UTF-8, nested too deep
            pass
        for key in ("metadata", "ipulab", "set"):
            told = told.get(key) if isinstance(told, dict) else None
    if isinstance(told, str) and told in sets():
        return told
    found = set_for_notebook(name)
    return found.id if found else None
