"""Hardware presets and systems: plain data, each figure with its source.

Sources (docs/machine.md gives every figure with its source):
  [GC-IPU1]  Graphcore Mk1 Colossus GC2 datasheet; Jia et al., "Dissecting the Graphcore IPU
             Architecture via Microbenchmarking", 2019.
  [GC-IPU2]  Graphcore IPU-M2000 / GC200 product pages and datasheet, 2020.
  [GC-BOW]   Graphcore Bow-2000 / Bow Pod datasheets, 2022 (Poplar prints "1,850.0 MHz").
  [IPUMODEL] Poplar's IPUModel defaults (exchangeBytesPerCycle = 4, 6 worker contexts) and
             the clock derived from published IPUModel profiles.
  [POPTEST]  Poplar's own test harness: global sync 15 ns per hop x 2, hops = 1 + ipus/4;
             IPU-Links 128 Gbit/s per link at 85 % efficiency.
  [GC-POD]   Graphcore IPU-POD datasheets and IPU-POD documentation (Pod sizes and
             topology, machines' memory).
  [MODEL]    ipulab's modelling choice where nothing is published; the reason is given inline.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil

KIB = 1024
GB = 1e9


@dataclass(frozen=True)
class Chip:
    """One IPU model: what a single chip has and how fast it moves data."""

    name: str
    description: str
    tiles_per_ipu: int
    bytes_per_tile: int
    num_worker_contexts: int
    clock_hz: float
    exchange_bytes_per_cycle: int
    fp32_flops_per_cycle_per_tile: int
    fp16_flops_per_cycle_per_tile: int
    sram_read_bytes_per_cycle: int
    sram_write_bytes_per_cycle: int
    ipu_link_bytes_per_second: float     # one direction of one link, after efficiency
    host_link_bytes_per_second: float    # one direction
    sources: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def peak_fp32_flops(self) -> float:
        return self.fp32_flops_per_cycle_per_tile * self.tiles_per_ipu * self.clock_hz

    @property
    def peak_fp16_flops(self) -> float:
        return self.fp16_flops_per_cycle_per_tile * self.tiles_per_ipu * self.clock_hz


# IPU-Links, [POPTEST]: 128 Gbit/s per link and direction at 85 % efficiency. This matches the
# published Mk2 total of 320 GB/s = 10 links x 2 directions x 16 GB/s [GC-IPU2].
_LINK_MK2 = 128e9 / 8 * 0.85
# Mk1 [GC-IPU1]: 3 links of 64 GB/s (both directions) join the two IPUs of a C2 card.
_LINK_MK1 = 64e9 / 2 * 0.85
# PCIe Gen4 x16: 64 GB/s counted over both directions, so 32 GB/s each way [GC-IPU1, GC-IPU2].
_PCIE4_X16 = 32e9

ipu1 = Chip(
    name="ipu1", description="Mk1 Colossus GC2",
    tiles_per_ipu=1216, bytes_per_tile=256 * KIB, num_worker_contexts=6, clock_hz=1.6e9,
    exchange_bytes_per_cycle=4, fp32_flops_per_cycle_per_tile=16,
    fp16_flops_per_cycle_per_tile=64, sram_read_bytes_per_cycle=16,
    sram_write_bytes_per_cycle=8, ipu_link_bytes_per_second=_LINK_MK1,
    host_link_bytes_per_second=_PCIE4_X16,
    sources={"tiles_per_ipu": "GC-IPU1", "bytes_per_tile": "GC-IPU1 (256 KiB, 304 MB total)",
             "clock_hz": "GC-IPU1 (1.6 GHz)", "exchange_bytes_per_cycle": "IPUMODEL, Jia 2019",
             "flops": "31.1 TFLOPS fp32 / 124.5 fp16, derived per tile and cycle",
             "sram": "Jia 2019: 16 B/cycle read, 8 B/cycle write",
             "ipu_links": "GC-IPU1: 3 links of 64 GB/s, 85 % efficiency as POPTEST",
             "host_link": "PCIe Gen4 x16"},
)

ipu2 = Chip(
    name="ipu2", description="Mk2 Colossus GC200",
    tiles_per_ipu=1472, bytes_per_tile=624 * KIB, num_worker_contexts=6, clock_hz=1.33e9,
    exchange_bytes_per_cycle=4, fp32_flops_per_cycle_per_tile=32,
    fp16_flops_per_cycle_per_tile=128, sram_read_bytes_per_cycle=16,
    sram_write_bytes_per_cycle=8, ipu_link_bytes_per_second=_LINK_MK2,
    host_link_bytes_per_second=_PCIE4_X16,
    sources={"tiles_per_ipu": "GC-IPU2", "bytes_per_tile": "GC-IPU2 (624 KiB, 897 MB total)",
             "clock_hz": "IPUMODEL (1.33 GHz derived from published profiles)",
             "exchange_bytes_per_cycle": "IPUMODEL exchangeBytesPerCycle = 4 (8 TB/s)",
             "flops": "62.5 TFLOPS fp32 / 250 fp16, derived per tile and cycle",
             "sram": "as Mk1 per cycle [MODEL]: 47.5 TB/s quoted",
             "ipu_links": "GC-IPU2: 10 links, 320 GB/s; POPTEST efficiency",
             "host_link": "PCIe Gen4 x16"},
)

bow = Chip(
    name="bow", description="Bow IPU",
    tiles_per_ipu=1472, bytes_per_tile=624 * KIB, num_worker_contexts=6, clock_hz=1.85e9,
    exchange_bytes_per_cycle=4, fp32_flops_per_cycle_per_tile=32,
    fp16_flops_per_cycle_per_tile=128, sram_read_bytes_per_cycle=16,
    sram_write_bytes_per_cycle=8, ipu_link_bytes_per_second=_LINK_MK2,
    host_link_bytes_per_second=_PCIE4_X16,
    sources={"tiles_per_ipu": "GC-BOW", "bytes_per_tile": "GC-BOW (624 KiB)",
             "clock_hz": "GC-BOW (Poplar prints 1,850.0 MHz)",
             "exchange_bytes_per_cycle": "4 B/cycle/tile x 1472 x 1.85 GHz = ~11 TB/s (GC-BOW)",
             "flops": "~87.5 TFLOPS fp32 / 350 fp16 (GC-BOW), per tile and cycle as Mk2",
             "sram": "as Mk2 per cycle; ~65 TB/s quoted",
             "ipu_links": "GC-BOW: 10 links, 320 GB/s; POPTEST efficiency",
             "host_link": "PCIe Gen4 x16 (a Bow-2000 uses its gateway instead)"},
)

CHIPS = {c.name: c for c in (ipu1, ipu2, bow)}


@dataclass(frozen=True)
class CostModel:
    """Constants of the cycle model that no datasheet gives; each is a documented choice [MODEL]."""

    # No published on-chip sync latency: a documented choice of the order of 100-200 cycles.
    sync_internal_cycles: int = 150
    # Fixed cost to start an exchange phase on a tile (exchange code setup, a few instructions).
    exchange_setup_cycles: int = 16
    # On-tile copies are done by copy vertices: 8 B/cycle, the SRAM write width (Jia 2019).
    on_tile_copy_bytes_per_cycle: int = 8
    # Default vertex estimate, in worker-issue cycles: a fixed entry/exit cost plus one cycle per
    # element touched (one load or store per element per issue slot).
    vertex_overhead_cycles: int = 10
    vertex_cycles_per_element: int = 1
    # Latency to cross one IPU-Link hop (serialisation and switch); order of a few hundred ns.
    ipu_link_latency_s: float = 200e-9
    # Global-sync hop delay [POPTEST]: 15 ns per hop, counted twice (up and back).
    sync_hop_s: float = 15e-9
    # Latency to cross racks on GW-Links (gateway, Ethernet switches on a Bow Pod256, gateway):
    # none is published; the order of an RDMA round over a switch, 2 us.
    gw_link_latency_s: float = 2e-6
    # Round trip to start a host transfer over PCIe (doorbell + descriptor fetch): about 1 us.
    host_latency_s: float = 1e-6
    # Memory layout: every allocation aligned to 8 bytes (64-bit loads).
    alignment: int = 8
    # Vertex state: a header per vertex plus per field a pointer (scalar), pointer + size
    # (Vector) or pointer + size + one 8-byte entry per sub-vector (VectorList).
    vertex_header_bytes: int = 4
    scalar_field_bytes: int = 4
    vector_field_bytes: int = 8
    vector_list_entry_bytes: int = 8
    # Code: each codelet present on a tile costs its machine code once; each program step that
    # involves a tile costs a few supervisor instructions there.
    codelet_code_bytes: int = 256
    control_code_bytes_per_step: int = 16
    # Product planning: PopLibs plans products and convolutions in groups of channels that
    # fill the AMP unit (its planner's in-, out- and partial-channels per group) and never
    # cuts a dimension into blocks smaller than that: thinner blocks leave the AMP idle and
    # multiply the pieces the exchange must address and move. poplin.plan_mat_mul keeps
    # blocks of at least this many rows (m), inner elements (k) and columns (n), unless the
    # dimension itself is smaller. [MODEL: the AMP's 16 fp32 MACs per cycle as 16 x 1 (rows
    # of the result x columns), fed in 32-element runs of the inner dimension.]
    matmul_grain: tuple = (16, 32, 16)


COST = CostModel()


# Gateway: 2 x 100 Gbit/s links per Bow-2000 [GC-BOW]; the GW-Links between Pod racks.
_GATEWAY = 2 * 100e9 / 8


@dataclass(frozen=True)
class System:
    """A set of IPUs with their IPU-Link topology and host connection."""

    name: str
    description: str
    chip: Chip
    num_ipus: int
    host_link_bytes_per_second: float
    streaming_memory_bytes: int = 0
    ipus_per_machine: int = 4
    links_within_machine: int = 2   # links joining each pair of IPUs inside one machine [MODEL]
    links_between_machines: int = 2  # links from an IPU to the same IPU of the next machine
    # Streaming memory (remote buffers) bandwidth of ONE machine, shared by its IPUs; 0 means
    # the system has no streaming memory of its own and remote buffers live in host memory,
    # reached over the host link.
    streaming_memory_bytes_per_second: float = 0.0
    # "ladder": machines side by side (a Pod16's direct-attached machines); "torus": the 2-D
    # torus of IPU-Links of a Pod rack (POD64 reports ipuLinkTopology torus).
    topology: str = "ladder"
    # IPUs of one rack (0: one rack); racks talk over GW-Links of gateway_bytes_per_second
    # per machine.
    ipus_per_rack: int = 0
    gateway_bytes_per_second: float = _GATEWAY

    @property
    def num_machines(self) -> int:
        return ceil(self.num_ipus / self.ipus_per_machine)

    @property
    def num_racks(self) -> int:
        return ceil(self.num_ipus / self.ipus_per_rack) if self.ipus_per_rack else 1

    def rack_of(self, ipu):
        """The rack of an IPU (or of an array of them)."""
        return ipu // self.ipus_per_rack if self.ipus_per_rack else ipu * 0

    def route(self, src_ipu: int, dst_ipu: int) -> tuple[int, int]:
        """(links in parallel, hops) between two IPUs of one rack.

        [MODEL] Inside a machine the IPUs are fully connected. In a ladder, IPU k of machine m
        links to IPU k of machines m +/- 1. In a torus, the rack's IPUs form rings both ways:
        the machine's IPUs (k, wrapping round) and the rack's machines (m, wrapping round).
        """
        if src_ipu == dst_ipu:
            return 0, 0
        ma, ka = divmod(src_ipu, self.ipus_per_machine)
        mb, kb = divmod(dst_ipu, self.ipus_per_machine)
        if ma == mb:
            return self.links_within_machine, 1
        if self.topology == "torus":       # (between racks: the same place in the other rack)
            ring = min(self.ipus_per_rack or self.num_ipus, self.num_ipus) // self.ipus_per_machine
            dm, dk = abs(ma % ring - mb % ring), abs(ka - kb)
            gw = int(self.rack_of(src_ipu) != self.rack_of(dst_ipu))
            return self.links_between_machines, \
                min(dm, ring - dm) + min(dk, self.ipus_per_machine - dk) + gw
        return self.links_between_machines, abs(ma - mb) + (ka != kb)

    @property
    def peak_fp16_flops(self) -> float:
        return self.chip.peak_fp16_flops * self.num_ipus

    @property
    def streaming_bytes_per_second(self) -> float:
        """Bandwidth to remote buffers per machine: streaming memory, else the host link."""
        return self.streaming_memory_bytes_per_second or self.host_link_bytes_per_second


def _single(chip: Chip) -> System:
    return System(chip.name, f"one {chip.description}", chip, 1, chip.host_link_bytes_per_second)


# Streaming memory: DDR4 on each machine's IPU-Gateway [GC-IPU2, GC-BOW give the capacity
# only]. [MODEL] No bandwidth is published with the capacity, so we take the gateway's own
# link rate (2 x 100 Gbit/s = 25 GB/s) for the path between a machine's IPUs and its
# streaming memory, shared by the machine's 4 IPUs.
_STREAMING = _GATEWAY

SYSTEMS = {
    "ipu1": _single(ipu1),
    "ipu2": _single(ipu2),
    "bow": _single(bow),
    # Mk1 C2 card: two IPUs joined by 3 IPU-Links [GC-IPU1].
    "c2": System("c2", "C2 card: 2 x Mk1 GC2", ipu1, 2, _PCIE4_X16,
                 ipus_per_machine=2, links_within_machine=3),
    # IPU-M2000: 4 x GC200, 1 PFLOPS fp16, up to 448 GB streaming memory [GC-IPU2].
    "m2000": System("m2000", "IPU-M2000: 4 x GC200", ipu2, 4, _GATEWAY, 448 * 10**9,
                     streaming_memory_bytes_per_second=_STREAMING),
    # Bow-2000: 4 x Bow IPU, 1.4 PFLOPS fp16, up to 256 GB streaming memory [GC-BOW].
    "bow2000": System("bow2000", "Bow-2000: 4 x Bow IPU", bow, 4, _GATEWAY, 256 * 10**9,
                      streaming_memory_bytes_per_second=_STREAMING),
}


# A Pod's machines: Bow-2000 with 256 GB of streaming memory [GC-BOW], M2000 with the 128 GB
# it ships with [GC-POD].
POD_MACHINES = {"bow": ("Bow-2000", 256 * 10**9), "ipu2": ("IPU-M2000", 128 * 10**9)}
POD_RACK = 64          # IPUs of a POD64 rack; bigger Pods are racks joined by GW-Links


def pod(num_ipus: int, chip: Chip = bow) -> System:
    """A Pod of num_ipus IPUs (a power of two, 16 or more) built of 4-IPU machines of chip:
    a Pod16's 4 machines direct-attached (a ladder); from 32 IPUs a 2-D torus in each POD64
    rack; Pod128 and Pod256 are 2 and 4 racks joined by GW-Links [GC-POD]."""
    if chip.name not in POD_MACHINES:
        raise ValueError(f"Pods are built of Bow-2000s (bow) or IPU-M2000s (ipu2), not "
                         f"{chip.name}")
    if num_ipus < 16 or num_ipus & (num_ipus - 1):
        raise ValueError(f"a Pod's size is a power of two, 16 or more, not {num_ipus}")
    machine, memory = POD_MACHINES[chip.name]
    name = f"pod{num_ipus}" if chip.name == "bow" else f"m2000-pod{num_ipus}"
    prefix = "Bow " if chip.name == "bow" else "IPU-"
    return System(name, f"{prefix}Pod{num_ipus}: {num_ipus // 4} x {machine}", chip, num_ipus,
                  _GATEWAY, num_ipus // 4 * memory, streaming_memory_bytes_per_second=_STREAMING,
                  topology="ladder" if num_ipus <= 16 else "torus",
                  ipus_per_rack=POD_RACK if num_ipus > POD_RACK else 0)


# The Pods of the datasheets: powers of two from 16 to 256 IPUs [GC-POD], of
# Bow-2000s (podN) and of IPU-M2000s (m2000-podN). Bigger ones are built with pod(n).
POD_SIZES = (16, 32, 64, 128, 256)
SYSTEMS.update({s.name: s for chip in (bow, ipu2) for s in (pod(n, chip) for n in POD_SIZES)})


def system_for(chip: Chip, num_ipus: int) -> System:
    """The named system with this chip and IPU count, else a generic ladder of 4-IPU machines."""
    for s in SYSTEMS.values():
        if s.chip is chip and s.num_ipus == num_ipus:
            return s
    if num_ipus == 1:
        return _single(chip)
    host = chip.host_link_bytes_per_second if num_ipus < 4 else _GATEWAY
    return System(f"{chip.name}x{num_ipus}", f"{num_ipus} x {chip.description}", chip,
                  num_ipus, host)
