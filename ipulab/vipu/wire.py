"""The V-IPU server's wire: one JSON object per line each way (UTF-8, no NaN), bounded in size,
never pickle. A request names one action of ARGS and its arguments; the server checks each
for type and size before a controller sees it, since a client is untrusted.

    -> {"action": "create_partition", "args": {"name": "p", "size": 4}}
    <- {"ok": true, "user": "bob", "admin": false, "result": {...}}
    <- {"ok": false, "user": "bob", "admin": false, "error": "NoFreeIpusError", "message": "..."}
"""
from __future__ import annotations

import json
import socket
import struct
import time

from .. import errors
from ..errors import VipuServerError
from .partition import Allocation, Partition

MAX_REQUEST = 64 * 1024          # bytes of one request line
MAX_REPLY = 16 * 2**20           # bytes of one reply line (a client's bound on the server)
MAX_TEXT = 256                   # characters of one text argument
MAX_ITEMS = 1024                 # items of one list argument

# action -> {argument: kind}; a kind ending in "!" is required. Kinds: text, text? (or null),
# texts (a list of text), int, bool, value (an int, a float or a text: the controller refuses
# what is not a power of two by its own rule, as in local mode).
ARGS = {
    "whoami": {},
    "system": {},
    "init": {"system": "text!", "allocations": "texts"},
    "list_allocations": {},
    "list_partitions": {},
    "partition": {"name": "text!"},
    "alive": {"lease": "int!"},
    "create_partition": {"name": "text!", "size": "value!", "allocation": "text?",
                         "reconfigurable": "bool", "sync_type": "text?", "gcds": "value",
                         "user": "text?"},
    "remove_partition": {"name": "text!"},
    "share": {"name": "text!", "users": "texts!"},
}

# The errors a reply may name; any other name is raised as VipuError.
ERRORS = {c.__name__: c for c in (
    errors.VipuError, errors.PartitionSizeError, errors.PartitionNameError,
    errors.UnknownPartitionError, errors.PartitionOwnerError, errors.AllocationError,
    errors.NoFreeIpusError, errors.SyncTypeError, errors.StateError, errors.AdminOnlyError,
    errors.VipuServerError)}


def encode(message: dict) -> bytes:
    """One line of JSON."""
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def _no_constants(name):
    raise ValueError(f"{name} is not JSON")


def decode(line: bytes) -> dict:
    """A JSON object from one line, else VipuServerError."""
    try:
        message = json.loads(line.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise VipuServerError(f"bad request: not one line of JSON ({e})") from None
    if not isinstance(message, dict):
        raise VipuServerError("bad request: a request is a JSON object")
    return message


def _is(kind: str, value) -> bool:
    kind = kind.rstrip("!")
    if kind in ("text", "text?"):
        return (isinstance(value, str) and len(value) <= MAX_TEXT) or \
            (kind == "text?" and value is None)
    if kind == "texts":
        return isinstance(value, list) and len(value) <= MAX_ITEMS and \
            all(isinstance(v, str) and len(v) <= MAX_TEXT for v in value)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**62
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "value":
        return (isinstance(value, (int, float)) and not isinstance(value, bool) and
                abs(value) < 2**62) or (isinstance(value, str) and len(value) <= MAX_TEXT)
    raise AssertionError(kind)


def request(message: dict) -> tuple[str, dict]:
    """(action, arguments) of a decoded request, each argument checked; else
    VipuServerError saying what is wrong."""
    action, args = message.get("action"), message.get("args", {})
    if set(message) - {"action", "args"}:
        raise VipuServerError(f"bad request: unknown keys {sorted(set(message) - {'action', 'args'})}")
    if not isinstance(action, str) or action not in ARGS:
        raise VipuServerError(f"bad request: the action is one of {', '.join(ARGS)}, not "
                              f"{str(action)[:40]!r}")
    if not isinstance(args, dict):
        raise VipuServerError(f"bad request: {action}'s arguments are a JSON object")
    spec = ARGS[action]
    unknown = sorted(set(args) - set(spec))
    if unknown:
        raise VipuServerError(f"bad request: {action} takes no argument {unknown[0][:40]!r}")
    for name, kind in spec.items():
        if name not in args:
            if kind.endswith("!"):
                raise VipuServerError(f"bad request: {action} needs {name}")
        elif not _is(kind, args[name]):
            raise VipuServerError(f"bad request: {action}'s {name} is not a "
                                  f"{kind.rstrip('!?')} of the allowed size")
    return action, args


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket, as the kernel says
    (SO_PEERCRED): the server's of a client, and a client's of its server."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def read_line(sock: socket.socket, limit: int, deadline: float) -> bytes:
    """One line from sock (without its newline), at most limit bytes, by the deadline (a
    time.monotonic() value); else VipuServerError. Bytes after the line are dropped."""
    buf = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise VipuServerError("timed out waiting for a whole line")
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(65536, limit + 1 - len(buf)))
        except socket.timeout:
            raise VipuServerError("timed out waiting for a whole line") from None
        except OSError as e:
            raise VipuServerError(f"the connection broke ({e.strerror or e})") from None
        if not chunk:
            raise VipuServerError("the connection closed before a whole line")
        end = chunk.find(b"\n")
        if end >= 0:
            buf += chunk[:end]
            if len(buf) > limit:
                break
            return bytes(buf)
        buf += chunk
        if len(buf) > limit:
            break
    raise VipuServerError(f"a line is at most {limit:,} bytes")


