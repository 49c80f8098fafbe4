"""Cost classes: what one layer of a model costs, one class per layer kind, at both scales.

Every class carries the counts the full scale reads (Calculon's elements, not bytes: the
datatype comes later), per sample:

  params, largest   its weights, and its largest weight tensor (what RTS gathers at once)
  flops             forward FLOPs of the matrix engine (backward: twice that)
  keep              activation elements kept for the backward pass when recomputing (its
                    input), live: those alive while its backward runs, reduce: those a
                    tensor-sharded layer all-reduces between its shards (per pass)

and the layers the simulator runs (Layer and its kinds) also say what nn builds for them, op by
op, into a tiles.Ipu (the small scale): forward(ipu, run, x) and backward(ipu, run, dy) take
and give where the tensor flowing through lies (a tiles.Layout; a placed.Placed for the layers
of tokens.py and transformer.py), and weights_of names their weights for the update
(update.py). `run` is the pass (step.Pass): the micro-batch's samples and index, training or
evaluation, and what the mapping asks.

Here: Block (a block given by its counts alone: a transformer layer at full scale, or a stack
of them for an exercise), the CNN's kinds (Conv2d, Linear, ReLU, Dropout, Flatten; pooling in
pooling.py); layers_of(model, sample_shape) reads an nn.Sequential through kinds(), keyed by
nn's layer classes (a new layer kind is a new cost class and a line there).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import math
from dataclasses import dataclass
from math import ceil
from typing import ClassVar

from ..errors import PlanError


class later:  # noqa: N801 - used like a module
    """A module imported on first use: the full scale never needs the libraries (numba), and
    `ipulab` starts without them. later("..popops.expr").cast(...) imports, then calls."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name, __package__), attr)


types = later("..poplar.types")


@dataclass(frozen=True)
class Block:
    """A block by its counts per sample: parameters, its largest weight tensor, forward
    FLOPs, activation elements kept (recompute), live (backward) and all-reduced (tensor
    sharding, per pass). The full scale reads these; it has no cycle model."""

    name: str
    params: int
    largest: int
    flops: float
    keep: int
    live: int
    reduce: int = 0
    simulated: ClassVar[bool] = False     # whether it has a cycle model (runs on the simulator)

    def shard_params(self, t1: int, t2: int = 1) -> int:
        """Its parameters on each IPU of t1 × t2 sharing it (an even share)."""
        return self.params // (t1 * t2)

    def collectives(self, t1: int, t2: int = 1) -> tuple:
        """Elements a sample it all-reduces among its shards per pass, ((forward, backward)
        over t1, (forward, backward) over t2): its `reduce` split evenly."""
        half = self.reduce / 2
        return (half / t2,) * 2, ((half / t1,) * 2 if t2 > 1 else (0.0, 0.0))


@dataclass(frozen=True)
class Layer(Block):
    """A layer the simulator runs: its counts, its index in the model, its weight tensors'
    sizes (state_dict order; each is laid out on its own) and nn's work measure (what
    pipeline=p balances: nn.pipeline.layer_work)."""

    index: int = 0
    tensors: tuple = ()
    work: int = 0
    simulated: ClassVar[bool] = True
    cut_before: ClassVar[bool] = True      # a pipeline stage (or phase) may begin here
    grad_reads_weights: ClassVar[bool] = True   # its input gradient is a product with them

    def key(self, what: str) -> str:
        return f"{self.index}.{type(self).__name__}/{what}"

    def weights_of(self, t: int = 1) -> list:
        """(name, shape) of its weights in state_dict order, as this IPU holds them (its rows
        under tensor sharding t): what the update reads (update.py)."""
        return []

    def master(self, ipu, name: str, shape: tuple):
        """A weight's FLOAT master, mapped linearly where its layer lives (a placed tensor,
        made once a step)."""
        mc = ipu.mc
        return mc.once(("weight", self.index, name),
                       lambda: mc.addr.linear(shape, types.FLOAT, mc.graph.num_tiles))

    def read_last(self, ipu, run, name: str) -> None:
        """Its backward's last read of weight `name`: RTS's gathered copy dies (step.drop)."""
        if run.rts and run.last:
            ipu.free(("weight", self.index, name))

    def forward(self, ipu, run, x):
        """The ops of its forward on one micro-batch; where its output lies."""
        ipu.hold(("act", run.micro_batch, self.index), 0)
        return x

    @staticmethod
    def summed(ipu, dy) -> int:
        """Bytes of the gradient reaching it from the stage's t IPUs, where the shards' sum
        of a sharded layer after it left them (0 without tensor sharding)."""
        return dy.elements * ipu.mc.t * ipu.mc.E if dy is not None and ipu.mc.t > 1 else 0

    def replaced(self, ipu, run, dx):
        """Its input's gradient (laid out as dx) is written, then its output's and its
        output are freed."""
        mb, i = run.micro_batch, self.index
        ipu.hold(("grad", mb, i - 1), dx.elements * ipu.mc.E)
        ipu.free(("grad", mb, i))
        ipu.free(("act", mb, i))
        return dx

    def backward(self, ipu, run, dy):
        """The ops of its backward on one micro-batch (the gradient passes through)."""
        ipu.move(("grad", run.micro_batch, self.index), ("grad", run.micro_batch,
                                                           self.index - 1))
        ipu.free(("act", run.micro_batch, self.index))
        return dy


