"""The small scale: one training step of a model the simulator runs, walked as nn builds it.

The walk is nn's step (nn/step.py, nn/pipeline.py, nn/phased.py) told once, in program order,
on the IPU of every pipeline stage (its first IPU under tensor sharding, the fullest); each
layer's cost class (layers.py) says what it builds, and a tiles.Ipu counts it three ways at
once (supersteps, code/constants/vertex state/exchange buffers, liveness):

  batch in     the host's FIFOs copy the batch into the first stage's input (the fp16 cast
               of the master weights, an all-gather of them under RTS, each gathered
               weight live until its last read);
  forward      every micro-batch's forward (a pipeline: all of them, then the backwards, as
               GPipe), the loss on the last stage;
  backward     each block's backward (recompute: its forward rebuilt first, from its input:
               nn/build.py's blocks start at every layer with weights; a pipeline stage is
               one block), the weight gradients added into accumulators in a pipeline;
  evaluation   a forward of its own when nn cannot share the training one (a pipeline or
               Dropout): its ops only;
  update       the replicas' ring all-reduce of the gradients (RTS: reduce-scatter, and an
               all-gather of the updated weights), the optimizer's maps over this replica's
               weights, its state to and from Streaming Memory when it lives there (live
               from its load to its store); phased (nn/phased.py): last phase first, each
               phase's backward then its update, its weights and state streamed in and out
               (gathered again for its forward and its backward under RTS).

Cycles: a stage's supersteps per micro-batch are zipped across the stages into the slots of
a pipeline phase (poplar.parallel: stage s works on micro-batch k − s in slot k, each shared
superstep as long as its slowest stage's), M + p − 1 slots each way; then the loss, the hops
between stages, the replicas' ring, the update, Streaming Memory and the host's copies.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest
import math
from math import ceil


from .optim import optimizer_cost
from .update import update_placed
from ..poplar import INT
from .tiles import ENTRY_CYCLES, FLOAT, Ipu, Layout, Machine, joined

LABEL_BYTES = 4             # labels stream in as INT
COPY = "/copy"              # a copy between a stage's shards (shards.py): poplar.parallel
# merges the stages' compute sets into shared supersteps, not their copies


@dataclass
class Pass:
    """One pass over a micro-batch: its samples and index, training or evaluation, and what
    the mapping asks of every layer (t, RTS, a pipeline, the first layer with weights, whose
    input gradient nn never builds). inputs: where each layer's input lay in the forward."""

    n: int
    micro_batch: int
    train: bool
    t: int
    rts: bool
    pipelined: bool
    first_weighted: int
    batch: int = 0
    recompute: bool = False
    grid: tuple = (1, 1)          # t1 x t2 (a transformer's shards, nn/megatron.py)
    micro_batches: int = 1        # the passes of this kind in a step (a pipeline's M)
    inputs: dict = field(default_factory=dict)
    saved: dict = field(default_factory=dict)

    @property
    def last(self) -> bool:
        """Whether it is the step's last pass of its kind (the last to read the weights)."""
        return self.micro_batch == self.micro_batches - 1


@dataclass
class StageCost:
    """A stage's supersteps of one micro-batch (forward, with the loss on the last stage, and
    backward), of the update, its IPU's bytes by kind, and the bytes it keeps in Streaming
    Memory."""

    forward: list
    backward: list
    update: list
    memory: dict
    streamed: int = 0


