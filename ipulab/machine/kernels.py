"""The machine's numba kernels, kept apart from the code that plans their work."""
from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.typed import Dict


def frozen(a: np.ndarray) -> np.ndarray:
    """A read-only view of a: a kernel given only these compiles (and, in a fresh process,
    loads from numba's cache) one signature, not one for writable and one for read-only."""
    view = a.view()
    view.flags.writeable = False
    return view


@njit(cache=True, nogil=True)
def copy_runs(src, dst, src_start, dst_start, length):
    """dst[dst_start[r] + i] = src[src_start[r] + i] for every run r and i < length[r]."""
    for r in range(length.shape[0]):
        n = length[r]
        s, d = src_start[r], dst_start[r]
        if n <= 8:       # most runs of a gather: element by element, no views to set up
            for i in range(n):
                dst[d + i] = src[s + i]
            continue
        a = src[s:s + n]
        b = dst[d:d + n]
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


@njit(cache=True, nogil=True)
def slots_in_place(ids, starts, lengths, slot_tile, tile_of):
    """Per slot: True if its elements are contiguous in memory and all on the slot's tile,
    so a vertex can use them where they are (no exchange buffer)."""
    out = np.ones(starts.shape[0], np.bool_)
    for s in range(starts.shape[0]):
        b = starts[s]
        for i in range(b, b + lengths[s]):
            if tile_of[ids[i]] != slot_tile[s] or (i > b and ids[i] != ids[i - 1] + 1):
                out[s] = False
                break
    return out


@njit(cache=True, nogil=True)
def contiguous_slots(ids, starts, lengths):
    """Per slot: True if its elements are consecutive addresses (one range of the arena)."""
    out = np.ones(starts.shape[0], np.bool_)
    for s in range(starts.shape[0]):
        b = starts[s]
        for i in range(b + 1, b + lengths[s]):
            if ids[i] != ids[i - 1] + 1:
                out[s] = False
                break
    return out


@njit(cache=True, nogil=True)
def slot_runs(ids, starts, lengths, buffer_start, slot_tile, tile_of, to_buffer):
    """Copy runs between slots' elements and their buffers: (src, dst, length, src tile,
    dst tile). A run breaks where the slot's addresses stop being contiguous or change tile."""
    n = 0
    for s in range(starts.shape[0]):
        n += lengths[s]
    src_start = np.empty(n, np.int64)
    dst_start = np.empty(n, np.int64)
    length = np.empty(n, np.int64)
    src_tile = np.empty(n, np.int64)
    dst_tile = np.empty(n, np.int64)
    r = -1
    for s in range(starts.shape[0]):
        b = starts[s]
        for i in range(b, b + lengths[s]):
            addr, tile, buf = ids[i], tile_of[ids[i]], buffer_start[s] + i - b
            if r >= 0 and i > b and addr == ids[i - 1] + 1 and tile == tile_of[ids[i - 1]]:
                length[r] += 1
                continue
            r += 1
            length[r] = 1
            if to_buffer:
                src_start[r], dst_start[r], src_tile[r], dst_tile[r] = addr, buf, tile, slot_tile[s]
            else:
                src_start[r], dst_start[r], src_tile[r], dst_tile[r] = buf, addr, slot_tile[s], tile
    r += 1
    return src_start[:r], dst_start[:r], length[:r], src_tile[:r], dst_tile[:r]


@njit(cache=True, nogil=True)
def element_runs(src, dst, src_tile, dst_tile):
    """Start index of every maximal run contiguous in src and dst and on one tile pair."""
    n = src.shape[0]
    out = np.empty(n, np.int64)
    r = 0
    for i in range(n):
        if (i == 0 or src[i] != src[i - 1] + 1 or dst[i] != dst[i - 1] + 1
                or src_tile[i] != src_tile[i - 1] or dst_tile[i] != dst_tile[i - 1]):
            out[r] = i
            r += 1
    return out[:r]


@njit(cache=True, nogil=True)
def first_marked(ids, starts, lengths, slots, mark, lo):
    """(slot, address) of the first element of the given slots with mark[address - lo] set,
    or (-1, -1): finds an Input that reads what another vertex writes in one pass."""
    for s in slots:
        for i in range(starts[s], starts[s] + lengths[s]):
            j = ids[i] - lo
            if 0 <= j < mark.shape[0] and mark[j]:
                return s, ids[i]
    return -1, -1


_KEY3 = types.UniTuple(types.int64, 3)


@njit(cache=True, nogil=True)
def _slot_hash(ids, b, n):
    h = np.uint64(1469598103934665603)
    for i in range(b, b + n):
        h = (h ^ np.uint64(ids[i])) * np.uint64(1099511628211)
    return np.int64(h >> np.uint64(1))