class View(Layer):
    """Flatten: a view of its input, nothing moves."""


class FoldedReLU(Layer):
    """A ReLU right after a Conv2d or Linear: folded into their map (nn/build.py), no op."""

    cut_before: ClassVar[bool] = False


class Map(Layer):
    """An element-wise layer on its own: a map each way (popops' map codelets: a load per
    input, a store and each operation an element), its gradient laid out like its input."""

    op: ClassVar[str] = ""
    cost: ClassVar[dict] = {}         # pass -> (cycles an element, vector fields)
    train_only: ClassVar[bool] = False

    def forward(self, ipu, run, x):
        if run.train or not self.train_only:
            ipu.map(self.key(self.op), x, *self.cost["forward"], codelet=self.op)
        ipu.hold(("act", run.micro_batch, self.index), x.elements * ipu.mc.E)
        return x

    def backward(self, ipu, run, dy):
        x = run.inputs[self.index]
        ipu.map(self.key(f"{self.op}_grad"), x, *self.cost["backward"],
                codelet=f"{self.op}_grad", crossing=self.summed(ipu, dy))
        return self.replaced(ipu, run, x)


class ReLU(Map):
    """nn.ReLU not after a product: max(x, 0); its gradient selects on its output."""

    op, cost = "relu", {"forward": (3, 2), "backward": (5, 3)}


class Dropout(Map):
    """nn.Dropout: the mask drawn and applied in training (an evaluation passes x through,
    so nn builds it a forward of its own); its gradient masked."""

    op, cost, train_only = "dropout", {"forward": (6, 3), "backward": (5, 3)}, True


