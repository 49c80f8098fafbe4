"""Transformers for the planner: a cost class per layer kind of nn's transformer layers, at both
scales, and the presets built from them.

    plan.transformer("mine", layers=4, hidden=256, heads=4, seq=128, vocab=1000)
    plan.bert_large().parameters            # 335,141,888 (IPU_FACTS: "335.1 M")
    plan.spec_from_model(nn.small_gpt(), (32,))         # the same classes, read from nn

Every class carries the counts the full scale reads (layers.Block) and, for a model nn runs,
what nn builds for it op by op on placed tensors (ops.py, placed.py): Embedding
(popops.multi_slice, its gradient multi_update_add), PositionalEmbedding (an add; its gradient
a sum over the batch), LayerNorm (popnn.layer_norm), GELU (a map each way), TokenLinear (nn.Linear
on [.., in]: the bias folded into one product), MultiheadAttention (a fused qkv Linear, grouped
products of the heads, popnn.softmax with its causal mask, Dropout on the weights, the output
Linear) and EncoderLayer (nn.TransformerEncoderLayer: post- or pre-norm, ReLU folded into
linear1 or GELU, Dropout after the attention, inside and after the feed-forward).

An encoder layer of hidden h, a heads, feed-forward f and sequence s has 4h² + 2hf + 9h + f
parameters (12h² + 13h when f = 4h, IPU_FACTS) and forward FLOPs 2·s·(4h² + 2hf) + 4s²h
(Narayanan et al. 2021, eq. 1 with f = 4h). Its activations per sample are Korthikanti et al.
2022's ("Reducing activation recomputation", fp16 bytes halved to elements): 17·s·h live with
selective recompute, s·h kept at its input, and tensor sharding as Megatron does it
(Shoeybi et al. 2019): the qkv and the first feed-forward Linear by columns (each of t shards
its heads and its slice of f), the output and second Linear by rows, one all-reduce of each
sublayer's output per pass each way: 2·s·h per pass. 2-D (t1 × t2, graphcore/examples
nlp/gpt3_175B/popxl): t1 shards heads and f as Megatron, t2 the hidden dimension, the layer
norms' statistics all-reduced over t2.

The embeddings and the tied head are the extra block of a preset's first stage ("embedding on
IPU 0", IPU_FACTS, Large-model mapping).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import PlanError
from .layers import Block, CrossEntropyLoss, Layer, later, linear_cost

E, ops, placed, types = (later(m) for m in ("..popops.expr", ".ops", ".placed",
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

    def weights_of(self, t: int = 1) -> list:
        """(name, shape) of its weights in state_dict order (the names its ops read them by)."""
        return []


def _gelu(grad: bool, dtype):
    """popnn's exact GELU expression (its gradient takes the input), in float32 on HALF."""
    from ..popnn.nonlinearity import FORWARD, GRADIENT, NonLinearityType
    e = (GRADIENT if grad else FORWARD)[NonLinearityType.GELU]
    if dtype is not types.FLOAT:
        floats = {n: E.cast(E.placeholder(n), types.FLOAT) for n in e.placeholders()}
        return E.cast(E.substitute(e, floats), dtype)
    return e


def _relu():
    return E.maximum(E._1, 0)


def _relu_grad():
    return E.select(E._2, 0, E._1 > 0)


def _add():
    return E._1 + E._2


# --- the layers ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Embedding(Tokens):
    """nn.Embedding(V, d) on token ids [n, S]: popops.multi_slice of the table; its gradient
    popops.multi_update_add into a zeroed table (no input gradient: ids)."""

    vocab: int = 0
    dim: int = 0
    positions: int = 1

    @classmethod
    def of(cls, vocab: int, dim: int, positions: int = 1, index: int = 0, work: int = 0,
           name: str = "tokens"):
        return cls(name, vocab * dim, vocab * dim, 0.0, positions, positions * dim, 0, index,
                   (vocab * dim,), work, vocab=vocab, dim=dim, positions=positions)

    def weights_of(self, t: int = 1) -> list:
        return [("weight", (self.vocab, self.dim))]

    def forward(self, ipu, run, x):
        ids = x.flatten()
        y = ops.multi_slice(ipu, self.op_name("lookup"), self.weight(ipu, "weight",
                                                                  (self.vocab, self.dim)), ids)
        return self.output(ipu, run, y.reshape(x.shape + (self.dim,)))

    def backward(self, ipu, run, dy):
        ids = run.inputs[self.index].flatten()
        w = self.weight(ipu, "weight", (self.vocab, self.dim))
        dw = ipu.mc.addr.like(w, dy.dtype)
        ipu.hold(("act", run.micro_batch, self.index, "dw"), dw)
        ops.map_op(ipu, self.op_name("weight_grad/zero"), E.const(0), [dw], in_place=True)
        ops.multi_update_add(ipu, self.op_name("weight_grad"), dw,
                             dy.reshape((ids.elements, self.dim)), ids)
        self.release(ipu, run, "dw")
        self.gradient_made(ipu, run, "weight", dw)
        return self.passed(ipu, run, None)


