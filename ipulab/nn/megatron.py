"""Tensor parallelism for transformers: attention heads and the feed-forward split across the
IPUs of a stage as Megatron-LM splits them (Shoeybi et al. 2019), and in 2-D as Graphcore's
PopXL GPT-3 application does (graphcore/examples nlp/gpt3_175B/popxl).

    nn.Trainer(nn.small_gpt(), pod, replicas=2, tensor_parallel=2)        # 1-D: t = 2
    nn.Trainer(nn.small_gpt(), pod, replicas=2, tensor_parallel=(2, 2))   # 2-D: t1 x t2 = "2x2"

Shard (i1, i2) of a stage's t1 x t2 shards is its IPU i1 * t2 + i2 (1-D: t2 = 1). t1 splits
the heads and the feed-forward's width f (Megatron), t2 the hidden dimension d (PopXL's
tp2). An activation [B, S, d] between layers is held by every shard: identical over t1, its
columns split over t2 (shard (i1, i2) holds columns block i2 of copy i1); for t2 = 1 every IPU
holds the whole activation. In a block (TransformerEncoderLayer), per sublayer:

  LayerNorm       on every shard, on its copy (t2 > 1: over its d / t2 columns, the row
                  statistics all-reduced over t2, as PopXL's LayerNormDistributed)
  column-parallel self_attn's in_proj (shard i1: the q, k and v rows of its h / t1 heads),
                  linear1 (its f / t1 rows); t2 > 1: weight blocks [.. / t1, d / t2], the
                  products all-reduced over t2, then the bias
  per head        scores, softmax, dropout and context of the shard's heads; the activation
                  (GELU or ReLU) of its feed-forward columns
  row-parallel    out_proj and linear2 (their input features: the shard's heads' or
                  feed-forward columns), all-reduced over t1 -- the sublayer's ONE
                  all-reduce forward; then their bias, dropout and the residual on every
                  shard
  backward        the row-parallel layers' input gradients all-reduced over t2 (t2 > 1), the
                  column-parallel layers' over t1: ONE all-reduce per sublayer (1-D)

So a 1-D block all-reduces twice forward and twice backward. A 2-D one: forward eight times
(each LayerNorm's mean and variance over t2, the column products over t2, the row products
over t1), backward six (each LayerNorm's two sums as one, the row-parallel input gradients
over t2, the column ones over t1), where PopXL places its replicated_all_reduce_identical_
inputs / identical_grad_inputs and its distributed LayerNorm's.

Around the blocks: nn.Embedding is vocab-parallel (Megatron's VocabParallelEmbedding and
PopXL's: shard i1 looks up the ids in its rows of the table (others read as zeros), the
lookups all-reduced over t1; its gradient lands in each shard's own rows);
nn.PositionalEmbedding is kept whole on every shard (Megatron's position table is not split;
it is [max_len, d], small), split over t2 by columns; a final nn.Linear (to the vocabulary)
is column-parallel over t1 (t2: by input columns, all-reduced) and its logits are gathered
for the loss: the loss reads the shards' columns (a view of them) over the IPU-Links, which
costs B x S x V values per step (Megatron's vocab-parallel cross-entropy saves that at
V = 50k; at the course's V = 64 it is a few kB). A layer without weights (GELU, Dropout, ...)
between them runs whole on copy 0.

The shards, their all-reduces (a reduce-scatter and an all-gather over the IPU-Links, every
group at once) and each weight's layout over them are nn/shards.py's.

Weights: each element lives on one IPU. A weight split by the scheme lives with its shard;
one every shard uses whole (LayerNorm's, the row-parallel biases, the position table; over
t2 their column blocks) lives once, on the first IPU of the shards that share it, and the
others read it over the IPU-Links: the same numbers as Megatron's copy per rank, updated
with the same gradient, without t - 1 copies of it and of its optimizer state. Dropout
draws its masks on the whole tensor the shards' pieces make (poprand's streams depend on
the element's index), so they are the one-IPU run's.
"""
from __future__ import annotations

import copy