@dataclass(frozen=True)
class Product(Layer):
    """A Conv2d or Linear: one product each way and one for the input gradient, the bias
    folded in (a row of ones), a ReLU right after it folded into its map; under tensor
    sharding 1/t of its output channels on each of the stage's t IPUs."""

    relu: bool = False

    def dims(self, run) -> tuple:
        """(outputs on this IPU, fan-in with the bias, positions) of its forward product."""
        raise NotImplementedError

    def forward(self, ipu, run, x):
        mc, mb, i = ipu.mc, run.micro_batch, self.index
        if mc.t > 1:                      # the whole input copied to every shard's IPU
            ipu.link(self.key("input_to_the_shards"), run.n * self.keep * mc.E)
            ipu.control(mc.linear(run.n * self.keep, span=1).tiles)
            ipu.hold(("input", mb, i), run.n * self.keep * mc.E)
        self.constants(ipu, run)
        pre = self.output(mc, run).elements * mc.E
        ipu.transient(max(ipu.partials(*self.forward_product(run)) + pre, 2 * pre))
        out = ipu.product(self.key("forward"), *self.forward_product(run), window=self.window,
                          local=True)
        if self.relu:
            ipu.map(self.key("relu"), out, *ReLU.cost["forward"], codelet="relu")
        ipu.hold(("act", mb, i), pre)
        return out

    def backward(self, ipu, run, dy):
        mc, mb, i = ipu.mc, run.micro_batch, self.index
        oc, fan, p = self.dims(run)
        out = self.output(mc, run)
        if self.relu:
            ipu.map(self.key("relu_grad"), out, *ReLU.cost["backward"], codelet="relu_grad")
        if mc.t > 1:                      # this shard's slice of the output gradient
            ipu.link(self.key("output_grad_to_the_shards"), oc * p * mc.E)
            ipu.control(mc.linear(oc * p, span=1).tiles)
        ipu.hold(("dy", mb, i), out.elements * mc.E)
        ipu.free(("grad", mb, i))
        ipu.transient(ipu.partials(*self.weight_product(run)))
        ipu.product(self.key("weight_grad"), *self.weight_product(run), window=self.window)
        ipu.hold(("wgrad", i, mb), self.gradient(mc, run).elements * mc.E, "gradients")
        self.gradients_made(mc, run)
        if run.pipelined:                 # added into the step's accumulators, one a tensor,
            ipu.free(("wgrad", i, mb))    # mapped over the stage's t IPUs (not by shard)
            for n in self.tensors:
                ipu.map(self.key("accumulate"), mc.staged(n), 4, remote=mc.E,
                        codelet="accumulate", crossing=n * mc.E)
        dx = None
        if i > run.first_weighted:
            dx = self.input_gradient(ipu, run)
        for key in ("dy", "input", "act"):
            ipu.free((key, mb, i))
        return dx

    def input_gradient(self, ipu, run):
        """The input-gradient product (and the shards' sum); held as the gradient flowing
        into the layer before."""
        mc, mb, i = ipu.mc, run.micro_batch, self.index
        m, k, n = self.input_product(run)
        dx = run.n * self.keep
        ipu.transient(ipu.partials(m, k, n) + self.flipped(ipu) + dx * mc.E)
        lay = ipu.product(self.key("input_grad"), m, k, n, window=self.window)
        if mc.t > 1:
            ipu.shard_sum(self.key("input_grad/sum"), dx, lay.tiles)
            lay = mc.staged(dx)
        ipu.hold(("grad", mb, i - 1), mc.staged(dx).elements * mc.E)
        return lay

    window = 1

    def output(self, mc, run):
        """Where its output lies: on the forward product's tiles."""
        oc, fan, p = self.dims(run)
        return mc.placed(mc.plan(*self.forward_product(run)).tiles_used, oc * p)

    def gradient(self, mc, run):
        """Where its weight gradient lies: on the weight-gradient product's tiles."""
        oc, fan, _ = self.dims(run)
        return mc.placed(mc.plan(*self.weight_product(run)).tiles_used, oc * fan)

    def weights_of(self, t: int = 1) -> list:
        """Its weight and bias on this IPU (1/t of its output channels)."""
        shape = self.weight_shape(t)
        return [("weight", shape)] + [("bias", shape[:1])] * self.has_bias

    def gradients_made(self, mc, run) -> None:
        """Where its weight gradients are (the update reads them: update.py): the weight-
        gradient product's result [out, fan] (its last column the bias's), or, in a pipeline,
        the accumulators, mapped linearly."""
        if mc.has(("grad", self.index, "weight")):
            return
        shapes = dict(self.weights_of(run.t))
        if run.pipelined:
            for name, shape in shapes.items():
                mc.once(("grad", self.index, name),
                        lambda shape=shape: mc.addr.linear(shape, mc.dtype, mc.graph.num_tiles))
            return
        dw = mc.addr.product(mc.plan(*self.weight_product(run)), mc.dtype, False)
        fan = dw.shape[1] - self.has_bias
        mc.once(("grad", self.index, "weight"), lambda: dw[:, :fan].reshape(shapes["weight"]))
        if self.has_bias:
            mc.once(("grad", self.index, "bias"), lambda: dw[:, fan])

    def constants(self, ipu, run) -> None:
        """The forward's constants (the row of ones the bias multiplies, padding)."""

    def flipped(self, ipu) -> int:
        return 0

    def with_relu(self) -> "Product":
        """This layer with a ReLU folded into it (the layer after it)."""
        return dataclasses.replace(self, relu=True)


@dataclass(frozen=True)
class Linear(Product):
    """nn.Linear: (n, in + 1) x (in + 1, out / t) forward."""

    features: tuple = ()        # (in, out, bias)

    def dims(self, run):
        fin, o, bias = self.features
        return ceil(o / run.t), fin + bias, run.n

    @property
    def has_bias(self) -> int:
        return self.features[2]

    def weight_shape(self, t: int) -> tuple:
        fin, o, _ = self.features
        return ceil(o / t), fin

    def forward_product(self, run):
        oc, fan, n = self.dims(run)
        return n, fan, oc

    def weight_product(self, run):
        oc, fan, n = self.dims(run)
        return oc, n, fan

    def input_product(self, run):
        oc, fan, n = self.dims(run)
        return n, oc, self.features[0]

    def constants(self, ipu, run):
        ipu.constant(self.features[2] * run.n, ipu.mc.E, ("ones", run.n))


