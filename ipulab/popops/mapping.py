"""Views for element-wise work: gathered intervals and NumPy-style broadcast views."""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import concat


def gather(flat, intervals):
    """The elements of a flat tensor in the given intervals, as one view."""
    views = [flat.slice(b, e) for b, e in intervals]
    return views[0] if len(views) == 1 else concat(views)


def broadcast_to(t, shape):
    """A view of t broadcast to shape (NumPy rules), built from expand and broadcast."""
    shape = tuple(shape)
    if t.shape == shape:
        return t
    lead = len(shape) - t.rank
    v = t.expand(list(range(lead))) if lead > 0 else t
    for d, (have, want) in enumerate(zip(v.shape, shape)):
        if have != want:
            v = v.broadcast(want, d)
    return v


def broadcast_shape(tensors, what: str) -> tuple:
    try:
        return tuple(int(s) for s in np.broadcast_shapes(*(t.shape for t in tensors)))
    except ValueError:
        shapes = ", ".join(f"'{t.name}' {list(t.shape)}" for t in tensors)
        raise GraphError(f"{what}: shapes do not broadcast together: {shapes}") from None
