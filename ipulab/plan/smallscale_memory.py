"""Small-scale mode, memory: the bytes of one IPU of a training step by the simulator's kinds.

The simulator (poplar/layout.py) counts, per tile: code (each codelet once per tile it runs
on, control code per program step the tile takes part in), constants, variables (the
always-live ones, and an area where those that are not always live share addresses), vertex
state (a header, a pointer or scalar per field and an entry per VectorList region, per
vertex) and exchange buffers (per tile, the largest set one compute set needs). This module
counts the same kinds from the graph the nn trainer builds, op by op as the libraries create
their vertices, at the cost model's sizes (arch.CostModel):

  product     poplin.plan_mat_mul: a MatMulBlock vertex (4 vectors) per tile used and its
              dims constant (3 INTs a tile); when the inner dimension is split (or HALF, or
              accumulating) a ReducePartials compute set, a vertex per tile; each tile keeps
              a buffer for the A and B blocks it receives;
  map         popops: each tile's elements cut into at most 6 pieces of whole 64-bit grains,
              a vertex per piece (a vector per field);
  pooling     popnn: a vertex per worker and tile with its geometry and runs constants;
  padding     poplin.conv_patches and the transposed convolution pad with zero constants, and
              the folded bias multiplies a constant row of ones (shared per shape and IPU).

Which ops run on an IPU, and how often they are built (every micro-batch of a pipeline, an
evaluation forward of its own, a recomputed forward), follows nn/step.py and nn/pipeline.py.
"""
from __future__ import annotations

from math import ceil

import numpy as np


WORKERS = 6
FLOAT = 4
MIN_LINEAR_BYTES = 128      # map_tensor_linearly puts at least this much on a tile
POOL_STATE = {False: (4, 2), True: (6, 4)}     # (vector and list fields, list entries)
POOL_CONSTANTS = {False: 12 + 8, True: 12 + 12}     # geometry and runs bytes per vertex


def first_ipu(model, elements: int, nbytes: int) -> int:
    """Elements on the first IPU of a tensor mapped linearly over a stage's t IPUs: at least
    128 bytes a tile from its first tile on, so a small one sits on the first IPU (the
    fullest under tensor sharding, the one modelled)."""
    T, t = model.target.tiles_per_ipu, model.m.t
    tiles = max(1, min(T * t, ceil(elements * nbytes / MIN_LINEAR_BYTES)))
    return ceil(elements * min(T, tiles) / tiles)


