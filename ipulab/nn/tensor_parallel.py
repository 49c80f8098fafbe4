"""Tensor parallelism (TrainConfig(tensor_parallel=t)): the layers with weights of a pipeline
stage (of the replica, without a pipeline) shared by its t IPUs. scheme() picks how:

  ChannelSplit   a CNN or MLP (this module): every Conv2d and Linear split by output channels
                 (features), as Megatron splits a column-parallel layer;
  Megatron       a transformer (nn/megatron.py): attention heads and the feed-forward split as
                 Megatron-LM, 1-D or 2-D (t1 x t2) as Graphcore's PopXL GPT-3.

ChannelSplit: shard i holds rows [lo_i, hi_i) of the weight and bias (split_bounds: as equal
as possible; a layer with fewer outputs than t uses fewer IPUs) in its IPU's tile memory. A
layer's step:

  forward    the input is copied to every shard's IPU (ONE exchange over the IPU-Links: the
             all-gather of the previous layer's sharded output), each shard runs the layer's
             own forward on its rows (its ReLU too), all shards in the same supersteps
             (poplar.parallel); the output is the concat of the shards' outputs, a view.
  backward   each shard's slice of dL/dy is copied to its IPU; each shard runs the layer's
             own backward: its rows of the weight gradient, and a PARTIAL input gradient
             (the sum over its outputs only); popops.reduce adds the t partials across the
             IPUs (the all-reduce the split needs, left spread over the stage's tiles for
             the layer before, which copies what it needs).

The shards run the layers' ordinary forward and backward (layers.py) on views of the weights,
so the arithmetic per output is unchanged; only the input gradient is summed in two levels
(within each shard's product, then across shards).
"""
from __future__ import annotations

import copy
import weakref

import numpy as np

from .. import popops, poputil
from ..errors import ConfigError
from ..poplar import concat, parallel
from ..poplar import program as prog
from .layers import Conv2d, Linear

_SHARDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def shard_graphs(graph, t: int) -> list:
    """The t virtual graphs (one IPU's tiles each, in order) of a stage's graph; the same
    objects on every call, so shared constants stay shared."""
    cached = _SHARDS.get(graph)
    if cached is None or len(cached) != t:
        tiles = graph.target.num_tiles // t
        cached = [graph.create_virtual_graph(i * tiles, (i + 1) * tiles) for i in range(t)]
        _SHARDS[graph] = cached
    return cached


def split_bounds(n: int, t: int) -> list[tuple[int, int]]:
    """[lo, hi) of each non-empty shard when n outputs are split t ways (the first n % t
    shards one larger)."""
    edges = np.cumsum([0] + [n // t + (i < n % t) for i in range(t)])
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def scheme(model, grid):
    """How the t1 x t2 IPUs of a stage share model's layers (None: t = 1): Megatron for a
    transformer, ChannelSplit (1-D only) for the rest; ConfigError naming a layer that
    cannot be split so."""
    t1, t2 = grid
    if t1 * t2 == 1:
        return None
    from .megatron import Megatron, is_transformer
    if is_transformer(model):
        return Megatron(model, t1, t2)
    if t2 > 1:
        raise ConfigError("tensor_parallel", "is 2-D (t1 x t2) for transformers only (heads "
                          "and feed-forward over t1, the hidden dimension over t2); a model of "
                          f"Conv2d and Linear layers splits 1-D: tensor_parallel={t1 * t2}",
                          grid)
    other = next((i for i, layer in enumerate(model.layers) if layer.param_names and
                  not isinstance(layer, (Conv2d, Linear))), None)
    if other is not None:
        raise ConfigError("tensor_parallel", f"splits Conv2d and Linear layers (and "
                          f"transformers); layer {other} ({model[other]!r}) cannot be split",
                          t1)
    return ChannelSplit(t1)


def is_sharded(b) -> bool:
    return b.tp is not None and bool(b.layer.param_names)


class ChannelSplit:
    """Every Conv2d and Linear split across t IPUs by output channels (see the module)."""

    def __init__(self, t: int):
        self.t = self.ipus = t

    def map_weight(self, graph, layer, name: str, tensor) -> None:
        """Map a weight (or bias) of a sharded layer: rows of shard i linearly on IPU i."""
        shards = shard_graphs(graph, self.t)
        for i, (lo, hi) in enumerate(split_bounds(tensor.shape[0], self.t)):
            poputil.map_tensor_linearly(shards[i], tensor.slice(lo, hi, 0))

    def forward(self, b, x):
        """The layer on x, its outputs split across the shards' IPUs (see the module)."""
        graphs = shard_graphs(b.graph, self.t)
        bounds = split_bounds(b.param("weight").shape[0], self.t)
        b.sub = []
        for i, (lo, hi) in enumerate(bounds):
            sub = copy.copy(b)
            sub.graph, sub.tp, sub.prefix = graphs[i], None, f"{b.prefix}shard{i}/"
            sub.params = {k: v.slice(lo, hi, 0) for k, v in b.params.items()}
            sub.grads, sub._saved = {}, {}
            b.sub.append(sub)
        xs = _to_shards(b, [x] * len(bounds), "input")
        parts, ys = [], []
        for sub, xi in zip(b.sub, xs):
            sub.seq = prog.Sequence()
            ys.append(b.layer.forward(sub, xi))
            parts.append(sub.seq)
        b.seq.add(parallel(b.graph, parts, b.name("shards forward")))
        return concat(ys, 1)

    def backward(self, b, dy):
        """Weight gradients per shard (joined), and the input gradient summed over the
        shards."""
        bounds = split_bounds(b.param("weight").shape[0], self.t)
        dys = _to_shards(b, [dy.slice(lo, hi, 1) for lo, hi in bounds], "output_grad")
        parts, dxs = [], []
        for sub, dyi, (lo, hi) in zip(b.sub, dys, bounds):
            sub.seq, sub.need_dx = prog.Sequence(), b.need_dx
            sub.params = {k: v.slice(lo, hi, 0) for k, v in b.params.items()}  # (phases swap)
            dxs.append(b.layer.backward(sub, dyi))
            parts.append(sub.seq)
        b.seq.add(parallel(b.graph, parts, b.name("shards backward")))
        for name in b.layer.param_names:
            b.grad(name, concat([sub.grads[name] for sub in b.sub], 0))
        if not b.need_dx:
            return None
        if len(dxs) == 1:
            return dxs[0]
        partials = concat([d.reshape([1, *d.shape]) for d in dxs], 0)
        return popops.reduce(b.graph, partials, [0], "add", b.seq, b.name("input_grad/sum"))


def _to_shards(b, tensors, what: str) -> list:
    """Each tensor copied to a new variable on its shard's IPU, all in ONE exchange."""
    out, copies = [], []
    for i, t in enumerate(tensors):
        g = b.sub[i].graph
        v = g.add_variable(t.dtype, list(t.shape), b.name(f"shard{i}/{what}"))
        poputil.map_tensor_linearly(g, v)
        out.append(v)
        copies.append(prog.Copy(t, v, name=b.name(f"shard{i}/{what} to its IPU")))
    b.seq.add(parallel(b.graph, copies, b.name(f"{what} to the shards")))
    return out


__all__ = ["shard_graphs", "split_bounds", "scheme", "is_sharded", "ChannelSplit"]
