"""Disaggregated hosts (VMware Project Radium, IPU-over-Fabric): CPU servers reach the Pod's IPUs
over the data-centre network (100 GbE RoCEv2), so the CPU:IPU ratio is chosen per workload
[Graphcore V-IPU user guide]. A training job whose input pipeline needs more host CPU than it
has is host-bound: the IPUs wait for batches.

    pool = HostPool(hosts=1, cores_per_host=32, ipus=4)
    plan = input_plan(trainer, pool)        # trainer: an nn.Trainer that has run a step
    plan.bound, plan.step_seconds, plan.cores_needed
    print(plan)                             # the three times, which one wins, and by how much

The three times per training step, overlapped (the host prepares batch n + 1 while the IPUs
run batch n, as a prefetching data loader does), so the slowest sets the pace:
  IPU       the simulated training step: trainer.profile().total_seconds (nn on the simulator)
  host CPU  samples per step x host seconds per sample / cores of the job's hosts
  RoCE      the batch's bytes (inputs and labels as the IPUs read them) / the hosts' links
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import VipuError

# 100 GbE RoCEv2 per host, one direction [Graphcore Bow Pod datasheets: "100 GbE RoCEv2"].
ROCE_BYTES_PER_SECOND = 100e9 / 8

# Host CPU seconds per sample, per core, of input pipelines with a published rate:
#   jpeg-224: read, decode an ImageNet-size JPEG, random-resized-crop to 224 x 224, flip,
#     normalise. "A single core decodes 50-200 images per second depending on resolution"
#     (systemoverflow.com, "Production data pipeline design and throughput"); 8 PyTorch
#     DataLoader workers on a Ryzen 9 9950X3D do 955 images/s of 1024 x 1024 JPEGs with
#     flip, rotation and colour jitter, 8.4 ms per image per worker (isztld.com, "I moved my
#     image preprocessing to GPU"). We take 100 images/s per core: 10 ms.
HOST_SECONDS_PER_SAMPLE = {"jpeg-224": 10e-3}


@dataclass(frozen=True)
class HostPool:
    """`hosts` CPU servers of `cores_per_host` cores attached over RoCE to a job of `ipus` IPUs."""

    hosts: int
    cores_per_host: int
    ipus: int
    link_bytes_per_second: float = ROCE_BYTES_PER_SECOND

    def __post_init__(self):
        for name in ("hosts", "cores_per_host", "ipus"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise VipuError(f"HostPool: {name} must be a whole number >= 1, not {value!r}")
        if not self.link_bytes_per_second > 0:
            raise VipuError(f"HostPool: link_bytes_per_second must be > 0, not "
                            f"{self.link_bytes_per_second!r}")

    @property
    def cores(self) -> int:
        return self.hosts * self.cores_per_host

    @property
    def ratio(self) -> str:
        """The CPU:IPU ratio, as cores per IPU: '8 cores : 1 IPU'."""
        return f"{self.cores / self.ipus:g} cores : 1 IPU"

    @classmethod
    def with_ratio(cls, ipus: int, cores_per_ipu: int, cores_per_host: int = 8) -> "HostPool":
        """Hosts (e.g. VMs) of cores_per_host cores giving exactly cores_per_ipu cores per IPU."""
        total = ipus * cores_per_ipu
        if total % cores_per_host:
            raise VipuError(f"HostPool: {ipus} IPUs x {cores_per_ipu} cores per IPU = {total} "
                            f"cores is not a whole number of {cores_per_host}-core hosts")
        return cls(total // cores_per_host, cores_per_host, ipus)


@dataclass(frozen=True)
class InputPlan:
    """The times of one training step and which bound wins."""

    samples: int                 # per step, over all replicas
    batch_bytes: int
    ipu_seconds: float
    host_seconds: float
    network_seconds: float
    pool: HostPool
    seconds_per_sample: float

    @property
    def times(self) -> dict[str, float]:
        return {"IPU": self.ipu_seconds, "host CPU": self.host_seconds,
                "RoCE": self.network_seconds}

    @property
    def bound(self) -> str:
        """'IPU', 'host CPU' or 'RoCE': the slowest of the three (ties go to the IPU)."""
        return max(self.times, key=lambda k: (self.times[k], k == "IPU"))

    @property
    def step_seconds(self) -> float:
        return max(self.times.values())

    @property
    def ipu_busy(self) -> float:
        """The share of time the IPUs compute: 1 when IPU-bound."""
        return self.ipu_seconds / self.step_seconds

    @property
    def cores_needed(self) -> int:
        """Host cores that would prepare a batch within the IPU step."""
        return math.ceil(self.samples * self.seconds_per_sample / self.ipu_seconds)

    def __str__(self) -> str:
        t = {k: f"{v * 1e6:,.{1 if v >= 1e-6 else 3}f} µs" for k, v in self.times.items()}
        head = (f"{self.samples} samples per step on {self.pool.ipus} IPU(s), "
                f"{self.pool.hosts} host(s) x {self.pool.cores_per_host} cores "
                f"({self.pool.ratio}): IPU {t['IPU']}, host CPU {t['host CPU']}, RoCE "
                f"{t['RoCE']} ({self.batch_bytes:,} B)")
        if self.bound == "IPU":
            return f"{head}. IPU-bound: the hosts keep up."
        return (f"{head}. {self.bound}-bound: a step takes {t[self.bound]}, the IPUs compute "
                f"{100 * self.ipu_busy:.1f} % of the time; {self.cores_needed:,} cores would "
                f"keep them busy.")


def batch_bytes(trainer) -> int:
    """Bytes of one step's inputs and int32 labels, in the precision the trainer reads them."""
    itemsize = 2 if trainer.precision == "fp16" else 4
    per_sample = int(np.prod(trainer.input_shape)) * itemsize + 4
    return trainer.global_batch_size * per_sample


def input_plan(trainer, pool: HostPool, seconds_per_sample: float | str = "jpeg-224") -> InputPlan:
    """The step of `trainer` (an nn.Trainer that has run, on pool.ipus IPUs) fed by `pool`:
    the IPU time from its simulated profile, the host time from the pipeline's cost per sample
    (seconds, or a name of HOST_SECONDS_PER_SAMPLE), the network time from the batch's bytes."""
    if isinstance(seconds_per_sample, str):
        if seconds_per_sample not in HOST_SECONDS_PER_SAMPLE:
            raise VipuError(f"unknown input pipeline {seconds_per_sample!r}; known: "
                            f"{', '.join(HOST_SECONDS_PER_SAMPLE)} (or give seconds per sample)")
        seconds_per_sample = HOST_SECONDS_PER_SAMPLE[seconds_per_sample]
    if not seconds_per_sample >= 0:
        raise VipuError(f"seconds per sample must be >= 0, not {seconds_per_sample!r}")
    ipus = trainer.device.target.num_ipus
    if ipus != pool.ipus:
        raise VipuError(f"the trainer runs on {ipus} IPU(s) but the host pool feeds "
                        f"{pool.ipus}: make them the same job")
    samples, nbytes = trainer.global_batch_size, batch_bytes(trainer)
    return InputPlan(samples, nbytes, float(trainer.profile().total_seconds),
                     samples * seconds_per_sample / pool.cores,
                     nbytes / (pool.hosts * pool.link_bytes_per_second), pool,
                     float(seconds_per_sample))
