"""A controller that asks a V-IPU server (`ipulab vipu serve`) instead of opening the state
file: the same methods, results and errors as Controller, for the user the kernel says this
process runs as. Its partitions' devices run on this process's simulator, and ask the server
before every run whether their partition is still there.

A client talks only to the server it expects: before it sends a byte, the kernel's word on
the listening process (SO_PEERCRED) must be the account that owns the socket's folder, or
the one server_user ($IPULAB_VIPU_SERVER_USER) names; anyone can make a socket in a
world-writable folder first, and would otherwise receive other users' requests.

    ctl = vipu.connect(server="/run/ipulab/vipu.sock")     # or $IPULAB_VIPU_SERVER
    ctl.user                                              # 'alice': from the kernel
    vipu.connect(server="/tmp/vipu.sock", server_user="teacher")   # /tmp is root's folder
    dev = ctl.create_partition("mine", 4).device(tiles_per_ipu=16)
"""
from __future__ import annotations

import os
import pwd
import re
import socket
import time
from pathlib import Path

from .. import arch
from ..errors import AllocationError, VipuServerError
from . import wire
from .controller import pod_system
from .partition import EVERYONE, Allocation, Partition, scrub


class RemoteController:
    """A V-IPU controller acting, through the server at `server`, for the user this process
    runs as. user and admin are what the server says; they cannot be set."""

    def __init__(self, server, timeout: float = 30.0, server_user: str | int | None = None):
        """server: the server's Unix socket; timeout: seconds for one request, including a
        wait for another's transaction and retries while the server is busy; server_user:
        the account (name or uid) the server must run as (default: $IPULAB_VIPU_SERVER_USER,
        else whoever owns the socket's folder)."""
        self.server = Path(server).expanduser().absolute()
        self.timeout = float(timeout)
        named = server_user if server_user is not None else \
            os.environ.get("IPULAB_VIPU_SERVER_USER") or None
        self._server_uid = None if named is None else _uid_of(named)
        self._user = self._admin = None
        self._call("whoami")

    user = property(lambda self: self._user, doc="who the server knows this process as")
    admin = property(lambda self: self._admin, doc="whether that is the administrator")

    def __repr__(self) -> str:
        return f"RemoteController({str(self.server)!r}, user={self.user!r})"

    @property
    def where(self) -> str:
        """The server this controller asks (what `ipulab vipu init` says the state is in)."""
        return f"the V-IPU server at {self.server}"

    # --- the wire ------------------------------------------------------------------------------
    def _call(self, action: str, **args):
        """One request and its reply; the reply's error raised as its own class."""
        deadline = time.monotonic() + self.timeout
        pause = 0.02
        while True:
            reply = self._exchange({"action": action, "args": args}, deadline)
            if not reply.get("busy") or time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)                       # busy: try again, a little later
            pause = min(pause * 2, 0.5)
        user, admin = reply.get("user"), reply.get("admin")
        if isinstance(user, str) and isinstance(admin, bool):
            self._user, self._admin = user, admin
        if reply.get("ok") is True:
            return reply.get("result")
        message = reply.get("message")
        raise wire.error_class(reply.get("error"))(
            message if isinstance(message, str) else "the V-IPU server refused the request")

    def _exchange(self, message: dict, deadline: float) -> dict:
        where = self.server
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.1))
            try:
                sock.connect(str(where))
            except FileNotFoundError:
                raise VipuServerError(f"no V-IPU server at {where}: the socket does not exist "
                                      f"(the administrator starts one with `ipulab vipu serve "
                                      f"--socket {where}`)") from None
            except ConnectionRefusedError:
                raise VipuServerError(f"no V-IPU server answers at {where} (its server has "
                                      "stopped)") from None
            except PermissionError:
                raise VipuServerError(f"cannot reach the V-IPU server at {where}: permission "
                                      "denied") from None
            except socket.timeout:
                raise VipuServerError(f"the V-IPU server at {where} did not accept within "
                                      f"{self.timeout:g} s") from None
            except OSError as e:
                raise VipuServerError(f"cannot reach the V-IPU server at {where}: "
                                      f"{e.strerror or e}") from None
            self._check_peer(sock)
            try:
                sock.sendall(wire.encode(message))
                sent = None
            except OSError as e:            # closed early: its reply (busy?) may be there
                sent = VipuServerError(f"the V-IPU server at {where} closed the connection "
                                       f"({e.strerror or e})")
            try:
                line = wire.read_line(sock, wire.MAX_REPLY, deadline)
            except VipuServerError as e:
                raise sent or VipuServerError(f"no answer from the V-IPU server at {where}: "
                                              f"{e}") from None
        finally:
            sock.close()
        return wire.decode(line)

    def _check_peer(self, sock: socket.socket) -> None:
        """Refuse, having sent nothing, a server that does not run as the expected account."""
        from .server import account
        folder = self.server.parent
        try:
            expected = self._server_uid if self._server_uid is not None else \
                os.stat(folder).st_uid
            peer = wire.peer_uid(sock)
        except OSError as e:
            raise VipuServerError(f"cannot tell who runs the V-IPU server at {self.server}: "
                                  f"{e.strerror or e}") from None
        if peer != expected:
            whose = "--server-user" if self._server_uid is not None else f"owner of {folder}"
            raise VipuServerError(
                f"not talking to {self.server}: it is served by {account(peer)}, not by "
                f"{account(expected)} ({whose}); if {account(expected)} is wrong, name the "
                "server's account with --server-user")

    # --- the controller's methods --------------------------------------------------------------
    def init(self, system: str = "pod16", allocations=None) -> list[Allocation]:
        """Set up the cluster (the administrator only): see Controller.init."""
        return [wire.allocation_in(a) for a in
                self._call("init", system=str(system), allocations=_specs(allocations))]

    @property
    def system(self) -> arch.System:
        """The Pod the server manages."""
        name = self._call("system")
        if not isinstance(name, str):
            raise VipuServerError("the server sent a malformed system name")
        return pod_system(name)

    def list_allocations(self) -> list[Allocation]:
        return [wire.allocation_in(a) for a in _list(self._call("list_allocations"))]

    def list_partitions(self) -> list[Partition]:
        return [wire.partition_in(p, self) for p in _list(self._call("list_partitions"))]

    def partition(self, name: str) -> Partition:
        return wire.partition_in(self._call("partition", name=name), self)

    def alive(self, lease: int) -> bool:
        return self._call("alive", lease=lease) is True

    def create_partition(self, name: str, size: int, allocation: str | None = None,
                         reconfigurable: bool = False, sync_type: str | None = None,
                         gcds: int = 1, user: str | None = None) -> Partition:
        """See Controller.create_partition; user (another user's partition) is for the
        administrator only."""
        args = dict(name=name, size=size, allocation=allocation,
                    reconfigurable=bool(reconfigurable), sync_type=sync_type, gcds=gcds)
        if user is not None:
            args["user"] = user
        return wire.partition_in(self._call("create_partition", **args), self)

    def remove_partition(self, name: str) -> Partition:
        """See Controller.remove_partition: this process's devices of it are cleared here,
        others' when they next ask the server."""
        p = wire.partition_in(self._call("remove_partition", name=name), self)
        scrub(self.where, p.lease)
        return p

    def share(self, name: str, users=EVERYONE) -> Partition:
        users = [users] if isinstance(users, str) else list(users)
        return wire.partition_in(self._call("share", name=name, users=users), self)


