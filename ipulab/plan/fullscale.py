"""The full scale: a stage of a model too big to simulate, from its layers' counts (Calculon).

Memory per IPU of stage s, shard j of t, with P = the stage's parameters on one IPU (a block's
shard_params: Megatron's column and row shards, their biases and norms replicated over t1,
and 2-D's over t2), L = its largest weight tensor / t, d = r under RTS else 1, b =
micro_batch_size, bytes per element w (2 in fp16, 4 in fp32) and z for the optimizer state
(optim.py: its fp32 elements per weight × 4):

  weights      not phased: P·w/d (+ L·w, the tensor RTS gathers just before use)
               phased:     2·Φ·w/d + L·w·[rts]   (this phase's and the prefetched next phase's)
  optimizer    on-chip: P·z/d;  off-chip: L·z/d (one tensor at a time, loaded for its update)
  gradients    not phased: P·w (the accumulator);  phased: Φ·w/d (+ L·w under RTS: the tensor
               reduce-scattered into the sharded accumulator)
  activations  recompute: the stage's block inputs × b / t (sharded with the sequence) ×
               in-flight micro-batches (1F1B: p − s; phased: none, they go to Streaming
               Memory) + one block's live set × b / t; without recompute every block's live
               set × b × in flight / t
  code_and_exchange  ASSUMED: 64 KiB of every tile (see CODE_BYTES_PER_TILE)

where Φ is the largest phase of the stage / t. The update's optimizer-state transient and the
backward's activations are not live at once: the peak is the resident bytes plus the larger.
Weights are trained in fp16 with stochastic rounding, without an fp32 master copy, as
Graphcore trains BERT. The in-flight depth p − s is 1F1B's (Narayanan et al. 2021).

Time per step by part: compute (each stage's FLOPs per micro-batch, × 3 forward and backward,
× 4 with recompute, / t at the chip's peak × EFFICIENCY, for the micro-batches of a step on the
slowest stage), bubble ((p − 1) more slots of the slowest stage), tensor (each block's
all-reduces among its shards, a ring over t1 and one over t2: Megatron's 2·s·h/t2 a pass
over t1, 2-D's partial sums of the hidden dimension over t2, transformer.EncoderLayer
.collectives), pipeline
(activations and their gradients to the next stage), replicas (the gradients' all-reduce over
IPU-Links inside a rack, the GW-Links' share across racks; phased RTS reduce-scatters every
micro-batch), update (the bytes the optimizer touches at the tiles' SRAM bandwidth ×
EFFICIENCY), streaming (off-chip state, phases' weights, state, accumulators and block inputs,
overlapped with compute when phased). Bandwidths and latencies are arch.py's.
"""
from __future__ import annotations

from math import ceil

from .. import arch
from .optim import optimizer_cost

BYTES = {"fp16": 2, "fp32": 4}
# [MODEL] Code (codelets, control), vertex state and exchange buffers: 64 KiB of each 624 KiB
# tile (~10 %). No figure is published and it cannot be checked at this scale; ipulab's own
# CNN and MLPs, counted as the simulator counts them, use 5-60 KiB per tile at 16 tiles per
# IPU, and large models run many more distinct codelets and exchanges per tile.
CODE_BYTES_PER_TILE = 64 * 1024
# [MODEL] Sustained fraction of the AMP's peak. Compiled code reaches about a quarter of a
# tile's SRAM bandwidth peak (Louw & McIntosh-Smith 2021, STREAM on Mk1: 7.3 of ~45 TB/s
# optimised, 12.4 hand-written), and a transformer's step is its matmuls fed from
# that SRAM with exchanges and syncs between them: we take the same quarter of peak FLOPs.
EFFICIENCY = 0.25
ASSUMPTIONS = (
    "code, vertex state and exchange buffers: 64 KiB per tile, assumed (not checked at "
    "this scale)",
    "compute at 25 % of peak FLOPs, the update at 25 % of SRAM bandwidth, assumed",
    "fp16 weights without an fp32 master copy (stochastic rounding, as Graphcore trains "
    "BERT); activations as Korthikanti et al. 2022")