from .. import popops, poputil
from ..errors import ConfigError
from ..poplar import concat
from ..popops.expr import _1
from .layers import Linear
from .shard_ops import (Whole, add, column, column_grad, dropout, dropout_grad, each, heads_axis,
                        last_axis, layer_norm, layer_norm_grad, row, row_grad)
from .shards import Grid, assemble, axis, owns, view
from .tensor_parallel import split_bounds
from .transformer import (Embedding, LayerNorm, MultiheadAttention, PositionalEmbedding,
                          TransformerEncoderLayer, _Part)

SPLIT_LAYERS = (Embedding, PositionalEmbedding, LayerNorm, MultiheadAttention,
                TransformerEncoderLayer, Linear)


def is_transformer(model) -> bool:
    """Whether model has a transformer layer (then tensor parallelism is Megatron's)."""
    return any(isinstance(layer, SPLIT_LAYERS[:-1]) for layer in model.layers)


def layouts(layer, t1: int, t2: int) -> dict:
    """{weight name: layout} of a layer split over t1 x t2 shards (see the module)."""
    def ax(n, dim, blocks=1):
        return axis(n, dim, t1 if dim == 1 else t2, blocks)

    if isinstance(layer, TransformerEncoderLayer):
        d, f = layer.d_model, layer.dim_feedforward
        out = {f"self_attn.{k}": v for k, v in
               layouts(layer.self_attn.layer, t1, t2).items()}
        out.update({"linear1.weight": (ax(f, 1), ax(d, 2)), "linear1.bias": (ax(f, 1),),
                    "linear2.weight": (ax(d, 2), ax(f, 1)), "linear2.bias": (ax(d, 2),)})
        out.update({f"{n}.{w}": (ax(d, 2),) for n in ("norm1", "norm2")
                    for w in ("weight", "bias")})
        return out
    if isinstance(layer, MultiheadAttention):
        d = layer.embed_dim
        return {"in_proj_weight": (ax(3 * d, 1, 3), ax(d, 2)),
                "in_proj_bias": (ax(3 * d, 1, 3),),
                "out_proj.weight": (ax(d, 2), ax(d, 1)), "out_proj.bias": (ax(d, 2),)}
    if isinstance(layer, Embedding):
        return {"weight": (ax(layer.num_embeddings, 1), ax(layer.embedding_dim, 2))}
    if isinstance(layer, PositionalEmbedding):
        return {"weight": (ax(layer.max_len, 0), ax(layer.dim, 2))}
    if isinstance(layer, LayerNorm):
        return {"weight": (ax(layer.dim, 2),), "bias": (ax(layer.dim, 2),)}
    if isinstance(layer, Linear):
        return {"weight": (ax(layer.out_features, 1), ax(layer.in_features, 2)),
                "bias": (ax(layer.out_features, 1),)}
    return {}


def _check(model, t1: int, t2: int) -> None:
    """ConfigError naming the first layer the t1 x t2 split cannot take."""
    t = f"{t1}x{t2}" if t2 > 1 else t1
    for i, layer in enumerate(model.layers):
        if not layer.param_names:
            continue
        where = f"layer {i} ({layer!r})"
        if not isinstance(layer, SPLIT_LAYERS):
            raise ConfigError("tensor_parallel", f"splits a transformer's layers (Embedding, "
                              f"PositionalEmbedding, LayerNorm, MultiheadAttention, "
                              f"TransformerEncoderLayer, Linear); {where} cannot be split", t)
        attention = layer.self_attn.layer if isinstance(layer, TransformerEncoderLayer) else \
            layer if isinstance(layer, MultiheadAttention) else None
        if attention is not None and attention.num_heads % t1:
            raise ConfigError("tensor_parallel", f"splits the attention heads over t1 = {t1} "
                              f"IPUs: {where} has {attention.num_heads} heads, which "
                              f"{t1} does not divide", t)
        for name, layout in layouts(layer, t1, t2).items():
            for axis, n in zip(layout, layer.param_shapes()[name]):
                parts = (1, t1, t2)[axis.dim]
                if n < parts:
                    raise ConfigError("tensor_parallel", f"splits {where}'s {name} "
                                      f"({n} wide) over {parts} IPUs: too few to split", t)


