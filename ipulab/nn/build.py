"""Graph construction for a model: forward and backward passes layer by layer, the gradient
all-reduce seam for data parallelism, and the argmax of predictions.

Layers see a LayerBuild: the graph, the program sequence to add to, their weights as tensors,
what they saved in the forward pass, and where their gradients go. A ReLU right after a
Conv2d or Linear is folded into that layer's bias map (forward) and its gradient map
(backward): one compute set fewer each way, the same arithmetic.
"""
from __future__ import annotations

import copy

from ..errors import GraphError, TileMemoryError
from ..poplar import concat
from . import tensor_parallel
from .layers import ReLU


class LayerBuild:
    """What one layer sees while it is turned into graph operations."""

    def __init__(self, graph, seq, layer, index: int, params: dict, train: bool, relu: bool,
                 seed, prefix: str = "", micro_batch: int = 0, tp=None):
        self.graph, self.seq, self.layer, self.index = graph, seq, layer, index
        self.params, self.train, self.relu, self.seed = params, train, relu, seed
        self.prefix, self.micro_batch = prefix, micro_batch
        self.tp, self.sub = tp, []     # tensor parallelism: its scheme, and a build per shard
        self.model = self.input = None     # its model; the tensor it was given (a checkpoint)
        self.need_dx = True
        self.grads: dict = {}
        self._saved: dict = {}
        self.scope, self.stream = "", 0      # a part of a composite layer: see part()

    def name(self, what: str) -> str:
        """A debug name: '<prefix><index>.<Layer>/<what>', e.g. '0.Conv2d/conv' (a part of a
        composite layer adds its scope: '2.TransformerEncoderLayer/self_attn/scores')."""
        return f"{self.prefix}{self.index}.{type(self.layer).__name__}/{self.scope}{what}"

    @property
    def seed_modifier(self) -> int:
        """Random streams differ per layer, part of a layer and micro-batch (and repeat when
        recomputed)."""
        return (self.index + 65536 * self.micro_batch + (self.stream << 24)) % 2 ** 32

    def part(self, scope: str, params: dict, stream: int = 0) -> "LayerBuild":
        """The build of one part of a composite layer (e.g. a TransformerEncoderLayer's
        linear1): this build with the part's own weights, gradients and saved tensors, names
        under scope, and random stream `stream` of its own (1..255) for its Dropout."""
        sub = copy.copy(self)
        sub.scope, sub.params, sub.relu = f"{self.scope}{scope}/", params, False
        sub.grads, sub._saved, sub.sub = {}, {}, []
        sub.stream = stream or self.stream
        return sub

    def param(self, name: str):
        return self.params[name]

    def has(self, name: str) -> bool:
        return name in self.params

    def save(self, **tensors) -> None:
        self._saved.update(tensors)

    def saved(self, key: str):
        return self._saved[key]

    def grad(self, name: str, tensor) -> None:
        self.grads[name] = tensor


def build_forward(graph, model, x, params: dict, seq, train: bool, seed=None, prefix: str = "",
                  span=None, micro_batch: int = 0, tp=None):
    """The forward pass of model's layers span = (lo, hi) (default: all) on x into seq:
    (output, [LayerBuild per built layer]).

    params: {layer index: {name: tensor}}. In training mode Dropout draws masks from `seed`
    (an UNSIGNED_INT [2] tensor) and the layer's seed_modifier (its index and micro_batch,
    the micro-batch's index); otherwise it passes its input through. tp: how the IPUs of graph
    share each layer with weights (tensor_parallel.scheme; None: graph runs them whole)."""
    layers = model.layers
    i, hi = span or (0, len(layers))
    builds = []
    while i < hi:
        layer = layers[i]
        relu = layer.fuses_relu and i + 1 < hi and isinstance(layers[i + 1], ReLU)
        b = LayerBuild(graph, seq, layer, i, params.get(i, {}), train, relu, seed, prefix,
                       micro_batch, tp)
        b.model, b.input = model, x
        with naming(b, "forward"):
            x = b.tp.forward(b, x) if tensor_parallel.is_sharded(b) else layer.forward(b, x)
        builds.append(b)
        i += 2 if relu else 1
    return x, builds


