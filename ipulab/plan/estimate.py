"""plan.estimate(spec, system, mapping): does it fit, and how fast does it train?

    e = plan.estimate(plan.bert_large(), "pod16",
                      plan.parse_mapping("p=4,layers=3/7/7/7,r=4,state=off-chip",
                                         optimizer="lamb"))
    e.fits, e.reason, e.peak_bytes_per_ipu, e.samples_per_second, e.memory[1], e.times

Memory per IPU by kind comes from memory.py (against the IPU's In-Processor Memory and its
share of Streaming Memory), step time by part from timing.py; samples/s = global batch / step.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import arch, devices
from ..errors import GraphError, PlanError
from .mapping import Mapping
from .memory import sram_bytes, stage_memory, streaming_bytes_per_ipu
from .timing import step_times

MB = 2**20


@dataclass(frozen=True)
class Estimate:
    """What the planner says of one mapping: memory per IPU of every stage by kind, the peak,
    whether it fits and why, step time by part, samples/s."""

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

    @property
    def samples_per_second(self) -> float:
        return self.global_batch / self.step_seconds if self.step_seconds > 0 else 0.0

    def to_dict(self) -> dict:
        """The JSON record of `ipulab plan --json`."""
        m = self.mapping
        return {"tensor_parallel": list(m.tensor_parallel), "pipeline": m.pipeline,
                "replicas": m.replicas, "rts": m.rts, "phases": m.phases,
                "optimizer_state": m.optimizer_state,
                "layers_per_stage": list(m.layers_per_stage or []), "micro_batch": m.micro,
                "gradient_accumulation": m.ga, "fits": self.fits, "reason": self.reason,
                "samples_per_second": self.samples_per_second,
                "peak_bytes_per_ipu": int(self.peak_bytes_per_ipu),
                "step_seconds": self.step_seconds, "times": dict(self.times),
                "memory_per_ipu": [dict(s["kinds"]) for s in self.memory]}


def system_of(system) -> arch.System:
    """An arch.System from itself or its name: any of devices.SYSTEM_NAMES (what `ipulab info`
    lists, aliases included)."""
    if isinstance(system, arch.System):
        return system
    try:
        return devices.find_system(str(system))
    except GraphError as e:
        raise PlanError(str(e)) from None


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
    return True, f"fits: {peak / MB:,.0f} of {sram / MB:,.0f} MiB per IPU ({peak / sram:.0%})"


def _cycle_model_times(spec, system, m) -> dict:
    """Seconds by part of an nn model's step from the small-scale mode (the cycle model):
    such a model is too small for FLOPs at a share of peak to say anything. The optimizer
    keeps a state (memory.py counts SGD's momentum), on or off chip as the mapping says.
    Imported here: the small-scale mode plans products with poplin (numba), which `ipulab`
    must not load to start, nor `ipulab plan` for a transformer."""
    from ..target import Target
    from .smallscale import small_scale
    target = Target(system.chip, system.num_ipus, system=system)
    parts = small_scale(spec, target, m, m.micro * m.ga, momentum=True)["cycle_parts"]
    return {k: v / system.chip.clock_hz for k, v in parts.items()}


def estimate(spec, system, mapping: Mapping, global_batch: int | None = None) -> Estimate:
    """The estimate of one mapping of spec on system (an arch.System or its name).
    PlanError if the mapping breaks a rule (t·p·r, powers of two, GA ≥ 2p − 1, phases)."""
    system = system_of(system)
    m = mapping.resolve(spec, system.num_ipus, global_batch)
    memory = [stage_memory(spec, system, m, s) for s in range(m.pipeline)]
    peak_stage = max(range(m.pipeline), key=lambda s: memory[s]["total"])
    peak = memory[peak_stage]["total"]
    stream = max(x["streaming"] for x in memory)
    sram, capacity = sram_bytes(system), streaming_bytes_per_ipu(system)
    fits, reason = _verdict(memory, peak, sram, stream, capacity)
    times = step_times(spec, system, m, memory) if spec.kind == "transformer" else \
        _cycle_model_times(spec, system, m)
    return Estimate(spec.name, system.name, spec.parameters, m, memory, int(peak), peak_stage,
                    sram, int(stream), capacity, fits, reason, times, sum(times.values()),
                    m.micro * m.replicas * m.ga)
