"""Transformer layers with PyTorch's names, arguments, maths and state_dict keys, in minGPT's
order (read bottom-up: the block is built from the parts above it):

    Embedding(num_embeddings, embedding_dim)     token ids [B, S] -> [B, S, d]
    PositionalEmbedding(max_len, dim)            x + weight[:S]: a learned position per row
    LayerNorm(dim, eps=1e-5)                     over the last dimension
    GELU()                                       exact: 0.5 x (1 + erf(x / sqrt 2))
    MultiheadAttention(embed_dim, num_heads)     self-attention, batch_first, optional causal
    TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
                            activation="relu", norm_first=False, causal=False)

A composite layer runs its parts' own forward and backward (layers.Linear, Dropout, ReLU,
...) on builds of their own (LayerBuild.part): each part sees its weights under its own names
(linear1's "weight" is the layer's "linear1.weight"), keeps its own saved tensors, and draws
Dropout masks from a random stream of its own. Every number is computed on tiles by popops,
poplin and popnn; shapes in the comments are B batch, S positions, d model width, h heads,
hd = d / h per head, f feed-forward width.

PyTorch's initialisation, seeded: Embedding N(0, 1) (PositionalEmbedding too), LayerNorm ones
and zeros, in_proj_weight Xavier-uniform with a zero bias, out_proj and the feed-forward
Linears as nn.Linear (out_proj's bias zero).
"""
from __future__ import annotations

import math

import numpy as np

from .. import poplin, popnn, popops, poputil
from ..errors import GraphError
from ..poplar import concat
from ..popops.expr import _1, _2
from .layers import Dropout, Layer, Linear, ReLU, _positive, _uniform


def _probability(p, layer: str) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise GraphError(f"{layer}: dropout must be a probability in [0, 1), not {p!r}")
    return float(p)


def _divides(h: int, d: int, layer: str, heads: str, width: str) -> None:
    if d % h:
        raise GraphError(f"{layer}: {heads}={h} must divide {width}={d} (each of the {h} heads "
                         f"gets {width} / {heads} features)")


def _check_width(layer, shape, dim: int) -> tuple:
    if len(shape) < 1 or shape[-1] != dim:
        raise GraphError(f"{layer!r} takes samples whose last dimension is {dim}, not of shape "
                         f"{tuple(shape)}")
    return tuple(shape)


# --- parts of a composite layer --------------------------------------------------------------
class _Part:
    """A part of a composite layer: the part, its scope (debug names, the prefix of its keys
    in the layer's state_dict unless `keys` names them), and its Dropout stream."""

    def __init__(self, scope: str, layer: Layer, stream: int = 0, keys: dict | None = None):
        self.scope, self.layer, self.stream = scope, layer, stream
        self.keys = keys or {n: f"{scope}.{n}" for n in layer.param_names}

    def params(self, b) -> dict:
        return {n: b.params[k] for n, k in self.keys.items() if k in b.params}

    def forward(self, b, x, relu: bool = False):
        """The part's forward on its own build, kept in b for the backward pass."""
        sub = b.part(self.scope, self.params(b), self.stream)
        sub.relu = relu
        b.save(**{f"part/{self.scope}": sub})
        return self.layer.forward(sub, x)

    def backward(self, b, dy, need_dx: bool = True):
        """The part's backward (its weights as b holds them now: phases swap them); its
        gradients go to b under the layer's keys."""
        sub = b.saved(f"part/{self.scope}")
        sub.seq, sub.need_dx, sub.params = b.seq, need_dx, self.params(b)
        dx = self.layer.backward(sub, dy)
        b.grads.update({self.keys[n]: t for n, t in sub.grads.items()})
        return dx