def error_class(name) -> type:
    """The exception class a reply names (VipuError if it names none we raise)."""
    return ERRORS.get(name, errors.VipuError) if isinstance(name, str) else errors.VipuError


# --- results: allocations and partitions as JSON, and back (checked: a reply is data too) ------
def allocation_out(a: Allocation) -> dict:
    return {"name": a.name, "first_machine": a.first_machine, "machines": a.machines,
            "user": a.user, "ipus_per_machine": a.ipus_per_machine, "free": list(a.free)}


def partition_out(p: Partition) -> dict:
    return {"name": p.name, "ipus": list(p.ipus), "user": p.user, "allocation": p.allocation,
            "reconfigurable": p.reconfigurable, "sync_type": p.sync_type, "gcds": p.gcds,
            "shared": list(p.shared), "lease": p.lease, "system": p.pod.name}


def _ints(values) -> tuple:
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                               for v in values):
        raise TypeError("not a list of integers")
    return tuple(values)


def allocation_in(d) -> Allocation:
    """An Allocation from a reply, else VipuServerError."""
    try:
        return Allocation(_text(d["name"]), _int(d["first_machine"]), _int(d["machines"]),
                          None if d["user"] is None else _text(d["user"]),
                          _int(d["ipus_per_machine"]), _ints(d["free"]))
    except (KeyError, TypeError) as e:
        raise VipuServerError(f"the server sent a malformed allocation ({e})") from None


def partition_in(d, controller) -> Partition:
    """A Partition (whose device() runs in this process) from a reply, else VipuServerError."""
    from .controller import pod_system
    try:
        flag = d["reconfigurable"]
        if not isinstance(flag, bool):
            raise TypeError("reconfigurable is not a bool")
        return Partition(_text(d["name"]), _ints(d["ipus"]), _text(d["user"]),
                         _text(d["allocation"]), flag, _text(d["sync_type"]), _int(d["gcds"]),
                         tuple(_text(u) for u in _items(d["shared"])), _int(d["lease"]),
                         pod_system(_text(d["system"])), controller)
    except (KeyError, TypeError, errors.StateError) as e:
        raise VipuServerError(f"the server sent a malformed partition ({e})") from None


def _items(value) -> list:
    if not isinstance(value, list):
        raise TypeError(f"{value!r} is not a list")
    return value


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a text")
    return value


def _int(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not an integer")
    return value
