"""The machine's numba kernels, kept apart from the code that plans their work."""
from __future__ import annotations

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
