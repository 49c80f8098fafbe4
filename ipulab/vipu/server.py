"""`ipulab vipu serve`: the V-IPU controller as a server for a class on one machine.

The server alone opens the state file (0600, its own user's); every local user reaches it
through a Unix socket (0666). Who a client is comes from the kernel (SO_PEERCRED): the
account name of its uid, or uid<N> where the uid has none, never a name the client claims.
The server's own user is the administrator (init, every allocation and partition).

Each connection carries one request and its reply (wire.py: a line of JSON each way, checked
before use) and is served in its own thread within a deadline, so a stuck or hostile client
holds one thread for a few seconds at most and never the others; each request is one SQLite
transaction of the controller. Connections are shared fairly between accounts: one account
holds at most max_per_uid, and when all max_clients are taken, a newcomer from an account
holding fewer drops the oldest unfinished request of the account holding most (a few
accounts of half-sent lines cannot keep the others out). A server killed with SIGKILL leaves a stale socket, which the
next server on the same path replaces (a flock beside the socket tells stale from live);
SQLite's journal keeps the state whole.
"""
from __future__ import annotations

import fcntl
import os
import pwd
import queue
import re
import signal
import socket
import stat
import sys
import threading
import time
import traceback
from pathlib import Path

from ..errors import AdminOnlyError, IpuLabError, VipuServerError
from . import wire
from .controller import NAME, Controller
from .state import default_path

REQUEST_SECONDS = 10.0       # a client has this long to send its request (and read the reply)
MAX_CLIENTS = 128            # connections served at once
MAX_PER_UID = 32             # of them from one uid: one user cannot take every thread
LOG_BACKLOG = 1000           # log lines waiting to be written; more are dropped, never waited for
CHANGES = ("init", "create_partition", "remove_partition", "share")


