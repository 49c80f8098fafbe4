"""Memory per IPU by kind: the planner's accounting of In-Processor and Streaming Memory.

For the IPU holding pipeline stage s, shard j of t, with P = the stage's parameters / t,
L = its largest weight tensor / t, d = r under RTS else 1, b = micro-batch, and bytes per
element w (2 in fp16, 4 in fp32) and z for the optimizer state:

  weights      not phased: P·w/d (+ L·w, the tensor RTS gathers just before use)
               phased:     2·Φ·w/d + L·w·[rts]   (this phase's and the prefetched next phase's)
  optimizer    on-chip: P·z/d;  off-chip: L·z/d (one tensor at a time, loaded for its update)
  gradients    not phased: P·w (the accumulator);  phased: Φ·w/d (+ L·w under RTS: the tensor
               reduce-scattered into the sharded accumulator)
  activations  recompute: the stage's block inputs × b / t (sharded with the sequence) ×
               in-flight micro-batches (1F1B: p − s; phased: none, they go to Streaming
               Memory) + one block's live set × b / t;
               without recompute every block's live set × b × in flight / t
  code         code and exchange buffers, a fixed share of every tile

where Φ is the largest phase of the stage (its ceil(layers / phases) consecutive layers, or the
extra block) / t. The update's optimizer-state transient and the backward's activations are
not live at once: the peak is the resident bytes plus the larger of the two.

Constants: z = 4 B per state element (fp32 moments); SGD keeps 1 per weight (momentum), Adam
and LAMB 2 (Kingma & Ba 2015; You et al. 2020). Weights are trained in fp16 with stochastic
rounding, without an fp32 master copy, as Graphcore trains BERT (IPU_FACTS' ZeRO accounting
adds 4 B for such a copy). The in-flight depth p − s is 1F1B's (PipeDream-Flush, Narayanan et
al. 2021). Live sets are Korthikanti et al. 2022's (see spec.transformer).
"""
from __future__ import annotations

from math import ceil

# fp32 moments [Kingma & Ba 2015; You et al. 2020]: elements of state per weight
STATE_ELEMENTS = {"sgd": 1, "adam": 2, "lamb": 2}
STATE_BYTES = 4
BYTES = {"fp16": 2, "fp32": 4}
# [MODEL] Code (codelets, control) and exchange buffers: 64 KiB of each 624 KiB tile (~10 %).
# No figure is published; ipulab's own CNN step uses ~25 KiB per tile at 16 tiles per IPU and
# large models run many more distinct codelets and exchanges per tile.
CODE_BYTES_PER_TILE = 64 * 1024
KINDS = ("weights", "optimizer_state", "gradients", "activations", "code_and_exchange")


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


def _activations(spec, m, blocks, s: int) -> tuple[int, int]:
    """(resident, transient) activation bytes on an IPU of stage s."""
    a, b, t = BYTES[m.precision], m.micro, m.t
    depth = 1 if m.phased else m.pipeline - s
    live = max(blk.live for blk in blocks) * b * a // t
    if m.phased:
        return 0, live
    if m.recompute:
        return sum(blk.keep for blk in blocks) * b * a * depth // t, live
    return sum(blk.live for blk in blocks) * b * a * depth // t, 0


def stage_memory(spec, system, m, s: int) -> dict:
    """Bytes per IPU of stage s by kind (KINDS) at its peak, and what it keeps off-chip:
    {"kinds": {...}, "total": int, "streaming": int}."""
    blocks = stage_blocks(spec, m.layers_per_stage, s)
    t, d = m.t, (m.replicas if m.rts else 1)
    w, z = BYTES[m.precision], STATE_BYTES * STATE_ELEMENTS[m.optimizer]
    P = sum(b.params for b in blocks) // t
    L = max(b.largest for b in blocks) // t
    rts_copy = L * w if m.rts else 0
    if m.phased:
        phase = _largest_phase(spec, m, blocks) // t
        weights = 2 * phase * w // d + rts_copy
        grads = phase * w // d + rts_copy
    else:
        weights, grads = P * w // d + rts_copy, P * w
    on_chip_state = m.optimizer_state == "on-chip" and not m.phased
    state_res = P * z // d if on_chip_state else 0
    state_tr = 0 if on_chip_state else L * z // d
    act_res, act_tr = _activations(spec, m, blocks, s)
    code = CODE_BYTES_PER_TILE * system.chip.tiles_per_ipu
    kinds = dict(weights=weights, optimizer_state=state_res, gradients=grads,
                 activations=act_res, code_and_exchange=code)
    if act_tr >= state_tr:
        kinds["activations"] += act_tr
    else:
        kinds["optimizer_state"] += state_tr
    streaming = (0 if on_chip_state else P * z // d) + \
        (P * 2 * w // d + sum(b.keep for b in blocks) * m.micro * (m.ga or 1) * w // t
         if m.phased else 0)
    return {"kinds": kinds, "total": sum(kinds.values()), "streaming": streaming}


def sram_bytes(system) -> int:
    """In-Processor Memory of one IPU: tiles × bytes per tile (940,572,672 B on Mk2/Bow)."""
    return system.chip.tiles_per_ipu * system.chip.bytes_per_tile


def streaming_bytes_per_ipu(system) -> float:
    """Streaming Memory an IPU may use: its machine's, shared by the machine's IPUs (none
    on a system without it: remote buffers then live in host memory, unbounded here)."""
    if not system.streaming_memory_bytes:
        return float("inf")
    return system.streaming_memory_bytes / system.num_ipus
