"""Layers on tokens, priced element by element: what nn builds for each, op by op, on placed
tensors (ops.py, placed.py), and the counts the full scale reads (layers.Block).

    Embedding            popops.multi_slice of the table; its gradient popops.multi_update_add
                         into a zeroed table
    PositionalEmbedding  an add; its gradient a sum over the batch (popops.reduce)
    LayerNorm            popnn.layer_norm, rows where they live; its gradient
                         layer_norm_gradients and the parameter sums as one product
    GELU                 a map each way (the exact GELU, in float32 on HALF data)
    TokenLinear          nn.Linear on [.., in]: the bias folded into one product, a ReLU after it
                         folded into its map
    TokenDropout, TokenReLU, TokenView   nn.Dropout, a lone nn.ReLU, nn.Flatten among them

The parts (LinearPart, NormPart, DropoutPart) serve a layer of their own and the parts of a
transformer block (transformer.py) alike: a part names its ops and keys in its layer's scope.
A layer holds what its ops make until their last read (Tokens.save, release), tile by tile.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from typing import ClassVar

from .layers import Layer, later, linear_cost

E, ops, placed, reductions, sharding, slices, types = (
    later(m) for m in ("..popops.expr", ".ops", ".placed", ".reductions", ".shards", ".slices",
                       "..poplar.types"))


# --- what a placed layer shares ----------------------------------------------------------------
class Tokens(Layer):
    """A layer priced element by element (placed.py): its weights as the products read them,
    its saved tensors held until their last read, its weight gradients (added into a
    pipeline's accumulators)."""

    placed: ClassVar[bool] = True
    scope: ClassVar[str] = ""

    def op_name(self, what: str) -> str:
        return f"{self.index}.{self.nn_name}/{what}"

    @property
    def nn_name(self) -> str:
        return type(self).__name__

    def weight(self, ipu, name: str, shape: tuple):
        """A weight as the step reads it: the master, or its HALF copy in fp16 (the cast
        maps it alike)."""
        mc = ipu.mc
        w = self.master(ipu, name, shape)
        if mc.dtype is types.FLOAT:
            return w
        return mc.once(("half", self.index, name), lambda: mc.addr.like(w, mc.dtype))

    def save(self, ipu, run, part: str, t) -> None:
        """A tensor an op made that later ops read: held until released."""
        run.saved[self.index, part] = t
        ipu.hold(("act", run.micro_batch, self.index, part), t)

    def note(self, run, part: str, t) -> None:
        """A view its backward reads (its variables are held under their own names)."""
        run.saved[self.index, part] = t

    def saved(self, run, part: str):
        return run.saved[self.index, part]

    def release(self, ipu, run, *parts: str) -> None:
        for part in parts:
            ipu.free(("act", run.micro_batch, self.index, part))

    def forget(self, ipu, run) -> None:
        """Its saved tensors die after its forward (recompute rebuilds them)."""
        for key in [k for k in ipu.held if k[:3] == ("act", run.micro_batch, self.index)
                    and len(k) == 4]:
            ipu.free(key)

    def gradient_made(self, ipu, run, key: str, g) -> None:
        """A weight gradient: held (the update reads it); in a pipeline added into the
        tensor's accumulator (popops.scaled_add_to) and dropped."""
        mc = ipu.mc
        if run.pipelined:
            acc = mc.once(("grad", self.index, key),
                            lambda: mc.addr.linear(g.shape, g.dtype, mc.graph.num_tiles))
            ops.map_op(ipu, f"mb{run.micro_batch}/grad_sum/{self.index}.{key}",
                       E._1 + E._2 * E.const(1.0), [acc, g], in_place=True)
        else:
            mc.once(("grad", self.index, key), lambda: g)
            ipu.hold(("wgrad", self.index, key), g, "gradients")

    def output(self, ipu, run, y):
        ipu.hold(("act", run.micro_batch, self.index), y)
        return y

    def passed(self, ipu, run, dx):
        """Its input's gradient is dx: held for the layer before; its output's gradient and
        its output freed."""
        mb, i = run.micro_batch, self.index
        if dx is not None:
            ipu.hold(("grad", mb, i - 1), dx)
        ipu.free(("grad", mb, i))
        ipu.free(("act", mb, i))
        self.forget(ipu, run)
        return dx

    def need_dx(self, run) -> bool:
        return self.index > run.first_weighted

    def weights_of(self, grid: tuple = (1, 1)) -> list:
        """(name, shape) of its weights in state_dict order (the names its ops read them by),
        shard 0's of a t1 x t2 grid (nn/megatron.py)."""
        return []


def gelu_expr(grad: bool, dtype):
    """popnn's exact GELU expression (its gradient takes the input), in float32 on HALF."""
    from ..popnn.nonlinearity import FORWARD, GRADIENT, NonLinearityType
    e = (GRADIENT if grad else FORWARD)[NonLinearityType.GELU]
    if dtype is not types.FLOAT:
        floats = {n: E.cast(E.placeholder(n), types.FLOAT) for n in e.placeholders()}
        return E.cast(E.substitute(e, floats), dtype)
    return e


def relu_expr():
    return E.maximum(E._1, 0)


def relu_grad_expr():
    return E.select(E._2, 0, E._1 > 0)


def add_expr():
    return E._1 + E._2


# --- the layers ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Embedding(Tokens):
    """nn.Embedding(V, d) on token ids [n, S]: popops.multi_slice of the table; its gradient
    popops.multi_update_add into a zeroed table (no input gradient: ids). Over t shards
    vocab-parallel (shards.py): each looks the ids up in its V/t rows, all-reduced."""

    vocab: int = 0
    dim: int = 0
    positions: int = 1
    grad_reads_weights: ClassVar[bool] = False     # its gradient is dy added into a table

    @classmethod
    def of(cls, vocab: int, dim: int, positions: int = 1, index: int = 0, work: int = 0,
           name: str = "tokens"):
        return cls(name, vocab * dim, vocab * dim, 0.0, positions, positions * dim, 0, index,
                   (vocab * dim,), work, vocab=vocab, dim=dim, positions=positions)

    def weights_of(self, grid: tuple = (1, 1)) -> list:
        return [("weight", (self.vocab // grid[0], self.dim // grid[1]))]

    def forward(self, ipu, run, x):
        ids, split = x.flatten(), run.grid != (1, 1)
        if split:
            ids = sharding.shard_ids(self, ipu, run, ids)
        [(_, shape)] = self.weights_of(run.grid)
        y = slices.multi_slice(ipu, self.op_name("lookup"), self.weight(ipu, "weight", shape),
                               ids).reshape(x.shape + shape[1:])
        y = sharding.over(ipu, self, run, "all_reduce/t1", y, 1)
        return self.output(ipu, run, y)

    def backward(self, ipu, run, dy):
        split = run.grid != (1, 1)
        ids = self.saved(run, "ids") if split else run.inputs[self.index].flatten()
        w = self.weight(ipu, "weight", self.weights_of(run.grid)[0][1])
        dw = ipu.mc.addr.like(w, dy.dtype)
        ipu.hold(("act", run.micro_batch, self.index, "dw"), dw)
        ops.map_op(ipu, self.op_name("weight_grad/zero"), E.const(0), [dw], in_place=True)
        slices.multi_update_add(ipu, self.op_name("weight_grad"), dw,
                             dy.reshape((ids.elements, w.shape[1])), ids)
        self.release(ipu, run, "dw", "ids")
        self.gradient_made(ipu, run, "weight", dw)
        return self.passed(ipu, run, None)


@dataclass(frozen=True)
class PositionalEmbedding(Tokens):
    """nn.PositionalEmbedding(max_len, d): x + weight[:S] (a map); its gradient dy summed
    over the batch (popops.reduce), the rows past S a shared constant of zeros."""

    max_len: int = 0
    dim: int = 0
    positions: int = 1
    grad_reads_weights: ClassVar[bool] = False     # its gradient is dy summed over the batch

    @classmethod
    def of(cls, max_len: int, dim: int, positions: int, index: int = 0, work: int = 0,
           name: str = "positions"):
        n = positions * dim
        return cls(name, max_len * dim, max_len * dim, 0.0, n, 2 * n, 0, index,
                   (max_len * dim,), work, max_len=max_len, dim=dim, positions=positions)

    def weights_of(self, grid: tuple = (1, 1)) -> list:
        return [("weight", (self.max_len, self.dim // grid[1]))]

    def forward(self, ipu, run, x):
        w = sharding.shared(ipu, self.weight(ipu, "weight", self.weights_of(run.grid)[0][1]))
        y = ops.map_op(ipu, self.op_name("add"), add_expr(), [x, w[:x.shape[1]]])
        if not run.recompute:           # its backward does not read its input
            ipu.free(("act", run.micro_batch, self.index - 1))
        return self.output(ipu, run, y)

    def backward(self, ipu, run, dy):
        dw = reductions.reduce_rows(ipu, self.op_name("weight_grad"), dy)
        if self.positions < self.max_len:
            zeros = ipu.shared_constant((self.max_len - self.positions, dy.shape[-1]), dy.dtype)
            dw = placed.concat([dw, zeros], 0)
        self.gradient_made(ipu, run, "weight", dw)
        dx = dy if self.need_dx(run) else None
        if dx is not None:
            ipu.move(("grad", run.micro_batch, self.index), ("grad", run.micro_batch,
                                                             self.index - 1))
        ipu.free(("act", run.micro_batch, self.index))
        return dx


@dataclass(frozen=True)
class NormPart:
    """nn.LayerNorm(d) inside any layer: popnn.layer_norm (rows where they live), its
    statistics kept; backward popnn.layer_norm_gradients and the parameter sums as one
    product."""

    scope: str
    dim: int

    def forward(self, layer, ipu, run, x):
        if run.grid[1] > 1:             # over its columns, the statistics all-reduced
            return sharding.norm(layer, ipu, run, self, x)
        g, b = (sharding.shared(ipu, layer.weight(ipu, self.scope + n, (self.dim,)))
                for n in ("weight", "bias"))
        y, mean, inv = ops.layer_norm(ipu, layer.op_name(self.scope + "layer_norm"), x, g, b)
        layer.save(ipu, run, self.scope + "mean", mean)
        layer.save(ipu, run, self.scope + "inv_std", inv)
        return y

    def backward(self, layer, ipu, run, x, dy, need_dx: bool):
        if run.grid[1] > 1:
            return sharding.norm_grad(layer, ipu, run, self, dy, need_dx)
        g = layer.weight(ipu, self.scope + "weight", (self.dim,))
        stats = (layer.saved(run, self.scope + "mean"), layer.saved(run, self.scope + "inv_std"))
        dx, sums = ops.layer_norm_grad(ipu, layer.op_name(self.scope + "layer_norm_grad"), x, dy,
                                       *stats, g, need_dx)
        layer.read_last(ipu, run, self.scope + "weight")
        sums = sums.reshape((2 * self.dim,))
        layer.gradient_made(ipu, run, self.scope + "weight", sums[:self.dim])
        layer.gradient_made(ipu, run, self.scope + "bias", sums[self.dim:])
        layer.release(ipu, run, self.scope + "mean", self.scope + "inv_std")
        return dx


@dataclass(frozen=True)
class LayerNorm(Tokens):
    """nn.LayerNorm(d) over the last dimension: NormPart on its own."""

    dim: int = 0
    rows: int = 1

    @classmethod
    def of(cls, dim: int, rows: int = 1, index: int = 0, work: int = 0, name: str = "norm"):
        return cls(name, 2 * dim, dim, 0.0, rows * dim, rows * dim, 0, index, (dim, dim),
                   work, dim=dim, rows=rows)

    def weights_of(self, grid: tuple = (1, 1)) -> list:
        return [("weight", (self.dim // grid[1],)), ("bias", (self.dim // grid[1],))]

    def forward(self, ipu, run, x):
        return self.output(ipu, run, NormPart("", self.dim).forward(self, ipu, run, x))

    def backward(self, ipu, run, dy):
        dx = NormPart("", self.dim).backward(self, ipu, run, run.inputs[self.index], dy,
                                             self.need_dx(run))
        return self.passed(ipu, run, dx)


@dataclass(frozen=True)
class GELU(Tokens):
    """nn.GELU(): one map each way (its gradient reads the input)."""

    @classmethod
    def of(cls, elements: int, index: int = 0, work: int = 0, name: str = "gelu"):
        return cls(name, 0, 0, 0.0, elements, 2 * elements, 0, index, (), work)

    def forward(self, ipu, run, x):
        return self.output(ipu, run, ops.map_op(ipu, self.op_name("gelu"),
                                                gelu_expr(False, x.dtype), [x]))

    def backward(self, ipu, run, dy):
        x = run.inputs[self.index]
        dx = ops.map_op(ipu, self.op_name("gelu_grad"), gelu_expr(True, x.dtype), [x, dy])
        return self.passed(ipu, run, dx)


@dataclass(frozen=True)
class LinearPart:
    """nn.Linear(fin, fout) on [.., fin] as nn builds it, inside any layer: [x, 1] @ [w, b]ᵀ
    (the bias folded into one product), a ReLU folded after it; backward the weight-gradient
    product (its last column the bias's) and the input-gradient product."""

    scope: str
    fin: int
    fout: int
    bias: bool = True
    relu: bool = False

    def forward(self, layer, ipu, run, x):
        rows = x.elements // self.fin
        x2 = x.reshape((rows, self.fin))
        w = layer.weight(ipu, self.scope + "weight", (self.fout, self.fin))
        if self.bias:
            b = layer.weight(ipu, self.scope + "bias", (self.fout,))
            x2 = placed.concat([x2, ipu.shared_constant((rows, 1), x.dtype)], 1)
            w = placed.concat([w, b.reshape((self.fout, 1))], 1)
        y = ops.mat_mul(ipu, layer.op_name(self.scope + "matmul"), x2, w.dim_shuffle((1, 0)))
        layer.note(run, self.scope + "x", x2)
        if self.relu:
            layer.save(ipu, run, self.scope + "pre", y)
            y = ops.map_op(ipu, layer.op_name(self.scope + "relu"), relu_expr(), [y])
            layer.release(ipu, run, self.scope + "pre")
        return y.reshape(x.shape[:-1] + (self.fout,))

    def backward(self, layer, ipu, run, dy, y, need_dx: bool):
        """dx (or None); y: its output (a folded ReLU's gradient reads it)."""
        x2 = layer.saved(run, self.scope + "x")
        rows = x2.shape[0]
        dy2 = dy.reshape((rows, self.fout))
        if self.relu:
            dy2 = ops.map_op(ipu, layer.op_name(self.scope + "relu_grad"), relu_grad_expr(),
                             [y.reshape((rows, self.fout)), dy2])
            layer.save(ipu, run, self.scope + "dy", dy2)
        dw = ops.mat_mul(ipu, layer.op_name(self.scope + "weight_grad"), dy2.dim_shuffle((1, 0)),
                         x2)
        layer.gradient_made(ipu, run, self.scope + "weight", dw[:, :self.fin])
        if self.bias:
            layer.gradient_made(ipu, run, self.scope + "bias", dw[:, self.fin])
        dx = None
        if need_dx:
            w = layer.weight(ipu, self.scope + "weight", (self.fout, self.fin))
            dx = ops.mat_mul(ipu, layer.op_name(self.scope + "input_grad"), dy2, w)
            dx = dx.reshape(dy.shape[:-1] + (self.fin,))
            layer.read_last(ipu, run, self.scope + "weight")
        layer.release(ipu, run, self.scope + "dy")
        return dx


@dataclass(frozen=True)
class TokenLinear(Tokens):
    """nn.Linear on samples of [.., in] (a transformer's head, or any Linear of a model of
    tokens): LinearPart; over t shards by columns (each its fout/t), the logits gathered."""

    features: tuple = ()        # (in, out, bias, relu)

    @classmethod
    def of(cls, fin: int, fout: int, tokens: int = 1, bias: bool = True, relu: bool = False,
           index: int = 0, work: int = 0, name: str = "linear"):
        c = linear_cost(name, fin, fout, tokens, bias, True, index, work)
        return cls(c.name, c.params, c.largest, c.flops, c.keep, c.live, c.reduce, index,
                   c.tensors, work, features=(fin, fout, bias, relu))

    @property
    def nn_name(self) -> str:
        return "Linear"

    @property
    def part(self) -> LinearPart:
        fin, fout, bias, relu = self.features
        return LinearPart("", fin, fout, bias, relu)

    def weights_of(self, grid: tuple = (1, 1)) -> list:
        fin, fout, bias, _ = self.features
        t1, t2 = grid
        return [("weight", (fout // t1, fin // t2))] + [("bias", (fout // t1,))] * bias

    def withrelu_expr(self) -> "TokenLinear":
        """This Linear with the ReLU after it folded in (as nn folds it)."""
        return dataclasses.replace(self, features=self.features[:3] + (True,))

    def forward(self, ipu, run, x):
        y = sharding.column(self, ipu, run, self.part, x)
        self.note(run, "out", y)
        return self.output(ipu, run, sharding.gathered(ipu, y, run.grid[0]))

    def backward(self, ipu, run, dy):
        y = self.saved(run, "out")
        dy = sharding.columns_to_shard(self, ipu, dy, run.grid[0])
        return self.passed(ipu, run, sharding.column_grad(self, ipu, run, self.part, dy, y,
                                                          self.need_dx(run)))


@dataclass(frozen=True)
class DropoutPart:
    """nn.Dropout(p) inside a layer: poprand.dropout in training (its mask kept), a map for
    its gradient; p = 0 or an evaluation: nothing."""

    scope: str
    p: float

    def forward(self, layer, ipu, run, x):
        if not run.train or self.p == 0.0:
            return x
        y, mask = ops.dropout(ipu, layer.op_name(self.scope + "dropout"), x)
        layer.save(ipu, run, self.scope + "mask", mask)
        return y

    def backward(self, layer, ipu, run, dy):
        if self.p == 0.0:
            return dy
        mask = layer.saved(run, self.scope + "mask")
        scale = 1.0 / (1.0 - self.p)
        dx = ops.map_op(ipu, layer.op_name(self.scope + "dropout_grad"),
                        E.select(E._1 * scale, 0, E._2), [dy, mask])
        layer.release(ipu, run, self.scope + "mask")
        return dx


@dataclass(frozen=True)
class TokenDropout(Tokens):
    """nn.Dropout in a model of tokens."""

    p: float = 0.0

    @property
    def train_only(self) -> bool:
        """Whether it draws masks (then the evaluation has a forward of its own)."""
        return self.p > 0

    @property
    def nn_name(self) -> str:
        return "Dropout"

    def forward(self, ipu, run, x):
        y = DropoutPart("", self.p).forward(self, ipu, run, x)
        return self.output(ipu, run, y) if y is not x else x

    def backward(self, ipu, run, dy):
        dx = DropoutPart("", self.p).backward(self, ipu, run, dy)
        return self.passed(ipu, run, dx)


@dataclass(frozen=True)
class TokenReLU(Tokens):
    """nn.ReLU in a model of tokens, not after a Linear: a map each way (its gradient reads
    its output)."""

    @property
    def nn_name(self) -> str:
        return "ReLU"

    def forward(self, ipu, run, x):
        y = ops.map_op(ipu, self.op_name("relu"), relu_expr(), [x])
        self.note(run, "out", y)
        return self.output(ipu, run, y)

    def backward(self, ipu, run, dy):
        y = self.saved(run, "out")
        dx = ops.map_op(ipu, self.op_name("relu_grad"), relu_grad_expr(), [y, dy])
        return self.passed(ipu, run, dx)


@dataclass(frozen=True)
class TokenView(Tokens):
    """nn.Flatten in a model of tokens: a view."""

    @property
    def nn_name(self) -> str:
        return "Flatten"

    def forward(self, ipu, run, x):
        return x.reshape((x.shape[0], -1))

    def backward(self, ipu, run, dy):
        ipu.move(("grad", run.micro_batch, self.index), ("grad", run.micro_batch,
                                                         self.index - 1))
        return dy.reshape(run.inputs[self.index].shape)


# --- nn's layers: their cost classes (layers.kinds) --------------------------------------------
def embedding_of(layer, i, shape, out, work, **kw) -> Embedding:
    return Embedding.of(layer.num_embeddings, layer.embedding_dim, math.prod(shape), i, work,
                        f"{i}.Embedding")


def positional_embedding_of(layer, i, shape, out, work, **kw) -> PositionalEmbedding:
    return PositionalEmbedding.of(layer.max_len, layer.dim, shape[0], i, work,
                                  f"{i}.PositionalEmbedding")


def layer_norm_of(layer, i, shape, out, work, **kw) -> LayerNorm:
    return LayerNorm.of(layer.dim, math.prod(shape[:-1]), i, work, f"{i}.LayerNorm")


def gelu_of(layer, i, shape, out, work, **kw) -> GELU:
    return GELU.of(math.prod(shape), i, work, f"{i}.GELU")
