"""Codelet variants: one codelet's compute on data of another type (PopLibs' templated
vertices, poputil::templateVertex)."""
from __future__ import annotations

from ..poplar import Vector, VectorList
from ..poplar.vertex import set_recipe

_variants: dict = {}


def typed_variant(base: type, dtype, attrs, suffix: str) -> type:
    """base with the fields named in attrs retyped to dtype (one class per pair, made once).

    The compute function is shared; numba compiles each class once per process, and only
    when a graph uses it."""
    key = (base, dtype.name)
    if dtype == base.fields_dtype:
        return base
    if key not in _variants:
        ns = {"__module__": base.__module__, "__doc__": f"{base.__name__} on {dtype} data.",
              "fields_dtype": dtype}
        for attr in attrs:
            f = next(x for x in base.fields if x.attr == attr)
            shape = {"vector": Vector, "vector_list": VectorList}.get(f.kind)
            ns[attr] = type(f)(dtype if shape is None else shape[dtype], name=f.name)
        _variants[key] = set_recipe(type(base.__name__ + suffix, (base,), ns), typed_variant,
                                    base, dtype, tuple(attrs), suffix)
    return _variants[key]