@njit(cache=True, nogil=True)
def alias_slots(ids, starts, lengths, tiles, cand):
    """For each candidate slot, in order: the position (in cand) of the first earlier
    candidate on the same tile with exactly the same element addresses, or -1. Slots are
    found by a hash of their addresses, then compared element by element."""
    out = np.full(cand.shape[0], -1, np.int64)
    seen = Dict.empty(key_type=_KEY3, value_type=types.int64)
    for j in range(cand.shape[0]):
        s = cand[j]
        b, n = starts[s], lengths[s]
        h = _slot_hash(ids, b, n)
        while True:
            key = (tiles[s], n, h)
            if key not in seen:
                seen[key] = j
                break
            k = seen[key]
            t = starts[cand[k]]
            same = True
            for i in range(n):
                if ids[b + i] != ids[t + i]:
                    same = False
                    break
            if same:
                out[j] = k
                break
            h += 1
    return out


@njit(cache=True, nogil=True)
def row_hashes(values, counts):
    """A hash of each row of a ragged array (row r: the next counts[r] values)."""
    out = np.empty(counts.shape[0], np.int64)
    b = 0
    for r in range(counts.shape[0]):
        out[r] = _slot_hash(values, b, counts[r])
        b += counts[r]
    return out


@njit(cache=True, nogil=True)
def first_of_pairs(a, b):
    """True where (a[i], b[i]) occurs for the first time: an open-addressing hash table, one
    pass (a sort would take n log n)."""
    n = a.shape[0]
    size = 1
    while size < 2 * n:
        size *= 2
    mask = size - 1
    slot_of = np.full(size, -1, np.int64)
    first = np.zeros(n, np.bool_)
    for i in range(n):
        h = (np.uint64(a[i]) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(b[i])
        k = np.int64((h >> np.uint64(17)) & np.uint64(mask))
        while True:
            j = slot_of[k]
            if j < 0:
                slot_of[k] = i
                first[i] = True
                break
            if a[j] == a[i] and b[j] == b[i]:
                break
            k = (k + 1) & mask
    return first


@njit(cache=True, nogil=True)
def copy_runs_replicated(src, dst, src_start, dst_start, length, group, src_stride, dst_stride,
                         first, last):
    """copy_runs for replicas first <= i < last. The runs come in groups (group g: runs
    group[g] <= r < group[g + 1]) that each replica finds shifted by the same distance,
    i * src_stride[g] and i * dst_stride[g]: a group's runs are copied replica by replica, on
    views of the arenas that start there (each replica's runs still in order; replicas touch
    disjoint elements). A third faster than shifting every run: the runs' addresses stay
    small unsigned numbers, as copy_runs' are."""
    for g in range(group.shape[0] - 1):
        lo, hi = group[g], group[g + 1]
        for i in range(first, last):
            copy_runs(src[i * src_stride[g]:], dst[i * dst_stride[g]:], src_start[lo:hi],
                      dst_start[lo:hi], length[lo:hi])


@njit(cache=True, nogil=True)
def first_repeat(ids):
    """The lowest address that occurs more than once in ids, or -1 (a mark per address over
    the span; sorted instead where the span is much wider than ids are many)."""
    n = ids.shape[0]
    if n < 2:
        return -1
    lo, hi = ids[0], ids[0]
    for a in ids:
        lo = min(lo, a)
        hi = max(hi, a)
    if hi - lo > 16 * n:
        s = np.sort(ids)
        for i in range(1, n):
            if s[i] == s[i - 1]:
                return s[i]
        return -1
    seen = np.zeros(hi - lo + 1, np.bool_)
    found = -1
    for a in ids:
        if seen[a - lo]:
            if found < 0 or a < found:
                found = a
        seen[a - lo] = True
    return found


@njit(cache=True, nogil=True)
def place_on_tiles(tile, var, size, start, end):
    """Offsets for allocations (tile[i], var[i], size[i] bytes), given sorted by tile, then
    largest first: on each tile, each at the lowest offset clear of the allocations placed
    before it there whose variables are live at the same time (start/end: per variable and
    root program, -1 where unused). Allocations of variables never live together share bytes."""
    n = tile.shape[0]
    offset = np.zeros(n, np.int64)
    lo = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    first = 0
    for i in range(n):
        if i > 0 and tile[i] != tile[i - 1]:
            first = i
        m = 0
        for j in range(first, i):
            a, b = var[i], var[j]
            meet = False
            for r in range(start.shape[1]):
                if start[a, r] >= 0 and start[b, r] >= 0 and start[a, r] <= end[b, r] \
                        and start[b, r] <= end[a, r]:
                    meet = True
                    break
            if meet:
                lo[m], hi[m] = offset[j], offset[j] + size[j]
                m += 1
        order = np.argsort(lo[:m])
        at = 0
        for k in order:
            if lo[k] - at >= size[i]:
                break
            at = max(at, hi[k])
        offset[i] = at
    return offset