@dataclass(frozen=True)
class Conv2d(Product):
    """nn.Conv2d as poplin lowers it: (out / t, c·kh·kw + 1) x (c·kh·kw + 1, n·ho·wo) over
    a patches view of the padded input; its input gradient a convolution of the output
    gradient with the flipped weights."""

    geometry: tuple = ()        # (c, h, w, o, ho, wo, kh, kw, ph, pw, bias)

    @property
    def window(self) -> int:
        return self.geometry[6] * self.geometry[7]

    def dims(self, run):
        c, h, w, o, ho, wo, kh, kw, ph, pw, bias = self.geometry
        return ceil(o / run.t), c * kh * kw + bias, run.n * ho * wo

    @property
    def has_bias(self) -> int:
        return self.geometry[10]

    def weight_shape(self, t: int) -> tuple:
        c, h, w, o, ho, wo, kh, kw = self.geometry[:8]
        return ceil(o / t), c, kh, kw

    def forward_product(self, run):
        return self.dims(run)

    def weight_product(self, run):
        oc, fan, p = self.dims(run)
        return oc, p, fan

    def input_product(self, run):
        c, h, w, o, ho, wo, kh, kw = self.geometry[:8]
        return c, ceil(o / run.t) * kh * kw, run.n * h * w

    def constants(self, ipu, run):
        c, h, w, o, ho, wo, kh, kw, ph, pw, bias = self.geometry
        n, E = run.n, ipu.mc.E
        ipu.constant(n * c * ph * w, E, ("pad", n, c, ph, w))
        ipu.constant(n * c * (h + 2 * ph) * pw, E, ("pad", n, c, h + 2 * ph, pw))
        ipu.constant(bias * n * ho * wo, E, ("ones", n * ho * wo))

    def input_gradient(self, ipu, run):
        c, h, w, o, ho, wo, kh, kw, ph, pw, bias = self.geometry
        n, E, oc = run.n, ipu.mc.E, ceil(o / run.t)
        kp, kq = kh - 1 - ph, kw - 1 - pw
        ipu.constant(n * oc * kp * wo, E, ("pad", n, oc, kp, wo))
        ipu.constant(n * oc * (ho + 2 * kp) * kq, E, ("pad", n, oc, ho + 2 * kp, kq))
        flipped = ipu.mc.linear(ceil(self.params / run.t), 4)
        ipu.copy(self.key("flipped_weights"), flipped, ipu.mc.E)
        return super().input_gradient(ipu, run)

    def flipped(self, ipu) -> int:
        return self.params // ipu.mc.t * ipu.mc.E


def _conv(layer, i: int, shape: tuple, out: tuple, work: int, **kw) -> Conv2d:
    c, h, w = shape
    o, ho, wo = out
    (kh, kw_), (ph, pw) = layer.kernel_size, layer.padding
    bias = int(bool(layer.bias))
    fan, n_in, n_out = c * kh * kw_ + bias, c * h * w, o * ho * wo
    return Conv2d(f"{i}.Conv2d", o * fan, o * fan, 2.0 * fan * n_out, n_in,
                  n_in + fan * ho * wo + n_out, n_out, i, (o * (fan - bias),) + (o,) * bias,
                  work, geometry=(c, h, w, o, ho, wo, kh, kw_, ph, pw, bias))


def linear_cost(name: str, fin: int, fout: int, tokens: int = 1, bias: bool = True,
                folded: bool = False, index: int = 0, work: int = 0) -> Linear:
    """A Linear of fin -> fout features applied to `tokens` vectors per sample; folded: its
    bias is a column of the product (nn's bias trick), so the matrix engine computes it too."""
    fan = fin + bias
    return Linear(name, fout * fan, fout * fan, 2.0 * (fin + (folded and bias)) * fout * tokens,
                  tokens * fin, tokens * (fin + fout), tokens * fout, index,
                  (fout * fin,) + (fout,) * bias, work, features=(fin, fout, int(bias)))


