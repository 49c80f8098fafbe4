"""Constants filled with one value, shared: one per graph, type, shape and value.

Constants are always live, so the padding zeros of every convolution and the ones of every
folded bias would otherwise be stored again for each layer, micro-batch and recomputation
that asks for the same shape. The first caller creates and maps the constant (linearly, as
map_tensor_linearly); later callers on the same graph get the same tensor."""
from __future__ import annotations

import weakref

from .tile_mapping import map_tensor_linearly

_SHARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def shared_constant(graph, dtype, shape, value, name: str):
    """A constant of `value` of this type and shape on graph, mapped linearly; the same tensor
    for every call with the same graph (or virtual graph), type, shape and value."""
    cache = _SHARED.setdefault(graph, {})
    key = (dtype.name, tuple(int(s) for s in shape), float(value))
    if key not in cache:
        cache[key] = graph.add_constant(dtype, list(key[1]), value, name)
        map_tensor_linearly(graph, cache[key])
    return cache[key]