def account(uid: int) -> str:
    """A uid's V-IPU user name: its account name, or uid<N> without one (or when the name is
    not a V-IPU name, or is uid<M> of another uid: those names are the uids' own)."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return f"uid{uid}"
    if not NAME.match(name) or (re.fullmatch(r"uid\d+", name) and name != f"uid{uid}"):
        return f"uid{uid}"
    return name


class Server:
    """The controller behind a Unix socket. open() takes the socket and the state file,
    serve_forever() answers until stop(); close() gives them back."""

    def __init__(self, socket_path, db=None, timeout: float = 10.0,
                 request_seconds: float = REQUEST_SECONDS, max_clients: int = MAX_CLIENTS,
                 max_per_uid: int = MAX_PER_UID, log=None):
        """socket_path: the Unix socket to listen on; db: the state file (default
        $IPULAB_VIPU_DB, else ~/.ipulab/vipu.sqlite of the server's user); timeout: seconds
        a request waits for another's transaction; request_seconds: what a client has to
        send a request and read its reply; log: a file for one line per change or refusal
        (default stderr)."""
        self.socket_path = Path(socket_path).expanduser().absolute()
        self.db = (Path(db).expanduser() if db is not None else default_path()).absolute()
        self.timeout, self.request_seconds = float(timeout), float(request_seconds)
        self.max_clients, self.max_per_uid = int(max_clients), int(max_per_uid)
        self.uid = os.geteuid()
        self.admin = account(self.uid)
        self._log_file = log
        self._log_lines: queue.Queue = queue.Queue(maxsize=LOG_BACKLOG)
        self._logger: threading.Thread | None = None
        self._sock = self._lock_fd = self._inode = None
        self._stop = threading.Event()
        self._guard = threading.Lock()
        self._active: dict[int, int] = {}           # uid -> connections being served
        self._reading: dict[int, list] = {}         # uid -> its connections yet to send a line
        self._threads: set[threading.Thread] = set()
        self.notes: list[str] = []                  # what open() had to say

    def client_flag(self) -> str:
        """' --server-user NAME' where clients must name this server's account (the socket's
        folder is another's, e.g. /tmp: a client trusts its owner by default), else ''."""
        try:
            owner = os.stat(self.socket_path.parent).st_uid
        except OSError:
            return ""
        return "" if owner == self.uid else f" --server-user {self.admin}"

    def __repr__(self) -> str:
        return f"Server({str(self.socket_path)!r}, db={str(self.db)!r}, admin={self.admin!r})"

    # --- start and stop ------------------------------------------------------------------------
    def open(self) -> "Server":
        """Take the socket (replacing a stale one, refusing a live one) and the state file
        (made 0600 if new; an existing one must be a file of the server's user, and is made
        0600). VipuServerError or StateError says why not."""
        try:
            self._take_lock()
            self._prepare_state()
            self._bind()
        except OSError as e:
            self.close()
            raise VipuServerError(f"cannot start the V-IPU server: {e.strerror or e}"
                                  f"{f' ({e.filename})' if e.filename else ''}") from None
        except BaseException:
            self.close()
            raise
        return self

    def _take_lock(self) -> None:
        """A flock beside the socket for the server's life: two servers never race for one
        path, and a killed server's lock goes with it."""
        parent = self.socket_path.parent
        if not parent.exists():
            parent.mkdir(parents=True, mode=0o755)
            os.chmod(parent, 0o755)                   # reachable by every user
        lock = self.socket_path.with_name(self.socket_path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise VipuServerError(f"another V-IPU server is running on {self.socket_path} "
                                  f"(it holds {lock})") from None
        self._lock_fd = fd

    def _prepare_state(self) -> None:
        path = self.db
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o700)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            os.close(fd)
            self.notes.append(f"made the state file {path} (0600)")
            return
        if not stat.S_ISREG(st.st_mode):
            raise VipuServerError(f"the state {path} is not a regular file (a link or a "
                                  "folder?): give --db a file of the server's own")
        if st.st_uid != self.uid:
            raise VipuServerError(f"the state {path} belongs to uid {st.st_uid}, not to the "
                                  f"server's user {self.admin!r}: only the server may own it")
        for f in (path, path.with_name(path.name + "-journal")):
            if f.exists() and os.lstat(f).st_mode & 0o077 and os.lstat(f).st_uid == self.uid:
                os.chmod(f, 0o600)
                self.notes.append(f"made {f} readable by the server's user only (0600)")

    def _bind(self) -> None:
        path = self.socket_path
        if os.path.lexists(path):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise VipuServerError(f"{path} exists and is not a socket: not replacing it")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(2.0)
            try:
                probe.connect(str(path))
            except (ConnectionRefusedError, FileNotFoundError):
                path.unlink(missing_ok=True)          # stale: its server is gone
                self.notes.append(f"replaced the stale socket {path}")
            except OSError as e:
                raise VipuServerError(f"cannot tell whether a server listens on {path} "
                                      f"({e.strerror or e}): not replacing it") from None
            else:
                raise VipuServerError(f"a V-IPU server is already listening on {path}")
            finally:
                probe.close()
        # Bound, opened to every user and listening under a temporary name, then renamed:
        # whoever sees the socket at its path can connect at once.
        ready = path.with_name(f".{path.name}.{os.getpid()}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            ready.unlink(missing_ok=True)
            sock.bind(str(ready))
            os.chmod(ready, 0o666)                    # every local user may connect
            sock.listen(128)
            os.rename(ready, path)
        except OSError as e:
            sock.close()
            ready.unlink(missing_ok=True)
            raise VipuServerError(f"cannot listen on {path}: {e.strerror or e}") from None
        sock.settimeout(0.25)                         # accept() wakes to see stop()
        self._sock, self._inode = sock, os.stat(path).st_ino
        hidden = [d for d in path.parents if not os.stat(d).st_mode & stat.S_IXOTH]
        if hidden:
            self.notes.append(f"other users cannot reach {path}: {hidden[0]} is not searchable "
                              f"by them (chmod o+x it, or put the socket elsewhere)")

    def stop(self) -> None:
        """Stop accepting; serve_forever() returns once the requests under way are answered."""
        self._stop.set()

    def close(self) -> None:
        """Remove the socket (if it is still this server's) and let the lock go."""
        if self._sock is not None:
            self._sock.close()
            try:
                if os.stat(self.socket_path).st_ino == self._inode:
                    self.socket_path.unlink()
            except OSError:
                pass
            self._sock = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        deadline = time.monotonic() + 1.0             # the last lines out, if the log takes them
        while self._log_lines.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def __enter__(self) -> "Server":
        return self if self._sock is not None else self.open()

    def __exit__(self, *exc) -> None:
        self.stop()
        self.close()

    # --- serving -------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        """Accept connections until stop(), each served in its own thread; then wait (a few
        seconds at most) for the requests under way."""
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._stop.is_set():
                    break
                time.sleep(0.05)                      # e.g. out of file descriptors
                continue
            self._admit(conn)
        for t in list(self._threads):
            t.join(self.request_seconds + self.timeout)

    def _admit(self, conn: socket.socket) -> None:
        try:
            uid = wire.peer_uid(conn)
        except OSError:
            conn.close()
            return
        entry = _Connection(conn, uid)
        with self._guard:
            mine = self._active.get(uid, 0)
            busy = mine >= self.max_per_uid or (
                sum(self._active.values()) >= self.max_clients and not self._make_room(mine))
            if not busy:
                self._active[uid] = mine + 1
                self._reading.setdefault(uid, []).append(entry)
        if busy:                                      # told at once, never queued
            self._reply(conn, {"ok": False, "busy": True, "error": "VipuServerError",
                               "message": "the V-IPU server is busy: try again"}, 0.5)
            conn.close()
            return
        t = threading.Thread(target=self._serve, args=(entry,), daemon=True,
                             name=f"vipu-client-{uid}")
        with self._guard:
            self._threads.add(t)
        t.start()

    def _make_room(self, mine: int) -> bool:
        """(under the guard) For a newcomer whose account holds `mine` connections: drop the
        oldest unfinished request of the account holding most, if it holds more than mine + 1
        (so two accounts never take turns); False if there is none to drop."""
        for uid, held in sorted(self._active.items(), key=lambda item: -item[1]):
            if held <= mine + 1:
                return False
            if self._reading.get(uid):
                victim = self._reading[uid].pop(0)
                victim.dropped = True
                self._release(uid)
                try:
                    victim.conn.shutdown(socket.SHUT_RD)   # its reader wakes to a closed line
                except OSError:
                    pass
                return True
        return False

    def _release(self, uid: int) -> None:
        """(under the guard) One connection of uid fewer."""
        self._active[uid] -= 1
        if not self._active[uid]:
            del self._active[uid]
            self._reading.pop(uid, None)

    def _serve(self, entry: "_Connection") -> None:
        conn, uid = entry.conn, entry.uid
        deadline = time.monotonic() + self.request_seconds
        try:
            try:
                line = wire.read_line(conn, wire.MAX_REQUEST, deadline)
            except VipuServerError as e:
                line, why = None, e
            with self._guard:
                if not entry.dropped:
                    self._reading[uid].remove(entry)
            if entry.dropped:
                why = "the server is full and your account held more connections than others"
            if line is None or entry.dropped:
                self.log(f"{account(uid)}: dropped a connection: {why}")
                self._reply(conn, {"ok": False, "error": "VipuServerError",
                                   "message": f"bad request: {why}"}, 1.0)
                return
            reply = self.answer(uid, line)
            self._reply(conn, reply, max(deadline - time.monotonic(), 1.0))
        finally:
            conn.close()
            with self._guard:
                if not entry.dropped:
                    self._release(uid)
                self._threads.discard(threading.current_thread())

    @staticmethod
    def _reply(conn: socket.socket, reply: dict, seconds: float) -> None:
        try:
            conn.settimeout(seconds)
            conn.sendall(wire.encode(reply))
        except OSError:
            pass                                      # the client went away: its loss

    def answer(self, uid: int, line: bytes) -> dict:
        """The reply to one request line from a client of this uid."""
        user, admin = account(uid), uid == self.uid
        head = {"user": user, "admin": admin}
        action = "request"
        try:
            action, args = wire.request(wire.decode(line))
            result = self._do(Controller(self.db, user, self.timeout, admin=admin), action,
                              args)
        except IpuLabError as e:
            self.log(f"{user}: {action} refused: {type(e).__name__}: {e}")
            return {"ok": False, **head, "error": type(e).__name__,
                    "message": str(e).replace("\n", " ")}
        except Exception as e:        # a bug of ours: the server stays up, the log says what
            self.log(f"{user}: {action} failed: {type(e).__name__}: {e}\n"
                     f"{traceback.format_exc()}")
            return {"ok": False, **head, "error": "VipuError",
                    "message": f"the V-IPU server failed on this {action} ({type(e).__name__}); "
                               "its log says more"}
        if action in CHANGES:
            self.log(f"{user}: {action} {_brief(args)}: done")
        return {"ok": True, **head, "result": result}

    def _do(self, ctl: Controller, action: str, args: dict):
        """Run one action on the client's controller: one transaction of the state."""
        if action == "whoami":
            return None
        if action == "init":
            if not ctl.admin:
                raise AdminOnlyError(f"only the administrator ({self.admin!r}, who runs the "
                                     f"V-IPU server) can init the cluster, not {ctl.user!r}")
            return [wire.allocation_out(a) for a in
                    ctl.init(args["system"], args.get("allocations") or None)]
        if action == "system":
            return ctl.system.name
        if action == "list_allocations":
            return [wire.allocation_out(a) for a in ctl.list_allocations()]
        if action == "list_partitions":
            return [wire.partition_out(p) for p in ctl.list_partitions()]
        if action == "alive":
            return ctl.alive(args["lease"])
        if action == "create_partition":
            owner = args.get("user")
            if owner is not None and owner != ctl.user and not ctl.admin:
                raise AdminOnlyError(f"only the administrator ({self.admin!r}) can create a "
                                     f"partition for another user; you are {ctl.user!r}")
            kwargs = {k: args[k] for k in ("allocation", "reconfigurable", "sync_type", "gcds",
                                           "user") if k in args}
            return wire.partition_out(ctl.create_partition(args["name"], args["size"],
                                                           **kwargs))
        if action == "share":
            return wire.partition_out(ctl.share(args["name"], args["users"]))
        method = {"partition": ctl.partition, "remove_partition": ctl.remove_partition}[action]
        return wire.partition_out(method(args["name"]))

    def log(self, line: str) -> None:
        """Queue one line for the log. A request never waits for it: a log nobody reads (a
        full pipe) costs lines, not answers."""
        if self._logger is None:
            with self._guard:
                if self._logger is None:
                    self._logger = threading.Thread(target=self._write_log, daemon=True,
                                                    name="vipu-log")
                    self._logger.start()
        try:
            self._log_lines.put_nowait(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}")
        except queue.Full:
            pass

    def _write_log(self) -> None:
        while True:
            line = self._log_lines.get()
            try:
                print(line, file=self._log_file or sys.stderr, flush=True)
            except (OSError, ValueError):
                pass
            finally:
                self._log_lines.task_done()


class _Connection:
    """One client's connection: its socket, its uid, and whether it was dropped to make room
    for another account's."""
    __slots__ = ("conn", "uid", "dropped")

    def __init__(self, conn: socket.socket, uid: int):
        self.conn, self.uid, self.dropped = conn, uid, False


def _brief(args: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in args.items())[:200]


def serve(socket_path, db=None, log=None) -> int:
    """Run a server until SIGTERM or SIGINT (`ipulab vipu serve`); returns the exit code."""
    server = Server(socket_path, db, log=log)

    def stop(signum, _frame):
        server.stop()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.open()
        os.umask(0o077)               # whatever the server makes from now on is its own
        out = log or sys.stdout
        for note in server.notes:
            print(f"note: {note}", file=out, flush=True)
        print(f"V-IPU server: state {server.db} (0600, {server.admin}'s), socket "
              f"{server.socket_path} (0666); administrator {server.admin}", file=out)
        print(f"clients: ipulab vipu --server {server.socket_path}{server.client_flag()} ...; "
              "SIGTERM or Ctrl-C stops the server", file=out, flush=True)
        server.serve_forever()
    finally:
        server.close()
        for s, h in previous.items():
            signal.signal(s, h)
    print("V-IPU server stopped", file=out, flush=True)
    return 0
