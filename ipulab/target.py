"""Target: the machine a graph is built for (chip, IPU count, tiles) and its cycle conversions."""
from __future__ import annotations

from math import ceil

import numpy as np

from . import arch
from .errors import GraphError, PartitionError


class Target:
    """What Poplar calls a Target: tiles, memory, workers, clock, and how data moves between IPUs."""

    def __init__(self, chip: arch.Chip, num_ipus: int = 1, tiles_per_ipu: int | None = None,
                 cost: arch.CostModel = arch.COST, system: arch.System | None = None):
        """system: the machine the IPUs are in (default: the named system of this chip and
        IPU count, e.g. a Bow-2000 for 4 Bow IPUs)."""
        tiles_per_ipu = chip.tiles_per_ipu if tiles_per_ipu is None else int(tiles_per_ipu)
        if not 1 <= tiles_per_ipu <= chip.tiles_per_ipu:
            raise GraphError(f"{chip.name} has 1 to {chip.tiles_per_ipu} tiles per IPU, "
                             f"not {tiles_per_ipu}")
        if num_ipus < 1:
            raise GraphError(f"a target needs at least one IPU, not {num_ipus}")
        self.chip, self.cost = chip, cost
        self.num_ipus, self.tiles_per_ipu = int(num_ipus), tiles_per_ipu
        self.system = system or arch.system_for(chip, self.num_ipus)
        if self.system.num_ipus != self.num_ipus or self.system.chip is not chip:
            raise GraphError(f"{self.system.description} has {self.system.num_ipus} "
                             f"{self.system.chip.name} IPUs, not {num_ipus} {chip.name}")

    arch = property(lambda self: self.chip.name)
    num_tiles = property(lambda self: self.num_ipus * self.tiles_per_ipu)
    bytes_per_tile = property(lambda self: self.chip.bytes_per_tile)
    num_worker_contexts = property(lambda self: self.chip.num_worker_contexts)
    exchange_bytes_per_cycle = property(lambda self: self.chip.exchange_bytes_per_cycle)
    clock_hz = property(lambda self: self.chip.clock_hz)

    @property
    def peak_fp32_flops(self) -> float:
        """Peak fp32 FLOP/s of THIS target: its tiles at the chip's rate (fewer tiles, less)."""
        return self.chip.fp32_flops_per_cycle_per_tile * self.num_tiles * self.clock_hz

    @property
    def peak_fp16_flops(self) -> float:
        return self.chip.fp16_flops_per_cycle_per_tile * self.num_tiles * self.clock_hz

    def __repr__(self) -> str:
        return (f"Target({self.arch}, {self.num_ipus} IPU(s) x {self.tiles_per_ipu} tiles, "
                f"{self.system.name})")

    # --- V-IPU isolation (ipulab.vipu): a partition's target carries its identity ------------
    @property
    def partition(self) -> str | None:
        """The V-IPU partition (or GCD) these IPUs are, as "name#lease[/gcd]"; None if the
        target is not a partition."""
        return getattr(self.system, "partition", None) or None

    def check_partition(self, other, what: str) -> None:
        """PartitionError if `other` (a target) is another partition's than this one's:
        nothing of one partition may name another's IPUs, streams or buffers."""
        theirs = getattr(other, "partition", None)
        if (self.partition or theirs) and theirs != self.partition:
            raise PartitionError(f"cannot {what} {other!r}: this program is for partition "
                                 f"{self.partition or '(none)'} and that is partition "
                                 f"{theirs or '(none)'}; partitions are isolated")

    def tile_error(self, tile: int, n: int) -> GraphError:
        """The error for a tile past a graph's n tiles: on a partition, a PartitionError (the
        tiles beyond are another partition's IPUs)."""
        text = f"tile {tile} does not exist: this graph has tiles 0 to {n - 1}"
        if self.partition:
            return PartitionError(f"{text} of partition {self.partition}: a program cannot "
                                  "name the IPUs of another partition")
        return GraphError(text)

    def __eq__(self, other) -> bool:
        return isinstance(other, Target) and (self.chip, self.num_ipus, self.tiles_per_ipu,
                                              self.system) == (
            other.chip, other.num_ipus, other.tiles_per_ipu, other.system)

    def __hash__(self) -> int:
        return hash((self.chip.name, self.num_ipus, self.tiles_per_ipu, self.system.name))

    # --- conversions used by the cycle model -----------------------------------------------
    def cycles(self, seconds: float) -> int:
        return int(ceil(seconds * self.clock_hz))

    def ipu_of(self, tiles: np.ndarray) -> np.ndarray:
        return np.asarray(tiles) // self.tiles_per_ipu

    def sync_cycles(self, kind: str) -> int:
        """internal: one IPU's barrier; external: all IPUs over the links; global: with the host."""
        internal = self.cost.sync_internal_cycles
        if kind == "internal":
            return internal
        hops = 1 + self.num_ipus // 4
        racks = self.system.num_racks      # a sync across racks also crosses the GW-Links
        external = internal + self.cycles(2 * self.cost.sync_hop_s * hops + 2 * (racks > 1) *
                                          self.cost.gw_link_latency_s)
        return external if kind == "external" else external + self.cycles(self.cost.host_latency_s)

    def host_cycles(self, nbytes: int) -> int:
        if nbytes <= 0:
            return 0
        rate = self.system.host_link_bytes_per_second
        return self.cycles(self.cost.host_latency_s + nbytes / rate)

    def machine_of(self, tiles: np.ndarray) -> np.ndarray:
        """The machine (e.g. Bow-2000 of a Pod) each tile's IPU belongs to."""
        return self.ipu_of(tiles) // self.system.ipus_per_machine

    def streaming_cycles(self, nbytes: int) -> int:
        """Moving nbytes between one machine's IPUs and its streaming memory (remote buffers);
        on a system without streaming memory, over the host link. Same latency as the host."""
        if nbytes <= 0:
            return 0
        return self.cycles(self.cost.host_latency_s
                           + nbytes / self.system.streaming_bytes_per_second)

    def link_cycles(self, nbytes: int, src_ipu: int, dst_ipu: int) -> int:
        """Moving nbytes from one IPU to another: over IPU-Links inside a rack, over the
        machine's GW-Links between racks. [MODEL] A machine's GW-Links are shared by its IPUs,
        which in a collective all send at once: each gets its share."""
        if nbytes > 0 and self.system.rack_of(src_ipu) != self.system.rack_of(dst_ipu):
            share = self.system.gateway_bytes_per_second / self.system.ipus_per_machine
            return self.cycles(self.cost.gw_link_latency_s + nbytes / share)
        links, hops = self.system.route(src_ipu, dst_ipu)
        if nbytes <= 0 or links == 0:
            return 0
        return self.cycles(hops * self.cost.ipu_link_latency_s
                           + nbytes / (links * self.chip.ipu_link_bytes_per_second))