# a mapping with t > 1 rests on this too: nn does not shard transformer layers yet, so the
# simulator cannot check it at small scale
TENSOR_ASSUMPTION = ("tensor sharding as Megatron (1-D) and Graphcore's PopXL GPT-3 (2-D) "
                     "shard a layer: its parameters and all-reduces counted per layer "
                     "(the simulator's own sharding is checked at the small scale, t ≤ 4 and "
                     "2x2; not these counts at this size)")


def stage_blocks(spec, stages, s: int) -> list:
    """The blocks of stage s (the extra block, e.g. embeddings, on stage 0)."""
    start = sum(stages[:s])
    blocks = list(spec.blocks[start:start + stages[s]])
    return ([spec.extra] if s == 0 and spec.extra else []) + blocks


def _largest_phase(spec, m, blocks) -> int:
    """Parameters of the largest phase of a stage: ceil(layers / phases) consecutive layers."""
    n = ceil(spec.num_layers / m.phases)
    layers = [b for b in blocks if b is not spec.extra]
    groups = [sum(b.params for b in layers[i:i + n]) for i in range(0, len(layers), n)]
    return max(groups + ([spec.extra.params] if spec.extra in blocks else []))


def _activations(m, blocks, s: int) -> tuple[int, int]:
    """(resident, transient) activation bytes on an IPU of stage s."""
    a, b, t = BYTES[m.precision], m.micro_batch_size, m.t
    depth = 1 if m.phased else m.pipeline - s
    live = max(blk.live for blk in blocks) * b * a // t
    if m.phased:
        return 0, live
    if m.recompute:
        return sum(blk.keep for blk in blocks) * b * a * depth // t, live
    return sum(blk.live for blk in blocks) * b * a * depth // t, 0


