"""The V-IPU state in SQLite: 8 processes creating and removing partitions at once never put an
IPU in two partitions and lose nothing; a process killed mid-transaction leaves a consistent
state; a corrupt, foreign, newer or locked file is a clear StateError and is not changed."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import time

import pytest

from ipulab import errors, vipu

WORKERS = 8
OPS = 25


def overlaps(db) -> list:
    """Pairs of stored partitions that share an IPU (read straight from the file)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name, first_ipu, size FROM partitions").fetchall()
    return [(a[0], b[0]) for i, a in enumerate(rows) for b in rows[i + 1:]
            if a[1] < b[1] + b[2] and b[1] < a[1] + a[2]]


def worker(db: str, k: int, start, out) -> None:
    """Once every worker is ready, create partitions of 1, 2 or 4 IPUs, holding at most two
    (the oldest goes); report what happened and any overlap seen after each change."""
    ctl = vipu.connect(db, user=f"u{k}", timeout=60)
    created, removed, seen, full = [], [], [], 0
    start.wait(120)
    for i in range(OPS):
        name = f"u{k}-{i}"
        try:
            ctl.create_partition(name, (1, 2, 4)[(k + i) % 3])
            created.append(name)
        except errors.NoFreeIpusError:
            full += 1
        if len(created) - len(removed) > 1:
            removed.append(ctl.remove_partition(created[len(removed)]).name)
        seen += overlaps(db)
    out.put((k, created, removed, seen, full))


def test_eight_processes_at_once_never_share_an_ipu_and_lose_nothing(tmp_path):
    db = str(tmp_path / "vipu.sqlite")
    vipu.connect(db, user="admin").init("pod16")
    ctx = mp.get_context("spawn")
    out, start = ctx.Queue(), ctx.Barrier(WORKERS)
    procs = [ctx.Process(target=worker, args=(db, k, start, out)) for k in range(WORKERS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    expected = set()
    for k, created, removed, seen, _ in results:
        assert seen == [], f"worker {k} saw IPUs in two partitions: {seen}"
        assert set(removed) <= set(created)
        expected |= set(created) - set(removed)
    assert sum(len(r[1]) for r in results) > 2 * WORKERS
    assert sum(r[4] for r in results) > 0        # they did compete: some found the Pod full
    stored = {name for (name,) in sqlite3.connect(db).execute("SELECT name FROM partitions")}
    assert stored == expected               # every create and remove that returned is there
    assert overlaps(db) == []
    for k in range(WORKERS):                # and the controller reads it back consistently
        mine = {p.name for p in vipu.connect(db, user=f"u{k}").list_partitions()}
        assert mine == {n for n in expected if n.startswith(f"u{k}-")}


def die_mid_transaction(db: str) -> None:
    """Take the write lock, book IPUs for a partition, then die before committing."""
    store = vipu.Store(db)
    with store.write() as conn:
        conn.execute("INSERT INTO partitions (name, allocation, first_ipu, size, user, "
                     "reconfigurable, sync_type, gcds) VALUES ('ghost', 'all', 4, 4, 'x', 0, "
                     "'pod-native-default', 1)")
        conn.execute("INSERT INTO ipus VALUES (4, 99)")
        os._exit(3)


def create_forever(db: str) -> None:
    ctl = vipu.connect(db, user="loop", timeout=60)
    i = 0
    while True:
        try:
            ctl.create_partition(f"loop-{i}", 1)
        except errors.NoFreeIpusError:
            ctl.remove_partition(f"loop-{i - 16}")
        i += 1


def test_a_process_killed_mid_transaction_leaves_a_consistent_state(tmp_path):
    db = str(tmp_path / "vipu.sqlite")
    ctl = vipu.connect(db, user="alice")
    ctl.init("pod16")
    ctl.create_partition("kept", 4)
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=die_mid_transaction, args=(db,))
    p.start()
    p.join(60)
    assert p.exitcode == 3
    assert [q.name for q in ctl.list_partitions()] == ["kept"]
    assert ctl.create_partition("next", 4).ipus == (4, 5, 6, 7)   # the ghost's IPUs are free


def test_sigkill_at_any_moment_leaves_a_consistent_state(tmp_path):
    db = str(tmp_path / "vipu.sqlite")
    vipu.connect(db, user="admin").init("pod16")
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=create_forever, args=(db,))
    p.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:       # wait until it is busy creating and removing
        with sqlite3.connect(db) as conn:
            if conn.execute("SELECT COUNT(*) FROM partitions").fetchone()[0] >= 16:
                break
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(p.pid, signal.SIGKILL)
    p.join(60)
    ctl = vipu.connect(db, user="loop")
    parts = ctl.list_partitions()             # the controller's own consistency checks pass
    assert overlaps(db) == [] and len(parts) <= 16
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for q in parts:
        ctl.remove_partition(q.name)
    assert ctl.create_partition("whole", 16).ipus == tuple(range(16))


