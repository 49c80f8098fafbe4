"""A ring all-reduce (ADD) in one kernel call: what gcl's 2(r-1) copies and r-1 combines do,
element for element, without a host call and a pass over the buffers for each of them.

Every step of the ring moves buffer index i only to index i of another buffer, so the ring
runs index by index. An index every chunk covers (i < min(size)) takes the direct way: chunk
c's sum in ring order, (x_c + x_{c+1}) + ... + x_{c-1} (x_k: replica k's chunk c), which is
what the combines compute. An index some chunk does not cover (the short last chunks) runs
the steps as they are, stale buffer values included, so the buffers end with the same bits.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def ring_all_reduce_add(a, flat, out, recv, mine, stride, size):
    """The ring, chunk by chunk (different chunks touch different elements). a: the arena;
    flat, out (n) and recv, mine (m): replica 0's addresses (replica j's are j * stride
    further); size[c]: chunk c's elements. out is flat itself or apart from it."""
    r, m = size.shape[0], recv.shape[0]
    clean = min(size.min(), m)
    _ring_steps(a, flat, out, recv, mine, stride, size, clean)
    acc = np.empty(clean, a.dtype)
    for c in range(r):
        base = c * m
        # replica c-1 ends with chunk c in its recv (the sum) and its mine (its own part,
        # read before out, which may be flat, is written)
        held = ((c - 1) % r) * stride
        for i in range(clean):
            a[mine[i] + held] = a[flat[base + i] + held]
        for i in range(clean):
            acc[i] = a[flat[base + i] + c * stride]
        for k in range(1, r):
            off = ((c + k) % r) * stride
            for i in range(clean):
                acc[i] += a[flat[base + i] + off]
        for i in range(clean):
            a[recv[i] + held] = acc[i]
        for k in range(r):
            off = k * stride
            for i in range(clean):
                a[out[base + i] + off] = acc[i]


@njit(cache=True, nogil=True)
def _ring_steps(a, flat, out, recv, mine, stride, size, lo):
    """Buffer indices lo..m-1 through the ring's steps one by one (see the module's text)."""
    r, m = size.shape[0], recv.shape[0]
    rv, nv, mv = np.empty(r, a.dtype), np.empty(r, a.dtype), np.empty(r, a.dtype)
    for i in range(lo, m):
        for j in range(r):
            rv[j], mv[j] = a[recv[i] + j * stride], a[mine[i] + j * stride]
        for s in range(r - 1):
            nv[:] = rv       # a step's copies read what the step before left
            for j in range(r):
                c, own = (j - s) % r, (j - s - 1) % r
                if i < size[c]:
                    nv[(j + 1) % r] = a[flat[c * m + i] + j * stride] if s == 0 else rv[j]
                if i < size[own]:
                    mv[j] = a[flat[own * m + i] + j * stride]
            for j in range(r):
                rv[j] = nv[j] + mv[j]
        for j in range(r):
            a[recv[i] + j * stride], a[mine[i] + j * stride] = rv[j], mv[j]
        for c in range(r):
            if i < size[c]:
                for k in range(r):
                    a[out[c * m + i] + k * stride] = rv[(c - 1) % r]
