"""Sliding-window arithmetic shared by convolution, pooling and the nn layers built on them."""
from __future__ import annotations

import numpy as np

from ..errors import GraphError


def pair(v, what: str, where: str) -> tuple[int, int]:
    """(v, v) for an int, or v as a pair of ints (kernel sizes, strides, paddings); GraphError
    '<where>: <what> must be an int or a pair of ints' otherwise."""
    try:
        p = (v, v) if isinstance(v, (int, np.integer)) else tuple(v)
    except TypeError:
        p = ()
    if len(p) != 2 or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                              for x in p):
        raise GraphError(f"{where}: {what} must be an int or a pair of ints, not {v!r}")
    return int(p[0]), int(p[1])


def window_output(size: int, kernel: int, stride: int, padding: int) -> int:
    """How many windows of `kernel` fit `size` padded by `padding` on both sides, `stride`
    apart (< 1: the kernel does not fit)."""
    return (size + 2 * padding - kernel) // stride + 1
