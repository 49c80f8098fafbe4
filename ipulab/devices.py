"""Devices: IPUModel(...) and the named systems (devices.bow2000() and friends)."""
from __future__ import annotations

import numpy as np

from . import arch
from .errors import GraphError
from .target import Target


class Device:
    """A simulated device; an Engine is loaded onto one."""

    def __init__(self, target: Target):
        self.target = target

    def __repr__(self) -> str:
        return f"Device({self.target!r})"

    def allocate(self, sizes: dict) -> dict:
        """Zeroed memory for an engine's arenas ({dtype name: elements}); a device that must
        clear its memory later (a V-IPU partition's) keeps what it hands out."""
        return {k: np.zeros(n, np.dtype(k)) for k, n in sizes.items()}

    def check(self) -> None:
        """Raise if the device can no longer run programs (a removed partition's); an engine
        asks before every run and host transfer."""


class IPUModel:
    """Poplar's IPUModel: pick a chip, optionally change num_ipus / tiles_per_ipu, create_device()."""

    def __init__(self, arch_name: str = "ipu2"):
        if arch_name not in arch.CHIPS:
            raise GraphError(f"unknown IPU architecture {arch_name!r}; "
                             f"choose one of {', '.join(arch.CHIPS)}")
        self.chip = arch.CHIPS[arch_name]
        self.num_ipus = 1
        self.tiles_per_ipu = self.chip.tiles_per_ipu

    def create_device(self) -> Device:
        return Device(Target(self.chip, self.num_ipus, self.tiles_per_ipu))


# Other names for systems, accepted wherever a system is named (and listed by `ipulab info`).
ALIASES = {"ipu": "bow"}
# The one vocabulary of systems: what `ipulab info` lists and `train`, `plan`, `vipu init`
# and the APIs accept (pod512 is none: Pods go from 16 to 256 IPUs).
SYSTEM_NAMES = tuple(arch.SYSTEMS) + tuple(ALIASES)


def find_system(name: str) -> arch.System:
    """The arch.System of a name of SYSTEM_NAMES (an alias included); else GraphError
    naming them all (and, for a podN, the rule of Pod sizes)."""
    if name in SYSTEM_NAMES:
        return arch.SYSTEMS[ALIASES.get(name, name)]
    rule = ""
    if isinstance(name, str) and name.removeprefix("m2000-").startswith("pod"):
        sizes = ", ".join(str(n) for n in arch.POD_SIZES)
        rule = f": a Pod's size is a power of two from 16 to 256 IPUs ({sizes})"
    raise GraphError(f"unknown system {name!r}{rule}; choose one of {', '.join(SYSTEM_NAMES)}")


def system(name: str, tiles_per_ipu: int | None = None) -> Device:
    """The named system of ipulab.arch (`ipulab info` lists them: ipu1, ipu2, bow, c2, m2000,
    bow2000, pod16, ...; "ipu" is one Bow IPU), optionally with fewer tiles per IPU."""
    s = find_system(name)
    return Device(Target(s.chip, s.num_ipus, tiles_per_ipu, system=s))


def ipu(arch_name: str = "ipu2", tiles_per_ipu: int | None = None) -> Device:
    """One IPU of the given architecture."""
    return Device(Target(IPUModel(arch_name).chip, 1, tiles_per_ipu))


def c2(tiles_per_ipu: int | None = None) -> Device:
    """A Mk1 C2 card: two GC2 IPUs joined by three IPU-Links."""
    return system("c2", tiles_per_ipu)


def m2000(tiles_per_ipu: int | None = None) -> Device:
    """An IPU-M2000: four Mk2 GC200 IPUs."""
    return system("m2000", tiles_per_ipu)


def bow2000(tiles_per_ipu: int | None = None) -> Device:
    """A Bow-2000: four Bow IPUs, 5,888 tiles (same as IPUModel("bow") with num_ipus = 4)."""
    return system("bow2000", tiles_per_ipu)


def pod16(tiles_per_ipu: int | None = None) -> Device:
    """A Bow Pod16: four Bow-2000s, 16 IPUs."""
    return system("pod16", tiles_per_ipu)


def pod(n: int, ipu: str = "bow", tiles_per_ipu: int | None = None) -> Device:
    """An IPU-POD of n IPUs (16, 32, 64, 128, 256: a power of two): Bow-2000s (ipu="bow") or
    IPU-M2000s (ipu="ipu2"); a 2-D torus of IPU-Links in each 64-IPU rack, GW-Links between
    racks. Cheap to make at any size; simulate with a few tiles_per_ipu."""
    if ipu not in arch.POD_MACHINES:
        raise GraphError(f"a Pod is built of Bow-2000s (ipu='bow') or IPU-M2000s "
                         f"(ipu='ipu2'), not {ipu!r}")
    try:
        s = arch.pod(int(n), arch.CHIPS[ipu])
    except (ValueError, TypeError) as e:
        raise GraphError(str(e)) from None
    return Device(Target(s.chip, s.num_ipus, tiles_per_ipu, system=s))
