"""The V-IPU controller: a Pod's machines granted to users as allocations, carved into
partitions, kept in one SQLite file (state.py) so that every process of a class sees one Pod.

    ctl = vipu.connect()                         # $IPULAB_VIPU_DB, $IPULAB_USER
    ctl.init("pod16", allocations={"a": (0, 2, "alice"), "b": (2, 2, None)})
    p = ctl.create_partition("train", 4)         # 4 IPUs of one allocation, joined by IPU-Links
    p.device()                                   # a device of exactly those IPUs
    ctl.remove_partition("train")

The rules are the V-IPU docs' [Graphcore V-IPU user guide]; each broken one raises its own
VipuError subclass (ipulab.errors) naming the rule, the request and what is free.
"""
from __future__ import annotations

import getpass
import os
import re
import warnings

import numpy as np

from .. import arch
from ..errors import (AllocationError, NoFreeIpusError, PartitionNameError, PartitionOwnerError,
                      PartitionSizeError, StateError, SyncTypeError, UnknownPartitionError,
                      VipuError)
from .blocks import find_block
from .partition import EVERYONE, Allocation, Partition, scrub
from .state import Store

SYNC_TYPES = ("pod-native-default", "c2-compatible")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def default_user() -> str:
    """$IPULAB_USER, else the login name."""
    try:
        return os.environ.get("IPULAB_USER") or getpass.getuser()
    except (KeyError, OSError):         # no login name (a container without a passwd entry)
        raise VipuError("no user name: set $IPULAB_USER or pass --user NAME") from None


def connect(db=None, user: str | None = None, timeout: float = 10.0, server=None,
            server_user=None):
    """The controller of a Pod. Local mode (one person): the state in db (default
    $IPULAB_VIPU_DB, else ~/.ipulab/vipu.sqlite), acting for user (default $IPULAB_USER, else
    the login name), a label and not an identity. Through a server (a class on one machine):
    server, the socket of `ipulab vipu serve` (default $IPULAB_VIPU_SERVER when no db is
    given), where the user is the account the kernel names; a user given then is ignored,
    with a warning if it is not that account. server_user: the account the server must run
    as (RemoteController: default the owner of the socket's folder)."""
    if server is None and db is None:
        server = os.environ.get("IPULAB_VIPU_SERVER") or None
    if server is None:
        return Controller(db, user, timeout)
    if db is not None:
        raise VipuError("give db (local mode) or server (a shared Pod), not both: the "
                        "server alone opens its state file")
    from .client import RemoteController
    ctl = RemoteController(server, timeout=max(float(timeout), 30.0), server_user=server_user)
    claimed = user if user is not None else os.environ.get("IPULAB_USER")
    if claimed and claimed != ctl.user:
        warnings.warn(ignored_user(claimed, ctl), stacklevel=2)
    return ctl


def ignored_user(claimed: str, ctl) -> str:
    """What a client is told when it claims a name the server does not take."""
    return (f"the user name {claimed!r} is ignored: the V-IPU server knows you as "
            f"{ctl.user!r}, your account as the kernel names it")


def pod_system(name: str) -> arch.System:
    """A Pod of `ipulab info`'s systems by name (pod16 ... pod256, m2000-pod16 ...), built of
    4-IPU machines."""
    s = arch.SYSTEMS.get(name) if isinstance(name, str) else None
    if s is None or s.num_ipus < 16 or s.chip.name not in arch.POD_MACHINES:
        pods = [n for n, x in arch.SYSTEMS.items() if x.num_ipus >= 16]
        raise StateError(f"unknown Pod {name!r}: a V-IPU cluster is one of {', '.join(pods)} "
                         "(the Pods of `ipulab info`)")
    return s


