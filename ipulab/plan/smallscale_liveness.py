"""Small-scale mode, variables: the bytes of one IPU's variables as the simulator keeps them.

The simulator (poplar/liveness.py) keeps always live only the variables a step reads before
it writes them (the fp32 master weights, an on-chip velocity, an RTS shard); every other
variable lives from its first write to its last read, and those share addresses, so the
variables take the always-live bytes plus about the largest sum of tensors live at one point
of the program. This module walks the step in program order, tensor by tensor as the nn
trainer creates them (nn/step.py, nn/layers.py, nn/pipeline.py), and keeps that peak:

  forward    each block's output (a product's float partials and its pre-ReLU output only
             while the product and the ReLU map run); under tensor sharding each shard's IPU
             also keeps its copy of the layer's whole input;
  backward   the gradient flowing back, the weight gradients (kept until the update), the
             input-gradient product's partials and flipped weights while it runs; a block's
             output is freed after its backward, its input after the block before;
  pipeline   the forward of every micro-batch before the backwards (the slots of a phase), the
             float accumulators of the weight gradients for the whole step;
  recompute  only each block's input is kept; its forward is rebuilt before its backward;
  update     the gradients (copied into the all-reduce's result) and its chunk in flight;
  RTS        the gathered weights are temporary: each is freed after its last read (its
             layer's input-gradient product, or its forward for the first layer).
"""
from __future__ import annotations

from math import ceil

from .smallscale_memory import first_ipu

FLOAT = 4


