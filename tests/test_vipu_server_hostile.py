"""The V-IPU server's clients and accounts, hostile (issue 38): a client talks only to the
server it expects (the account owning the socket's folder, or --server-user), as the kernel
says, and sends nothing to another; a few accounts holding half-sent lines cannot take the
server's capacity from the others.

Root only: the other accounts are forked children with their own uid and gid.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time

import pytest

from ipulab import errors, vipu
from ipulab.vipu import wire
from test_vipu_server import as_root, as_uid, client, serving, shared_dir  # noqa: F401

MALLORY, HOGS = 47101, [47111, 47112, 47113, 47114]


def _become(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _impostor(path: str, ready, heard) -> None:
    """As MALLORY: listen on path first, answer whoever connects as if the administrator,
    and report the bytes each client sent."""
    _become(MALLORY)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o666)
    s.listen(8)
    ready.set()
    while True:
        conn, _ = s.accept()
        conn.settimeout(5)
        try:
            heard.put(conn.recv(65536))
            conn.sendall(wire.encode({"ok": True, "user": "root", "admin": True,
                                      "result": None}))
        except OSError:
            pass
        conn.close()


@pytest.fixture
def impostor(shared_dir):
    """MALLORY's socket in a world-writable folder (sticky, as /tmp) that root owns."""
    shared_dir.chmod(0o1777)
    path = shared_dir / "vipu.sock"
    ctx = mp.get_context("fork")
    ready, heard = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_impostor, args=(str(path), ready, heard))
    proc.start()
    assert ready.wait(30)
    yield path, heard
    proc.kill()
    proc.join(10)


@as_root
def test_a_client_refuses_a_server_of_another_account(impostor):
    path, heard = impostor
    with pytest.raises(errors.VipuServerError) as refused:
        vipu.connect(server=path)
    message = str(refused.value)
    assert f"uid{MALLORY}" in message and "root" in message and str(path) in message
    assert "--server-user" in message
    code, out, err = client(None, "list", "partitions", server_path=path)
    assert code == 1 and out == "" and err.count("\n") == 1 and f"uid{MALLORY}" in err
    # told --server-user root, it refuses too; the impostor heard nothing either way
    code, _, err = client(None, "--server-user", "root", "list", "partitions",
                          server_path=path)
    assert code == 1 and f"uid{MALLORY}" in err
    assert [heard.get(timeout=30) for _ in range(3)] == [b""] * 3, "the impostor heard"


@as_root
def test_server_user_names_the_server_in_a_folder_another_account_owns(shared_dir):
    folder = shared_dir / "mallory"
    folder.mkdir()
    os.chown(folder, MALLORY, MALLORY)
    with serving(folder) as srv:             # root's server, in MALLORY's folder
        with pytest.raises(errors.VipuServerError, match=f"uid{MALLORY}"):
            vipu.connect(server=srv.socket_path)
        admin = vipu.connect(server=srv.socket_path, server_user="root")
        assert admin.user == "root"
        admin.init("pod16")
        code, out, err = client(47102, "--server-user", "root", "list", "partitions",
                                server_path=srv.socket_path)
        assert code == 0 and err == "", err
        os.environ["IPULAB_VIPU_SERVER_USER"] = "0"
        try:
            assert vipu.connect(server=srv.socket_path).user == "root"
        finally:
            del os.environ["IPULAB_VIPU_SERVER_USER"]
        code, _, err = client(None, "--server-user", "no-such-account", "list", "partitions",
                              server_path=srv.socket_path)
        assert code == 1 and "no-such-account" in err and err.count("\n") == 1


def _hog(uid: int, path: str, count: int, held, done) -> None:
    """As uid: hold `count` connections, each with half a request, until done."""
    _become(uid)
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(b'{"action": "whoami"')
        socks.append(s)
    held.put(uid)
    done.wait(120)


@as_root
def test_a_few_accounts_cannot_take_the_servers_capacity(shared_dir):
    """As the issue's 4 accounts x 32 half-sent lines on 128 connections, scaled down: 4 x 2
    on 8. Another account is answered while every hog still holds its connections."""
    with serving(shared_dir, request_seconds=60.0, max_clients=8, max_per_uid=2) as srv:
        ctx = mp.get_context("fork")
        held, done = ctx.Queue(), ctx.Event()
        hogs = [ctx.Process(target=_hog, args=(u, str(srv.socket_path), 2, held, done))
                for u in HOGS]
        for p in hogs:
            p.start()
        try:
            assert sorted(held.get(timeout=60) for _ in hogs) == HOGS
            deadline = time.monotonic() + 30         # all 8 admitted, however busy the machine
            while sum(srv._active.values()) < 8 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert sum(srv._active.values()) == 8
            answered = as_uid(47120, lambda: vipu.RemoteController(srv.socket_path,
                                                                   timeout=10).user)
            assert answered == "uid47120"
            assert all(p.is_alive() for p in hogs)   # still holding, not gone
        finally:
            done.set()
            for p in hogs:
                p.join(30)


@as_root
def test_the_server_tells_clients_the_account_to_expect(shared_dir):
    """In a folder another account owns, clients must name the server's account: the server
    says how; in its own folder, a client needs no flag."""
    folder = shared_dir / "theirs"
    folder.mkdir()
    os.chown(folder, MALLORY, MALLORY)
    with serving(folder) as srv:
        assert srv.client_flag() == " --server-user root"
    with serving(shared_dir) as srv:
        assert srv.client_flag() == ""
