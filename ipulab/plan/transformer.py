"""Transformer layers for the planner: self-attention and nn.TransformerEncoderLayer, at both
scales.

    plan.spec_from_model(nn.small_gpt(), (32,))     # EncoderLayer x 2 among tokens.py's layers
    plan.bert_large().blocks[0]                     # the same class at full scale (presets.py)

MultiheadAttention (AttentionPart: a fused qkv Linear, grouped products of the heads' views,
popnn.softmax with its scale and causal mask, Dropout on the weights, the output Linear) and
EncoderLayer (post- or pre-norm, a ReLU folded into linear1 or GELU, Dropout after the
attention, inside and after the feed-forward, the residual adds as maps), priced element by
element as nn builds them (tokens.py's parts, ops.py).

An encoder layer of hidden h, a heads, feed-forward f and sequence s has 4h² + 2hf + 9h + f
parameters (12h² + 13h when f = 4h) and forward FLOPs 2·s·(4h² + 2hf) + 4s²h
(Narayanan et al. 2021, eq. 1 with f = 4h). Its activations per sample are Korthikanti et al.
2022's ("Reducing activation recomputation", fp16 bytes halved to elements): 17·s·h live with
selective recompute, s·h kept at its input, and tensor sharding as Megatron does it
(Shoeybi et al. 2019): the qkv and the first feed-forward Linear by columns (each of t shards
its heads and its slice of f), the output and second Linear by rows, one all-reduce of each
sublayer's output per pass each way: 2·s·h per pass. 2-D (t1 × t2, graphcore/examples
nlp/gpt3_175B/popxl): t1 shards heads and f as Megatron, t2 the hidden dimension, the products'
partial sums and the layer norms' statistics all-reduced over t2. At the small scale the
shards are priced as nn/megatron.py builds them (shards.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from .layers import later, linear_cost
from .tokens import DropoutPart, LinearPart, NormPart, Tokens, add_expr, gelu_expr

ops, placed, sharding = later(".ops"), later(".placed"), later(".shards")


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
    t1: int = 1                 # Megatron's shards: this one's heads (shards.py)

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
        B, S, _ = x.shape
        h, sc, d = self.heads // self.t1, self.scope, self.dim // self.t1
        qkv = sharding.column(layer, ipu, run, self.in_proj, x)          # [B, S, 3d]
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
        return sharding.row(layer, ipu, run, self.out_proj, _merge_heads(ctx, B, h))

    def backward(self, layer, ipu, run, dy, need_dx: bool):
        h, sc = self.heads // self.t1, self.scope
        q, k, v, probs, attn = layer.saved(run, sc + "views")
        B, S = dy.shape[:2]
        dctx = sharding.row_grad(layer, ipu, run, self.out_proj, dy)
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
        dx = sharding.column_grad(layer, ipu, run, self.in_proj, dqkv, None, need_dx)
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

    def part(self, grid: tuple) -> AttentionPart:
        return AttentionPart("", self.dim, self.heads, self.causal, self.dropout, grid[0])

    def weights_of(self, grid: tuple = (1, 1)) -> list:
        return _attention_weights("", self.dim, grid)

    @property
    def train_only(self) -> bool:
        return self.dropout > 0

    def forward(self, ipu, run, x):
        return self.output(ipu, run, self.part(run.grid).forward(self, ipu, run, x))

    def backward(self, ipu, run, dy):
        return self.passed(ipu, run, self.part(run.grid).backward(self, ipu, run, dy,
                                                               self.need_dx(run)))


def _attention_weights(scope: str, d: int, grid: tuple = (1, 1)) -> list:
    """Shard 0's of t1 x t2 (nn/megatron.py: its heads' q, k and v rows, out_proj's columns
    of them; t2 splits the hidden dimension; the biases on the shards that own them)."""
    t1, t2 = grid
    return [(f"{scope}in_proj/weight", (3 * d // t1, d // t2)),
            (f"{scope}in_proj/bias", (3 * d // t1,)),
            (f"{scope}out_proj/weight", (d // t2, d // t1)), (f"{scope}out_proj/bias", (d // t2,))]


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

    def weights_of(self, grid: tuple = (1, 1)) -> list:
        d, f = self.dim // grid[1], self.ffn // grid[0]
        return _attention_weights("self_attn/", self.dim, grid) + [
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

    def attention(self, grid: tuple) -> AttentionPart:
        return AttentionPart("self_attn/", self.dim, self.heads, self.causal, self.dropout,
                             grid[0])

    @property
    def linear1(self) -> LinearPart:
        return LinearPart("linear1/", self.dim, self.ffn, relu=self.activation == "relu")

    @property
    def linear2(self) -> LinearPart:
        return LinearPart("linear2/", self.ffn, self.dim)

    def _drop(self, which: str) -> DropoutPart:
        return DropoutPart(f"{which}/", self.dropout)

    def _add(self, ipu, run, a, b, what: str):
        return ops.map_op(ipu, self.op_name(what), add_expr(), [a, b])

    def _dropped(self, ipu, run, y, which: str, part: str):
        """A sublayer's output y through its Dropout, held as `part` until the residual add
        reads it (y itself dies at the Dropout)."""
        self.save(ipu, run, part, y)
        z = self._drop(which).forward(self, ipu, run, y)
        if z is not y:
            self.release(ipu, run, part)
            self.save(ipu, run, part, z)
        return z

    def _sa(self, ipu, run, x):
        return self._dropped(ipu, run, self.attention(run.grid).forward(self, ipu, run, x),
                             "dropout1",
                             "sa")

    def _ff(self, ipu, run, x):
        h1 = sharding.column(self, ipu, run, self.linear1, x)
        self.save(ipu, run, "h1", h1)
        if self.activation == "gelu":
            a = ops.map_op(ipu, self.op_name("activation/gelu"), gelu_expr(False, h1.dtype), [h1])
            self.save(ipu, run, "act", a)
        else:
            a = h1
        a2 = self._drop("dropout").forward(self, ipu, run, a)
        if a2 is not a:
            self.save(ipu, run, "act2", a2)
            self.release(ipu, run, "act")     # GELU's output: read by the dropout only
        return self._dropped(ipu, run, sharding.row(self, ipu, run, self.linear2, a2),
                             "dropout2", "ff")

    def _residual(self, ipu, run, x, y, what: str, part: str, keep: str | None):
        """x + y (the sublayer's output, `part`, read only here), held as `keep`."""
        z = self._add(ipu, run, x, y, what)
        self.release(ipu, run, part)
        if keep:
            self.save(ipu, run, keep, z)
        return z

    def _normed(self, ipu, run, which: str, x, keep: str):
        y = NormPart(f"{which}/", self.dim).forward(self, ipu, run, x)
        self.save(ipu, run, keep, y)
        return y

    def forward(self, ipu, run, x):
        if self.norm_first:
            n1 = self._normed(ipu, run, "norm1", x, "n1")
            x2 = self._residual(ipu, run, x, self._sa(ipu, run, n1), "residual1", "sa", "x2")
            n2 = self._normed(ipu, run, "norm2", x2, "n2")
            out = self._residual(ipu, run, x2, self._ff(ipu, run, n2), "residual2", "ff", None)
        else:
            r1 = self._residual(ipu, run, x, self._sa(ipu, run, x), "residual1", "sa", "r1")
            x2 = self._normed(ipu, run, "norm1", r1, "x2")
            r2 = self._residual(ipu, run, x2, self._ff(ipu, run, x2), "residual2", "ff", "r2")
            out = NormPart("norm2/", self.dim).forward(self, ipu, run, r2)
        self.note(run, "views", (x, x2))
        return self.output(ipu, run, out)

    def _ff_grad(self, ipu, run, dy, x):
        """The feed-forward's gradient (x: its input)."""
        dy = self._drop("dropout2").backward(self, ipu, run, dy)
        a2 = sharding.row_grad(self, ipu, run, self.linear2, dy)
        self.release(ipu, run, "act2", "act")
        self.save(ipu, run, "da", a2)
        da = self._drop("dropout").backward(self, ipu, run, a2)
        if self.activation == "gelu":
            h1 = self.saved(run, "h1")
            da = ops.map_op(ipu, self.op_name("activation/gelu_grad"), gelu_expr(True, h1.dtype),
                            [h1, da])
            self.save(ipu, run, "dh", da)
            self.release(ipu, run, "da", "h1")
        dx = sharding.column_grad(self, ipu, run, self.linear1, da, self.saved(run, "h1")
                                  if self.activation == "relu" else None, True)
        self.release(ipu, run, "h1", "da", "dh")
        return dx

    def _sa_grad(self, ipu, run, dy, need_dx: bool):
        dy = self._drop("dropout1").backward(self, ipu, run, dy)
        return self.attention(run.grid).backward(self, ipu, run, dy, need_dx)

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
def attention_of(layer, i, shape, out, work, **kw) -> MultiheadAttention:
    return MultiheadAttention.of(layer.embed_dim, layer.num_heads, shape[0], layer.causal,
                                 layer.dropout, i, work, f"{i}.MultiheadAttention")


def encoder_layer_of(layer, i, shape, out, work, **kw) -> EncoderLayer:
    return EncoderLayer.of(layer.d_model, layer.nhead, layer.dim_feedforward, shape[0],
                           layer.dropout, layer.activation, layer.norm_first, layer.causal, i,
                           work, f"{i}.TransformerEncoderLayer", folded=True)