def _power_of_two(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1 and n & (n - 1) == 0


def spans(ipus) -> str:
    """IPU indices as ranges: [0, 1, 2, 5] -> '0-2, 5'."""
    out, ipus = [], sorted(ipus)
    i = 0
    while i < len(ipus):
        j = i
        while j + 1 < len(ipus) and ipus[j + 1] == ipus[j] + 1:
            j += 1
        out.append(str(ipus[i]) if i == j else f"{ipus[i]}-{ipus[j]}")
        i = j + 1
    return ", ".join(out) or "none"


class Controller:
    """A V-IPU controller acting for one user over the state in one SQLite file. admin: the
    administrator's controller (vipu-admin's view: every allocation and partition, and the
    removal of any partition), as `ipulab vipu serve` gives its own user."""

    def __init__(self, db=None, user: str | None = None, timeout: float = 10.0,
                 admin: bool = False):
        self.store = Store(db, timeout)
        self.user = _checked_user(user if user is not None else default_user())
        self.admin = bool(admin)

    def __repr__(self) -> str:
        return f"Controller({str(self.store.path)!r}, user={self.user!r})"

    @property
    def where(self) -> str:
        """Where the state is: the state file (a server's controller: its socket)."""
        return str(self.store.path)

    # --- the cluster ---------------------------------------------------------------------------
    def init(self, system: str = "pod16", allocations=None) -> list[Allocation]:
        """Set up the cluster: a Pod and its allocations. allocations: "NAME=MACHINES[:USER]"
        strings, or {name: "MACHINES[:USER]"} or {name: (first_machine, machines, user or
        None)}; MACHINES is a machine index or a range FIRST-LAST, machines (of 4 IPUs)
        numbered from 0, and no USER means everyone. None: the whole Pod granted to everyone
        as allocation "all". Refused while partitions exist."""
        pod = pod_system(system)
        allocs = _parse_allocations(allocations, pod)
        with self.store.write(create=True) as conn:
            n = conn.execute("SELECT COUNT(*) FROM partitions").fetchone()[0]
            if n:
                raise StateError(f"the cluster has {n} partition(s); remove them before init")
            conn.execute("DELETE FROM allocations")
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('system', ?)", (pod.name,))
            conn.executemany("INSERT INTO allocations VALUES (?, ?, ?, ?)",
                             [(a.name, a.first_machine, a.machines, a.user) for a in allocs])
        return allocs

    @property
    def system(self) -> arch.System:
        """The Pod this controller manages."""
        with self.store.read() as conn:
            return _system(conn)

    def list_allocations(self) -> list[Allocation]:
        """The allocations granted to this user (or to everyone), with their free IPUs (the
        administrator: every allocation)."""
        with self.store.read() as conn:
            _, allocs, parts = _snapshot(conn, self)
        return [a.with_free(_free(a, parts)) for a in allocs
                if self.admin or a.granted_to(self.user)]

    def list_partitions(self) -> list[Partition]:
        """The partitions this user may see: their own and those shared with them (the
        administrator: every partition)."""
        with self.store.read() as conn:
            parts = _snapshot(conn, self)[2]
        return [p for p in parts if self._sees(p)]

    def _sees(self, p: Partition) -> bool:
        return self.admin or p.visible_to(self.user)

    def partition(self, name: str) -> Partition:
        """The partition of that name, if visible to this user."""
        with self.store.read() as conn:
            parts = _snapshot(conn, self)[2]
        return self._visible(name, parts)

    def _visible(self, name: str, parts: list[Partition]) -> Partition:
        """The partition of that name if this user may see it; else UnknownPartitionError,
        whether or not another user has one of that name (a refusal reveals nothing)."""
        for p in parts:
            if p.name == name and self._sees(p):
                return p
        mine = [p.name for p in parts if self._sees(p)]
        raise UnknownPartitionError(
            f"unknown partition {name!r}: no partition of that name is visible to user "
            f"{self.user!r} (a partition is visible only to its creator unless shared); "
            f"visible: {', '.join(mine) or 'none'}")

    def alive(self, lease: int) -> bool:
        """Whether the partition with this lease (its row id, never reused) still exists and
        this user may see it (what a device asks before every run)."""
        with self.store.read() as conn:
            row = conn.execute("SELECT user, shared FROM partitions WHERE id=?",
                               (lease,)).fetchone()
        if row is None:
            return False
        shared = row[1].split(",") if isinstance(row[1], str) and row[1] else []
        return self.admin or row[0] == self.user or self.user in shared or EVERYONE in shared

    # --- partitions ----------------------------------------------------------------------------
    def create_partition(self, name: str, size: int, allocation: str | None = None,
                         reconfigurable: bool = False, sync_type: str | None = None,
                         gcds: int = 1, user: str | None = None) -> Partition:
        """A partition of `size` IPUs (a power of two) from ONE allocation granted to the user,
        placed on the first free aligned block, so its IPUs are joined by IPU-Links.
        reconfigurable needs sync_type c2-compatible (the default when reconfigurable).
        gcds: graph compilation domains, each an independent Poplar instance. user: create
        it for another user (as vipu-admin can; default: this controller's user)."""
        user = self.user if user is None else _checked_user(user)
        _check_name(name)
        sync_type = _sync_type(reconfigurable, sync_type)
        with self.store.write() as conn:
            pod, allocs, parts = _snapshot(conn, self)
            taken = [p for p in parts if p.name == name]
            if taken:           # whose it is, only if this user may see it
                owner = f" (owner {taken[0].user})" if self._sees(taken[0]) else ""
                raise PartitionNameError(f"a partition named {name!r} already exists{owner}: "
                                         "partition names are unique in the Pod")
            alloc, first = _place(name, size, gcds, allocation, user, pod, allocs, parts)
            cur = conn.execute(
                "INSERT INTO partitions (name, allocation, first_ipu, size, user, "
                "reconfigurable, sync_type, gcds) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (name, alloc.name, first, size, user, int(bool(reconfigurable)), sync_type, gcds))
            conn.executemany("INSERT INTO ipus VALUES (?, ?)",
                             [(i, cur.lastrowid) for i in range(first, first + size)])
        return Partition(name, tuple(range(first, first + size)), user, alloc.name,
                         bool(reconfigurable), sync_type, gcds, (), cur.lastrowid, pod, self)

    def remove_partition(self, name: str) -> Partition:
        """Remove one of this user's partitions: its IPUs are free again, and the memory of its
        devices in this process is cleared first (a device elsewhere clears its own when its
        engine next checks in)."""
        with self.store.write() as conn:
            parts = _snapshot(conn, self)[2]
            p = self._owned(name, parts, "remove")
            conn.execute("DELETE FROM ipus WHERE partition=?", (p.lease,))
            conn.execute("DELETE FROM partitions WHERE id=?", (p.lease,))
            scrub(self.where, p.lease)    # in the transaction: cleared before the IPUs are free
        return p

    def share(self, name: str, users=EVERYONE) -> Partition:
        """Let other users see and use one of this user's partitions: a user name, a list of
        them, or "*" for everyone. Only its creator may remove it."""
        users = [users] if isinstance(users, str) else list(users)
        for u in users:
            if u != EVERYONE:
                _checked_user(u)
        with self.store.write() as conn:
            p = self._owned(name, _snapshot(conn, self)[2], "share")
            shared = tuple(sorted(set(p.shared) | set(users)))
            conn.execute("UPDATE partitions SET shared=? WHERE id=?", (",".join(shared), p.lease))
        return p.with_shared(shared)

    def _owned(self, name: str, parts: list[Partition], verb: str) -> Partition:
        """The partition of that name, if this user created it (or is the administrator). One
        they cannot see is UnknownPartitionError, as if it did not exist; one shared with
        them is PartitionOwnerError, naming its owner."""
        p = self._visible(name, parts)
        if p.user != self.user and not self.admin:
            raise PartitionOwnerError(f"user {self.user!r} cannot {verb} partition {name!r}: "
                                      f"it belongs to {p.user!r}, and only its creator can")
        return p


# --- the rules, as functions of a snapshot ---------------------------------------------------------
def _checked_user(user) -> str:
    if not isinstance(user, str) or not NAME.match(user):
        raise VipuError(f"a user name is 1 to 64 letters, digits, '_', '.' or '-', not {user!r}")
    return user


def _check_name(name) -> None:
    if not isinstance(name, str) or not NAME.match(name):
        raise PartitionNameError(f"a partition name is 1 to 64 letters, digits, '_', '.' or "
                                 f"'-' (starting with a letter or digit), not {name!r}")


def _sync_type(reconfigurable: bool, sync_type: str | None) -> str:
    """The sync type to record: c2-compatible for a reconfigurable partition."""
    if sync_type is not None and sync_type not in SYNC_TYPES:
        raise SyncTypeError(f"unknown sync type {sync_type!r}; choose one of "
                            f"{', '.join(SYNC_TYPES)}")
    if reconfigurable and sync_type not in (None, "c2-compatible"):
        raise SyncTypeError(f"a reconfigurable partition needs the c2-compatible sync type, "
                            f"not {sync_type!r}")
    return sync_type or ("c2-compatible" if reconfigurable else "pod-native-default")


def _parse_allocations(allocations, pod: arch.System) -> list[Allocation]:
    """Allocations from "NAME=MACHINES[:USER]" strings or a dict (see Controller.init),
    checked: names, users, machines of the Pod, no machine in two allocations."""
    if not allocations:
        return [Allocation("all", 0, pod.num_machines, None, pod.ipus_per_machine)]
    if isinstance(allocations, str):
        allocations = [allocations]
    items = ((k, _parse_spec(f"{k}={v}")[1] if isinstance(v, str) else v)
             for k, v in allocations.items()) if isinstance(allocations, dict) else \
        (_parse_spec(s) for s in allocations)
    out, owner = [], {}
    for name, spec in items:
        if not isinstance(name, str) or not NAME.match(name):
            raise AllocationError(f"an allocation name is 1 to 64 letters, digits, '_', '.' or "
                                  f"'-', not {name!r}")
        first, count, user = _machines(name, spec, pod)
        for m in range(first, first + count):
            if m in owner:
                raise AllocationError(f"machine {m} is in allocations {owner[m]!r} and "
                                      f"{name!r}: a machine belongs to one allocation")
            owner[m] = name
        out.append(Allocation(name, first, count, user, pod.ipus_per_machine))
    return out


def _machines(name: str, spec, pod: arch.System) -> tuple[int, int, str | None]:
    """(first machine, machines, user) of one allocation, checked against the Pod."""
    try:
        first, count, user = (tuple(spec) + (None,))[:3] if len(spec) == 2 else tuple(spec)
        last = range(first, first + count)[-1] if count >= 1 else -1
    except (TypeError, ValueError, IndexError):
        raise AllocationError(f"allocation {name!r}: give (first_machine, machines[, user]) "
                              f"or 'MACHINES[:USER]', not {spec!r}") from None
    if user is not None:
        _checked_user(user)
    if count < 1 or first < 0 or last >= pod.num_machines:
        raise AllocationError(f"allocation {name!r}: machines {first} to {first + count - 1} "
                              f"are not in the {pod.name}'s machines 0 to "
                              f"{pod.num_machines - 1}")
    return first, count, user


def _parse_spec(spec) -> tuple[str, tuple]:
    """"NAME=MACHINES[:USER]" with MACHINES a machine index or a range FIRST-LAST."""
    m = re.fullmatch(r"([^=]+)=(\d+)(?:-(\d+))?(?::(.+))?", str(spec))
    if not m:
        raise AllocationError(f"an allocation is NAME=MACHINES[:USER], MACHINES a machine "
                              f"index or a range like 0-1, not {spec!r}")
    first = int(m.group(2))
    last = int(m.group(3)) if m.group(3) is not None else first
    if last < first:
        raise AllocationError(f"allocation {spec!r}: the range {first}-{last} is empty")
    return m.group(1), (first, last - first + 1, m.group(4))


def _system(conn) -> arch.System:
    row = conn.execute("SELECT value FROM meta WHERE key='system'").fetchone()
    if row is None:
        raise StateError("the V-IPU state names no Pod: run `ipulab vipu init` first")
    return pod_system(row[0])


def _snapshot(conn, ctl: Controller) -> tuple[arch.System, list[Allocation], list[Partition]]:
    """The Pod, its allocations and its partitions as stored, checked (the file is untrusted):
    allocations inside the Pod, partitions of known allocations on their own IPUs."""
    pod = _system(conn)
    rows = conn.execute("SELECT name, first_machine, machines, user FROM allocations "
                        "ORDER BY first_machine").fetchall()
    try:
        allocs = _parse_allocations({r[0]: tuple(r[1:]) for r in rows}, pod) if rows else []
    except (AllocationError, TypeError) as e:
        raise StateError(f"the V-IPU state has a bad allocation: {e}") from None
    by_name = {a.name: a for a in allocs}
    parts = [_partition(row, pod, by_name, ctl) for row in conn.execute(
        "SELECT id, name, allocation, first_ipu, size, user, reconfigurable, sync_type, gcds, "
        "shared FROM partitions ORDER BY first_ipu")]
    booked = dict(conn.execute("SELECT ipu, partition FROM ipus").fetchall())
    if booked != {i: p.lease for p in parts for i in p.ipus}:
        raise StateError("the V-IPU state is inconsistent: its IPU table does not match its "
                         "partitions")
    return pod, allocs, parts


def _partition(row, pod: arch.System, allocs: dict, ctl: Controller) -> Partition:
    """A stored partition row as a Partition, if every field is one the controller writes."""
    lease, name, alloc, first, size, user, reconf, sync, gcds, shared = row
    a = allocs.get(alloc)
    names = shared.split(",") if isinstance(shared, str) and shared else []
    placed = a is not None and isinstance(first, int) and _power_of_two(size) and \
        a.first_ipu <= first and first + size <= a.end_ipu and (first - a.first_ipu) % size == 0
    if not (placed and isinstance(lease, int) and _power_of_two(gcds) and gcds <= size and
            sync in SYNC_TYPES and reconf in (0, 1) and isinstance(shared, str) and
            all(isinstance(x, str) and NAME.match(x) for x in (name, user)) and
            all(x == EVERYONE or NAME.match(x) for x in names)):
        raise StateError(f"the V-IPU state has a bad partition row: {row!r}")
    return Partition(name, tuple(range(first, first + size)), user, alloc, bool(reconf), sync,
                     gcds, tuple(names), lease, pod, ctl)


def _free(a: Allocation, parts: list[Partition]) -> tuple[int, ...]:
    taken = {i for p in parts for i in p.ipus}
    return tuple(i for i in range(a.first_ipu, a.end_ipu) if i not in taken)


def _place(name, size, gcds, allocation, user, pod, allocs, parts) -> tuple[Allocation, int]:
    """The allocation and first IPU of the new partition: the lowest free block of `size`
    IPUs (a power of two, split into `gcds`) aligned to its size inside one allocation granted
    to the user."""
    mine = [a for a in allocs if a.granted_to(user)]
    free = "; ".join(f"{a.name}: IPUs {spans(_free(a, parts))}" for a in mine)
    if not _power_of_two(size):
        raise PartitionSizeError(f"partition {name!r}: the size of a partition must be a "
                                 f"power of two (1, 2, 4, 8, ...), not {size!r}; free: {free}")
    request = f"partition {name!r} of {size} IPUs"
    if size > pod.num_ipus:
        raise PartitionSizeError(f"{request}: larger than the {pod.name}'s {pod.num_ipus} IPUs; "
                                 f"free: {free}")
    if not _power_of_two(gcds) or gcds > size:
        raise PartitionSizeError(f"{request}: its IPUs split into a power of two of GCDs, at "
                                 f"most one per IPU, not {gcds!r}")
    if allocation is not None:
        named = [a for a in allocs if a.name == allocation]
        if not named or not named[0].granted_to(user):
            raise AllocationError(
                f"{request}: no allocation {allocation!r} granted to user {user!r}; theirs: "
                f"{', '.join(a.name for a in mine) or 'none'}")
        mine = named
    if not mine:
        raise AllocationError(f"{request}: user {user!r} has no allocation")
    largest = max(a.num_ipus for a in mine)
    if size > largest:
        raise AllocationError(
            f"{request}: a partition cannot span allocations, and the largest of "
            f"{', '.join(f'{a.name} ({a.num_ipus} IPUs)' for a in mine)} has {largest}; "
            f"free: {free}")
    for a in mine:              # blocks aligned from the allocation's first IPU
        free_ipus = np.asarray(_free(a, parts), np.int64) - a.first_ipu
        busy = np.ones(a.num_ipus // size * size, bool)
        busy[free_ipus[free_ipus < busy.size]] = False
        first = find_block(busy, size)
        if first is not None:
            return a, a.first_ipu + first
    free = "; ".join(f"{a.name}: IPUs {spans(_free(a, parts))}" for a in mine)
    raise NoFreeIpusError(f"{request}: no {size} free IPUs joined by IPU-Links (an aligned "
                          f"block) in one allocation; free: {free}")
