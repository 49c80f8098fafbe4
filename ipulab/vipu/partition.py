"""Allocations and partitions as the controller hands them out, and a partition as a device.

A partition's device is a Target of exactly its IPUs: its system is a PartitionSystem, the
Pod seen through the partition's global IPU indices, so IPU-Link routes, racks and the sync
domain are the partition's own, and the target carries the partition's identity (name, lease,
GCD). An Engine compiled for one partition refuses another's device, and asks its device
before every run whether the partition still exists (Device.check).

A PartitionDevice keeps the memory it gives its engines (Device.allocate): when the partition
is removed the memory is zeroed before the IPUs are free again (scrub), as V-IPU clears a
partition's IPUs before handing them to the next user.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field, fields, replace

import numpy as np

from .. import arch
from ..devices import Device
from ..errors import PartitionError
from ..target import Target

EVERYONE = "*"         # an allocation granted to every user, or a partition shared with all


@dataclass(frozen=True)
class Allocation:
    """Machines of the Pod granted to one user (user None: to everyone)."""

    name: str
    first_machine: int
    machines: int
    user: str | None
    ipus_per_machine: int = 4
    free: tuple = ()            # free IPUs, when listed

    first_ipu = property(lambda self: self.first_machine * self.ipus_per_machine)
    num_ipus = property(lambda self: self.machines * self.ipus_per_machine)
    end_ipu = property(lambda self: self.first_ipu + self.num_ipus)

    def granted_to(self, user: str) -> bool:
        return self.user is None or self.user == user

    def with_free(self, free) -> "Allocation":
        return replace(self, free=tuple(free))

    def to_dict(self) -> dict:
        return {"name": self.name, "user": self.user or EVERYONE,
                "machines": list(range(self.first_machine, self.first_machine + self.machines)),
                "ipus": list(range(self.first_ipu, self.end_ipu)), "free": list(self.free)}


@dataclass(frozen=True)
class PartitionSystem(arch.System):
    """The Pod seen through one partition (or one GCD of it): IPU i here is IPU ipus[i] of
    the Pod, so routes and racks are the Pod's, and the sync domain is these IPUs only."""

    pod: arch.System | None = None
    ipus: tuple = ()
    partition: str = ""          # identity: "name#lease" (and "/gcd" for one GCD)

    @classmethod
    def of(cls, pod: arch.System, ipus: tuple, identity: str) -> "PartitionSystem":
        base = {f.name: getattr(pod, f.name) for f in fields(arch.System)}
        base.update(name=f"{pod.name}:{identity}", num_ipus=len(ipus),
                    description=f"partition {identity} of {pod.description}: IPUs "
                                f"{ipus[0]}-{ipus[-1]}",
                    streaming_memory_bytes=pod.streaming_memory_bytes * len(ipus) //
                    pod.num_ipus)
        return cls(**base, pod=pod, ipus=tuple(ipus), partition=identity)

    @property
    def num_racks(self) -> int:
        return len({int(self.pod.rack_of(i)) for i in self.ipus})

    def rack_of(self, ipu):
        return self.pod.rack_of(np.asarray(self.ipus)[ipu])

    def route(self, src_ipu: int, dst_ipu: int) -> tuple[int, int]:
        return self.pod.route(self.ipus[src_ipu], self.ipus[dst_ipu])


# Devices of live partitions in this process, by (where the state is, lease): what scrub()
# clears. `where` is the controller's: its state file, or its server's socket.
_DEVICES: dict[tuple[str, int], weakref.WeakSet] = {}
_LOCK = threading.Lock()


def scrub(where: str, lease: int) -> None:
    """Zero the memory of every device of the partition with this lease in this process
    (its partition is being removed)."""
    with _LOCK:
        devs = list(_DEVICES.pop((where, lease), ()))
    for d in devs:
        d.scrub()


class PartitionDevice(Device):
    """A device of one partition's IPUs (or one GCD's): Engine, nn.Trainer and friends run on
    it unchanged; it refuses work once its partition is removed."""

    def __init__(self, target: Target, partition: "Partition"):
        super().__init__(target)
        self.partition = partition
        self._memory: list[weakref.ref] = []      # the arrays handed out, while in use
        self._lock = threading.Lock()
        with _LOCK:
            _DEVICES.setdefault((partition.controller.where, partition.lease),
                                weakref.WeakSet()).add(self)

    def __repr__(self) -> str:
        return f"PartitionDevice({self.target.partition}, IPUs {list(self.target.system.ipus)})"

    def allocate(self, sizes: dict) -> dict:
        self.check()
        arenas = super().allocate(sizes)
        with self._lock:
            self._memory = [r for r in self._memory if r() is not None] + \
                [weakref.ref(a) for a in arenas.values()]
        return arenas

    def check(self) -> None:
        """PartitionError (after clearing this device's memory) if the partition is gone."""
        if not self.partition.controller.alive(self.partition.lease):
            self.scrub()
            raise PartitionError(
                f"partition {self.partition.name!r} (IPUs {self.partition.ipus[0]}-"
                f"{self.partition.ipus[-1]}) has been removed: the job on it is stopped and "
                "its memory cleared; create a partition to run again")

    def scrub(self) -> None:
        """Zero every byte this device handed out (a removed partition's memory)."""
        for a in self._arrays():
            a.fill(0)

    def memory_bytes(self) -> int:
        """Non-zero bytes in the memory this device handed to its engines: what a removed
        partition's next user could read if it were not cleared."""
        return int(sum(np.count_nonzero(a) * a.itemsize for a in self._arrays()))

    def _arrays(self) -> list[np.ndarray]:
        """The memory handed out that an engine still holds."""
        with self._lock:
            return [a for a in (r() for r in self._memory) if a is not None]