class StageLiveness:
    """The peak bytes of live temporaries on the IPU of one stage, and the always-live ones."""

    def __init__(self, model, blocks, first_stage: bool):
        self.s, self.blocks, self.first = model, list(blocks), first_stage
        self.m, self.E, self.t, self.n = model.m, model.bytes, model.m.t, model.m.micro
        self.held: dict = {}
        self.cur = self.peak = 0

    # --- bookkeeping -----------------------------------------------------------------------
    def add(self, key, nbytes: int) -> None:
        """A tensor is written: it is live (held) until freed."""
        self.held[key] = self.held.get(key, 0) + int(nbytes)
        self.cur += int(nbytes)
        self.peak = max(self.peak, self.cur)

    def free(self, key) -> None:
        """A tensor's last read has passed."""
        self.cur -= self.held.pop(key, 0)

    def transient(self, nbytes: int) -> None:
        """Bytes live only while one op runs (on top of what is held)."""
        self.peak = max(self.peak, self.cur + int(nbytes))

    def partials(self, m: int, k: int, n: int) -> int:
        """Float partials of a product whose inner dimension is split (or of HALF inputs)."""
        plan = self.s.plan(m, k, n)
        split = plan.split.k > 1 or self.E == 2
        return m * n * plan.split.k * FLOAT if split else 0

    # --- sizes ------------------------------------------------------------------------------
    def out_bytes(self, i: int) -> int:
        """Bytes of block i's output on this IPU for one micro-batch."""
        b, n, t = self.s.spec.blocks[i], self.n, self.t
        if b.kind == "Conv2d":
            c, o, kh, kw, ho, wo, bias = b.shape
            return ceil(o / t) * n * ho * wo * self.E
        if b.kind == "Linear":
            return n * ceil(b.shape[1] / t) * self.E
        if b.kind in ("MaxPool2d", "AvgPool2d"):
            c, ho, wo, _, _ = b.shape
            return first_ipu(self.s, n * c * ho * wo, self.E) * self.E
        if b.kind in ("ReLU", "Dropout") and not self.fused(i):
            return first_ipu(self.s, n * b.keep, self.E) * self.E
        return 0

    def fused(self, i: int) -> bool:
        """Whether block i is a ReLU folded into the product before it."""
        blocks = self.s.spec.blocks
        return blocks[i].kind == "ReLU" and i > 0 and blocks[i - 1].kind in ("Conv2d", "Linear")

    def dims(self, i: int) -> tuple:
        """(oc, fan, positions) of a Conv2d or Linear block's forward product."""
        b, n, t = self.s.spec.blocks[i], self.n, self.t
        if b.kind == "Conv2d":
            c, o, kh, kw, ho, wo, bias = b.shape
            return ceil(o / t), c * kh * kw + bias, n * ho * wo
        fin, o, bias = b.shape
        return ceil(o / t), fin + bias, n

    # --- the walk ---------------------------------------------------------------------------
    def forward(self, i: int, mb: int) -> None:
        """Block i's forward on micro-batch mb: its output is held (and a shard's copy of
        its input); the product's partials and pre-ReLU output only while they run."""
        b = self.s.spec.blocks[i]
        if b.kind in ("Conv2d", "Linear"):
            oc, fan, p = self.dims(i)
            if self.t > 1:                      # the whole input copied to this shard's IPU
                self.add(("input", mb, i), self.n * b.keep * self.E)
            pre = oc * p * self.E
            self.transient(max(self.partials(oc, fan, p) + pre, 2 * pre))
            self.add(("act", mb, i), pre)
            if self.m.rts and self.weighted(i) == self.first_weighted():
                self.free(("weight", i))      # the first layer's weights: read only here
        else:
            self.add(("act", mb, i), self.out_bytes(i))

    def backward(self, i: int, mb: int) -> None:
        """Block i's backward on micro-batch mb: the gradient of its input replaces that of
        its output, its weight gradients are held, its output (and input copy) freed."""
        b, E, n, t = self.s.spec.blocks[i], self.E, self.n, self.t
        if b.kind in ("Conv2d", "Linear"):
            oc, fan, p = self.dims(i)
            self.add(("dy", mb, i), oc * p * E)             # the ReLU's (or copied) gradient
            self.free(("grad", mb, i))
            self.transient(self.partials(oc, p, fan))
            self.add(("wgrad", mb, i), oc * fan * E)
            if self.m.pipeline > 1:
                self.free(("wgrad", mb, i))       # added into the step's accumulator
            if self.blocks[0] > 0 or i > self.first_weighted():     # the input gradient
                dx = n * b.keep * E
                if b.kind == "Conv2d":
                    c, _, kh, kw = b.shape[:4]
                    work = self.partials(c, oc * kh * kw, n * b.keep // c) + b.params // t * E
                else:
                    work = self.partials(n, oc, b.keep)
                self.transient(work + dx)
                self.add(("grad", mb, i - 1), first_ipu(self.s, dx // E, E) * E)
            if self.m.rts:
                self.free(("weight", i))
            self.free(("dy", mb, i))
            self.free(("input", mb, i))
        elif self.fused(i) or b.kind == "Flatten":        # the gradient passes through
            self.held[("grad", mb, i - 1)] = self.held.pop(("grad", mb, i), 0)
        else:
            self.add(("grad", mb, i - 1), first_ipu(self.s, n * b.keep, E) * E)
            self.free(("grad", mb, i))
        self.free(("act", mb, i))

    def weighted(self, i: int) -> int:
        """i if block i has weights, else -1."""
        return i if self.s.spec.blocks[i].params else -1

    def first_weighted(self) -> int:
        """The model's first block with weights (its input gradient is never built)."""
        return next((i for i, b in enumerate(self.s.spec.blocks) if b.params), -1)

    def segments(self) -> list[list[int]]:
        """Recompute blocks: each starts at a layer with weights (the whole stage in a
        pipeline); without recompute, one segment."""
        if not self.m.recompute or self.m.pipeline > 1:
            return [self.blocks]
        out = []
        for i in self.blocks:
            if not out or self.s.spec.blocks[i].params:
                out.append([])
            out[-1].append(i)
        return out

    def step(self, micro: int) -> None:
        """Every micro-batch's forward, then the backwards (a recomputed segment's forward
        rebuilt just before its backward)."""
        segs, blocks = self.segments(), self.s.spec.blocks
        last = self.blocks[-1] == len(blocks) - 1
        for mb in range(micro):
            if self.blocks[0] > 0:                      # the previous stage's activations
                self.add(("act", mb, self.blocks[0] - 1), self.out_bytes(self.blocks[0] - 1))
            for seg in segs:
                for i in seg:
                    self.forward(i, mb)
                if self.m.recompute:
                    for i in seg[:-1]:
                        self.free(("act", mb, i))
            if last:
                self.add(("grad", mb, self.blocks[-1]), self.n * blocks[-1].reduce * self.E)
        for mb in range(micro):
            for seg in reversed(segs):
                for i in seg[:-1] if self.m.recompute else []:
                    self.forward(i, mb)
                for i in reversed(seg):
                    self.backward(i, mb)
            self.free(("act", mb, self.blocks[0] - 1))
            self.free(("grad", mb, self.blocks[0] - 1))

    def run(self, params: int, shard: int, momentum_on_chip: bool) -> tuple[int, int]:
        """(always-live bytes, peak of the others) of the step on this IPU; params: its fp32
        weights (of its largest phase when phased), shard: this replica's part under RTS."""
        m, E = self.m, self.E
        always = FLOAT * (shard if m.rts else params) + FLOAT * shard * momentum_on_chip
        for i in self.blocks if m.rts else []:
            self.add(("weight", i), ceil(self.s.spec.blocks[i].params / self.t) * FLOAT)
        if E == 2:
            self.add("half weights", params * E)
        if m.pipeline > 1:
            self.add("accumulators", params * E)
        if self.first:
            x = self.s.batch * self.s.spec.blocks[0].keep * E
            self.add("input", first_ipu(self.s, x // E, E) * E if m.pipeline == 1 else x)
        self.step(m.ga if m.pipeline > 1 else 1)
        # the gradients copied into the all-reduce's result, a chunk in flight; an off-chip
        # velocity loaded for the update
        chunks = 2 * ceil(params / m.replicas) if m.replicas > 1 else 0
        off_chip = self.s.momentum and m.optimizer_state == "off-chip" and not m.phased
        self.transient(FLOAT * (chunks + shard * off_chip))
        return always, self.peak