def _linear(layer, i: int, shape: tuple, out: tuple, work: int, placed: bool = False, **kw):
    if placed:
        from .tokens import TokenLinear
        return TokenLinear.of(layer.in_features, layer.out_features, math.prod(shape[:-1]),
                              bool(layer.bias), False, i, work, f"{i}.Linear")
    return linear_cost(f"{i}.Linear", layer.in_features, layer.out_features,
                       math.prod(shape[:-1]), bool(layer.bias), True, i, work)


def _relu(layer, i: int, shape: tuple, out: tuple, work: int, folded: bool = False,
          placed: bool = False):
    n = math.prod(shape)
    if placed and not folded:
        from .tokens import TokenReLU
        return TokenReLU(f"{i}.ReLU", 0, 0, float(n), n, 2 * n, 0, i, (), work)
    cls = FoldedReLU if folded else ReLU
    return cls(f"{i}.ReLU", 0, 0, float(n), n, 2 * n, 0, i, (), work)


def _dropout(layer, i: int, shape: tuple, out: tuple, work: int, placed: bool = False, **kw):
    n = math.prod(shape)
    if placed:
        from .tokens import TokenDropout
        return TokenDropout(f"{i}.Dropout", 0, 0, float(n), n, 2 * n, 0, i, (), work,
                            p=layer.p)
    return Dropout(f"{i}.Dropout", 0, 0, float(n), n, 2 * n, 0, i, (), work)


def _view(layer, i: int, shape: tuple, out: tuple, work: int, placed: bool = False, **kw):
    if placed:
        from .tokens import TokenView
        return TokenView(f"{i}.{type(layer).__name__}", 0, 0, 0.0, 0, 0, 0, i, (), work)
    return View(f"{i}.{type(layer).__name__}", 0, 0, 0.0, 0, 0, 0, i, (), work)


def kinds() -> dict:
    """nn's layer classes -> the function making their cost (imported on first use: nn
    builds graphs, which the full scale never needs)."""
    from .. import nn
    from .pooling import AvgPool2d, MaxPool2d, pool_of
    from .tokens import embedding_of, gelu_of, layer_norm_of, positional_embedding_of
    from .transformer import attention_of, encoder_layer_of
    return {nn.Conv2d: _conv, nn.Linear: _linear,
            nn.MaxPool2d: functools.partial(pool_of, MaxPool2d),
            nn.AvgPool2d: functools.partial(pool_of, AvgPool2d),
            nn.ReLU: _relu, nn.Dropout: _dropout, nn.Flatten: _view,
            nn.Embedding: embedding_of,
            nn.PositionalEmbedding: positional_embedding_of,
            nn.LayerNorm: layer_norm_of,
            nn.GELU: gelu_of,
            nn.MultiheadAttention: attention_of,
            nn.TransformerEncoderLayer: encoder_layer_of}


PLACED = ("Embedding", "PositionalEmbedding", "LayerNorm", "GELU", "MultiheadAttention",
          "TransformerEncoderLayer")


def layers_of(model, sample_shape) -> list[Layer]:
    """The cost of every layer of an nn.Sequential for samples of sample_shape: its kind's
    class (by nn's layer class), a ReLU folded into the product before it as nn folds it. A
    model of tokens or of transformer layers is priced element by element (its Linear,
    ReLU, Dropout and Flatten too: transformer.py); convolutions and pooling are not among
    them."""
    from ..errors import GraphError
    from ..nn.pipeline import layer_work
    makers = kinds()
    try:
        shapes = model.shapes(sample_shape)
    except GraphError as e:
        raise PlanError(f"spec_from_model: samples of shape {tuple(sample_shape)}: {e}") \
            from None
    placed = any(type(layer).__name__ in PLACED for layer in model)
    work = layer_work(model, sample_shape)
    out, prev = [], None
    for i, layer in enumerate(model):
        make = next((f for cls, f in makers.items() if isinstance(layer, cls)), None)
        if make is None:
            raise PlanError(f"the planner has no cost class for layer {i} "
                            f"({type(layer).__name__}); it knows "
                            f"{', '.join(c.__name__ for c in makers)}")
        if placed and (make is _conv or isinstance(make, functools.partial)):
            raise PlanError(f"layer {i} ({type(layer).__name__}): the planner prices "
                            "convolutions and pooling only in models without transformer "
                            "layers")
        folded = make is _relu and prev is not None and prev.fuses_relu
        cost = make(layer, i, shapes[i], shapes[i + 1], work[i], folded=folded, placed=placed)
        if folded:
            out[-1] = out[-1].with_relu()
        out.append(cost)
        prev = layer
    return out
