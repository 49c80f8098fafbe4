"""The V-IPU controller's durable state: one SQLite file shared by every process of a class.

Every change is ONE transaction begun with BEGIN IMMEDIATE (the write lock is taken before the
first read, so two processes never both see the same IPUs free); a process killed in the
middle leaves the previous state, which SQLite's journal restores. Reads take a snapshot in a
deferred transaction. Nothing read from the file is trusted: rows are checked before use.

The file is $IPULAB_VIPU_DB, else ~/.ipulab/vipu.sqlite. A file that is not a V-IPU state
(corrupt, another program's database, another schema) or that stays locked raises StateError
and is never written to: only `init` creates the tables, and only in a new or V-IPU file.
"""
from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path

from ..errors import StateError

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE allocations (
    name TEXT PRIMARY KEY, first_machine INTEGER NOT NULL, machines INTEGER NOT NULL,
    user TEXT);
CREATE TABLE partitions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
    allocation TEXT NOT NULL, first_ipu INTEGER NOT NULL, size INTEGER NOT NULL,
    user TEXT NOT NULL, reconfigurable INTEGER NOT NULL, sync_type TEXT NOT NULL,
    gcds INTEGER NOT NULL, shared TEXT NOT NULL DEFAULT '');
CREATE TABLE ipus (ipu INTEGER PRIMARY KEY, partition INTEGER NOT NULL);
"""
TABLES = {"meta", "allocations", "partitions", "ipus"}


def default_path() -> Path:
    """$IPULAB_VIPU_DB, else ~/.ipulab/vipu.sqlite."""
    env = os.environ.get("IPULAB_VIPU_DB")
    return Path(env).expanduser() if env else Path.home() / ".ipulab" / "vipu.sqlite"


class Store:
    """The state file: snapshots to read, transactions to change it."""

    def __init__(self, path=None, timeout: float = 10.0):
        """path: the SQLite file (default: default_path()); timeout: seconds to wait for
        another process's transaction before giving up with StateError."""
        path = Path(path).expanduser() if path is not None else default_path()
        self.path = path.absolute()      # one file, one name: how devices are found again
        self.timeout = float(timeout)

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    def _connect(self, create: bool = False) -> sqlite3.Connection:
        if not create and not self.path.exists():
            raise StateError(f"no V-IPU state at {self.path}: run `ipulab vipu init --system "
                             "pod16` (or Controller.init) first")
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=self.timeout,
                                   isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise StateError(f"cannot open the V-IPU state {self.path}: {e}") from None
        return conn

    def _failure(self, e: sqlite3.Error) -> StateError:
        """The StateError for a SQLite failure: locked, or not a (valid) state file."""
        text = str(e)
        if "locked" in text or "busy" in text:
            return StateError(f"the V-IPU state {self.path} is locked by another process "
                              f"(waited {self.timeout:g} s); try again")
        return StateError(f"{self.path} is not a valid V-IPU state file ({text}); it was "
                          "left untouched: move it away and run `ipulab vipu init`")

    def _check_schema(self, conn: sqlite3.Connection, allow_empty: bool = False) -> bool:
        """True if the file holds our tables at our schema version, False if it is empty
        (and allow_empty); else StateError."""
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                 if r[0] != "sqlite_sequence"}
        if not names and allow_empty:
            return False
        if not names:               # an empty file (as `ipulab vipu serve` makes it)
            raise StateError(f"no V-IPU state in {self.path} yet: run `ipulab vipu init "
                             "--system pod16` (or Controller.init) first")
        if names != TABLES:
            raise StateError(f"{self.path} is not a V-IPU state file (tables: "
                             f"{', '.join(sorted(names)) or 'none'}); it was left untouched")
        row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None or row[0] != str(SCHEMA_VERSION):
            raise StateError(f"{self.path} has V-IPU schema {row and row[0]!r}, this ipulab "
                             f"reads schema {SCHEMA_VERSION}; it was left untouched")
        return True

    @contextmanager
    def read(self):
        """A consistent snapshot: a connection inside a read transaction."""
        conn = self._connect()
        try:
            conn.execute("BEGIN")
            self._check_schema(conn)
            yield conn
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise self._failure(e) from None
        finally:
            conn.close()

    @contextmanager
    def write(self, create: bool = False):
        """One transaction (BEGIN IMMEDIATE): committed if the block ends normally, rolled
        back if it raises. create: make the file and its tables if they are not there."""
        conn = self._connect(create)
        try:
            conn.execute("BEGIN IMMEDIATE")
            if not self._check_schema(conn, allow_empty=create):
                for stmt in SCHEMA.strip().split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as e:
            raise StateError(f"the V-IPU state {self.path} refused an inconsistent change "
                             f"({e}); nothing was changed") from None
        except sqlite3.Error as e:
            raise self._failure(e) from None
        finally:
            conn.close()
