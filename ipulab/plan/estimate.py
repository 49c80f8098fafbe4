"""plan.estimate(spec, system, mapping): does it fit, and how fast does it train?

    e = plan.estimate(plan.bert_large(), "pod16",
                      plan.parse_mapping("p=4,layers=3/7/7/7,r=4,state=off-chip",
                                         optimizer="lamb"))
    e.fits, e.reason, e.peak_bytes_per_ipu, e.step_seconds, e.memory[1], e.times
    plan.estimate(plan.spec_from_model(model, (1, 8, 8)), trainer.device,
                  plan.mapping_from_config(trainer.config), trainer.global_batch_size)

One model at two scales. A model the simulator runs (read from nn) is priced by the cycle
model, layer by layer as nn builds its step (step.py): bytes of the fullest IPU as the
simulator counts them, cycles by part; benchmarks/plan_crosscheck.py holds both within 15 % of
the simulator. A model too big for it (a transformer preset) is priced at the full scale
(fullscale.py), with the assumptions that cannot be checked named in `assumptions`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import arch, devices
from ..errors import GraphError, PlanError
from ..target import Target
from .fullscale import ASSUMPTIONS, full_scale
from .mapping import Mapping

MB = 2**20
CHECKED = ("the cycle model, checked against the simulator (bytes of the fullest IPU and "
           "cycles within 15 %: benchmarks/plan_crosscheck.py)")
SHARD_ZERO = ("tensor sharding: the bytes of a stage's first IPU (shard 0, which holds the "
              "weights the shards share); another shard may hold a few % more")


@dataclass(frozen=True)
class Estimate:
    """What the planner says of one mapping: memory per IPU of every stage by kind, the peak,
    whether it fits and why, step time by part, samples/s, and the assumptions the numbers
    rest on."""

    model: str
    system: str
    parameters: int
    mapping: Mapping
    memory: list
    peak_bytes_per_ipu: int
    peak_stage: int
    sram_bytes: int
    streaming_bytes_per_ipu: int
    streaming_capacity: float
    fits: bool
    reason: str
    times: dict
    step_seconds: float
    global_batch: int
    assumptions: tuple = ()

    @property
    def samples_per_second(self) -> float:
        return self.global_batch / self.step_seconds if self.step_seconds > 0 else 0.0

    def to_dict(self) -> dict:
        """The JSON record of `ipulab plan --json` (micro_batch and gradient_accumulation:
        the old names of micro_batch_size and micro_batches, kept)."""
        m = self.mapping
        return {"tensor_parallel": list(m.tensor_parallel), "pipeline": m.pipeline,
                "replicas": m.replicas, "rts": m.rts, "phases": m.phases,
                "optimizer_state": m.optimizer_state,
                "layers_per_stage": list(m.layers_per_stage or []),
                "micro_batch_size": m.micro_batch_size, "micro_batches": m.micro_batches,
                "micro_batch": m.micro_batch_size, "gradient_accumulation": m.micro_batches,
                "fits": self.fits, "reason": self.reason,
                "samples_per_second": self.samples_per_second,
                "peak_bytes_per_ipu": int(self.peak_bytes_per_ipu),
                "step_seconds": self.step_seconds, "times": dict(self.times),
                "memory_per_ipu": [dict(s["kinds"]) for s in self.memory],
                "assumptions": list(self.assumptions)}


def system_of(system) -> arch.System:
    """An arch.System from itself or its name: any of devices.SYSTEM_NAMES (what `ipulab info`
    lists, aliases included); or the system of a device or target."""
    if isinstance(system, arch.System):
        return system
    if isinstance(system, (Target, devices.Device)):
        return target_of(system).system
    try:
        return devices.find_system(str(system))
    except GraphError as e:
        raise PlanError(str(e)) from None


def target_of(system) -> Target:
    """The Target the planner prices: a device's or a target itself (its tiles per IPU, as
    the simulator was given them), else a system (or its name) at full size."""
    if isinstance(system, devices.Device):
        return system.target
    if isinstance(system, Target):
        return system
    s = system_of(system)
    return Target(s.chip, s.num_ipus, system=s)


def _verdict(memory, peak, sram, stream, capacity) -> tuple[bool, str]:
    s = max(range(len(memory)), key=lambda i: memory[i]["total"])
    if peak > sram:
        kinds = memory[s]["kinds"]
        top = ", ".join(f"{k.replace('_', ' ')} {v / MB:,.0f}" for k, v in
                        sorted(kinds.items(), key=lambda kv: -kv[1])[:3])
        return False, (f"needs {peak / MB:,.0f} MiB per IPU on stage {s} ({top} MiB) > "
                       f"{sram / MB:,.0f} MiB In-Processor Memory")
    if stream > capacity:
        return False, (f"needs {stream / 1e9:,.1f} GB of Streaming Memory per IPU > its "
                       f"{capacity / 1e9:,.1f} GB share")
    digits = 0 if peak >= 100 * MB else 2
    return True, (f"fits: {peak / MB:,.{digits}f} of {sram / MB:,.0f} MiB per IPU "
                  f"({peak / sram:.0%})")


def _small_scale(spec, target, m) -> tuple[list, dict, tuple]:
    """(memory of every stage, seconds by part, assumptions) from the cycle model. Imported
    here: it plans products with poplin (numba), which `ipulab` must not load to start, nor
    `ipulab plan` for a transformer."""
    from .step import small_scale
    found = small_scale(spec, target, m, m.micro_batch_size * m.micro_batches)
    memory = [{"kinds": kinds, "total": sum(kinds.values()), "streaming": streamed}
              for kinds, streamed in zip(found["stages"], found["streaming"])]
    times = {k: v / target.clock_hz for k, v in found["cycle_parts"].items()}
    sharded = m.t > 1 and bool(spec.dims.get("placed"))
    return memory, times, (CHECKED,) + (SHARD_ZERO,) * sharded


def estimate(spec, system, mapping: Mapping, global_batch: int | None = None) -> Estimate:
    """The estimate of one mapping of spec on system: a name, an arch.System, or the device
    (or target) a simulated run was given. PlanError if the mapping breaks a rule (t·p·r,
    powers of two, micro-batches ≥ 2p − 1, phases)."""
    target = target_of(system)
    m = mapping.resolve(spec, target.num_ipus, global_batch)
    for block in spec.blocks if spec.simulated else ():      # nn/megatron.py splits heads
        heads = getattr(block, "heads", 0)
        if heads and heads % m.tensor_parallel[0]:
            raise PlanError(f"mapping: t1 = {m.tensor_parallel[0]} does not divide the {heads} "
                            f"attention heads of {block.name} (each shard takes whole heads)")
    if spec.simulated:
        memory, times, notes = _small_scale(spec, target, m)
    else:
        from .fullscale import TENSOR_ASSUMPTION
        (memory, times), notes = full_scale(spec, target, m), \
            ASSUMPTIONS + (TENSOR_ASSUMPTION,) * (m.t > 1)
    peak_stage = max(range(m.pipeline), key=lambda s: memory[s]["total"])
    peak = memory[peak_stage]["total"]
    stream = max(x["streaming"] for x in memory)
    sram, capacity = sram_bytes(target), streaming_bytes_per_ipu(target.system)
    fits, reason = _verdict(memory, peak, sram, stream, capacity)
    return Estimate(spec.name, target.system.name, spec.parameters, m, memory, int(peak),
                    peak_stage, sram, int(stream), capacity, fits, reason, times,
                    sum(times.values()), m.micro_batch_size * m.replicas * m.micro_batches,
                    tuple(notes))


def sram_bytes(target) -> int:
    """In-Processor Memory of one IPU: tiles × bytes per tile (940,572,672 B on Mk2/Bow)."""
    return target.tiles_per_ipu * target.chip.bytes_per_tile


def streaming_bytes_per_ipu(system) -> float:
    """Streaming Memory an IPU may use: its machine's, shared by the machine's IPUs (none
    on a system without it: remote buffers then live in host memory, unbounded here)."""
    if not system.streaming_memory_bytes:
        return float("inf")
    return system.streaming_memory_bytes / system.num_ipus
