"""Step time by part: compute, pipeline bubble, collectives and Streaming Memory traffic.

    compute      each stage's FLOPs per micro-batch (forward × 3 for forward and backward,
                 × 4 with recompute: Narayanan et al. 2021) / t at the chip's peak × EFFICIENCY,
                 for the GA micro-batches of a step on the slowest stage
    bubble       a pipeline of p stages fills and drains: (p − 1) more micro-batch slots of
                 the slowest stage (GPipe / 1F1B)
    tensor       sharded blocks all-reduce their outputs among the t shards (a ring: 2(t−1)/t
                 of the bytes over the IPU-Links, 2(t−1) link latencies), in every pass; a 2-D
                 t1 × t2 shard reduces over t1 and t2 separately, each of 1/t2 and 1/t1 of them
    pipeline     activations and their gradients cross to the next stage over the IPU-Links
    replicas     the gradients' all-reduce over r replicas (RTS: a reduce-scatter now and an
                 all-gather of the updated weights, the same bytes): over IPU-Links inside a rack,
                 over the machine's GW-Links, shared by its IPUs, when replicas span racks
    streaming    the optimizer state loaded and stored for the update when it is off-chip; with
                 phased execution every phase's weights, state, accumulators and block inputs,
                 overlapped with compute (the next phase loads while this one computes)

Bandwidths and latencies are arch.py's: IPU-Links (Chip.ipu_link_bytes_per_second × the
links between a pair), GW-Links (System.gateway_bytes_per_second per machine), Streaming
Memory (System.streaming_bytes_per_second per machine), CostModel latencies.
"""
from __future__ import annotations

from .. import arch
from .memory import BYTES, stage_blocks

# [MODEL] Sustained fraction of the AMP's peak. Compiled code reaches about a quarter of a
# tile's SRAM bandwidth peak (Louw & McIntosh-Smith 2021, STREAM on Mk1: 7.3 of ~45 TB/s
# optimised, 12.4 hand-written; IPU_FACTS), and a transformer's step is its matmuls fed from
# that SRAM with exchanges and syncs between them: we take the same quarter of peak FLOPs.
EFFICIENCY = 0.25


def peak_flops(system, precision: str) -> float:
    """Peak FLOP/s of one IPU in this precision (the chip preset's)."""
    c = system.chip
    return c.peak_fp16_flops if precision == "fp16" else c.peak_fp32_flops


def _ring(n: int, nbytes: float, bandwidth: float, latency: float) -> float:
    """Seconds of a ring all-reduce of nbytes among n members."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * latency


def link_bandwidth(system) -> float:
    """Bytes/s between neighbouring IPUs: the links joining them × one link's bandwidth."""
    links = min(system.links_within_machine, system.links_between_machines)
    return links * system.chip.ipu_link_bytes_per_second


def replica_ring(system, m) -> tuple[float, float]:
    """(bandwidth, latency) of the ring of replicas: IPU-Links inside a rack, the GW-Links'
    share per IPU of a machine when the replicas span racks."""
    cost = arch.COST
    if system.num_racks > 1 and m.replicas > 1:     # t·p·r = IPUs: the ring spans the racks
        return (system.gateway_bytes_per_second / system.ipus_per_machine,
                cost.gw_link_latency_s)
    return link_bandwidth(system), cost.ipu_link_latency_s


def _tensor_seconds(system, m, blocks) -> float:
    """Seconds per micro-batch of the tensor-sharding all-reduces of one stage."""
    if m.t == 1:
        return 0.0
    passes = 3 if m.recompute else 2
    nbytes = sum(b.reduce for b in blocks) * m.micro * BYTES[m.precision] * passes
    bw, lat = link_bandwidth(system), arch.COST.ipu_link_latency_s
    t1, t2 = m.tensor_parallel
    return _ring(t1, nbytes / t2, bw, lat) + _ring(t2, nbytes / t1, bw, lat)


def _replica_seconds(system, m, nbytes: float) -> float:
    """The gradients' collective over the replicas, nbytes per IPU: one all-reduce a step;
    phased with RTS, a reduce-scatter (half a ring) of every micro-batch's gradients into
    the sharded accumulators."""
    bw, lat = replica_ring(system, m)
    if m.phased and m.rts:
        return m.ga * _ring(m.replicas, nbytes / 2, bw, lat)
    return _ring(m.replicas, nbytes, bw, lat)


def step_times(spec, system, m, memory: list) -> dict:
    """Seconds per step by part (compute, bubble, tensor, pipeline, replicas, streaming)."""
    rate = peak_flops(system, m.precision) * EFFICIENCY
    factor = 4 if m.recompute else 3
    slots = []
    for s in range(m.pipeline):
        blocks = stage_blocks(spec, m.layers_per_stage, s)
        compute = factor * sum(b.flops for b in blocks) * m.micro / m.t / rate
        slots.append((compute, _tensor_seconds(system, m, blocks)))
    compute, tensor = max(slots, key=lambda x: x[0] + x[1])
    ga, a = m.ga, BYTES[m.precision]
    cut = sum(b.keep for b in spec.blocks[:1]) * m.micro * a / m.t
    hop = 2 * (cut / link_bandwidth(system) + arch.COST.ipu_link_latency_s) \
        if m.pipeline > 1 else 0.0
    full = max(sum(b.params for b in stage_blocks(spec, m.layers_per_stage, s))
               for s in range(m.pipeline)) / m.t * a
    replicas = _replica_seconds(system, m, full)
    stream_rate = system.streaming_bytes_per_second / system.ipus_per_machine
    streaming = max(mem["streaming"] for mem in memory) * 2 / stream_rate
    parts = {"compute": ga * compute, "bubble": (m.pipeline - 1) * (compute + tensor),
             "tensor": ga * tensor, "pipeline": (ga + m.pipeline - 1) * hop,
             "replicas": replicas, "streaming": streaming}
    if m.phased:       # loads of the next phase overlap this phase's compute
        parts["streaming"] = max(0.0, streaming - parts["compute"])
    return parts
