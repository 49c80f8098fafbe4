"""fill, zero, cast and scaled_add_to: small operations written as maps."""
from __future__ import annotations

from ..errors import GraphError
from ..poplar import Tensor
from . import expr as E
from .elementwise import map, map_in_place


def fill(graph, t, value, seq, name: str = "") -> None:
    """Set every element of t to value (converted to t's type), where t lives."""
    map_in_place(graph, E.const(value), [t], seq, name or "fill")


def zero(graph, t, seq, name: str = "") -> None:
    """Set every element of t to 0."""
    fill(graph, t, 0, seq, name or "zero")


def cast(graph, t, dtype, seq, name: str = "") -> Tensor:
    """A new tensor: t converted to dtype, mapped like t."""
    return map(graph, E.cast(E._1, dtype), [t], seq, name or "cast")


def _scaled(graph, a, b, scale, seq, name, sign):
    if isinstance(scale, Tensor):
        if scale.num_elements() != 1:
            raise GraphError(f"{name}: scale tensor '{scale.name}' must have one element, "
                             f"not {scale.num_elements()}")
        term = E._2 * E._3
        map_in_place(graph, E._1 + term if sign > 0 else E._1 - term,
                     [a, b, scale.reshape([])], seq, name)
    else:
        map_in_place(graph, E._1 + E._2 * E.const(sign * float(scale)), [a, b], seq, name)


def scaled_add_to(graph, a, b, scale, seq, name: str = "") -> None:
    """a += scale * b, in place (scale a number or a one-element tensor)."""
    _scaled(graph, a, b, scale, seq, name or "scaled_add_to", 1)


def scaled_subtract_from(graph, a, b, scale, seq, name: str = "") -> None:
    """a -= scale * b, in place (scale a number or a one-element tensor)."""
    _scaled(graph, a, b, scale, seq, name or "scaled_subtract_from", -1)