@dataclass(frozen=True)
class PositionalEmbedding(Tokens):
    """nn.PositionalEmbedding(max_len, d): x + weight[:S] (a map); its gradient dy summed
    over the batch (popops.reduce), the rows past S a shared constant of zeros."""

    max_len: int = 0
    dim: int = 0
    positions: int = 1

    @classmethod
    def of(cls, max_len: int, dim: int, positions: int, index: int = 0, work: int = 0,
           name: str = "positions"):
        n = positions * dim
        return cls(name, max_len * dim, max_len * dim, 0.0, n, 2 * n, 0, index,
                   (max_len * dim,), work, max_len=max_len, dim=dim, positions=positions)

    def weights_of(self, t: int = 1) -> list:
        return [("weight", (self.max_len, self.dim))]

    def forward(self, ipu, run, x):
        w = self.weight(ipu, "weight", (self.max_len, self.dim))
        y = ops.map_op(ipu, self.op_name("add"), _add(), [x, w[:x.shape[1]]])
        if not run.recompute:           # its backward does not read its input
            ipu.free(("act", run.micro_batch, self.index - 1))
        return self.output(ipu, run, y)

    def backward(self, ipu, run, dy):
        dw = ops.reduce_rows(ipu, self.op_name("weight_grad"), dy)
        if self.positions < self.max_len:
            zeros = ipu.shared_constant((self.max_len - self.positions, self.dim), dy.dtype)
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
        g, b = (layer.weight(ipu, self.scope + n, (self.dim,)) for n in ("weight", "bias"))
        y, mean, inv = ops.layer_norm(ipu, layer.op_name(self.scope + "layer_norm"), x, g, b)
        layer.save(ipu, run, self.scope + "mean", mean)
        layer.save(ipu, run, self.scope + "inv_std", inv)
        return y

    def backward(self, layer, ipu, run, x, dy, need_dx: bool):
        g = layer.weight(ipu, self.scope + "weight", (self.dim,))
        stats = (layer.saved(run, self.scope + "mean"), layer.saved(run, self.scope + "inv_std"))
        dx, sums = ops.layer_norm_grad(ipu, layer.op_name(self.scope + "layer_norm_grad"), x, dy,
                                       *stats, g, need_dx)
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

    def weights_of(self, t: int = 1) -> list:
        return [("weight", (self.dim,)), ("bias", (self.dim,))]

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
                                                _gelu(False, x.dtype), [x]))

    def backward(self, ipu, run, dy):
        x = run.inputs[self.index]
        dx = ops.map_op(ipu, self.op_name("gelu_grad"), _gelu(True, x.dtype), [x, dy])
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
            y = ops.map_op(ipu, layer.op_name(self.scope + "relu"), _relu(), [y])
            layer.release(ipu, run, self.scope + "pre")
        return y.reshape(x.shape[:-1] + (self.fout,))

    def backward(self, layer, ipu, run, dy, y, need_dx: bool):
        """dx (or None); y: its output (a folded ReLU's gradient reads it)."""
        x2 = layer.saved(run, self.scope + "x")
        rows = x2.shape[0]
        dy2 = dy.reshape((rows, self.fout))
        if self.relu:
            dy2 = ops.map_op(ipu, layer.op_name(self.scope + "relu_grad"), _relu_grad(),
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
        layer.release(ipu, run, self.scope + "dy")
        return dx


@dataclass(frozen=True)
class TokenLinear(Tokens):
    """nn.Linear on samples of [.., in] (a transformer's head, or any Linear of a model of
    tokens): LinearPart."""

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

    def weights_of(self, t: int = 1) -> list:
        fin, fout, bias, _ = self.features
        return [("weight", (fout, fin))] + [("bias", (fout,))] * bias

    def with_relu(self) -> "TokenLinear":
        """This Linear with the ReLU after it folded in (as nn folds it)."""
        return dataclasses.replace(self, features=self.features[:3] + (True,))

    def forward(self, ipu, run, x):
        y = self.part.forward(self, ipu, run, x)
        self.note(run, "out", y)
        return self.output(ipu, run, y)

    def backward(self, ipu, run, dy):
        y = self.saved(run, "out")
        return self.passed(ipu, run, self.part.backward(self, ipu, run, dy, y,
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
        y = ops.map_op(ipu, self.op_name("relu"), _relu(), [x])
        self.note(run, "out", y)
        return self.output(ipu, run, y)

    def backward(self, ipu, run, dy):
        y = self.saved(run, "out")
        dx = ops.map_op(ipu, self.op_name("relu_grad"), _relu_grad(), [y, dy])
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


def _heads(t, B: int, S: int, h: int):
    """[B, S, h·hd] -> [B·h, S, hd]: one matrix per (sample, head), a view."""
    hd = t.shape[-1] // h
    return t.reshape((B, S, h, hd)).dim_shuffle((0, 2, 1, 3)).reshape((B * h, S, hd))


def _merge_heads(t, B: int, h: int):
    """[B·h, S, hd] -> [B, S, h·hd] (the inverse view)."""
    _, S, hd = t.shape
    return t.reshape((B, h, S, hd)).dim_shuffle((0, 2, 1, 3)).reshape((B, S, h * hd))


@dataclass(frozen=True)
class AttentionPart:
    """nn.MultiheadAttention(d, h, dropout, causal) as self-attention, inside any layer: the
    fused qkv LinearPart, scores Q·Kᵀ and context A·V as grouped products of the heads'
    views, popnn.softmax (scale 1/√hd, the causal mask), Dropout on the weights, the output
    LinearPart; backward dQ and dK as one grouped product of 2·B·h matrices."""

    scope: str
    dim: int
    heads: int
    causal: bool = False
    dropout: float = 0.0

    @property
    def in_proj(self) -> LinearPart:
        return LinearPart(self.scope + "in_proj/", self.dim, 3 * self.dim)

    @property
    def out_proj(self) -> LinearPart:
        return LinearPart(self.scope + "out_proj/", self.dim, self.dim)

    @property
    def attn_drop(self) -> DropoutPart:
        return DropoutPart(self.scope + "attn_drop/", self.dropout)

    def forward(self, layer, ipu, run, x):
        B, S, d = x.shape
        h, sc = self.heads, self.scope
        qkv = self.in_proj.forward(layer, ipu, run, x)                    # [B, S, 3d]
        layer.save(ipu, run, sc + "qkv", qkv)
        q, k, v = (_heads(qkv[:, :, i * d:(i + 1) * d], B, S, h) for i in range(3))
        scores = ops.mat_mul(ipu, layer.op_name(sc + "scores"), q, k.dim_shuffle((0, 2, 1)))
        layer.save(ipu, run, sc + "scores", scores)
        probs = ops.softmax(ipu, layer.op_name(sc + "softmax"), scores, self.causal)
        layer.release(ipu, run, sc + "scores")
        layer.save(ipu, run, sc + "probs", probs)
        attn = self.attn_drop.forward(layer, ipu, run, probs)
        if attn is not probs:
            layer.save(ipu, run, sc + "attn", attn)
        ctx = ops.mat_mul(ipu, layer.op_name(sc + "context"), attn, v)          # [B·h, S, hd]
        layer.save(ipu, run, sc + "ctx", ctx)
        layer.note(run, sc + "views", (q, k, v, probs, attn))
        return self.out_proj.forward(layer, ipu, run, _merge_heads(ctx, B, h))

    def backward(self, layer, ipu, run, dy, need_dx: bool):
        h, sc = self.heads, self.scope
        q, k, v, probs, attn = layer.saved(run, sc + "views")
        B, S = dy.shape[:2]
        dctx = self.out_proj.backward(layer, ipu, run, dy, None, True)
        layer.release(ipu, run, sc + "ctx")
        layer.save(ipu, run, sc + "dctx", dctx)
        dctx = _heads(dctx, B, S, h)
        dattn = ops.mat_mul(ipu, layer.op_name(sc + "attn_grad"), dctx, v.dim_shuffle((0, 2, 1)))
        layer.save(ipu, run, sc + "dattn", dattn)
        dv = ops.mat_mul(ipu, layer.op_name(sc + "value_grad"), attn.dim_shuffle((0, 2, 1)), dctx)
        layer.save(ipu, run, sc + "dv", dv)
        layer.release(ipu, run, sc + "dctx", sc + "attn")
        dprobs = self.attn_drop.backward(layer, ipu, run, dattn)
        dscores = ops.softmax_grad(ipu, layer.op_name(sc + "softmax_grad"), probs, dprobs,
                                   self.causal)
        layer.release(ipu, run, sc + "dattn", sc + "probs")
        layer.save(ipu, run, sc + "dscores", dscores)
        G = dscores.shape[0]
        dqk = ops.mat_mul(ipu, layer.op_name(sc + "query_key_grad"),
                          placed.concat([dscores, dscores.dim_shuffle((0, 2, 1))]), placed.concat([k, q]))
        layer.release(ipu, run, sc + "dscores", sc + "qkv")
        layer.save(ipu, run, sc + "dqk", dqk)
        dqkv = placed.concat([_merge_heads(t, B, h) for t in (dqk[:G], dqk[G:], dv)], 2)
        dx = self.in_proj.backward(layer, ipu, run, dqkv, None, need_dx)
        layer.release(ipu, run, sc + "dqk", sc + "dv")
        return dx


@dataclass(frozen=True)
class MultiheadAttention(Tokens):
    """nn.MultiheadAttention: AttentionPart on its own."""

    dim: int = 0
    heads: int = 1
    positions: int = 1
    causal: bool = False
    dropout: float = 0.0

    @classmethod
    def of(cls, d: int, heads: int, positions: int, causal: bool = False,
           dropout: float = 0.0, index: int = 0, work: int = 0, name: str = "self_attn"):
        parts = _attention_counts(d, heads, positions)
        return cls(name, *parts, index, (3 * d * d, 3 * d, d * d, d), work, dim=d,
                   heads=heads, positions=positions, causal=causal, dropout=dropout)

    @property
    def part(self) -> AttentionPart:
        return AttentionPart("", self.dim, self.heads, self.causal, self.dropout)

    def weights_of(self, t: int = 1) -> list:
        return _attention_weights("", self.dim)

    @property
    def train_only(self) -> bool:
        return self.dropout > 0

    def forward(self, ipu, run, x):
        return self.output(ipu, run, self.part.forward(self, ipu, run, x))

    def backward(self, ipu, run, dy):
        return self.passed(ipu, run, self.part.backward(self, ipu, run, dy, self.need_dx(run)))


def _attention_weights(scope: str, d: int) -> list:
    return [(f"{scope}in_proj/weight", (3 * d, d)), (f"{scope}in_proj/bias", (3 * d,)),
            (f"{scope}out_proj/weight", (d, d)), (f"{scope}out_proj/bias", (d,))]


def _attention_counts(d: int, heads: int, s: int) -> tuple:
    """(params, largest, flops, keep, live, reduce) of self-attention with its projections."""
    params = 3 * d * (d + 1) + d * (d + 1)
    flops = 2.0 * s * (4 * d * d) + 4.0 * s * s * d
    return params, 3 * d * (d + 1), flops, s * d, 4 * s * d + heads * s * s, s * d


@dataclass(frozen=True)
class EncoderLayer(Tokens):
    """nn.TransformerEncoderLayer(d, h, f, dropout, activation, norm_first, causal):

        post-norm:  x = norm1(x + sa(x));  x = norm2(x + ff(x))
        pre-norm:   x = x + sa(norm1(x));  x = x + ff(norm2(x))
        sa = dropout1(self_attn(.)),  ff = dropout2(linear2(dropout(act(linear1(.)))))

    the residual adds maps (each the layout of the stream it adds to), a ReLU folded into
    linear1, GELU a map each way. Full scale: Korthikanti et al.'s activations (see the
    module)."""

    dim: int = 0
    heads: int = 1
    ffn: int = 0
    positions: int = 1
    dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    causal: bool = False

    @classmethod
    def of(cls, d: int, heads: int, ffn: int, positions: int, dropout: float = 0.0,
           activation: str = "gelu", norm_first: bool = False, causal: bool = False,
           index: int = 0, work: int = 0, name: str = "layer", folded: bool = False):
        s = positions
        parts = [linear_cost("in_proj", d, 3 * d, s, folded=folded),
                 linear_cost("out_proj", d, d, s, folded=folded),
                 linear_cost("linear1", d, ffn, s, folded=folded),
                 linear_cost("linear2", ffn, d, s, folded=folded)]
        params = sum(p.params for p in parts) + 4 * d
        flops = sum(p.flops for p in parts) + 4.0 * s * s * d
        tensors = (3 * d * d, 3 * d, d * d, d, ffn * d, ffn, d * ffn, d, d, d, d, d)
        return cls(name, params, max(p.largest for p in parts), flops, s * d, 17 * s * d,
                   2 * s * d, index, tensors, work, dim=d, heads=heads, ffn=ffn,
                   positions=positions, dropout=dropout, activation=activation,
                   norm_first=norm_first, causal=causal)

    @property
    def nn_name(self) -> str:
        return "TransformerEncoderLayer"

    @property
    def train_only(self) -> bool:
        return self.dropout > 0

    def weights_of(self, t: int = 1) -> list:
        d, f = self.dim, self.ffn
        return _attention_weights("self_attn/", d) + [
            ("linear1/weight", (f, d)), ("linear1/bias", (f,)), ("linear2/weight", (d, f)),
            ("linear2/bias", (d,)), ("norm1/weight", (d,)), ("norm1/bias", (d,)),
            ("norm2/weight", (d,)), ("norm2/bias", (d,))]

    def shard_params(self, t1: int, t2: int = 1) -> int:
        """Megatron (Shoeybi et al. 2019) over t1: the qkv and linear1 by columns (whole
        heads, a slice of f), out_proj and linear2 by rows, their biases and the norms
        replicated; 2-D (graphcore/examples nlp/gpt3_175B/popxl) also over t2, the hidden
        dimension: every matrix 1/(t1·t2), the biases and norms of the hidden dimension
        1/t2."""
        h, f = self.dim, self.ffn
        return ((4 * h * h + 2 * h * f) // (t1 * t2) + (3 * h + f) // t1
                + 6 * h // t2)

    def collectives(self, t1: int, t2: int = 1) -> tuple:
        """Per sample and pass: over t1 (Megatron) the attention's and the feed-forward's
        outputs all-reduced forward, the inputs' gradients backward, s·h/t2 each; over t2
        the products' partial sums of the hidden dimension (forward the qkv and linear1
        outputs, s·(3h + f)/t1; backward the gradients of the context and of the GELU's
        output, s·(h + f)/t1) and the layer norms' two statistics per token."""
        s, h, f = self.positions, self.dim, self.ffn
        over1 = (2.0 * s * h / t2,) * 2
        if t2 == 1:
            return over1, (0.0, 0.0)
        return over1, (s * (3 * h + f) / t1 + 4 * s, s * (h + f) / t1 + 4 * s)

    @property
    def attention(self) -> AttentionPart:
        return AttentionPart("self_attn/", self.dim, self.heads, self.causal, self.dropout)

    @property
    def linear1(self) -> LinearPart:
        return LinearPart("linear1/", self.dim, self.ffn, relu=self.activation == "relu")

    @property
    def linear2(self) -> LinearPart:
        return LinearPart("linear2/", self.ffn, self.dim)

    def _drop(self, which: str) -> DropoutPart:
        return DropoutPart(f"{which}/", self.dropout)

    def _add(self, ipu, run, a, b, what: str):
        return ops.map_op(ipu, self.op_name(what), _add(), [a, b])

    def _sa(self, ipu, run, x):
        y = self.attention.forward(self, ipu, run, x)
        self.save(ipu, run, "sa", y)
        z = self._drop("dropout1").forward(self, ipu, run, y)
        if z is not y:
            self.release(ipu, run, "sa")
            self.save(ipu, run, "sa", z)
        return z

    def _ff(self, ipu, run, x):
        h1 = self.linear1.forward(self, ipu, run, x)
        self.save(ipu, run, "h1", h1)
        if self.activation == "gelu":
            a = ops.map_op(ipu, self.op_name("activation/gelu"), _gelu(False, h1.dtype), [h1])
            self.save(ipu, run, "act", a)
        else:
            a = h1
        a2 = self._drop("dropout").forward(self, ipu, run, a)
        if a2 is not a:
            self.save(ipu, run, "act2", a2)
            self.release(ipu, run, "act")     # GELU's output: read by the dropout only
        f = self.linear2.forward(self, ipu, run, a2)
        self.save(ipu, run, "ff", f)
        z = self._drop("dropout2").forward(self, ipu, run, f)
        if z is not f:
            self.release(ipu, run, "ff")
            self.save(ipu, run, "ff", z)
        return z

    def forward(self, ipu, run, x):
        d = self.dim
        if self.norm_first:
            n1 = NormPart("norm1/", d).forward(self, ipu, run, x)
            self.save(ipu, run, "n1", n1)
            x2 = self._add(ipu, run, x, self._sa(ipu, run, n1), "residual1")
            self.release(ipu, run, "sa")
            self.save(ipu, run, "x2", x2)
            n2 = NormPart("norm2/", d).forward(self, ipu, run, x2)
            self.save(ipu, run, "n2", n2)
            out = self._add(ipu, run, x2, self._ff(ipu, run, n2), "residual2")
            self.release(ipu, run, "ff")
        else:
            r1 = self._add(ipu, run, x, self._sa(ipu, run, x), "residual1")
            self.release(ipu, run, "sa")
            self.save(ipu, run, "r1", r1)
            x2 = NormPart("norm1/", d).forward(self, ipu, run, r1)
            self.save(ipu, run, "x2", x2)
            r2 = self._add(ipu, run, x2, self._ff(ipu, run, x2), "residual2")
            self.release(ipu, run, "ff")
            self.save(ipu, run, "r2", r2)
            out = NormPart("norm2/", d).forward(self, ipu, run, r2)
        self.note(run, "views", (x, x2))
        return self.output(ipu, run, out)

    def _ff_grad(self, ipu, run, dy, x):
        """The feed-forward's gradient (x: its input)."""
        dy = self._drop("dropout2").backward(self, ipu, run, dy)
        a2 = self.linear2.backward(self, ipu, run, dy, None, True)
        self.release(ipu, run, "act2", "act")
        self.save(ipu, run, "da", a2)
        da = self._drop("dropout").backward(self, ipu, run, a2)
        if self.activation == "gelu":
            h1 = self.saved(run, "h1")
            da = ops.map_op(ipu, self.op_name("activation/gelu_grad"), _gelu(True, h1.dtype),
                            [h1, da])
            self.save(ipu, run, "dh", da)
            self.release(ipu, run, "da", "h1")
        dx = self.linear1.backward(self, ipu, run, da, self.saved(run, "h1")
                                   if self.activation == "relu" else None, True)
        self.release(ipu, run, "h1", "da", "dh")
        return dx

    def _sa_grad(self, ipu, run, dy, need_dx: bool):
        dy = self._drop("dropout1").backward(self, ipu, run, dy)
        return self.attention.backward(self, ipu, run, dy, need_dx)

    def backward(self, ipu, run, dy):
        d, need = self.dim, self.need_dx(run)
        x, x2 = self.saved(run, "views")
        if self.norm_first:
            dn2 = self._ff_grad(ipu, run, dy, None)
            self.save(ipu, run, "dn2", dn2)
            dx2n = NormPart("norm2/", d).backward(self, ipu, run, x2, dn2, True)
            self.release(ipu, run, "dn2", "n2", "x2")
            dx2 = self._add(ipu, run, dy, dx2n, "residual2_grad")
            self.save(ipu, run, "dx2", dx2)
            ipu.free(("grad", run.micro_batch, self.index))
            dn1 = self._sa_grad(ipu, run, dx2, True)
            self.save(ipu, run, "dn1", dn1)
            self.release(ipu, run, "x2")
            dx1 = NormPart("norm1/", d).backward(self, ipu, run, x, dn1, need)
            self.release(ipu, run, "dn1", "n1")
            dx = self._add(ipu, run, dx2, dx1, "residual1_grad") if need else None
        else:
            dr2 = NormPart("norm2/", d).backward(self, ipu, run, self.saved(run, "r2"), dy,
                                                 True)
            self.release(ipu, run, "r2")
            self.save(ipu, run, "dr2", dr2)
            ipu.free(("grad", run.micro_batch, self.index))
            dx2 = self._add(ipu, run, dr2, self._ff_grad(ipu, run, dr2, x2), "residual2_grad")
            self.release(ipu, run, "dr2", "x2")
            self.save(ipu, run, "dx2", dx2)
            dr1 = NormPart("norm1/", d).backward(self, ipu, run, self.saved(run, "r1"), dx2,
                                                 True)
            self.release(ipu, run, "r1", "dx2")
            self.save(ipu, run, "dx2", dr1)
            dxa = self._sa_grad(ipu, run, dr1, need)
            dx = self._add(ipu, run, dr1, dxa, "residual1_grad") if need else None
        return self.passed(ipu, run, dx)


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


def attention_of(layer, i, shape, out, work, **kw) -> MultiheadAttention:
    return MultiheadAttention.of(layer.embed_dim, layer.num_heads, shape[0], layer.causal,
                                 layer.dropout, i, work, f"{i}.MultiheadAttention")


def encoder_layer_of(layer, i, shape, out, work, **kw) -> EncoderLayer:
    return EncoderLayer.of(layer.d_model, layer.nhead, layer.dim_feedforward, shape[0],
                           layer.dropout, layer.activation, layer.norm_first, layer.causal, i,
                           work, f"{i}.TransformerEncoderLayer", folded=True)


@dataclass(frozen=True)
class TokenLoss(CrossEntropyLoss):
    """popnn.calc_loss of a score per position: each of the micro-batch's n·S tokens a
    sample (ops.token_loss), the labels [B, S] INT mapped linearly where the last layer
    lives; the evaluation's predictions popnn.arg_max of every token."""

    positions: int = 1

    @classmethod
    def of(cls, classes: int, positions: int = 1) -> "TokenLoss":
        return cls("loss", 0, 0, 0.0, positions * classes, 2 * positions * classes, 0,
                   classes, positions=positions)

    def forward(self, ipu, run, logits, key=None, loss: bool = True):
        """The loss of a micro-batch's logits (its gradient held as key, and returned); an
        evaluation (key None): the predictions too, only they when it shares the training
        step's loss (loss=False)."""
        mc = ipu.mc
        n, S, V = run.n, self.positions, self.classes
        labels = mc.once("labels", lambda: mc.addr.linear((run.batch, S), types.INT,
                                                            mc.graph.num_tiles))
        mb = run.micro_batch
        rows = labels[mb * n:(mb + 1) * n] if run.pipelined else labels
        flat = logits.reshape((n * S, V))
        if not loss:
            ops.arg_max(ipu, "predictions", flat)
            return None
        grad = ops.token_loss(ipu, "eval/loss" if key is None else "loss", flat, rows)
        if key is None:
            ops.arg_max(ipu, "predictions", flat)
            return None
        ipu.hold(key, grad)
        return grad.reshape(logits.shape)


# --- the presets: the same classes at full scale ----------------------------------------------------
@dataclass(frozen=True)
class Composite(Block):
    """A block made of layers (their costs in `parts`): its counts are their sums, its
    activations the block's own (Korthikanti et al.)."""

    parts: tuple = ()


def _sum(name: str, parts: list, keep: int, live: int, reduce: int = 0) -> Composite:
    return Composite(name, sum(p.params for p in parts), max(p.largest for p in parts),
                     sum(p.flops for p in parts), keep, live, reduce, tuple(parts))


def encoder_layer(h: int, heads: int, ffn: int, s: int) -> EncoderLayer:
    """One encoder layer of a preset (GELU, post-norm as BERT; its counts do not depend on
    where the norms are)."""
    return EncoderLayer.of(h, heads, ffn, s)


def embeddings(h: int, s: int, vocab: int, positions: int, type_vocab: int, predicted: int,
               pooler: bool) -> Composite:
    """Token, position and type embeddings with their LayerNorm, the head tied to the token
    table (predicted tokens × vocab logits) and BERT's pooler."""
    parts = [Embedding.of(vocab, h, s), PositionalEmbedding.of(positions, h, s),
             Embedding.of(type_vocab, h, s, name="types"), LayerNorm.of(h, s),
             Block("head", 0, 0, 2.0 * h * vocab * predicted, 0, 0)]
    if pooler:
        parts.append(linear_cost("pooler", h, h))
    return _sum("embeddings", parts, s * h, predicted * vocab + s * h)


def _positive(dims: dict, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"model spec {dims.get('name', '')!r}: {name} must be a positive "
                        f"integer, not {value!r}")
    return value


def transformer(name: str, layers: int, hidden: int, heads: int, seq: int, vocab: int,
                ffn: int | None = None, positions: int | None = None, type_vocab: int = 0,
                pooler: bool = False, predicted: int | None = None, micro_batch_size: int = 1,
                global_batch: int = 1, source: str = ""):
    """A transformer of `layers` identical encoder layers (hidden h, heads a, feed-forward
    f = 4h by default, sequence s) and its embeddings and tied head as the extra block."""
    from .spec import ModelSpec
    dims = dict(name=name, layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab)
    for k, v in list(dims.items())[1:]:
        _positive(dims, k, v)
    ffn = _positive(dims, "ffn", 4 * hidden if ffn is None else ffn)
    positions = _positive(dims, "positions", seq if positions is None else positions)
    predicted = _positive(dims, "predicted", seq if predicted is None else predicted)
    if hidden % heads:
        raise PlanError(f"model spec {name!r}: hidden {hidden} is not divisible by heads "
                        f"{heads} (each head gets hidden / heads features)")
    if seq > positions:
        raise PlanError(f"model spec {name!r}: seq {seq} is longer than its {positions} "
                        "position embeddings")
    if predicted > seq:
        raise PlanError(f"model spec {name!r}: {predicted} predicted tokens in a sequence of "
                        f"{seq}")
    layer = encoder_layer(hidden, heads, ffn, seq)
    extra = embeddings(hidden, seq, vocab, positions, type_vocab, predicted, pooler)
    dims.update(ffn=ffn, positions=positions, type_vocab=type_vocab, predicted=predicted)
    return ModelSpec(name, tuple(layer for _ in range(layers)), extra, "transformer", dims,
                     micro_batch_size, global_batch, source)


def bert_base():
    """BERT-Base (Devlin et al. 2019): 12 layers, h 768, 12 heads, vocab 30,522, 512
    positions, 2 token types, pooler; pretraining at sequence 128 (110 M parameters)."""
    return transformer("bert-base", 12, 768, 12, 128, 30522, positions=512, type_vocab=2,
                       pooler=True, predicted=20, micro_batch_size=8, global_batch=65536,
                       source="Devlin et al. 2019, BERT-Base; Graphcore pretrain configs")


def bert_large():
    """BERT-Large pretraining at sequence 128 as Graphcore's pretrain_large_128.json: 24
    layers, h 1024, 16 heads, 20 masked tokens predicted per sequence, micro-batch 8, global
    batch 65,536 (IPU_FACTS: 335.1 M parameters, 12,596,224 per encoder layer)."""
    return transformer("bert-large", 24, 1024, 16, 128, 30522, positions=512, type_vocab=2,
                       pooler=True, predicted=20, micro_batch_size=8, global_batch=65536,
                       source="Devlin et al. 2019; graphcore/examples "
                       "nlp/bert/popart/configs/pretrain_large_128.json")


def gpt3_2_7b():
    """GPT-3 2.7B (Brown et al. 2020, Table 2.1): 32 layers, h 2560, 32 heads, sequence 2048,
    vocab 50,257; micro-batch 1, global batch 512 (Brown et al.: 1 M tokens)."""
    return transformer("gpt3-2.7b", 32, 2560, 32, 2048, 50257, micro_batch_size=1,
                       global_batch=512,
                       source="Brown et al. 2020, Table 2.1; graphcore/examples nlp/gpt3_2.7B")


def gpt3_175b():
    """GPT-3 175B (Brown et al. 2020): 96 layers, h 12,288, 96 heads, sequence 2048; as
    Graphcore's PopXL config: micro-batch 1, global batch 128 (IPU_FACTS: 174.6 B parameters,
    12h² + 13h per layer)."""
    return transformer("gpt3-175b", 96, 12288, 96, 2048, 50257, micro_batch_size=1,
                       global_batch=128,
                       source="Brown et al. 2020; graphcore/examples "
                       "nlp/gpt3_175B/popxl/config/pretraining.yml")


PRESETS = {"bert-base": bert_base, "bert-large": bert_large, "gpt3-2.7b": gpt3_2_7b,
           "gpt3-175b": gpt3_175b}
