"""`ipulab vipu serve`: a class on one machine. The server alone opens the state (0600); a
client is who the kernel says it is, whatever name it claims; the server's user is the
administrator; refusals reveal nothing a user cannot see; many clients at once, a stuck or
hostile one blocks nobody, and a server killed with SIGKILL restarts on the same files with
nothing lost.

The tests that matter most run clients as other uids (root only: CI runs as root), as a
shared machine would: `ipulab vipu --server` in processes with their own uid and gid.
"""
from __future__ import annotations

import contextlib
import io
import json
import multiprocessing as mp
import os
import pwd
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ipulab import errors, poplar, vipu
from ipulab.poplar import program as prog
from ipulab.vipu import wire
from ipulab.vipu.server import Server, account

ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="clients of other uids need root to start them")
STUCK_SECONDS = 6.0     # a silent client's deadline: far beyond a busy machine's few requests
ALICE, BOB, CAROL = 47001, 47002, 47003        # uids without accounts: uid47001, ...
NOBODY = pwd.getpwnam("nobody").pw_uid if ROOT else None


@pytest.fixture
def shared_dir():
    """A folder every uid can reach (pytest's tmp_path is root's own, 0700)."""
    d = Path(tempfile.mkdtemp(prefix="ipulab-vipu-server-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def serving(folder, sock="v.sock", db="v.sqlite", **options):
    """A server in a thread of this process (so as this process's user: the admin), its log
    thrown away unless options give one; stopped and closed on the way out."""
    options.setdefault("log", open(os.devnull, "w"))
    srv = Server(folder / sock, folder / db, **options).open()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.stop()
        t.join(10)
        srv.close()


@pytest.fixture
def server(shared_dir):
    with serving(shared_dir, "vipu.sock", "state/vipu.sqlite", request_seconds=2.0) as srv:
        yield srv


def as_uid(uid, fn, *args):
    """fn(*args) in a forked child that runs as uid (and gid uid, no other groups): what a
    process of another user does. (A fork, not a new interpreter: the interpreter may sit in a
    folder only root can reach.) Returns fn's result, or ("raised", repr) if it raised."""
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child():
        try:
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            result = fn(*args)
        except BaseException as e:          # noqa: BLE001 - reported to the parent
            result = ("raised", repr(e))
        send.send(result)

    proc = ctx.Process(target=child)
    proc.start()
    try:
        assert receive.poll(120), "the child process did not answer"
        return receive.recv()
    finally:
        proc.join(30)


def _cli(args, env):
    from ipulab.cli import main
    os.environ.pop("IPULAB_USER", None)
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def client(uid, *args, server_path, env=None):
    """`ipulab vipu --server PATH ARGS` as uid; (code, out, err)."""
    return tuple(as_uid(uid, _cli, ["vipu", "--server", str(server_path), *args], env or {}))


def refused(result, *words, code=1):
    rc, out, err = result
    assert rc == code and out == "", (rc, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


# --- identity from the kernel --------------------------------------------------------------------
def test_account_names(monkeypatch):
    assert account(0) == "root"
    assert account(47999) == "uid47999"
    fake = {1: "alice", 2: "uid3", 3: "bad name", 4: "uid4"}
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: type("P", (), {"pw_name": fake[uid]}))
    assert [account(u) for u in (1, 2, 3, 4)] == ["alice", "uid2", "uid3", "uid4"]


@as_root
def test_clients_are_who_the_kernel_says(server):
    sock = server.socket_path
    admin = vipu.connect(server=sock)
    assert (admin.user, admin.admin) == ("root", True)
    admin.init("pod16", allocations={"research": (0, 2, f"uid{ALICE}"), "teaching": (2, 2, None)})

    code, out, _ = client(ALICE, "create", "partition", "train", "--size", "4",
                          server_path=sock)
    assert code == 0 and "IPUs 0-3 of allocation research" in out
    parts = json.loads(client(ALICE, "list", "partitions", "--json", server_path=sock)[1])
    assert parts == [{"name": "train", "size": 4, "ipus": [0, 1, 2, 3], "user": f"uid{ALICE}",
                      "allocation": "research"}]

    # bob claims to be alice, by flag or by environment: the server knows better
    for extra, env in (([], {"IPULAB_USER": f"uid{ALICE}"}), (["--user", f"uid{ALICE}"], {})):
        for action in (["remove", "partition", "train"], ["show", "partition", "train"]):
            err = refused(client(BOB, *action, *extra, server_path=sock, env=env),
                          "unknown partition 'train'", f"uid{BOB}", "is ignored")
            assert "research" not in err and "4 IPU" not in err
        code, out, err = client(BOB, "list", "partitions", "--json", *extra,
                                server_path=sock, env=env)
        assert code == 0 and json.loads(out) == [] and f"knows you as 'uid{BOB}'" in err
    assert [p.name for p in admin.list_partitions()] == ["train"]          # still alice's

    # a partition bob makes is bob's, whatever he claims
    code, out, err = client(BOB, "--user", f"uid{ALICE}", "create", "partition", "b", "--size",
                            "2", server_path=sock)
    assert code == 0 and "is ignored" in err
    assert {p.name: p.user for p in admin.list_partitions()} == {"train": f"uid{ALICE}",
                                                                "b": f"uid{BOB}"}
    # an account name where the uid has one
    code, out, _ = client(NOBODY, "create", "partition", "n", "--size", "1", server_path=sock)
    assert code == 0 and admin.partition("n").user == "nobody"
    # only the administrator inits, sees everything, creates for others
    refused(client(BOB, "init", "--system", "pod16", server_path=sock), "only the administrator")
    assert [p.name for p in admin.list_partitions()] == ["train", "b", "n"]
    assert [a["name"] for a in json.loads(client(BOB, "list", "allocations", "--json",
                                                 server_path=sock)[1])] == ["teaching"]
    assert [a.name for a in admin.list_allocations()] == ["research", "teaching"]
    assert admin.create_partition("given", 1, user=f"uid{CAROL}").user == f"uid{CAROL}"


@as_root
def test_the_state_file_is_the_servers_alone(server):
    vipu.connect(server=server.socket_path).init("pod16")
    st = os.stat(server.db)
    assert (st.st_mode & 0o777, st.st_uid) == (0o600, os.geteuid())
    assert os.stat(server.socket_path).st_mode & 0o777 == 0o666
    assert as_uid(BOB, _open_every_way, str(server.db)) == \
        ["open: PermissionError", "sqlite: OperationalError", "local mode: 1"]


def _open_every_way(db: str) -> list[str]:
    """How a client fares opening the server's state file itself."""
    seen = []
    try:
        open(db, "rb").read(1)
        seen.append("open: read")
    except OSError as e:
        seen.append(f"open: {type(e).__name__}")
    try:
        sqlite3.connect(db).execute("UPDATE partitions SET shared='*'")
        seen.append("sqlite: wrote")
    except sqlite3.Error as e:
        seen.append(f"sqlite: {type(e).__name__}")
    seen.append(f"local mode: {_cli(['vipu', '--db', db, 'list', 'partitions'], {})[0]}")
    return seen


@as_root
def test_many_clients_of_many_uids_at_once(server):
    vipu.connect(server=server.socket_path).init("pod16")
    uids = [48000 + k for k in range(8)]
    ctx = mp.get_context("fork")
    out, start = ctx.Queue(), ctx.Barrier(len(uids))
    procs = [ctx.Process(target=_churn, args=(u, str(server.socket_path), start, out))
             for u in uids]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted(results) == [f"uid{u}" for u in uids]
    parts = vipu.connect(server=server.socket_path).list_partitions()
    assert sorted(p.name for p in parts) == sorted(n for names in results.values() for n in names)
    assert all(p.name.startswith(p.user + "-") for p in parts)
    ipus = [i for p in parts for i in p.ipus]
    assert len(ipus) == len(set(ipus))


def _churn(uid, sock, start, out) -> None:
    """As uid: create partitions of 1, 2 and 4 IPUs, keeping at most one; report what is kept."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    ctl = vipu.connect(server=sock)
    made = []
    start.wait(60)
    for i in range(12):
        try:
            made.append(ctl.create_partition(f"{ctl.user}-{i}", (1, 2, 4)[i % 3]).name)
        except errors.NoFreeIpusError:
            pass
        if len(made) > 1:
            ctl.remove_partition(made.pop(0))
    out.put((ctl.user, made))


@as_root
def test_sigkill_then_restart_loses_nothing(shared_dir):
    sock, db = shared_dir / "v.sock", shared_dir / "v.sqlite"

    def start():
        p = subprocess.Popen([sys.executable, "-m", "ipulab", "vipu", "serve", "--socket",
                              str(sock), "--db", str(db)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        for _ in range(5):                                  # notes, then the banner
            line = p.stdout.readline()
            if line.startswith("V-IPU server:") or not line:
                break
        if not line.startswith("V-IPU server:"):
            p.kill()
            pytest.fail(f"the server did not start: {line!r} {p.communicate(timeout=30)}")
        return p
    first = start()
    try:
        code, out, _ = client(None, "init", "--system", "pod16", server_path=sock)
        assert code == 0 and "state in the V-IPU server at" in out
        assert client(ALICE, "create", "partition", "a", "--size", "4", server_path=sock)[0] == 0
        # a second server on a live socket is refused, in one line
        second = subprocess.run([sys.executable, "-m", "ipulab", "vipu", "serve", "--socket",
                                 str(sock), "--db", str(db)], capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 1 and second.stderr.count("\n") == 1
        assert "another V-IPU server is running" in second.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert sock.is_socket()                                       # stale, left behind
    refused(client(ALICE, "list", "partitions", server_path=sock), "no V-IPU server answers")
    again = start()
    try:
        parts = json.loads(client(ALICE, "list", "partitions", "--json", server_path=sock)[1])
        assert [(p["name"], p["user"]) for p in parts] == [("a", f"uid{ALICE}")]
        assert client(BOB, "create", "partition", "b", "--size", "4", server_path=sock)[0] == 0
    finally:
        again.send_signal(signal.SIGTERM)
        out, _ = again.communicate(timeout=30)
    assert again.returncode == 0 and "stopped" in out and not sock.exists()
    assert os.stat(db).st_mode & 0o777 == 0o600


# --- the wire: untrusted clients -----------------------------------------------------------------
def raw(server, payload: bytes, read=True, wait=5.0) -> dict | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(wait)
    s.connect(str(server.socket_path))
    try:
        try:
            s.sendall(payload)
        except BrokenPipeError:         # a busy server answers at once and closes: read that
            pass
        return wire.decode(wire.read_line(s, wire.MAX_REPLY, time.monotonic() + wait)) \
            if read else None
    finally:
        s.close()


@pytest.mark.parametrize("payload, words", [
    (b"not json\n", "not one line of JSON"),
    (b"[1, 2]\n", "a JSON object"),
    (b'{"action": "drop_tables"}\n', "the action is one of"),
    (b'{"action": "partition", "args": {}}\n', "partition needs name"),
    (b'{"action": "partition", "args": {"name": 7}}\n', "name is not a text"),
    (b'{"action": "alive", "args": {"lease": true}}\n', "lease is not a int"),
    (b'{"action": "share", "args": {"name": "p", "users": "bob"}}\n', "users is not a texts"),
    (b'{"action": "list_partitions", "args": {"user": "root"}}\n', "takes no argument 'user'"),
    (b'{"action": "partition", "args": {"name": NaN}}\n', "not JSON"),
    (b'\x80\x04\x95pickle\n', "not one line of JSON"),
    (b'{"action": "partition", "args": {"name": "' + b"x" * 300 + b'"}}\n', "allowed size"),
])
def test_malformed_requests_are_refused_by_name(server, payload, words):
    reply = raw(server, payload)
    assert reply["ok"] is False and reply["error"] == "VipuServerError"
    assert words in reply["message"], reply


def test_an_oversized_request_is_cut_off(server):
    reply = raw(server, b'{"action": "partition", "args": {"name": "' + b"x" * 100_000)
    assert reply["ok"] is False and "at most 65,536 bytes" in reply["message"]


def test_a_stuck_client_blocks_nobody(shared_dir):
    with serving(shared_dir, request_seconds=STUCK_SECONDS) as server:
        admin = vipu.connect(server=server.socket_path)
        admin.init("pod16")
        stuck = []
        for _ in range(5):                            # connected, and silent
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(server.socket_path))
            s.sendall(b'{"action": "whoami"')         # half a request, never finished
            stuck.append(s)
        admin.create_partition("p", 4)
        assert [p.name for p in admin.list_partitions()] == ["p"]
        # not behind the stuck ones: answered while all of them still wait to be dropped
        assert select.select(stuck, [], [], 0)[0] == [], "the stuck clients went first"
        deadline = time.monotonic() + STUCK_SECONDS + 10
        for s in stuck:                               # each dropped at its deadline
            s.settimeout(STUCK_SECONDS + 10)
            reply = wire.decode(wire.read_line(s, wire.MAX_REPLY, deadline))
            assert "timed out" in reply["message"], reply
            s.close()


def test_one_uid_cannot_take_every_thread(shared_dir):
    with serving(shared_dir, request_seconds=3.0, max_per_uid=2) as srv:
        hogs = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
        for h in hogs:
            h.connect(str(srv.socket_path))
        deadline = time.monotonic() + 10            # both admitted, however busy the machine
        while sum(srv._active.values()) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        reply = raw(srv, wire.encode({"action": "whoami"}))
        assert reply.get("busy") is True and "busy" in reply["message"]
        for h in hogs:
            h.close()
        # a client retries while busy, within its timeout
        assert vipu.connect(server=srv.socket_path).user == "root"


def test_a_log_nobody_reads_costs_lines_not_answers(shared_dir, monkeypatch):
    """The server's log is a pipe that no one drains (a test's or a service manager's): once
    it is full the server drops log lines and goes on answering."""
    import fcntl

    from ipulab.vipu import server as server_module
    monkeypatch.setattr(server_module, "LOG_BACKLOG", 5)
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    log = os.fdopen(write_end, "w")
    try:
        with serving(shared_dir, log=log) as srv:
            ctl = vipu.connect(server=srv.socket_path)
            ctl.init("pod16")
            for _ in range(60):                       # 60 refusals, each a ~300-byte log line
                with pytest.raises(errors.UnknownPartitionError):  # (not the client's timeout)
                    ctl.remove_partition("nope")
            assert srv._log_lines.full()              # the writer is stuck: lines were dropped
    finally:
        os.close(read_end)


def test_server_refuses_a_socket_path_that_is_a_file(shared_dir):
    f = shared_dir / "not-a-socket"
    f.write_text("mine")
    with pytest.raises(errors.VipuServerError, match="not a socket"):
        Server(f, shared_dir / "v.sqlite").open()
    assert f.read_text() == "mine"


def test_server_refuses_a_state_file_of_another_user(shared_dir):
    if not ROOT:
        pytest.skip("needs root to give a file away")
    db = shared_dir / "v.sqlite"
    db.write_bytes(b"")
    os.chown(db, ALICE, ALICE)
    with pytest.raises(errors.VipuServerError, match=f"belongs to uid {ALICE}"):
        Server(shared_dir / "v.sock", db).open()
    assert not (shared_dir / "v.sock").exists()


def test_an_existing_state_file_is_made_private(shared_dir, server):
    vipu.connect(server=server.socket_path).init("pod16")
    server.stop()
    server.close()
    os.chmod(server.db, 0o666)
    again = Server(server.socket_path, server.db, log=open(os.devnull, "w")).open()
    try:
        assert os.stat(server.db).st_mode & 0o777 == 0o600
        assert any("0600" in n for n in again.notes)
    finally:
        again.close()


# --- the remote controller: the same API, results and errors as local mode --------------------
def test_remote_controller_matches_local_mode(server, tmp_path):
    remote = vipu.connect(server=server.socket_path)
    local = vipu.connect(tmp_path / "local.sqlite", user="root")
    for ctl in (remote, local):
        ctl.init("pod16", allocations={"a": (0, 2, "root"), "b": "2-3"})
        ctl.create_partition("p", 4, allocation="a")
        ctl.create_partition("q", 2, reconfigurable=True, gcds=2)
        ctl.share("q", ["bob", "carol"])
    assert [p.to_dict() for p in remote.list_partitions()] == \
        [p.to_dict() for p in local.list_partitions()]
    assert remote.list_allocations() == local.list_allocations()
    assert remote.partition("q").ipuof_config() == local.partition("q").ipuof_config()
    assert remote.system == local.system
    said = {}
    for ctl in (remote, local):
        for bad, error in (((3,), errors.PartitionSizeError), (("abc",), errors.PartitionSizeError),
                           ((64,), errors.PartitionSizeError), ((8, "a"), errors.NoFreeIpusError),
                           ((2, "zz"), errors.AllocationError)):
            with pytest.raises(error) as refusal:
                ctl.create_partition("r", *bad)
            said.setdefault(bad, set()).add(str(refusal.value))
        with pytest.raises(errors.UnknownPartitionError):
            ctl.remove_partition("zz")
        with pytest.raises(errors.PartitionNameError):
            ctl.create_partition("p", 1)
    assert all(len(messages) == 1 for messages in said.values())     # word for word
    with pytest.raises(AttributeError):
        remote.user = "alice"
    assert remote.remove_partition("p").ipus == (0, 1, 2, 3)


def test_connect_ignores_a_claimed_user_with_a_warning(server, monkeypatch):
    with pytest.warns(UserWarning, match="'alice' is ignored"):
        ctl = vipu.connect(server=server.socket_path, user="alice")
    assert ctl.user == "root"
    monkeypatch.setenv("IPULAB_VIPU_SERVER", str(server.socket_path))
    assert isinstance(vipu.connect(), vipu.RemoteController)            # from the environment
    with pytest.raises(errors.VipuError, match="not both"):
        vipu.connect(db="x.sqlite", server=server.socket_path)


def test_a_remote_partition_runs_here_and_stops_when_removed(server):
    ctl = vipu.connect(server=server.socket_path)
    ctl.init("pod16")
    dev = ctl.create_partition("mine", 2).device(tiles_per_ipu=4)
    g = poplar.Graph(dev.target)
    v = g.add_variable(poplar.FLOAT, [4], "v")
    g.set_tile_mapping(v, 0)
    g.create_host_write("w", v)
    g.create_host_read("r", v)
    e = poplar.Engine(g, prog.Sequence([]))
    e.load(dev)
    e.write_tensor("w", np.arange(4, dtype=np.float32))
    e.run()
    assert dev.memory_bytes() > 0
    ctl.remove_partition("mine")
    assert dev.memory_bytes() == 0                    # cleared before the IPUs are free
    with pytest.raises(errors.PartitionError, match="has been removed"):
        e.run()


def test_unreachable_server_is_one_line(shared_dir, capsys):
    from ipulab.cli import main
    code = main(["vipu", "--server", str(shared_dir / "none.sock"), "list", "partitions"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "no V-IPU server at" in err


# --- local mode: refusals reveal nothing a user cannot see either -------------------------------
def test_local_refusals_reveal_nothing(tmp_path):
    db = tmp_path / "v.sqlite"
    alice, bob = vipu.connect(db, user="alice"), vipu.connect(db, user="bob")
    alice.init("pod16")
    alice.create_partition("secret", 4)
    with pytest.raises(errors.UnknownPartitionError) as shown:
        bob.partition("secret")
    for attempt in (lambda: bob.remove_partition("secret"), lambda: bob.share("secret", "bob")):
        with pytest.raises(errors.UnknownPartitionError) as refused_:
            attempt()
        assert str(refused_.value) == str(shown.value) and "alice" not in str(shown.value)
    alice.share("secret", "bob")                        # now bob sees it: he is told whose
    with pytest.raises(errors.PartitionOwnerError, match="belongs to 'alice'"):
        bob.remove_partition("secret")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM partitions").fetchone()[0] == 1