# --- embeddings ------------------------------------------------------------------------------
class Embedding(Layer):
    """torch.nn.Embedding(num_embeddings, embedding_dim): token ids -> rows of `weight`
    (popops.multi_slice); its gradient adds dL/dy's rows into a zeroed table at the ids
    (popops.multi_update_add). An id outside [0, num_embeddings) is refused by the Trainer
    (DataError); on the tiles it would read a row of zeros."""

    param_names = ("weight",)
    takes_tokens = True

    def __init__(self, num_embeddings: int, embedding_dim: int):
        self.num_embeddings = _positive(num_embeddings, "num_embeddings", "Embedding")
        self.embedding_dim = _positive(embedding_dim, "embedding_dim", "Embedding")

    def param_shapes(self) -> dict:
        return {"weight": (self.num_embeddings, self.embedding_dim)}

    def init_params(self, rng) -> dict:
        return {"weight": rng.standard_normal(self.param_shapes()["weight"]).astype(np.float32)}

    def output_shape(self, shape):
        if len(shape) < 1:
            raise GraphError(f"{self!r} takes token ids of shape (positions,), not {shape}")
        return (*shape, self.embedding_dim)

    def forward(self, b, x):
        ids = x.flatten()                                                  # [B*S] INT
        y = popops.multi_slice(b.graph, b.param("weight"), ids, b.seq, b.name("lookup"))
        b.save(ids=ids)
        return y.reshape([*x.shape, self.embedding_dim])                   # [B, S, d]

    def backward(self, b, dy):
        g, w, ids = b.graph, b.param("weight"), b.saved("ids")
        dw = poputil.new_like(g, dy.dtype, w.shape, w, b.name("weight_grad"))
        popops.zero(g, dw, b.seq, b.name("weight_grad/zero"))
        popops.multi_update_add(g, dw, dy.reshape([ids.num_elements(), self.embedding_dim]),
                                ids, 1.0, b.seq, b.name("weight_grad"))
        b.grad("weight", dw)
        return None                     # token ids have no gradient

    def __repr__(self) -> str:
        return f"Embedding({self.num_embeddings}, {self.embedding_dim})"


class PositionalEmbedding(Layer):
    """A learned position embedding: y = x + weight[:S] for x [B, S, dim] (weight [max_len,
    dim], key "weight"); its gradient is dL/dy summed over the batch (rows S.. get 0)."""

    param_names = ("weight",)

    def __init__(self, max_len: int, dim: int):
        self.max_len = _positive(max_len, "max_len", "PositionalEmbedding")
        self.dim = _positive(dim, "dim", "PositionalEmbedding")

    def param_shapes(self) -> dict:
        return {"weight": (self.max_len, self.dim)}

    def init_params(self, rng) -> dict:
        return {"weight": rng.standard_normal((self.max_len, self.dim)).astype(np.float32)}

    def output_shape(self, shape):
        if len(shape) != 2 or shape[1] != self.dim or not 1 <= shape[0] <= self.max_len:
            raise GraphError(f"{self!r} takes samples of shape (positions <= {self.max_len}, "
                             f"{self.dim}), not {tuple(shape)}")
        return tuple(shape)

    def forward(self, b, x):
        S = x.shape[1]
        return popops.map(b.graph, _1 + _2, [x, b.param("weight").slice(0, S)], b.seq,
                          b.name("add"))                                   # [B, S, d]

    def backward(self, b, dy):
        B, S, d = dy.shape
        dw = popops.reduce(b.graph, dy, [0], "add", b.seq, b.name("weight_grad"))   # [S, d]
        if S < self.max_len:
            rest = poputil.shared_constant(b.graph, dy.dtype, [self.max_len - S, d], 0.0,
                                           b.name("zeros"))
            dw = concat([dw, rest], 0)
        b.grad("weight", dw)
        return dy

    def __repr__(self) -> str:
        return f"PositionalEmbedding({self.max_len}, {self.dim})"


# --- normalisation and activation --------------------------------------------------------------
class LayerNorm(Layer):
    """torch.nn.LayerNorm(dim, eps=1e-5): over the last dimension, with weight (gamma, ones)
    and bias (beta, zeros) of shape (dim,)."""

    param_names = ("weight", "bias")

    def __init__(self, dim: int, eps: float = 1e-5):
        self.dim = _positive(dim, "dim", "LayerNorm")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise GraphError(f"LayerNorm: eps must be a positive number, not {eps!r}")
        self.eps = float(eps)

    def param_shapes(self) -> dict:
        return {"weight": (self.dim,), "bias": (self.dim,)}

    def init_params(self, rng) -> dict:
        return {"weight": np.ones(self.dim, np.float32), "bias": np.zeros(self.dim, np.float32)}

    def output_shape(self, shape):
        return _check_width(self, shape, self.dim)

    def forward(self, b, x):
        y, mean, inv_std = popnn.layer_norm(b.graph, x, b.param("weight"), b.param("bias"),
                                            b.seq, self.eps, b.name("layer_norm"))
        b.save(x=x, mean=mean, inv_std=inv_std)
        return y

    def backward(self, b, dy):
        x, mean, inv_std = b.saved("x"), b.saved("mean"), b.saved("inv_std")
        if b.need_dx:
            dx, dw, db = popnn.layer_norm_gradients(b.graph, x, dy, mean, inv_std,
                                                    b.param("weight"), b.seq,
                                                    b.name("layer_norm_grad"))
        else:
            dx = None
            dw, db = popnn.layer_norm_param_gradients(b.graph, x, dy, mean, inv_std, b.seq,
                                                      b.name("layer_norm_grad"))
        b.grad("weight", dw)
        b.grad("bias", db)
        return dx

    def __repr__(self) -> str:
        return f"LayerNorm(({self.dim},), eps={self.eps})"