class IpuMemory:
    """Accumulates the ops of one IPU: vertex state, program steps per tile, the codelets of
    each tile, constants and per-tile exchange buffers."""

    def __init__(self, model):
        self.m, self.cost = model, model.target.cost
        self.T, self.bytes = model.target.tiles_per_ipu, model.bytes
        self.grain = max(1, 8 // model.bytes)
        self.state = self.constants = self.steps = 0
        self.codelets: dict[str, int] = {}              # codelet -> tiles it runs on
        self.buffers = np.zeros(self.T, np.int64)
        self.shared: set = set()                        # constants shared per shape

    def _align(self, n: int) -> int:
        """n rounded up to the cost model's alignment (every allocation is aligned)."""
        a = self.cost.alignment
        return -(-int(n) // a) * a

    def _vertex(self, vectors: int, scalars: int = 0, entries: int = 0) -> int:
        """Vertex state bytes of one vertex: a header, a pointer (and size) per vector or
        VectorList field, a word per scalar, an entry per VectorList region."""
        c = self.cost
        return (c.vertex_header_bytes + vectors * c.vector_field_bytes
                + scalars * c.scalar_field_bytes + entries * c.vector_list_entry_bytes)

    def _code(self, name: str, tiles: int) -> None:
        """Codelet `name` runs on `tiles` tiles (its code is on each of them once)."""
        self.codelets[name] = max(self.codelets.get(name, 0), min(self.T, tiles))

    def linear_tiles(self, elements: int, nbytes: int | None = None) -> int:
        """Tiles map_tensor_linearly spreads `elements` over (at least 128 bytes a tile)."""
        size = nbytes or self.bytes
        return max(1, min(self.T, ceil(elements * size / MIN_LINEAR_BYTES)))

    def constant(self, elements: int, nbytes: int, key=None) -> None:
        """A constant mapped linearly (once per key when it is shared by shape)."""
        if elements <= 0 or (key is not None and key in self.shared):
            return
        if key is not None:
            self.shared.add(key)
        tiles = self.linear_tiles(elements, nbytes)
        self.constants += tiles * self._align(ceil(elements / tiles) * nbytes)

    # --- ops -------------------------------------------------------------------------------
    def product(self, m: int, k: int, n: int, accumulate: bool = False):
        """A product as poplin builds it; returns its plan (whose tiles hold the result)."""
        if min(m, k, n) < 1:
            return None
        plan = self.m.plan(m, k, n)
        tiles, blk = plan.tiles_used, plan.block
        self.state += tiles * self._vertex(4)
        self.constants += tiles * self._align(3 * 4)
        self.steps += tiles
        self._code("MatMulBlock", tiles)
        ab = (blk.m * blk.k + blk.k * blk.n) * self.bytes
        self.buffers[:tiles] = np.maximum(self.buffers[:tiles], ab)
        if plan.split.k > 1 or self.bytes == 2 or accumulate:
            self.state += tiles * self._vertex(2 + accumulate)
            self.constants += tiles * self._align(4) * accumulate
            self.steps += tiles
            self._code("ReducePartials" + "Acc" * accumulate, tiles)
        return plan

    def map(self, name: str, elements: int, fields: int, tiles: int | None = None,
            nbytes: int | None = None, remote: int = 0) -> None:
        """An element-wise compute set over `elements` on `tiles` (default: spread linearly):
        per tile, a vertex per piece of at most 6. remote: bytes per element of an input laid
        out elsewhere (a gradient where its product left it), received into a buffer."""
        if elements <= 0:
            return
        grain = max(1, 8 // (nbytes or self.bytes))
        tiles = min(tiles or self.linear_tiles(elements, nbytes), ceil(elements / grain))
        pieces = min(WORKERS, ceil(elements / tiles / grain))
        if remote:
            share = self._align(ceil(elements / tiles) * remote)
            self.buffers[:tiles] = np.maximum(self.buffers[:tiles], share)
        self.state += tiles * pieces * self._vertex(fields)
        self.steps += tiles
        self._code(name, tiles)

    def pool(self, elements: int, backward: bool) -> None:
        """A pooling compute set: a vertex per worker and tile, with constants."""
        tiles = self.linear_tiles(elements)
        vertices = tiles * min(WORKERS, ceil(elements / tiles / self.grain))
        vectors, entries = POOL_STATE[backward]
        self.state += vertices * self._vertex(vectors, entries=entries)
        self.constants += tiles * self._align(POOL_CONSTANTS[backward] * vertices // tiles)
        self.steps += tiles
        self._code(f"Pool{backward}", tiles)

    def code(self) -> int:
        """Codelet code (each codelet once per tile it runs on) and control code."""
        return (self.cost.codelet_code_bytes * sum(self.codelets.values())
                + self.cost.control_code_bytes_per_step * self.steps)


def _input_hw(b) -> tuple[int, int, int, int]:
    """(h, w, ph, pw) of a Conv2d block's input: its spatial size from the elements it keeps
    (square when they are), its padding from the output size at stride 1."""
    c, _, kh, kw, ho, wo, _ = b.shape
    hw = b.keep // c
    h = int(round(hw ** 0.5))
    h, w = (h, h) if h * h == hw else (hw, 1)
    return h, w, max(0, (ho - h + kh - 1) // 2), max(0, (wo - w + kw - 1) // 2)


class StageOps:
    """The ops the nn trainer builds on the IPU of one stage (one shard of it), counted into an
    IpuMemory: the forward and backward of its blocks per micro-batch, the loss, the update."""

    def __init__(self, model, blocks, last: bool):
        self.s, self.blocks, self.last = model, list(blocks), last
        self.mem = IpuMemory(model)
        self.t, self.n = model.m.t, model.m.micro

    def forward(self, i: int, train: bool = True) -> None:
        """The ops of block i's forward on one micro-batch: the padding and ones constants,
        the product of its shard and the folded ReLU, pooling, a standalone ReLU."""
        b, mem, n, t = self.s.spec.blocks[i], self.mem, self.n, self.t
        relu = i + 1 < len(self.s.spec.blocks) and self.s.spec.blocks[i + 1].kind == "ReLU"
        if b.kind == "Conv2d":
            c, o, kh, kw, ho, wo, bias = b.shape
            h, w, ph, pw = _input_hw(b)
            mem.constant(n * c * ph * w, self.s.bytes, ("pad", n, c, ph, w))
            mem.constant(n * c * (h + 2 * ph) * pw, self.s.bytes, ("pad", n, c, h + 2 * ph, pw))
            mem.constant(bias * n * ho * wo, self.s.bytes, ("ones", n * ho * wo))
            plan = mem.product(ceil(o / t), c * kh * kw + bias, n * ho * wo)
            if relu:
                mem.map("relu", ceil(o / t) * n * ho * wo, 2, plan.tiles_used)
        elif b.kind == "Linear":
            fin, o, bias = b.shape
            mem.constant(bias * n, self.s.bytes, ("ones", n))
            plan = mem.product(n, fin + bias, ceil(o / t))
            if relu:
                mem.map("relu", n * ceil(o / t), 2, plan.tiles_used)
        elif b.kind in ("MaxPool2d", "AvgPool2d"):
            c, ho, wo, _, _ = b.shape
            mem.pool(first_ipu(self.s, n * c * ho * wo, self.s.bytes), False)
        elif b.kind in ("ReLU", "Dropout") and not (i > 0 and self.s.spec.blocks[i - 1].kind
                                                    in ("Conv2d", "Linear")):
            if train or b.kind == "ReLU":       # an evaluation's Dropout passes x through
                mem.map(b.kind, first_ipu(self.s, n * b.keep, self.s.bytes), 2)

    def backward(self, i: int) -> None:
        """The ops of block i's backward on one micro-batch: the ReLU's gradient, the
        weight-gradient product, the input-gradient product (and its padding and the shards'
        sum), pooling's gradient; in a pipeline, the weight gradients' accumulation."""
        b, mem, n, t = self.s.spec.blocks[i], self.mem, self.n, self.t
        relu = i + 1 < len(self.s.spec.blocks) and self.s.spec.blocks[i + 1].kind == "ReLU"
        pipelined = self.s.m.pipeline > 1
        if b.kind == "Conv2d":
            c, o, kh, kw, ho, wo, bias = b.shape
            oc, (hh, ww, ph, pw) = ceil(o / t), _input_hw(b)
            if relu:
                mem.map("relu_grad", oc * n * ho * wo, 3, self._out_tiles(oc, n * ho * wo))
            mem.product(oc, n * ho * wo, c * kh * kw + bias)
            if i > 0:
                kp, kq = kh - 1 - ph, kw - 1 - pw
                mem.constant(n * oc * kp * wo, self.s.bytes, ("pad", n, oc, kp, wo))
                mem.constant(n * oc * (ho + 2 * kp) * kq, self.s.bytes,
                             ("pad", n, oc, ho + 2 * kp, kq))
                dx = mem.product(c, oc * kh * kw, n * hh * ww)
                self._shard_sum(n * b.keep, dx.tiles_used)
        elif b.kind == "Linear":
            fin, o, bias = b.shape
            oc = ceil(o / t)
            if relu:
                mem.map("relu_grad", n * oc, 3, self._out_tiles(n, oc))
            mem.product(oc, n, fin + bias)
            if i > 0:
                dx = mem.product(n, oc, fin)
                self._shard_sum(n * fin, dx.tiles_used)
        elif b.kind in ("MaxPool2d", "AvgPool2d"):
            c, ho, wo, _, _ = b.shape
            mem.pool(first_ipu(self.s, n * c * ho * wo, self.s.bytes), True)
        elif b.kind in ("ReLU", "Dropout") and not (i > 0 and self.s.spec.blocks[i - 1].kind
                                                    in ("Conv2d", "Linear")):
            mem.map(b.kind + "_grad", first_ipu(self.s, n * b.keep, self.s.bytes), 3)
        if pipelined and b.params:
            mem.map("accumulate", ceil(b.params / t), 2, None, self.s.bytes, self.s.bytes)

    def _out_tiles(self, m: int, n: int) -> int:
        """Tiles holding an (m, n) product's result (its plan's tiles)."""
        plan = self.s.plan(m, 2, n)
        return plan.tiles_used

    def _shard_sum(self, elements: int, tiles: int) -> None:
        """Tensor sharding: popops.reduce sums the t partial input gradients (an outer
        reduction). Stage 1 on each IPU adds its partial where the product left it (`tiles`);
        the final stage's output is mapped linearly over the t IPUs (the first IPU's share),
        each of its pieces of up to 6 per tile taking a region (and a dst offset, an INT
        constant) from each IPU's partials."""
        if self.t == 1:
            return
        mem = self.mem
        mem.map("ReduceOuter", elements, 3, tiles)
        mine = first_ipu(self.s, elements, FLOAT)
        out_tiles = mem.linear_tiles(mine, FLOAT)
        vertices = out_tiles * min(WORKERS, ceil(mine / out_tiles / mem.grain))
        mem.state += vertices * mem._vertex(3, entries=self.t)
        mem.constants += out_tiles * mem._align(ceil(vertices / out_tiles) * self.t * 4)
        mem.steps += out_tiles
        mem._code("ReduceOuterFinal", out_tiles)

    def copies(self, builds: int) -> None:
        """Program steps that move data without vertices (control code on the tiles they
        touch): the batch in from the host (training and evaluation) on the first stage, the
        activations and gradients between stages, the inputs and output gradients copied to
        the shards' IPUs, the transposed convolution's flipped weights."""
        mem, n, t, blocks = self.mem, self.n, self.t, self.s.spec.blocks
        if self.blocks[0] == 0:
            mem.steps += 2 * mem.linear_tiles(self.s.batch * blocks[0].keep)
        if self.last:
            mem.steps += 8
        for k in (self.blocks[0] - 1, self.blocks[-1]) if self.s.m.pipeline > 1 else ():
            if 0 <= k < len(blocks) - 1:
                size = n * (blocks[k].reduce or blocks[k].keep)
                mem.steps += 2 * builds * mem.linear_tiles(size)
        for i in self.blocks:
            b = blocks[i]
            if t > 1 and b.params:
                out = b.reduce if b.kind == "Conv2d" else b.shape[1]
                mem.steps += builds * (mem.linear_tiles(n * b.keep) +
                                       mem.linear_tiles(n * out // t))
            if b.kind == "Conv2d" and i > 0:
                mem.steps += builds * mem.linear_tiles(ceil(b.params / t), 4)

    def loss(self, evaluate: bool) -> None:
        """popnn.calc_loss on the last stage's IPU: softmax cross-entropy (a vertex per sample
        on up to 6 workers' rows), the sums of loss and correct answers and the mean; an
        evaluation adds arg_max."""
        mem, v = self.mem, min(self.n, WORKERS)
        mem.state += v * mem._vertex(5, scalars=1, entries=5)
        for name in ("sum", "correct", "mean"):
            mem.state += mem._vertex(2, entries=1)
            mem.steps += 1
            mem._code(name, 1)
        mem.steps += v
        mem._code("SoftmaxCrossEntropy", v)
        if evaluate:
            self.arg_max()

    def arg_max(self) -> None:
        """The evaluation's predictions: popnn.arg_max, a vertex per worker's rows."""
        mem, v = self.mem, min(self.n, WORKERS)
        mem.state += v * mem._vertex(2, entries=2)
        mem.steps += v
        mem._code("ArgMaxRows", v)

    def update(self, params: list[int]) -> None:
        """The step's end on this IPU for each phase's `params`: fp16 copies of the weights,
        the replicas' all-reduce (a combining map over a chunk), the pipeline's accumulators
        zeroed, SGD (and the velocity) over this replica's weights."""
        m, mem = self.s.m, self.mem
        for p in params:
            if self.s.bytes == 2:
                mem.map("to_half", p, 2, None, 4)
            if m.replicas > 1:
                mem.map("combine", ceil(p / m.replicas), 2, None, 4)
                gathers = 2 if m.rts and m.phased else 1
                mem.steps += (1 + gathers) * (m.replicas - 1) * mem.linear_tiles(p, 4)
            if m.pipeline > 1:
                mem.map("zero", p, 1, None, 4)
            shard = ceil(p / m.replicas) if m.rts else p
            mem.map("sgd", shard, 2, None, 4, remote=not self.s.momentum and self.s.bytes)
            if self.s.momentum:
                mem.map("velocity", shard, 2, None, 4, remote=self.s.bytes)

    def run(self, params: list[int]) -> dict:
        """Every op of the step on this IPU; the bytes by kind but variables."""
        m, blocks = self.s.m, self.blocks
        builds = m.ga if m.pipeline > 1 else 1
        dropout = any(b.kind == "Dropout" for b in self.s.spec.blocks)
        self.copies(builds)
        for _ in range(builds):
            for i in blocks:
                self.forward(i)
            if self.last:
                self.loss(False)
            for i in blocks if m.recompute else []:
                self.forward(i)
            for i in reversed(blocks):
                self.backward(i)
        for _ in range(builds if m.pipeline > 1 or dropout else 0):
            for i in blocks:
                self.forward(i, train=False)
            if self.last:
                self.loss(True)
        if self.last and not (m.pipeline > 1 or dropout):
            self.arg_max()
        self.update(params)
        mem = self.mem
        return {"code": mem.code(), "constants": mem.constants,
                "vertex_state": mem.state, "exchange_buffers": int(mem.buffers.sum())}