@dataclass(frozen=True)
class Partition:
    """A V-IPU partition: `ipus` are global IPU indices of the Pod, a contiguous aligned block
    of one allocation. device() is a simulated device of exactly those IPUs."""

    name: str
    ipus: tuple
    user: str
    allocation: str
    reconfigurable: bool
    sync_type: str
    gcds: int
    shared: tuple
    lease: int                       # the row id: never reused, so a new partition of the
    pod: arch.System = field(repr=False)        # same name is another partition
    controller: object = field(default=None, repr=False, compare=False)

    size = property(lambda self: len(self.ipus))

    def visible_to(self, user: str) -> bool:
        return user == self.user or user in self.shared or EVERYONE in self.shared

    def with_shared(self, shared) -> "Partition":
        return replace(self, shared=tuple(shared))

    def gcd_ipus(self, gcd: int) -> tuple:
        """The global IPUs of one graph compilation domain (the partition split evenly)."""
        if not isinstance(gcd, int) or not 0 <= gcd < self.gcds:
            raise PartitionError(f"partition {self.name!r} has GCDs 0 to {self.gcds - 1}, "
                                 f"not {gcd!r}")
        n = self.size // self.gcds
        return self.ipus[gcd * n:(gcd + 1) * n]

    def device(self, gcd: int | None = None, tiles_per_ipu: int | None = None) -> Device:
        """A device whose target is exactly this partition's IPUs (one GCD's, with several
        GCDs: each is an independent Poplar instance). tiles_per_ipu: fewer tiles per IPU,
        for a small, fast simulation."""
        if gcd is None and self.gcds > 1:
            raise PartitionError(f"partition {self.name!r} has {self.gcds} GCDs, each its own "
                                 f"device: device(gcd=0) to device(gcd={self.gcds - 1})")
        identity = f"{self.name}#{self.lease}" + (f"/{gcd}" if self.gcds > 1 else "")
        ipus = self.gcd_ipus(gcd or 0)
        system = PartitionSystem.of(self.pod, ipus, identity)
        return PartitionDevice(Target(self.pod.chip, len(ipus), tiles_per_ipu, system=system),
                               self)

    def devices(self, tiles_per_ipu: int | None = None) -> list[Device]:
        """One device per GCD."""
        return [self.device(g if self.gcds > 1 else None, tiles_per_ipu)
                for g in range(self.gcds)]

    def ipuof_config(self) -> dict:
        """The IPU-over-Fabric configuration V-IPU writes for the partition (what Poplar reads
        through IPUOF_CONFIG_PATH): its attributes and its devices, one per IPU and one per
        GCD of several IPUs, each with its global IPUs."""
        n = self.size // self.gcds
        ipm = self.pod.ipus_per_machine
        devices = [{"id": i, "type": "ipu", "num_ipus": 1, "ipus": [ipu], "gcd": i // n,
                    "agent": f"ag{ipu // ipm}"} for i, ipu in enumerate(self.ipus)]
        if n > 1:
            devices += [{"id": self.size + g, "type": "ipu", "num_ipus": n,
                         "ipus": list(self.gcd_ipus(g)), "gcd": g,
                         "agent": ",".join(sorted({f"ag{i // ipm}" for i in self.gcd_ipus(g)}))}
                        for g in range(self.gcds)]
        return {"attributes": {"partition_id": self.name, "user": self.user,
                               "system": self.pod.name, "num_ipus": self.size,
                               "num_gcds": self.gcds, "sync_type": self.sync_type,
                               "reconfigurable": self.reconfigurable,
                               "ipu_link_topology": self.pod.topology,
                               "ipu_link_domain_size": self.size},
                "env": {"IPUOF_VIPU_API_PARTITION_ID": self.name},
                "devices": devices}

    def session_config(self, devices) -> dict:
        """The IPUoF configuration of one session (a container, as Backend.AI makes them):
        the partition's attributes and ONLY the listed device ids, so the session cannot see
        the others."""
        cfg = self.ipuof_config()
        known = {d["id"]: d for d in cfg["devices"]}
        wanted = [devices] if isinstance(devices, int) else list(devices)
        bad = [d for d in wanted if d not in known]
        if bad or not wanted:
            raise PartitionError(f"partition {self.name!r} has devices {sorted(known)}; a "
                                 f"session gets some of them, not {bad or wanted}")
        return {**cfg, "devices": [known[d] for d in sorted(set(wanted))]}

    def summary(self) -> dict:
        """What `list partitions --json` prints of it."""
        return {"name": self.name, "size": self.size, "ipus": list(self.ipus),
                "user": self.user, "allocation": self.allocation}

    def to_dict(self) -> dict:
        return {**self.summary(), "reconfigurable": self.reconfigurable,
                "sync_type": self.sync_type, "gcds": self.gcds, "shared": list(self.shared),
                "machines": sorted({i // self.pod.ipus_per_machine for i in self.ipus}),
                "system": self.pod.name}