def _uid_of(user: str | int) -> int:
    """The uid of an account given by name, uid<N> or number; VipuServerError if none."""
    text = str(user)
    if re.fullmatch(r"(uid)?\d+", text):
        return int(text.removeprefix("uid"))
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise VipuServerError(f"--server-user {text!r}: no such account on this "
                              "machine") from None


def _list(value) -> list:
    if not isinstance(value, list):
        raise VipuServerError("the server sent a malformed list")
    return value


def _specs(allocations) -> list[str]:
    """Controller.init's allocations as "NAME=FIRST-LAST[:USER]" strings for the wire."""
    if not allocations:
        return []
    if isinstance(allocations, str):
        return [allocations]
    if not isinstance(allocations, dict):
        return [str(a) for a in allocations]
    out = []
    for name, spec in allocations.items():
        if isinstance(spec, str):
            out.append(f"{name}={spec}")
            continue
        try:
            first, count, user = (tuple(spec) + (None,))[:3] if len(spec) == 2 else tuple(spec)
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in (first, count)):
                raise TypeError
        except (TypeError, ValueError):
            raise AllocationError(f"allocation {name!r}: give (first_machine, machines[, user]) "
                                  f"or 'MACHINES[:USER]', not {spec!r}") from None
        if count < 1 or first < 0 or (user is not None and not isinstance(user, str)) or \
                re.search(r"[=:]", str(name)):
            raise AllocationError(f"allocation {name!r}: machines {first} to "
                                  f"{first + count - 1} of ({first}, {count}, {user!r}) are "
                                  "not machines of a Pod")
        out.append(f"{name}={first}-{first + count - 1}" + (f":{user}" if user else ""))
    return out
