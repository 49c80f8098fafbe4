"""Small-scale mode: one training step of an nn model on a simulated target, in cycles.

At full scale the planner times FLOPs at a share of peak (timing.py); a step of a small model
on a few tiles is instead dominated by what the cycle model charges per superstep. This mode
prices the step from the cycle model itself (arch.CostModel and the target), without running
anything:

  products     each Conv2d and Linear product (forward, weight gradient, input gradient) as
               poplin.plan_mat_mul plans it on one IPU's tiles (its prediction is the
               simulator's cycles for inputs laid out as it wants), each compute set paying the
               target's sync instead of one IPU's;
  maps         ReLU, its gradient, pooling, the loss and the SGD update as element-wise passes:
               the cost model's default vertex estimate (overhead + one cycle per element
               touched) per worker of 6, plus one superstep;
  host         the step's four FIFO copies (images, labels, loss, correct) at the host link;
  replicas     the ring all-reduce of the gradients: 2(r − 1) exchanges of a chunk over the
               slowest pair of the ring (Target.link_cycles) and r − 1 combining maps;
  tensor       t shards by output channels: each product has 1/t of the outputs, the input is
               copied to every shard's IPU and the partial input gradients are summed across
               the IPUs (a copy over the IPU-Links and a map);
  pipeline     stage s on its own IPU; in slot k stage s works on micro-batch k − s, so each of
               the M + p − 1 slots of a phase costs the slowest stage's work, and activations
               (gradients) cross to the next (previous) stage over the IPU-Links.

Memory (bytes of the fullest IPU) by the simulator's kinds: code, constants, vertex state and
exchange buffers from the ops the nn trainer builds on each IPU, counted as the libraries
create their vertices (smallscale_memory.py); variables: the always-live ones and the peak of
the tensors live at one point of the step, walked in program order (smallscale_liveness.py).
"""
from __future__ import annotations

from itertools import zip_longest
from math import ceil

from .. import poplin
from ..popnn.loss import SoftmaxCrossEntropy
from ..target import Target
from .smallscale_liveness import StageLiveness
from .smallscale_memory import StageOps

LABEL_BYTES = 4             # labels stream in as INT (4 bytes)
WORKERS = 6