def blocks(builds) -> list[list]:
    """Builds cut into recompute blocks: a block starts at every layer with weights (and at
    the first layer); only a block's input is kept for the backward pass."""
    out = []
    for b in builds:
        if not out or b.layer.param_names:
            out.append([])
        out[-1].append(b)
    return out


def build_backward(graph, builds, dy, seq, need_input_grad: bool = False,
                   recompute: bool = False, one_block: bool = False):
    """The backward pass into seq, from dy = dL/d(output): ({state_dict key: gradient},
    dL/d(input) or None).

    Without need_input_grad, layers before the first one with weights are skipped and that
    layer computes only its weight gradients. With recompute, each block's forward is built
    again into seq from the block's input just before its backward, so the forward pass's
    activations need not stay live until then. one_block makes all the builds one block (a
    pipeline stage keeps only its input per micro-batch, as GPipe)."""
    first = 0 if need_input_grad else \
        next((k for k, b in enumerate(builds) if b.layer.param_names), len(builds))
    position = {id(b): k for k, b in enumerate(builds)}
    grads = {}
    for block in reversed([list(builds)] if one_block else blocks(builds)):
        ks = [position[id(b)] for b in block]
        if ks[-1] < first:
            break
        if recompute and any(b.layer.param_names for b in block):
            b0, last = block[0], block[-1]
            _, block = build_forward(graph, b0.model, b0.input, {b.index: b.params for b in block},
                                     seq, b0.train, b0.seed, "recompute/" + b0.prefix,
                                     (b0.index, last.index + (2 if last.relu else 1)),
                                     b0.micro_batch, b0.tp)
        for k, b in zip(reversed(ks), reversed(block)):
            if k < first:
                break
            b.seq, b.need_dx = seq, k > first or need_input_grad
            with naming(b, "backward"):
                dy = b.tp.backward(b, dy) if tensor_parallel.is_sharded(b) else \
                    b.layer.backward(b, dy)
            grads.update({f"{b.index}.{name}": t for name, t in b.grads.items()})
    return _keys(builds, grads), (dy if need_input_grad else None)


def _keys(builds, grads: dict) -> dict:
    """Gradients in state_dict order."""
    return {f"{b.index}.{n}": grads[f"{b.index}.{n}"] for b in builds
            for n in b.layer.param_names if f"{b.index}.{n}" in grads}


class naming:
    """Re-raise a GraphError or TileMemoryError from building a layer with the layer named
    first: 'layer 3 (Linear(...)), backward: ...'."""

    def __init__(self, b: LayerBuild, what: str):
        self.where = f"layer {b.index} ({b.layer!r}), {what}"

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if isinstance(e, TileMemoryError):
            raise TileMemoryError(e.tile, e.needed, e.available, e.largest,
                                  message=f"{self.where}: {e}") from None
        if isinstance(e, GraphError):
            raise GraphError(f"{self.where}: {e}") from None
        return False


def uses_dropout(model) -> bool:
    return any(layer.uses_dropout for layer in model.layers)


# --- data parallelism ---------------------------------------------------------------------------
def all_reduce_gradients(graph, grads, seq, replicas: int):
    """Sum the gradients (one flat tensor) over the replicas, in seq.

    This is the one place data parallelism touches the training step: each replica's loss
    gradient is scaled by 1 / (replicas * batch_size), so the sum over replicas is the
    gradient of the mean loss over the global batch. With one replica there is nothing to
    add; with more, gcl.all_reduce sums over the IPU-Links (and every replica then applies the
    same update to its own copy of the weights)."""
    if replicas == 1:
        return grads
    from .. import gcl      # arrives with replicated graphs
    return gcl.all_reduce(graph, grads, "add", seq)


def split(flat_tensor, shapes):
    """Views of consecutive pieces of a flat tensor, one per shape (the inverse of flat)."""
    out, start = [], 0
    for shape in shapes:
        n = 1
        for s in shape:
            n *= int(s)
        out.append(flat_tensor.slice(start, start + n).reshape(list(shape)))
        start += n
    return out


def flat(tensors):
    """Tensors joined into one flat view (nothing copied)."""
    parts = [t.flatten() for t in tensors]
    return parts[0] if len(parts) == 1 else concat(parts)


__all__ = ["LayerBuild", "build_forward", "build_backward", "blocks", "uses_dropout",
           "all_reduce_gradients", "flat", "split"]
