"""The machine's numba kernels, kept apart from the code that plans their work."""
from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def copy_runs(src, dst, src_start, dst_start, length):
    """dst[dst_start[r] + i] = src[src_start[r] + i] for every run r and i < length[r]."""
    for r in range(length.shape[0]):
        n = length[r]
        a = src[src_start[r]:src_start[r] + n]
        b = dst[dst_start[r]:dst_start[r] + n]
        for i in range(n):   # through views: LLVM vectorises this, unlike indexing the arenas
            b[i] = a[i]


@njit(cache=True, nogil=True)
def deal_to_workers(tiles, estimates, multi, num_workers, busiest, busy_sum):
    """Deal vertices (sorted by tile, MultiVertex first, then largest first) to worker contexts.

    A Vertex goes to the least-loaded worker (lowest index on ties); a MultiVertex runs on
    every worker. Writes the busiest worker's total and the sum of all work per tile.
    """
    loads = np.zeros(num_workers, np.int64)
    current = -1
    for k in range(tiles.shape[0]):
        t = tiles[k]
        if t != current:
            if current >= 0:
                busiest[current] = loads.max()
            loads[:] = 0
            current = t
        e = estimates[k]
        if multi[k]:
            for w in range(num_workers):
                loads[w] += e
            busy_sum[t] += e * num_workers
        else:
            w = 0
            for j in range(1, num_workers):
                if loads[j] < loads[w]:
                    w = j
            loads[w] += e
            busy_sum[t] += e
    if current >= 0:
        busiest[current] = loads.max()


@njit(cache=True, nogil=True)
def to_half(x):
    """x rounded to the nearest half-precision value (ties to even), as a float32.

    numba has no float16 on the CPU, so HALF data lives in float32 and every store is rounded
    with this: the quantum of x's binade is a power of two, so a / q and r * q are exact.
    """
    a = abs(float(x))
    if not a < 65520.0:               # NaN, infinity, or rounds up past the largest half
        if a != a:
            return np.float32(x)
        return np.float32(math.copysign(math.inf, x))
    if a < 6.103515625e-05:           # below the smallest normal half: quantum 2**-24
        q = 5.9604644775390625e-08
    else:
        e = math.frexp(a)[1]          # a in [2**(e-1), 2**e); 10 mantissa bits
        q = math.ldexp(1.0, e - 11)
    return np.float32(math.copysign(np.rint(a / q) * q, x))