class Megatron:
    """A transformer's layers shared by the t1 x t2 IPUs of each stage (see the module):
    map_weight places each weight, forward and backward build a layer's step on its shards."""

    def __init__(self, model, t1: int, t2: int = 1):
        _check(model, t1, t2)
        self.t1, self.t2, self.ipus = t1, t2, t1 * t2
        self._grids: dict = {}
        self._held: dict = {}        # id(copy 0) -> (copy 0, grid, {shard: piece})

    def grid(self, graph) -> Grid:
        got = self._grids.get(id(graph))
        if got is None or got[0] is not graph:
            got = self._grids[id(graph)] = (graph, Grid(graph, self.t1, self.t2))
        return got[1]

    def layouts(self, layer) -> dict:
        return layouts(layer, self.t1, self.t2)

    def map_weight(self, graph, layer, name: str, tensor) -> None:
        """Each shard's part of a weight linearly on its IPU (a part shared by several shards
        on the first of them)."""
        layout, grid = self.layouts(layer)[name], self.grid(graph)
        for k in grid.shards:
            if owns(layout, k):
                poputil.map_tensor_linearly(grid.of(k), view(tensor, layout, k))

    # --- activations held by the shards ---------------------------------------------------
    def _hold(self, grid, pieces: dict):
        """Copy 0 of the activation the shards hold (what the next layer receives), noted so
        that a layer of this scheme after it takes the pieces themselves."""
        first = [pieces[(0, i2)] for i2 in range(self.t2)]
        x = first[0] if len(first) == 1 else concat(first, first[0].rank - 1)
        self._held[id(x)] = (x, grid, pieces)
        return x

    def _pieces(self, b, grid, x, what: str) -> dict:
        """The shards' pieces of x: as held, or x's column blocks copied to them (one
        exchange)."""
        held = self._held.get(id(x))
        if held is not None and held[0] is x and held[1] is grid:
            return held[2]
        bounds = split_bounds(x.shape[-1], self.t2)
        return grid.copies(b.seq, b.name(f"{what} to the shards"), {
            k: (k, x if self.t2 == 1 else x.slice(*bounds[k[1]], x.rank - 1))
            for k in grid.shards})

    def _shard_build(self, b, grid, k):
        sb = copy.copy(b)
        sb.graph, sb.tp = grid.of(k), None
        sb.prefix = f"{b.prefix}shard{k[0] * self.t2 + k[1]}/"
        sb.params, sb.grads, sb._saved, sb.sub = self._views(b, k), {}, {}, []
        return sb

    def _views(self, b, k) -> dict:
        lay = self.layouts(b.layer)
        return {n: view(t, lay[n], k) for n, t in b.params.items()}

    # --- a layer's step -------------------------------------------------------------------
    def forward(self, b, x):
        layer, grid = b.layer, self.grid(b.graph)
        sbs = {k: self._shard_build(b, grid, k) for k in grid.shards}
        b.save(grid=grid, shards=sbs)
        if isinstance(layer, Embedding):
            return self._hold(grid, self._embedding(b, grid, sbs, x))
        xs = self._pieces(b, grid, x, "input")
        if isinstance(layer, Linear):
            z = column(b, grid, sbs, Whole(layer), xs, b.relu)
            logits = [z[(i1, 0)] for i1 in range(self.t1)]     # gathered: a view
            return concat(logits, logits[0].rank - 1)
        if isinstance(layer, PositionalEmbedding):
            ys = each(b, grid, sbs, "shards", lambda k, sb: layer.forward(sb, xs[k]))
        elif isinstance(layer, LayerNorm):
            ys = layer_norm(b, grid, sbs, Whole(layer), xs)
        elif isinstance(layer, MultiheadAttention):
            b.save(attention=(b, sbs))
            ys = self._attention(b, grid, sbs, layer, xs)
        else:
            ys = self._block(b, grid, sbs, xs)
        return self._hold(grid, ys)

    def backward(self, b, dy):
        layer, grid, sbs = b.layer, b.saved("grid"), b.saved("shards")
        for k, sb in sbs.items():             # the weights as b holds them now (phases swap)
            sb.params, sb.need_dx = self._views(b, k), b.need_dx
        if isinstance(layer, Linear):
            bounds = split_bounds(layer.out_features, self.t1)
            dys = grid.copies(b.seq, b.name("output_grad to the shards"), {
                k: (k, dy.slice(*bounds[k[0]], dy.rank - 1)) for k in grid.shards})
            dx = column_grad(b, grid, sbs, Whole(layer), dys, b.relu, b.need_dx)
        else:
            dys = self._pieces(b, grid, dy, "output_grad")
            if isinstance(layer, Embedding):      # token ids have no gradient
                each(b, grid, sbs, "shards backward",
                     lambda k, sb: sb.saved("local").backward(sb, dys[k]))
                dx = None
            elif isinstance(layer, PositionalEmbedding):
                dx = each(b, grid, sbs, "shards backward", lambda k, sb: layer.backward(sb, dys[k]))
            elif isinstance(layer, LayerNorm):
                dx = layer_norm_grad(b, grid, sbs, Whole(layer), dys, b.need_dx)
            elif isinstance(layer, MultiheadAttention):
                dx = self._attention_grad(b, grid, sbs, layer, dys, b.need_dx)
            else:
                dx = self._block_grad(b, grid, sbs, dys)
        lay = self.layouts(layer)
        for name in layer.param_names:
            b.grad(name, assemble({k: sbs[k].grads[name] for k in grid.shards
                                   if owns(lay[name], k)}, lay[name]))
        return None if dx is None or not b.need_dx else self._hold(grid, dx)

    # --- vocab-parallel embedding ---------------------------------------------------------
    def _embedding(self, b, grid, sbs, ids) -> dict:
        """Each shard looks up the ids in its rows (ids of other rows read zeros); the
        lookups all-reduced over t1."""
        bounds = split_bounds(b.layer.num_embeddings, self.t1)
        mine = grid.copies(b.seq, b.name("token ids to the shards"),
                           {k: (k, ids) for k in grid.shards})

        def look(k, sb):
            lo = bounds[k[0]][0]
            local = mine[k] if lo == 0 else popops.map(sb.graph, _1 - lo, [mine[k]], sb.seq,
                                                       sb.name("local_ids"))
            w = sb.params["weight"]
            part = Embedding(*w.shape)
            sb.save(local=part)
            return part.forward(sb, local)

        rows = each(b, grid, sbs, "lookup", look)
        return grid.all_reduce(b.seq, b.name("all_reduce/t1"), rows, 1)

    # --- attention --------------------------------------------------------------------------
    def _attention(self, ab, grid, abs_, mha, xs: dict) -> dict:
        """Self-attention (ab: its build; abs_: its builds on the shards): in_proj by columns
        (each shard its heads' q, k and v), the shard's heads, out_proj by rows."""
        h = mha.num_heads // self.t1
        qkv = column(ab, grid, abs_, mha.in_proj, xs, False)
        probs = each(ab, grid, abs_, "heads", lambda k, sb: mha.attend(sb, qkv[k], h))
        samples = qkv[grid.shards[0]].shape[0]
        attn = dropout(ab, grid, mha.attn_drop, probs, 1, heads_axis(samples))
        ctx = each(ab, grid, abs_, "context", lambda k, sb: mha.context(sb, attn[k], h))
        return row(ab, grid, abs_, mha.out_proj, ctx)

    def _attention_grad(self, ab, grid, abs_, mha, dys: dict, need_dx: bool):
        h = mha.num_heads // self.t1
        dctx = row_grad(ab, grid, abs_, mha.out_proj, dys)
        dattn = each(ab, grid, abs_, "context backward",
                     lambda k, sb: mha.context_grad(sb, dctx[k], h))
        dprobs = dropout_grad(ab, grid, abs_, mha.attn_drop, dattn)
        dqkv = each(ab, grid, abs_, "heads backward",
                    lambda k, sb: mha.attend_grad(sb, dprobs[k], h))
        return column_grad(ab, grid, abs_, mha.in_proj, dqkv, False, need_dx)

    # --- the block ----------------------------------------------------------------------------
    def _block(self, b, grid, sbs, xs: dict) -> dict:
        """TransformerEncoderLayer's forward (its order: pre- or post-norm) on the shards."""
        L = b.layer
        ab = b.part(L.self_attn.scope, {}, L.self_attn.stream)
        abs_ = {k: sb.part(L.self_attn.scope, L.self_attn.params(sb), L.self_attn.stream)
                for k, sb in sbs.items()}
        b.save(attention=(ab, abs_))

        def sa(hs):
            return dropout(b, grid, L.drop1, self._attention(
                ab, grid, abs_, L.self_attn.layer, hs), 2, last_axis)

        if L.norm_first:
            x = add(b, grid, sbs, xs, sa(layer_norm(b, grid, sbs, L.norm1, xs)), "residual1")
            return add(b, grid, sbs, x,
                       self._ff(b, grid, sbs, layer_norm(b, grid, sbs, L.norm2, x)), "residual2")
        x = layer_norm(b, grid, sbs, L.norm1, add(b, grid, sbs, xs, sa(xs), "residual1"))
        return layer_norm(b, grid, sbs, L.norm2,
                          add(b, grid, sbs, x, self._ff(b, grid, sbs, x), "residual2"))

    def _block_grad(self, b, grid, sbs, dys: dict):
        L = b.layer
        if L.norm_first:
            dy = add(b, grid, sbs, dys, layer_norm_grad(
                b, grid, sbs, L.norm2, self._ff_grad(b, grid, sbs, dys)), "residual2_grad")
            dx = layer_norm_grad(b, grid, sbs, L.norm1, self._sa_grad(b, grid, sbs, dy),
                                 b.need_dx)
            return add(b, grid, sbs, dy, dx, "residual1_grad") if b.need_dx else None
        dy = layer_norm_grad(b, grid, sbs, L.norm2, dys)
        dy = add(b, grid, sbs, dy, self._ff_grad(b, grid, sbs, dy), "residual2_grad")
        dy = layer_norm_grad(b, grid, sbs, L.norm1, dy)
        dx = self._sa_grad(b, grid, sbs, dy, b.need_dx)
        return add(b, grid, sbs, dy, dx, "residual1_grad") if b.need_dx else None

    def _sa_grad(self, b, grid, sbs, dys: dict, need_dx: bool = True):
        L = b.layer
        ab, abs_ = b.saved("attention")
        ab.seq = b.seq                            # the backward pass's sequence
        for k, sb in sbs.items():
            abs_[k].params = L.self_attn.params(sb)
        dx = self._attention_grad(ab, grid, abs_, L.self_attn.layer,
                                  dropout_grad(b, grid, sbs, L.drop1, dys), need_dx)
        for k, sb in sbs.items():                 # under the block's keys
            sb.grads.update({L.self_attn.keys[n]: t for n, t in abs_[k].grads.items()})
        return dx

    def _ff(self, b, grid, sbs, hs: dict) -> dict:
        L = b.layer
        relu = L.activation == "relu"
        z = column(b, grid, sbs, L.linear1, hs, relu)
        if not relu:
            z = each(b, grid, sbs, "activation", lambda k, sb: L.act.forward(sb, z[k]))
        z = dropout(b, grid, L.drop, z, 1, last_axis)
        return dropout(b, grid, L.drop2, row(b, grid, sbs, L.linear2, z), 2, last_axis)

    def _ff_grad(self, b, grid, sbs, dys: dict) -> dict:
        L = b.layer
        relu = L.activation == "relu"
        dz = row_grad(b, grid, sbs, L.linear2, dropout_grad(b, grid, sbs, L.drop2, dys))
        dz = dropout_grad(b, grid, sbs, L.drop, dz)
        if not relu:
            dz = each(b, grid, sbs, "activation_grad", lambda k, sb: L.act.backward(sb, dz[k]))
        return column_grad(b, grid, sbs, L.linear1, dz, relu, True)


__all__ = ["Megatron", "is_transformer", "layouts"]