# --- bad files --------------------------------------------------------------------------------------
def unchanged(path, action, match):
    before = path.read_bytes()
    with pytest.raises(errors.StateError, match=match):
        action()
    assert path.read_bytes() == before


def test_a_corrupt_file_is_refused_and_left_as_it_was(tmp_path):
    db = tmp_path / "vipu.sqlite"
    db.write_bytes(b"this is not a database\n" * 100)
    ctl = vipu.connect(db, user="alice")
    for action in (ctl.list_partitions, lambda: ctl.create_partition("p", 1),
                   lambda: ctl.init("pod16")):
        unchanged(db, action, "not a valid V-IPU state file")


def test_a_truncated_state_is_refused(tmp_path):
    db = tmp_path / "vipu.sqlite"
    ctl = vipu.connect(db, user="alice")
    ctl.init("pod16")
    ctl.create_partition("p", 4)
    db.write_bytes(db.read_bytes()[:1000])
    unchanged(db, ctl.list_partitions, "not a valid V-IPU state file")


def test_another_programs_database_is_not_touched(tmp_path):
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE grades (student TEXT, mark INT)")
    ctl = vipu.connect(db, user="alice")
    unchanged(db, lambda: ctl.init("pod16"), "not a V-IPU state file .tables: grades")
    unchanged(db, ctl.list_partitions, "not a V-IPU state file")


def test_another_schema_and_bad_rows_are_refused(tmp_path):
    db = tmp_path / "vipu.sqlite"
    ctl = vipu.connect(db, user="alice")
    ctl.init("pod16")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value='99' WHERE key='schema'")
    unchanged(db, ctl.list_partitions, "schema '99'")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value=? WHERE key='schema'", (str(vipu.SCHEMA_VERSION),))
        conn.execute("INSERT INTO partitions (name, allocation, first_ipu, size, user, "
                     "reconfigurable, sync_type, gcds) VALUES ('bad', 'all', 0, 3, 'alice', 0, "
                     "'pod-native-default', 1)")
    unchanged(db, ctl.list_partitions, "bad partition row")
    unchanged(db, lambda: ctl.create_partition("p", 1), "bad partition row")


def test_a_missing_file_says_to_init(tmp_path):
    with pytest.raises(errors.StateError, match="ipulab vipu init"):
        vipu.connect(tmp_path / "none.sqlite", user="alice").list_partitions()
    assert not (tmp_path / "none.sqlite").exists()


def test_a_locked_file_is_a_clear_error_and_then_works(tmp_path):
    db = tmp_path / "vipu.sqlite"
    ctl = vipu.connect(db, user="alice", timeout=0.2)
    ctl.init("pod16")
    ctl.create_partition("p", 4)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(errors.StateError, match="locked by another process"):
            ctl.create_partition("q", 4)
        with pytest.raises(errors.StateError, match="locked"):
            ctl.list_partitions()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [p.name for p in ctl.list_partitions()] == ["p"]
    assert ctl.create_partition("q", 4).ipus == (4, 5, 6, 7)


def test_the_default_file_and_user_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("IPULAB_VIPU_DB", str(tmp_path / "env.sqlite"))
    monkeypatch.setenv("IPULAB_USER", "dana")
    ctl = vipu.connect()
    assert (ctl.store.path, ctl.user) == (tmp_path / "env.sqlite", "dana")
    ctl.init("pod64")
    assert ctl.create_partition("p", 64).user == "dana"
    monkeypatch.delenv("IPULAB_VIPU_DB")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert vipu.default_path() == tmp_path / ".ipulab" / "vipu.sqlite"