class StepWalk:
    """The step of `spec` (layers that run on the simulator) on `target` with a resolved
    mapping; batch: samples per replica and step."""

    def __init__(self, spec, target, mapping, batch: int):
        self.spec, self.target, self.m, self.batch = spec, target, mapping, batch
        self.mc = Machine(target, mapping)
        self.layers = list(spec.blocks)
        self.opt = optimizer_cost(mapping.optimizer, mapping.momentum,
                                  mapping.precision == "fp16", mapping.weight_decay)
        self.first_weighted = next((b.index for b in self.layers if b.params), len(self.layers))
        self.dropout = any(getattr(b, "train_only", False) for b in self.layers)   # a forward
        # of its own for the evaluation (nn builds one when a layer acts only in training)
        self.placed = bool(spec.dims.get("placed"))    # priced element by element
        self.ring_cycles: dict = {}    # stage -> cycles of the replicas' ring (update.py)

    # --- the shape of the step -------------------------------------------------------------
    def stages(self) -> list[range]:
        out, start = [], 0
        for count in self.m.layers_per_stage:
            out.append(range(start, start + count))
            start += count
        return out

    def phases(self) -> list[range]:
        """The layers of each phase (one phase of every layer when not phased)."""
        if not self.m.phased:
            return [range(len(self.layers))]
        out, start = [], 0
        for n in self.m.layers_per_phase:
            out.append(range(start, start + n))
            start += n
        return out

    def segments(self, blocks: range) -> list[list[int]]:
        """Recompute blocks: each starts at a layer with weights (a pipeline stage is one)."""
        if not self.m.recompute or self.m.pipeline > 1:
            return [list(blocks)]
        out = []
        for i in blocks:
            if not out or self.layers[i].params:
                out.append([])
            out[-1].append(i)
        return out

    def weights(self, blocks) -> Layout:
        """This IPU's weights of `blocks`: each tensor mapped linearly on its own, all of them
        from the first tile on."""
        return joined(self.mc.linear(n, FLOAT) for i in blocks for n in self.tensors(i))

    def tensors(self, i: int) -> list:
        """Elements of layer i's weight tensors on a stage's first IPU: 1/t of each (its
        rows) under tensor sharding; a transformer's as Megatron splits them (its shard's,
        and those every shard reads, kept there)."""
        if self.placed:
            return [math.prod(shape) for _, shape in self.weights_of(i)]
        return [ceil(n / self.m.t) for n in self.layers[i].tensors]

    def weights_of(self, i: int) -> list:
        """(name, shape) of layer i's weights on a stage's first IPU (update.py)."""
        layer = self.layers[i]
        return layer.weights_of(self.m.tensor_parallel if self.placed else self.m.t)

    def on_ipu(self, blocks) -> float:
        """Parameters of `blocks` on a stage's first IPU (1/t of them, or Megatron's)."""
        if self.placed:
            return sum(sum(self.tensors(i)) for i in blocks)
        return sum(self.layers[i].params for i in blocks) / self.m.t

    def outputs(self, i: int) -> int:
        """Elements of layer i's output per sample."""
        return self.layers[i + 1].keep if i + 1 < len(self.layers) else \
            self.layers[-1].reduce

    # --- a stage ---------------------------------------------------------------------------
    def stage(self, s: int) -> StageCost:
        """The walk of stage s on its IPU."""
        m, mc = self.m, self.mc
        blocks = self.stages()[s]
        ipu, last = Ipu(mc, per_tile=self.placed), s == m.pipeline - 1
        builds = m.micro_batches if m.pipeline > 1 else 1
        per_phase = [self.weights([i for i in ph if i in blocks]).elements
                     for ph in self.phases() if set(ph) & set(blocks)]
        params = max(per_phase)
        shard = mc.linear(ceil(self.on_ipu(blocks) / m.replicas),
                          FLOAT, mc.replica_span).elements if m.rts else params
        on_chip = m.optimizer_state == "on-chip" and not m.phased
        always = {"weights": FLOAT * shard,
                  "optimizer_state": self.opt.state_bytes(shard) if on_chip else 0}
        self.step_tensors(ipu, s, blocks, params)
        cost = StageCost([], [], [], {})
        runs = [self.run(mb, True) for mb in range(builds)]
        for run in runs:
            self.forward(ipu, s, blocks, run, cost, last)
        self.last_logits = runs[0].saved.get("logits")
        for run in runs:
            ipu.clock = cost.backward if run.micro_batch == 0 else None
            self.backward(ipu, s, blocks, run, cost)
        ipu.clock, ipu.live = None, False
        self.evaluation(ipu, s, blocks, builds, last)
        ipu.clock, ipu.live = cost.update, True
        if not m.phased:                    # phased: each phase's after its backward
            self.update(ipu, s, blocks, blocks)
        cost.memory = ipu.memory(always)
        weights = int(self.on_ipu(blocks))
        weights = ceil(weights / m.replicas) if m.rts else weights
        cost.streamed = FLOAT * weights * m.phased + self.opt.state_bytes(weights) * (not on_chip)
        return cost

    def run(self, mb: int, train: bool) -> Pass:
        m = self.m
        return Pass(m.micro_batch_size, mb, train, m.t, m.rts, m.pipeline > 1,
                    self.first_weighted, self.batch, m.recompute, m.tensor_parallel,
                    m.micro_batches if m.pipeline > 1 else 1)

    def batch_input(self):
        """A placed model's batch: [B, ...] (token ids INT) mapped linearly on the first
        stage."""
        mc, shape = self.mc, self.spec.dims["sample_shape"]
        dtype = INT if self.spec.dims.get("tokens") else mc.dtype
        return mc.once("input", lambda: mc.addr.linear((self.batch,) + tuple(shape), dtype,
                                                         mc.graph.num_tiles))

    def step_tensors(self, ipu, s: int, blocks, params: int) -> None:
        """What the step starts with: RTS's gathered weights (phased: each phase gathers
        its own, forward and backward), the fp16 weights, a pipeline's accumulators, the
        first stage's batch (and the copies that bring it in)."""
        m, mc = self.m, self.mc
        if m.rts and not m.phased:
            self.gather(ipu, blocks)
        if mc.E == 2:
            ipu.hold("half weights", params * mc.E, "weights")
        if m.pipeline > 1:
            ipu.hold("accumulators", sum(mc.staged(n).elements for i in blocks
                                         for n in self.layers[i].tensors) * mc.E, "gradients")
        if s == 0 and self.placed:
            x = self.batch_input()
            ipu.hold("input", x)
            ipu.control(2 * x.tiles)                      # training's and evaluation's batch
        elif s == 0:
            x = self.batch * self.layers[0].keep
            ipu.hold("input", mc.staged(x).elements * mc.E)
            ipu.control(2 * mc.staged(x).tiles)          # training's and evaluation's batch
        if s == m.pipeline - 1:
            ipu.control(8)

    def gather(self, ipu, layers) -> None:
        """RTS: the weights of `layers` all-gathered from this replica's shard into the
        layers' own tensors (each mapped linearly on its own; a placed model's as its ops read
        them), each live until its last read (drop)."""
        for i in layers:
            if self.placed:
                for name, shape in self.weights_of(i):
                    ipu.hold(("weight", i, name), self.layers[i].master(ipu, name, shape),
                             "weights")
            elif self.layers[i].params:
                ipu.hold(("weight", i), self.weights([i]).elements * FLOAT, "weights")

    @staticmethod
    def drop(ipu, i: int) -> None:
        """RTS: layer i's gathered weights after their last read."""
        for key in [k for k in ipu.held if isinstance(k, tuple) and k[:2] == ("weight", i)]:
            ipu.free(key)

    def read_back(self, i: int) -> bool:
        """Whether layer i's backward reads its weights: its input gradient's product
        (none for the first layer with weights, nor for a table whose gradient is a sum of
        the output's: Layer.grad_reads_weights)."""
        return i > self.first_weighted and self.layers[i].grad_reads_weights

    def forward(self, ipu, s: int, blocks, run: Pass, cost: StageCost, last: bool) -> None:
        """One micro-batch's forward on this stage (and the loss on the last). RTS: a
        layer's gathered weights die after its last forward when its backward reads none
        (or, phased, reads the phase's backward copies, gathered again)."""
        m, mc, mb = self.m, self.mc, run.micro_batch
        ipu.clock = cost.forward if mb == 0 else None
        x = self.arrive(ipu, blocks, run)
        for part in self.parts(blocks):
            if m.rts and m.phased:
                self.gather(ipu, part)
            x = self.forward_part(ipu, run, part, x)
        run.saved["logits"] = x
        if last:
            run.saved["dlogits"] = self.spec.loss.forward(ipu, run, x,
                                                          ("grad", mb, blocks[-1]))
        elif m.pipeline > 1:                       # to the next stage, its gradient back
            ipu.control(2 * mc.staged(run.n * self.outputs(blocks[-1])).tiles)

    def parts(self, blocks) -> list[list[int]]:
        """The stage's layers phase by phase (one part when not phased)."""
        return [p for p in ([i for i in ph if i in blocks] for ph in self.phases()) if p]

    def forward_part(self, ipu, run: Pass, part, x):
        """The forward of a phase's layers (a stage's when not phased)."""
        m, mb = self.m, run.micro_batch
        for seg in self.segments(part):
            for i in seg:
                run.inputs[i] = x
                x = self.layers[i].forward(ipu, run, x)
                if m.rts and run.last and (m.phased or not (m.recompute or self.read_back(i))):
                    self.drop(ipu, i)
            for i in seg[:-1] if m.recompute else ():
                ipu.free(("act", mb, i))
            for i in seg if m.recompute else ():      # rebuilt before their backward
                getattr(self.layers[i], "forget", lambda ipu, run: None)(ipu, run)
        return x

    def arrive(self, ipu, blocks, run: Pass) -> Layout:
        """Where a micro-batch's input lies: the batch on the first stage; the previous
        stage's activations (and the copies that bring them and take their gradient back)."""
        mc, lo = self.mc, blocks[0]
        if self.placed:
            return self.arrive_placed(ipu, lo, run)
        if lo == 0:
            return mc.staged(run.n * self.layers[0].keep)
        size = run.n * self.outputs(lo - 1)
        ipu.hold(("act", run.micro_batch, lo - 1), mc.staged(size).elements * mc.E)
        ipu.control(2 * mc.staged(size).tiles)
        return mc.staged(size)

    def arrive_placed(self, ipu, lo: int, run: Pass):
        """A placed model's micro-batch: its rows of the batch; on a later stage a copy of
        the previous stage's output mapped linearly (its gradient goes back alike)."""
        mc, n, mb = self.mc, run.n, run.micro_batch
        if lo == 0:
            x = self.batch_input()
            return x[mb * n:(mb + 1) * n] if run.pipelined else x
        shape = (n,) + tuple(self.spec.dims["shapes"][lo])
        x = mc.addr.linear(shape, mc.dtype, mc.graph.num_tiles)
        ipu.hold(("act", mb, lo - 1), x)
        ipu.control(2 * x.tiles)
        return self.to_shards(ipu, x, f"{lo}.input")

    def to_shards(self, ipu, x, name: str):
        """Under tensor sharding, a stage's input (or its output's gradient) copied to its
        shards (nn/megatron.py: what no layer of the stage left on them; t2 > 1: each
        shard's column block)."""
        if self.mc.t == 1:
            return x
        from .shards import to_shard
        t2 = self.m.tensor_parallel[1]
        return to_shard(ipu, f"{name} to the shards", x[..., :x.shape[-1] // t2])

    def backward(self, ipu, s: int, blocks, run: Pass, cost: StageCost) -> None:
        """One micro-batch's backward on this stage: each block's forward rebuilt first when
        recomputing, then its layers' backwards (none before the first layer with weights).
        Phased (nn/phased.py), last phase first: its weights gathered again under RTS, its
        backward, then its update (into cost.update) before the phase before it."""
        m, mb, dy = self.m, run.micro_batch, run.saved.get("dlogits")
        if self.placed and blocks[-1] < len(self.layers) - 1:    # from the next stage
            shape = (run.n,) + tuple(self.spec.dims["shapes"][blocks[-1] + 1])
            dy = self.mc.addr.linear(shape, self.mc.dtype, self.mc.graph.num_tiles)
            ipu.hold(("grad", mb, blocks[-1]), dy)
            dy = self.to_shards(ipu, dy, f"{blocks[-1]}.output_grad")
        for part in reversed(self.parts(blocks)):
            if m.rts and m.phased:
                self.gather(ipu, [i for i in part if i >= self.first_weighted])
            for seg in reversed(self.segments(part)):
                if seg[-1] < self.first_weighted:
                    break
                if m.recompute and any(self.layers[i].params for i in seg):
                    for i in seg:
                        self.layers[i].forward(ipu, run, run.inputs[i])
                for i in reversed(seg):
                    if i >= self.first_weighted:
                        dy = self.layers[i].backward(ipu, run, dy)
                    if m.rts and run.last:
                        self.drop(ipu, i)
            if m.phased:
                clock, ipu.clock = ipu.clock, cost.update
                self.update(ipu, s, blocks, part)
                ipu.clock = clock
        for i in blocks:
            ipu.free(("act", mb, i))
        ipu.free(("act", mb, blocks[0] - 1))
        ipu.free(("grad", mb, blocks[0] - 1))

    def evaluation(self, ipu, s: int, blocks, builds: int, last: bool) -> None:
        """The evaluation step's ops: its own forward when the training one cannot be shared
        (a pipeline, Dropout), the loss and the predictions."""
        own = self.m.pipeline > 1 or self.dropout
        for mb in range(builds if own else 0):
            run = self.run(mb, False)
            x = self.arrive(ipu, blocks, run)
            for i in blocks:
                x = self.layers[i].forward(ipu, run, x)
            if last:
                self.spec.loss.forward(ipu, run, x)
        if last and not own and self.placed:
            self.spec.loss.forward(ipu, self.run(0, False), self.last_logits, None,
                                   loss=False)
        elif last and not own:
            ipu.arg_max(self.m.micro_batch_size)

    def update(self, ipu, s: int, blocks, part) -> None:
        """The update of this stage's layers of one phase (of all of them when not phased)
        on its IPU (update.py): the fp16 copies, a pipeline's accumulators, the replicas'
        collectives, the optimizer. Each weight is updated where it lives (the shared ones
        read by no other shard). The replicas' ring carries the phase's gradients of every
        stage."""
        shared, self.mc.shared = self.mc.shared, {}
        phase = next(ph for ph in self.phases() if part[0] in ph) if self.m.phased else \
            range(len(self.layers))
        total = sum(math.prod(shape) for i in phase for _, shape in self.weights_of(i))
        self.ring_cycles[s] = self.ring_cycles.get(s, 0) + update_placed(
            self, ipu, [i for i in part if i in blocks], total)
        self.mc.shared = shared

    # --- the step ---------------------------------------------------------------------------
    def cycles(self) -> tuple[dict, list]:
        """Cycles of the step by part (host, forward with the loss, backward, pipeline hops,
        replicas, update, streaming), and each stage's StageCost. A pipeline sums its
        micro-batches' losses and correct answers and takes the mean after the slots."""
        m, mc = self.m, self.mc
        stages = [self.stage(s) for s in range(m.pipeline)]
        steps = lambda part: [[c for n, c in getattr(st, part) if not n.endswith(COPY)]
                              for st in stages]
        copies = lambda part: m.micro_batches * sum(c for st in stages for n, c in
                                                    getattr(st, part) if n.endswith(COPY))
        hops = [self.hop(b) for b in self.stages()[:-1]] + [[]]
        phases = [int(self.on_ipu(ph)) for ph in self.phases()]
        params = max(int(self.on_ipu(b)) for b in self.stages())
        losses = 3 * (mc.sync + mc.W * ENTRY_CYCLES) if m.pipeline > 1 else 0
        parts = {"host": self.host(),
                 "forward": self.slots(steps("forward")) + copies("forward") + losses,
                 "backward": self.slots(steps("backward")[::-1]) + copies("backward"),
                 "pipeline": 2 * self.slots(hops),
                 "replicas": max(self.ring_cycles.values(), default=0),
                 "update": max(sum(c for _, c in st.update) for st in stages),
                 "streaming": self.streaming(params, phases)}
        return parts, stages

    def hop(self, blocks) -> list[int]:
        """A micro-batch's activations to the next stage over the IPU-Links."""
        nbytes = self.m.micro_batch_size * self.outputs(blocks[-1]) * self.mc.E
        return [self.mc.far_sync + self.target.link_cycles(nbytes, 0, 1)]

    def host(self) -> int:
        """The step's four FIFO copies: the batch (token ids INT), labels (one a position),
        loss, correct."""
        r, mc, dims = self.m.replicas, self.mc, self.spec.dims
        sample = 1
        for d in dims["sample_shape"]:
            sample *= d
        size = LABEL_BYTES if dims.get("tokens") else mc.E
        labels = getattr(self.spec.loss, "positions", 1)
        sizes = (self.batch * r * sample * size, self.batch * r * labels * LABEL_BYTES,
                 4 * r, 4 * r)
        return sum(mc.sync + self.target.host_cycles(b) for b in sizes)

    def hop_cycles(self, nbytes: int) -> int:
        """A chunk of nbytes from every replica to the next over the IPU-Links (the slowest
        pair of the ring)."""
        m = self.m
        r, span = m.replicas, m.t * m.pipeline
        return max(self.target.link_cycles(nbytes, j * span + k, (j + 1) % r * span + k)
                   for j in range(r) for k in range(span))

    def streaming(self, params: int, phases: list) -> int:
        """Remote-buffer copies (one superstep each; the machine's IPUs share its
        bandwidth, each streaming its part: 1/t of a stage's, a replica spread over several
        IPUs a share each): phased, each phase's fp32 weights loaded before its forward and
        its backward and stored after its update, and its state loaded and stored; off-chip
        state, loaded before the update and stored after it. 1/r of them under RTS."""
        m, mc = self.m, self.mc
        share = (lambda k: ceil(k / m.replicas) if m.rts else k)
        per_machine = self.target.system.ipus_per_machine
        copy = (lambda nbytes: mc.sync + self.target.streaming_cycles(
            ceil(nbytes / mc.layer_span) * per_machine))
        if m.phased:
            return sum(3 * copy(FLOAT * share(k)) + 2 * bool(self.opt.state_elements) *
                       copy(self.opt.state_bytes(share(k))) for k in phases)
        if m.optimizer_state == "off-chip" and self.opt.state_elements:
            return 2 * copy(self.opt.state_bytes(share(params)))
        return 0

    def slots(self, work: list) -> int:
        """A phase of the pipeline: in slot k, stage s works on micro-batch k − s (if there is
        one). The stages' supersteps are zipped into shared ones, each as long as its slowest
        stage's; with one stage, the micro-batches one after another."""
        M, total = self.m.micro_batches, 0
        for k in range(M + len(work) - 1):
            active = [w for s, w in enumerate(work) if 0 <= k - s < M]
            total += sum(max(step) for step in zip_longest(*active, fillvalue=0)) \
                if active else 0
        return total


def small_scale(spec, target, mapping, batch: int) -> dict:
    """The small scale's prediction of one training step on a (small) simulated target:
    {"cycles", "cycle_parts", "bytes_per_ipu", "memory_parts", "stages"}; mapping resolved,
    batch: samples per replica and step."""
    walk = StepWalk(spec, target, mapping, batch)
    parts, stages = walk.cycles()
    fullest = max(stages, key=lambda st: sum(st.memory.values()))
    return {"cycles": int(sum(parts.values())), "cycle_parts": parts,
            "bytes_per_ipu": int(sum(fullest.memory.values())), "memory_parts": fullest.memory,
            "stages": [st.memory for st in stages], "streaming": [st.streamed for st in stages]}