class GELU(Layer):
    """torch.nn.GELU(): exact, 0.5 x (1 + erf(x / sqrt(2))), one popops map each way."""

    def forward(self, b, x):
        b.save(x=x)
        return popnn.non_linearity(b.graph, "gelu", x, b.seq, b.name("gelu"))

    def backward(self, b, dy):
        return popnn.non_linearity_input_gradient(b.graph, "gelu", b.saved("x"), dy, b.seq,
                                                  b.name("gelu_grad"))


# --- attention ---------------------------------------------------------------------------------
def _heads(t, B: int, S: int, h: int):
    """[B, S, h*hd] -> [B*h, S, hd]: a view, one matrix per (sample, head)."""
    hd = t.shape[-1] // h
    return t.reshape([B, S, h, hd]).dim_shuffle([0, 2, 1, 3]).reshape([B * h, S, hd])


def _merge_heads(t, B: int, h: int):
    """[B*h, S, hd] -> [B, S, h*hd] (the inverse view of _heads)."""
    _, S, hd = t.shape
    return t.reshape([B, h, S, hd]).dim_shuffle([0, 2, 1, 3]).reshape([B, S, h * hd])


class MultiheadAttention(Layer):
    """torch.nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, batch_first=True) as
    self-attention (query = key = value = x), with an optional causal mask (PyTorch's
    is_causal): keys in_proj_weight [3d, d], in_proj_bias [3d], out_proj.weight [d, d],
    out_proj.bias [d]. Dropout (p = dropout) acts on the attention weights in training."""

    param_names = ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0,
                 causal: bool = False):
        what = "MultiheadAttention"
        self.embed_dim = _positive(embed_dim, "embed_dim", what)
        self.num_heads = _positive(num_heads, "num_heads", what)
        _divides(self.num_heads, self.embed_dim, what, "num_heads", "embed_dim")
        self.dropout, self.causal = _probability(dropout, what), bool(causal)
        d = self.embed_dim
        self.in_proj = _Part("in_proj", Linear(d, 3 * d),
                             keys={"weight": "in_proj_weight", "bias": "in_proj_bias"})
        self.out_proj = _Part("out_proj", Linear(d, d))
        self.attn_drop = _Part("attn_drop", Dropout(self.dropout), stream=1)

    def param_shapes(self) -> dict:
        d = self.embed_dim
        return {"in_proj_weight": (3 * d, d), "in_proj_bias": (3 * d,),
                "out_proj.weight": (d, d), "out_proj.bias": (d,)}

    def init_params(self, rng) -> dict:
        d = self.embed_dim
        bound = math.sqrt(6.0 / (d + 3 * d))            # xavier_uniform_ of a [3d, d] matrix
        return {"in_proj_weight": rng.uniform(-bound, bound, (3 * d, d)).astype(np.float32),
                "in_proj_bias": np.zeros(3 * d, np.float32),
                "out_proj.weight": _uniform(rng, (d, d), d),
                "out_proj.bias": np.zeros(d, np.float32)}

    def output_shape(self, shape):
        if len(shape) != 2 or shape[1] != self.embed_dim:
            raise GraphError(f"{self!r} takes samples of shape (positions, {self.embed_dim}), "
                             f"not {tuple(shape)}")
        return tuple(shape)

    @property
    def scale(self) -> float:
        """1 / sqrt(hd): the scores' scale, applied inside the softmax."""
        return 1.0 / math.sqrt(self.embed_dim // self.num_heads)

    @property
    def uses_dropout(self) -> bool:
        return self.dropout > 0

    def forward(self, b, x):
        qkv = self.in_proj.forward(b, x)                                   # [B, S, 3d]
        attn = self.attn_drop.forward(b, self.attend(b, qkv, self.num_heads))
        return self.out_proj.forward(b, self.context(b, attn, self.num_heads))   # [B, S, d]

    def backward(self, b, dy):
        h = self.num_heads
        dattn = self.context_grad(b, self.out_proj.backward(b, dy), h)
        dqkv = self.attend_grad(b, self.attn_drop.backward(b, dattn), h)
        return self.in_proj.backward(b, dqkv, b.need_dx)

    # the attention of h heads between the projections (tensor parallelism runs it on each
    # shard's heads, nn/megatron.py)
    def attend(self, b, qkv, h: int):
        """The attention weights [B*h, S, S] of the h heads of qkv [B, S, 3 * h * hd] (their
        queries, then keys, then values): softmax(Q.K^T / sqrt(hd)), causal if asked."""
        B, S, w = qkv.shape
        q, k, v = (_heads(qkv[:, :, i * w // 3:(i + 1) * w // 3], B, S, h) for i in range(3))
        scores = poplin.mat_mul_grouped(b.graph, q, k.dim_shuffle([0, 2, 1]), b.seq,
                                        b.name("scores"))                  # [B*h, S, S]
        probs = popnn.softmax(b.graph, scores, b.seq, self.scale, self.causal,
                              b.name("softmax"))
        b.save(q=q, k=k, v=v, probs=probs)
        return probs

    def context(self, b, attn, h: int):
        """The heads' outputs attn.V, merged: [B, S, h * hd]."""
        ctx = poplin.mat_mul_grouped(b.graph, attn, b.saved("v"), b.seq,
                                     b.name("context"))                    # [B*h, S, hd]
        b.save(attn=attn)
        return _merge_heads(ctx, attn.shape[0] // h, h)

    def context_grad(self, b, dctx, h: int):
        """dL/d(attention weights) from dL/d(merged outputs); dL/dV kept for attend_grad."""
        g, seq, v, attn = b.graph, b.seq, b.saved("v"), b.saved("attn")
        dctx = _heads(dctx, dctx.shape[0], dctx.shape[1], h)                # [B*h, S, hd]
        dattn = poplin.mat_mul_grouped(g, dctx, v.dim_shuffle([0, 2, 1]), seq,
                                       b.name("attn_grad"))                # [B*h, S, S]
        b.save(dv=poplin.mat_mul_grouped(g, attn.dim_shuffle([0, 2, 1]), dctx, seq,
                                         b.name("value_grad")))            # [B*h, S, hd]
        return dattn

    def attend_grad(self, b, dprobs, h: int):
        """dL/d(qkv) [B, S, 3 * h * hd] from dL/d(attention weights)."""
        g, seq = b.graph, b.seq
        q, k, probs, dv = (b.saved(n) for n in ("q", "k", "probs", "dv"))
        G = dprobs.shape[0]
        B = G // h
        dscores = popnn.softmax_input_gradient(g, probs, dprobs, seq, self.scale, self.causal,
                                               b.name("softmax_grad"))     # [B*h, S, S]
        # dq = dscores @ k and dk = dscores^T @ q: one grouped product of 2Bh groups
        dqk = poplin.mat_mul_grouped(g, concat([dscores, dscores.dim_shuffle([0, 2, 1])]),
                                     concat([k, q]), seq, b.name("query_key_grad"))
        return concat([_merge_heads(t, B, h) for t in (dqk.slice(0, G), dqk.slice(G, 2 * G),
                                                       dv)], 2)            # [B, S, 3 * h * hd]

    def __repr__(self) -> str:
        extra = f", dropout={self.dropout}" if self.dropout else ""
        extra += ", causal=True" if self.causal else ""
        return f"MultiheadAttention({self.embed_dim}, {self.num_heads}{extra})"


# --- the block ---------------------------------------------------------------------------------
class TransformerEncoderLayer(Layer):
    """torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
    activation="relu", norm_first=False, batch_first=True) on samples (S, d_model), with
    causal=True for PyTorch's causal mask (a GPT block).

        post-norm (default):  x = norm1(x + sa(x));  x = norm2(x + ff(x))
        pre-norm:             x = x + sa(norm1(x));  x = x + ff(norm2(x))
        sa(x) = dropout1(self_attn(x)),  ff(x) = dropout2(linear2(dropout(act(linear1(x)))))

    A ReLU is folded into linear1's product (as Conv2d and Linear fold one); GELU is exact.
    Keys: self_attn.{in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias},
    linear1.*, linear2.*, norm1.*, norm2.* (weight and bias each)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str = "relu", norm_first: bool = False,
                 causal: bool = False):
        what = "TransformerEncoderLayer"
        d = self.d_model = _positive(d_model, "d_model", what)
        self.nhead = _positive(nhead, "nhead", what)
        _divides(self.nhead, d, what, "nhead", "d_model")
        f = self.dim_feedforward = _positive(dim_feedforward, "dim_feedforward", what)
        self.dropout = _probability(dropout, what)
        if activation not in ("relu", "gelu"):
            raise GraphError(f"{what}: activation must be 'relu' or 'gelu', not {activation!r}")
        self.activation, self.norm_first, self.causal = activation, bool(norm_first), \
            bool(causal)
        attention = MultiheadAttention(d, nhead, dropout, causal)
        self.self_attn = _Part("self_attn", attention)
        self.linear1, self.linear2 = _Part("linear1", Linear(d, f)), _Part("linear2",
                                                                           Linear(f, d))
        self.norm1, self.norm2 = _Part("norm1", LayerNorm(d)), _Part("norm2", LayerNorm(d))
        self.act = _Part("activation", GELU() if activation == "gelu" else ReLU())
        self.drop, self.drop1, self.drop2 = (_Part(n, Dropout(self.dropout), stream=s)
                                             for n, s in (("dropout", 2), ("dropout1", 3),
                                                          ("dropout2", 4)))
        self.param_names = tuple(k for part in self._weighted for k in part.keys.values())

    @property
    def _weighted(self):
        """The parts with weights, in PyTorch's state_dict order."""
        return (self.self_attn, self.linear1, self.linear2, self.norm1, self.norm2)

    def param_shapes(self) -> dict:
        return {part.keys[n]: shape for part in self._weighted
                for n, shape in part.layer.param_shapes().items()}

    def init_params(self, rng) -> dict:
        return {part.keys[n]: value for part in self._weighted
                for n, value in part.layer.init_params(rng).items()}

    def output_shape(self, shape):
        if len(shape) != 2 or shape[1] != self.d_model:
            raise GraphError(f"{self!r} takes samples of shape (positions, {self.d_model}), "
                             f"not {tuple(shape)}")
        return tuple(shape)

    @property
    def uses_dropout(self) -> bool:
        return self.dropout > 0

    def _sa(self, b, x):
        return self.drop1.forward(b, self.self_attn.forward(b, x))

    def _ff(self, b, x):
        relu = self.activation == "relu"       # folded into linear1's product
        y = self.linear1.forward(b, x, relu=relu)                          # [B, S, f]
        if not relu:
            y = self.act.forward(b, y)
        return self.drop2.forward(b, self.linear2.forward(b, self.drop.forward(b, y)))

    def _sa_grad(self, b, dy, need_dx: bool = True):
        return self.self_attn.backward(b, self.drop1.backward(b, dy), need_dx)

    def _ff_grad(self, b, dy):
        dy = self.linear2.backward(b, self.drop2.backward(b, dy))
        dy = self.drop.backward(b, dy)
        if self.activation != "relu":
            dy = self.act.backward(b, dy)
        return self.linear1.backward(b, dy)

    def _add(self, b, x, y, what: str):
        return popops.map(b.graph, _1 + _2, [x, y], b.seq, b.name(what))

    def forward(self, b, x):                                               # [B, S, d]
        if self.norm_first:
            x = self._add(b, x, self._sa(b, self.norm1.forward(b, x)), "residual1")
            return self._add(b, x, self._ff(b, self.norm2.forward(b, x)), "residual2")
        x = self.norm1.forward(b, self._add(b, x, self._sa(b, x), "residual1"))
        return self.norm2.forward(b, self._add(b, x, self._ff(b, x), "residual2"))

    def backward(self, b, dy):
        if self.norm_first:
            dy = self._add(b, dy, self.norm2.backward(b, self._ff_grad(b, dy)), "residual2_grad")
            dx = self.norm1.backward(b, self._sa_grad(b, dy), b.need_dx)
            return self._add(b, dy, dx, "residual1_grad") if b.need_dx else None
        dy = self.norm2.backward(b, dy)
        dy = self._add(b, dy, self._ff_grad(b, dy), "residual2_grad")
        dy = self.norm1.backward(b, dy)
        dx = self._sa_grad(b, dy, b.need_dx)
        return self._add(b, dy, dx, "residual1_grad") if b.need_dx else None

    def __repr__(self) -> str:
        extra = "" if self.activation == "relu" else f", activation={self.activation!r}"
        extra += ", norm_first=True" if self.norm_first else ""
        extra += ", causal=True" if self.causal else ""
        return (f"TransformerEncoderLayer({self.d_model}, {self.nhead}, dim_feedforward="
                f"{self.dim_feedforward}, dropout={self.dropout}{extra})")


__all__ = ["Embedding", "PositionalEmbedding", "LayerNorm", "GELU", "MultiheadAttention",
           "TransformerEncoderLayer"]