class StepModel:
    """One step of `spec` (an nn model's spec) on `target` with a mapping: its cycles by
    part (parts) and the bytes of its fullest IPU by kind (memory)."""

    def __init__(self, spec, target, mapping, batch: int, momentum: bool = False):
        self.spec, self.target, self.m, self.batch = spec, target, mapping, batch
        self.momentum = momentum
        self.one_ipu = Target(target.chip, 1, target.tiles_per_ipu)
        self.sync = target.sync_cycles("external" if target.num_ipus > 1 else "internal")
        self.bytes = 2 if mapping.precision == "fp16" else 4
        self._plans: dict = {}

    def plan(self, m: int, k: int, n: int):
        """poplin's plan of an (m, k) x (k, n) product on one IPU of the target (kept: the
        memory model asks again for every micro-batch and pass)."""
        key = (m, k, n)
        if key not in self._plans:
            self._plans[key] = poplin.plan_mat_mul(
                self.one_ipu, m, k, n, dtype="half" if self.bytes == 2 else "float")
        return self._plans[key]

    # --- pieces: each a list of its supersteps' cycles -----------------------------------
    def product(self, m: int, k: int, n: int, window: int = 1) -> list[int]:
        """A product on one IPU as poplin plans it (products, then the reduction when the
        inner dimension is split), its syncs at this target's price. window: a convolution's
        B operand is a patches view (im2col) in which every element of its tensor appears
        kh·kw times; a tile receives each element once."""
        if min(m, k, n) < 1:
            return []
        plan = self.plan(m, k, n)
        c, blk = plan.cycles, plan.block
        # the inputs come as the layer before left them, not as the plan wants: every tile
        # receives its whole blocks of A and B (the plan counts only the pieces it lacks)
        gather = ceil((blk.m * blk.k + blk.k * blk.n // window) * self.bytes
                      / self.target.exchange_bytes_per_cycle) + self.target.cost.exchange_setup_cycles
        steps = [self.sync + max(gather, c["exchange"]) + c["compute"]]
        if c["reduction_compute"]:
            steps.append(self.sync + c["reduction_exchange"] + c["reduction_compute"])
        return steps

    def elementwise(self, elements: int, touched: int = 2) -> list[int]:
        """A map over `elements` spread over one IPU's tiles: two supersteps (popops maps the
        bulk with one vertex per worker, the remainder in a second compute set), the default
        vertex estimate of each worker's share (overhead + `touched` per element)."""
        cost = self.target.cost
        share = ceil(elements / (self.target.tiles_per_ipu * WORKERS))
        return [self.sync + WORKERS * (cost.vertex_overhead_cycles
                                       + cost.vertex_cycles_per_element * touched * share),
                self.sync]

    def link(self, nbytes: int) -> list[int]:
        """Moving nbytes to the neighbouring IPU, one superstep."""
        return [self.sync + self.target.link_cycles(int(nbytes), 0, 1)] if nbytes else []

    # --- a block -------------------------------------------------------------------------
    def block(self, i: int, n: int, backward: bool) -> list[int]:
        """The supersteps of block i on a micro-batch of n samples (forward, or backward)."""
        b, t = self.spec.blocks[i], self.m.t
        relu = i + 1 < len(self.spec.blocks) and self.spec.blocks[i + 1].kind == "ReLU"
        if b.kind == "Conv2d":
            c, o, kh, kw, ho, wo, bias = b.shape
            fan, p, oc = c * kh * kw + bias, n * ho * wo, ceil(o / t)
            out = n * oc * ho * wo
            win = kh * kw
            if not backward:
                return self._scatter(n * b.keep) + self.product(oc, fan, p, win) + \
                    relu * self.elementwise(out)
            dx = (self.product(c, oc * win, n * (b.keep // c), win) + self._gather(n * b.keep)
                  if i > 0 else [])
            return relu * self.elementwise(out, 3) + self.product(oc, p, fan, win) + dx
        if b.kind == "Linear":
            fin, o, bias = b.shape
            oc = ceil(o / t)
            if not backward:
                return self._scatter(n * fin) + self.product(n, fin + bias, oc) + \
                    relu * self.elementwise(n * oc)
            dx = self.product(n, oc, fin) + self._gather(n * fin) if i > 0 else []
            return relu * self.elementwise(n * oc, 3) + self.product(oc, n, fin + bias) + dx
        if b.kind in ("MaxPool2d", "AvgPool2d"):
            c, ho, wo, kh, kw = b.shape
            return self.elementwise(n * c * ho * wo, kh * kw + 1 + backward)
        if b.kind in ("ReLU", "Dropout") and not (i > 0 and self.spec.blocks[i - 1].kind in
                                                  ("Conv2d", "Linear")):
            return self.elementwise(n * b.keep, 2 + backward)
        return []

    def _accumulate(self, i: int) -> list[int]:
        """A pipeline adds each micro-batch's weight gradients of block i to an accumulator."""
        params = self.spec.blocks[i].params
        return self.elementwise(ceil(params / self.m.t), 3) if self.m.pipeline > 1 and params \
            else []

    def _scatter(self, elements: int) -> list[int]:
        """Tensor sharding: the input copied to the other shards' IPUs."""
        return self.link(elements * self.bytes) if self.m.t > 1 else []

    def _gather(self, elements: int) -> list[int]:
        """Tensor sharding: the partial input gradients summed across the shards' IPUs."""
        if self.m.t == 1:
            return []
        return self.link(elements * self.bytes) + self.elementwise(elements, 3)

    # --- the step ------------------------------------------------------------------------
    def _stages(self) -> list[range]:
        out, start = [], 0
        for count in self.m.layers_per_stage:
            out.append(range(start, start + count))
            start += count
        return out

    def _ring(self, elements: int) -> int:
        """The ring over the replicas of `elements` gradients per IPU: a reduce-scatter
        (r − 1 exchanges and combining maps) and r − 1 exchanges of all-gather, of the summed
        gradients or, under RTS, of the updated weights; a phased RTS model gathers a phase's
        weights before its forward and again before its backward."""
        r, span = self.m.replicas, self.m.t * self.m.pipeline
        if r == 1 or not elements:
            return 0
        chunk = ceil(elements / r) * self.bytes
        hop = max(self.target.link_cycles(chunk, j * span + k, (j + 1) % r * span + k)
                  for j in range(r) for k in range(span))
        gathers = 2 if self.m.rts and self.m.phased else 1
        return (1 + gathers) * (r - 1) * (self.sync + hop) + \
            (r - 1) * sum(self.elementwise(ceil(elements / r), 3))

    def parts(self) -> dict:
        """Cycles of the step by part: host, forward, loss, backward, pipeline, replicas,
        update."""
        m, stages = self.m, self._stages()
        micro, n = m.ga, m.micro
        fwd = [[c for i in s for c in self.block(i, n, False)] for s in stages]
        bwd = [[c for i in reversed(s) for c in self.block(i, n, True) + self._accumulate(i)]
               + m.recompute * f for s, f in zip(stages, fwd)]
        classes = self.spec.blocks[-1].reduce
        # softmax cross-entropy (its codelet's estimate), then the sums of loss and correct
        per_tile = ceil(n / self.target.tiles_per_ipu)      # samples spread over the tiles
        loss = self.sync + SoftmaxCrossEntropy.cycle_estimate(
            1, logits=(per_tile * classes,), labels=(per_tile,)) + 3 * (self.sync + WORKERS * (
                self.target.cost.vertex_overhead_cycles + n))
        hops = [self.link(n * (self.spec.blocks[s[-1]].reduce or self.spec.blocks[s[-1]].keep)
                          * self.bytes) for s in stages[:-1]] + [[]]
        params = max(sum(self.spec.blocks[i].params for i in s) for s in stages) // m.t
        phases = [sum(self.spec.blocks[i].params for i in ph) // m.t for ph in self._phases()]
        sample = 1
        for d in self.spec.dims["sample_shape"]:
            sample *= d
        x_bytes = self.batch * m.replicas * sample * self.bytes
        host = sum(self.sync + self.target.host_cycles(b) for b in (
            x_bytes, self.batch * m.replicas * LABEL_BYTES, 4 * m.replicas, 4 * m.replicas))
        return {"host": host, "forward": self._slots(fwd), "loss": micro * loss,
                "backward": self._slots(bwd[::-1]), "pipeline": 2 * self._slots(hops),
                "replicas": sum(self._ring(k) for k in phases), "update": self._update(params),
                "streaming": sum(self._streaming(k) for k in phases) if m.phased else 0}

    def _phases(self) -> list[range]:
        """The blocks of each phase (one phase holding every block when not phased)."""
        if not self.m.phased:
            return [range(len(self.spec.blocks))]
        sizes = self.m.layers_per_phase or [ceil(len(self.spec.blocks) / self.m.phases)] * \
            self.m.phases
        out, start = [], 0
        for n in sizes:
            out.append(range(start, min(start + n, len(self.spec.blocks))))
            start += n
        return out

    def _streaming(self, params: int) -> int:
        """A phase's copies to and from Streaming Memory (remote buffers, one superstep each):
        its fp32 weights loaded before its forward and its backward and stored after its
        update, and so its momentum (loaded, stored); 1/r of them under RTS."""
        shard = ceil(params / self.m.replicas) if self.m.rts else params
        nbytes = 4 * shard * self.target.system.ipus_per_machine
        return (3 + 2 * self.momentum) * (self.sync + self.target.streaming_cycles(nbytes))

    def _update(self, params: int) -> int:
        """SGD on an IPU's weights (1/r of them under RTS: each replica updates its shard),
        with momentum read and written; an off-chip momentum is loaded from Streaming Memory
        before and stored after it (the machine's IPUs share its bandwidth)."""
        shard = ceil(params / self.m.replicas) if self.m.rts else params
        cycles = sum(self.elementwise(shard, 3 + 2 * self.momentum))
        if self.momentum and self.m.optimizer_state == "off-chip":
            nbytes = 4 * shard * self.target.system.ipus_per_machine
            cycles += 2 * (self.sync + self.target.streaming_cycles(nbytes))
        return cycles

    def _slots(self, work: list) -> int:
        """A phase of the pipeline: in slot k, stage s works on micro-batch k − s (if there is
        one). The stages' supersteps are zipped into shared ones (poplar.parallel), each as
        long as its slowest stage's; with one stage, the micro-batches one after another."""
        M, total = self.m.ga, 0
        for k in range(M + len(work) - 1):
            active = [w for s, w in enumerate(work) if 0 <= k - s < M]
            total += sum(max(step) for step in zip_longest(*active, fillvalue=0)) \
                if active else 0
        return total

    # --- memory ------------------------------------------------------------------------
    def stage_bytes(self, s: int, blocks) -> dict:
        """Bytes of the IPU of stage s by the simulator's kinds: code, constants, vertex
        state and exchange buffers from the ops built on it (smallscale_memory.StageOps);
        variables: the always-live ones (master weights, optimizer state on chip) and the
        peak of the live temporaries (smallscale_liveness.StageLiveness). Phased: only the
        largest phase's weights are on chip; its ops and update are counted per phase."""
        m = self.m
        phases = [ph for ph in self._phases() if set(ph) & set(blocks)] if m.phased else [blocks]
        per_phase = [sum(self.spec.blocks[i].params for i in ph if i in blocks) // m.t
                     for ph in phases]
        kinds = StageOps(self, blocks, s == len(self._stages()) - 1).run(per_phase)
        params = max(per_phase) if m.phased else per_phase[0]   # only one phase is on chip
        shard = ceil(params / m.replicas) if m.rts else params
        on_chip = self.momentum and m.optimizer_state == "on-chip"
        always, peak = StageLiveness(self, blocks, s == 0).run(params, shard, on_chip)
        return {**kinds, "variables": always + peak}

    def memory(self) -> dict:
        """The fullest stage's IPU by kind."""
        return max((self.stage_bytes(s, b) for s, b in enumerate(self._stages())),
                   key=lambda kinds: sum(kinds.values()))


def small_scale(spec, target, mapping, batch: int, momentum: bool = False) -> dict:
    """The small-scale mode's prediction of one training step of an nn model's spec on a
    (small) simulated target: {"cycles", "cycle_parts", "bytes_per_ipu", "memory_parts"}.
    mapping: resolved (layers_per_stage; micro = samples per micro-batch, ga = micro-batches
    per step); batch: samples per replica and step; momentum: SGD keeps a velocity (the
    optimizer state the mapping's optimizer_state and rts place)."""
    model = StepModel(spec, target, mapping, batch, momentum)
    parts, memory = model.parts(), model.memory()
    return {"cycles": int(sum(parts.values())), "cycle_parts": parts,
            "bytes_per_ipu": int(sum(memory.values())), "memory_parts": memory}
