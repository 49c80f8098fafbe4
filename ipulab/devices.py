"""Devices: IPUModel(...) and the named systems (devices.bow2000() and friends)."""
from __future__ import annotations

from . import arch
from .errors import GraphError
from .target import Target


class Device:
    """A simulated device; an Engine is loaded onto one."""

    def __init__(self, target: Target):
        self.target = target

    def __repr__(self) -> str:
        return f"Device({self.target!r})"


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


def _system(name: str, tiles_per_ipu: int | None) -> Device:
    s = arch.SYSTEMS[name]
    return Device(Target(s.chip, s.num_ipus, tiles_per_ipu))


def ipu(arch_name: str = "ipu2", tiles_per_ipu: int | None = None) -> Device:
    """One IPU of the given architecture."""
    return Device(Target(IPUModel(arch_name).chip, 1, tiles_per_ipu))


def c2(tiles_per_ipu: int | None = None) -> Device:
    """A Mk1 C2 card: two GC2 IPUs joined by three IPU-Links."""
    return _system("c2", tiles_per_ipu)


def m2000(tiles_per_ipu: int | None = None) -> Device:
    """An IPU-M2000: four Mk2 GC200 IPUs."""
    return _system("m2000", tiles_per_ipu)


def bow2000(tiles_per_ipu: int | None = None) -> Device:
    """A Bow-2000: four Bow IPUs, 5,888 tiles (same as IPUModel("bow") with num_ipus = 4)."""
    return _system("bow2000", tiles_per_ipu)


def pod16(tiles_per_ipu: int | None = None) -> Device:
    """A Bow Pod16: four Bow-2000s, 16 IPUs."""
    return _system("pod16", tiles_per_ipu)
