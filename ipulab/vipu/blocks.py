"""Where a partition of n IPUs may go on a Pod: the placement rule of V-IPU as a pure function.

A partition's size is a power of two and its IPUs must be joined by IPU-Links. Taking blocks
aligned to their size gives exactly that on a Pod's machines of 4 IPUs: 2 IPUs share a
machine, 4 are one machine, 8 are two neighbouring machines (IPU k of one linked to IPU k of
the next), 16 a whole Pod16 [Graphcore IPU-POD datasheets]. The lowest free block is taken first, so small
partitions pack at one end and leave large blocks whole at the other.
"""
from __future__ import annotations

import numpy as np


def find_block(busy, size: int) -> int | None:
    """The first IPU of the lowest aligned block of `size` free IPUs in `busy` (a bool array,
    True = taken), or None if there is none."""
    busy = np.asarray(busy, bool)
    if size < 1 or size > busy.size:
        return None
    taken = busy.reshape(-1, size).any(axis=1)
    free = np.flatnonzero(~taken)
    return int(free[0]) * size if free.size else None


def largest_free_block(busy) -> int:
    """The size of the largest aligned block of free IPUs (0 if every IPU is taken): the largest
    partition that could be created now."""
    busy = np.asarray(busy, bool)
    size = busy.size
    while size >= 1:
        if find_block(busy, size) is not None:
            return size
        size //= 2
    return 0