def stage_memory(spec, target, m, s: int) -> dict:
    """Bytes per IPU of stage s by kind at its peak, and what it keeps off-chip:
    {"kinds": {...}, "total": int, "streaming": int}."""
    blocks = stage_blocks(spec, m.layers_per_stage, s)
    t, d = m.t, (m.replicas if m.rts else 1)
    opt = optimizer_cost(m.optimizer, m.momentum)
    w = BYTES[m.precision]
    P = sum(b.shard_params(*m.tensor_parallel) for b in blocks)
    L = max(b.largest for b in blocks) // t
    rts_copy = L * w if m.rts else 0
    if m.phased:
        phase = _largest_phase(spec, m, blocks) // t
        weights, grads = 2 * phase * w // d + rts_copy, phase * w // d + rts_copy
    else:
        weights, grads = P * w // d + rts_copy, P * w
    on_chip = m.optimizer_state == "on-chip" and not m.phased
    state_res = opt.state_bytes(P) // d if on_chip else 0
    state_tr = 0 if on_chip else opt.state_bytes(L) // d
    act_res, act_tr = _activations(m, blocks, s)
    kinds = dict(weights=weights, optimizer_state=state_res, gradients=grads,
                 activations=act_res,
                 code_and_exchange=CODE_BYTES_PER_TILE * target.tiles_per_ipu)
    if act_tr >= state_tr:
        kinds["activations"] += act_tr
    else:
        kinds["optimizer_state"] += state_tr
    streaming = (0 if on_chip else opt.state_bytes(P) // d) + \
        (P * 2 * w // d + sum(b.keep for b in blocks) * m.micro_batch_size * m.micro_batches
         * w // t if m.phased else 0)
    return {"kinds": kinds, "total": sum(kinds.values()), "streaming": streaming}


def peak_flops(target, precision: str) -> float:
    """Peak FLOP/s of one IPU of the target in this precision (its tiles at the chip's rate)."""
    c = target.chip
    rate = c.fp16_flops_per_cycle_per_tile if precision == "fp16" else \
        c.fp32_flops_per_cycle_per_tile
    return rate * target.tiles_per_ipu * c.clock_hz


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
    if system.num_racks > 1 and m.replicas > 1:     # t·p·r = IPUs: the ring spans the racks
        return (system.gateway_bytes_per_second / system.ipus_per_machine,
                arch.COST.gw_link_latency_s)
    return link_bandwidth(system), arch.COST.ipu_link_latency_s


def _tensor_seconds(system, m, blocks) -> float:
    """Seconds per micro-batch of the tensor-sharding all-reduces of one stage: each block's
    collectives over t1 and over t2 (forward twice with recompute), a ring each."""
    if m.t == 1:
        return 0.0
    t1, t2 = m.tensor_parallel
    forwards = 2 if m.recompute else 1
    per = m.micro_batch_size * BYTES[m.precision]
    bw, lat = link_bandwidth(system), arch.COST.ipu_link_latency_s
    total = 0.0
    for b in blocks:
        for n, (fwd, bwd) in zip((t1, t2), b.collectives(t1, t2)):
            total += _ring(n, (forwards * fwd + bwd) * per, bw, lat)
    return total


def _replica_seconds(system, m, nbytes: float) -> float:
    """The gradients' collective over the replicas, nbytes per IPU: one all-reduce a step;
    phased with RTS, a reduce-scatter (half a ring) of every micro-batch's gradients."""
    bw, lat = replica_ring(system, m)
    if m.phased and m.rts:
        return m.micro_batches * _ring(m.replicas, nbytes / 2, bw, lat)
    return _ring(m.replicas, nbytes, bw, lat)


def _update_seconds(target, m, params: float) -> float:
    """The optimizer's update of this IPU's weights (1/r under RTS): the fp32 elements it
    reads and writes per weight at the tiles' SRAM bandwidth × EFFICIENCY."""
    c = target.chip
    weights = params / m.replicas if m.rts else params
    rate = c.sram_read_bytes_per_cycle * target.tiles_per_ipu * c.clock_hz * EFFICIENCY
    return weights * 4 * optimizer_cost(m.optimizer, m.momentum).touched / rate


def step_times(spec, target, m, memory: list) -> dict:
    """Seconds per step by part (compute, bubble, tensor, pipeline, replicas, update,
    streaming)."""
    system = target.system
    rate = peak_flops(target, m.precision) * EFFICIENCY
    factor = 4 if m.recompute else 3
    slots = []
    for s in range(m.pipeline):
        blocks = stage_blocks(spec, m.layers_per_stage, s)
        compute = factor * sum(b.flops for b in blocks) * m.micro_batch_size / m.t / rate
        slots.append((compute, _tensor_seconds(system, m, blocks)))
    compute, tensor = max(slots, key=lambda x: x[0] + x[1])
    M, a = m.micro_batches, BYTES[m.precision]
    cut = sum(b.keep for b in spec.blocks[:1]) * m.micro_batch_size * a / m.t
    hop = 2 * (cut / link_bandwidth(system) + arch.COST.ipu_link_latency_s) \
        if m.pipeline > 1 else 0.0
    params = max(sum(b.shard_params(*m.tensor_parallel)
                     for b in stage_blocks(spec, m.layers_per_stage, s))
                 for s in range(m.pipeline))
    stream_rate = system.streaming_bytes_per_second / system.ipus_per_machine
    streaming = max(mem["streaming"] for mem in memory) * 2 / stream_rate
    parts = {"compute": M * compute, "bubble": (m.pipeline - 1) * (compute + tensor),
             "tensor": M * tensor, "pipeline": (M + m.pipeline - 1) * hop,
             "replicas": _replica_seconds(system, m, params * a),
             "update": _update_seconds(target, m, params), "streaming": streaming}
    if m.phased:       # loads of the next phase overlap this phase's compute
        parts["streaming"] = max(0.0, streaming - parts["compute"])
    return parts


def full_scale(spec, target, m) -> tuple[list, dict]:
    """(memory of an IPU of every stage, seconds per step by part) of a resolved mapping."""
    memory = [stage_memory(spec, target, m, s) for s in range(m.pipeline)]
    return memory, step_times(spec, target, m, memory)
