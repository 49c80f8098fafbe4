"""Stage 1 of a reduction: which partials each tile makes, and which vertex makes them.

The input is seen as outputs p (its kept dimensions) and, for each, the elements reduced into
it. Two ways to cut the work on a tile, chosen by which gives fewer regions:

- inner: the reduced dimensions are the fast ones (row sums). A tile's elements of one output
  row form a unit and yield one partial; a vertex reduces each of its regions into one
  partial (codelet `in[j] -> out[j]`).
- outer: the last dimension is kept (column sums, sums over a batch). A tile's elements are
  cut into segments along the trailing kept block, each adding element-wise into a range of
  consecutive outputs; overlapping ranges merge into a unit of partials. A vertex takes a
  slice of the tile's partials and adds every segment that falls into it at its offset
  (codelet `out[dst[j] + k] op= in[j][k]`).

Either way the partials of a tile are stored together (unit after unit) on that tile, and up
to 6 vertices share the tile's work.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..poputil import require_mapped, split_even

MIN_SPLIT = 32   # a row is split between workers only into pieces of at least this many


@dataclass
class Stage1:
    """Units (the output range each covers, in storage order) and the vertices making them."""

    outer: bool
    source: object = None     # the flat tensor whose elements the vertices' regions are
    unit_tile: list = field(default_factory=list)
    unit_p0: list = field(default_factory=list)
    unit_p1: list = field(default_factory=list)
    # (tile, regions (each a list of (begin, end) intervals of source), dst offsets or None,
    #  storage begin, storage end)
    vertices: list = field(default_factory=list)
    size: int = 0   # partials stored so far

    def add_units(self, tile, p0, p1) -> int:
        """Append units on tile; return the storage position of the first."""
        start = self.size
        self.unit_tile += [tile] * len(p0)
        self.unit_p0 += [int(p) for p in p0]
        self.unit_p1 += [int(p) for p in p1]
        self.size = start + int(np.sum(np.asarray(p1) - np.asarray(p0)))
        return start

    def arrays(self):
        return (np.asarray(self.unit_tile, np.int64), np.asarray(self.unit_p0, np.int64),
                np.asarray(self.unit_p1, np.int64))


def trailing_kept(shape, kept) -> int:
    """Elements in the block of trailing dimensions that are kept (1 if the last is reduced)."""
    q, d = 1, len(shape) - 1
    while d >= 0 and d in kept:
        q, d = q * shape[d], d - 1
    return q


def _segments(intervals, q: int):
    """Intervals cut at multiples of q: (begins, ends) arrays."""
    b = np.array([x for x, _ in intervals], np.int64)
    e = np.array([y for _, y in intervals], np.int64)
    first, last = b // q, (e - 1) // q
    counts = last - first + 1
    rep = np.repeat(np.arange(b.size), counts)
    block = first[rep] + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts,
                                                                   counts)
    return np.maximum(block * q, b[rep]), np.minimum((block + 1) * q, e[rep])


def _rows(intervals, R: int):
    """A tile's elements of the [P, R] view grouped by row: [(p, intervals)], in order of p."""
    rows: list = []
    for b, e in intervals:
        while b < e:
            p, end = b // R, min(e, (b // R + 1) * R)
            if rows and rows[-1][0] == p:
                rows[-1][1].append((b, end))
            else:
                rows.append((p, [(b, end)]))
            b = end
    return rows


def _row_units(rows, tiles_of_p, workers: int):
    """A tile's work for the inner cut as units (p, intervals, size), in order of p.

    A row larger than one worker's share of the tile is split between workers, into about
    sqrt(n / tiles holding the row) pieces: splitting speeds this stage up but gives the
    final stage more partials to combine, and both grow with n and the tiles involved."""
    sizes = [sum(e - b for b, e in iv) for _, iv in rows]
    share = max(MIN_SPLIT, -(-sum(sizes) // workers))
    units = []
    for (p, iv), n in zip(rows, sizes):
        k = min(-(-n // share), int(math.sqrt(n / tiles_of_p[p])))
        pieces = split_even(iv, k) if k > 1 else [iv]
        units += [(p, piece, sum(e - b for b, e in piece)) for piece in pieces]
    return units


def _groups(sizes, workers: int) -> list[int]:
    """The vertex each unit (of these sizes, in order) goes to: contiguous groups of
    near-equal work, at most `workers` of them."""
    total, cum, out = max(1, sum(sizes)), 0, []
    for s in sizes:
        out.append(min(workers - 1, (2 * cum + s) * workers // (2 * total)))
        cum += s
    return out


def plan_inner(graph, t, kept, dims, P: int, R: int, what: str) -> Stage1:
    flat = t.dim_shuffle(kept + dims).reshape([P, R]).flatten()
    workers = graph.target.num_worker_contexts
    rows = [(tile, _rows(iv, R)) for tile, iv in require_mapped(graph, flat, what)]
    tiles_of_p = np.bincount([p for _, tile_rows in rows for p, _ in tile_rows], minlength=P)
    plan = Stage1(outer=False, source=flat)
    for tile, tile_rows in rows:
        units = _row_units(tile_rows, tiles_of_p, workers)
        ps = [u[0] for u in units]
        start = plan.add_units(tile, ps, [p + 1 for p in ps])
        groups = _groups([u[2] for u in units], workers)
        first = 0
        for i in range(1, len(units) + 1):
            if i == len(units) or groups[i] != groups[first]:
                plan.vertices.append((tile, [u[1] for u in units[first:i]], None,
                                      start + first, start + i))
                first = i
    return plan


def plan_outer(graph, t, kept, q: int, grain: int, what: str) -> Stage1:
    flat = t.flatten()
    workers = graph.target.num_worker_contexts
    kept_shape = tuple(t.shape[d] for d in kept)
    plan = Stage1(outer=True, source=flat)
    for tile, intervals in require_mapped(graph, flat, what):
        seg_b, seg_e = _segments(intervals, q)
        coords = np.unravel_index(seg_b, t.shape)
        p0 = np.ravel_multi_index(tuple(coords[d] for d in kept), kept_shape)
        p1 = p0 + (seg_e - seg_b)
        # merge overlapping output ranges into units
        order = np.argsort(p0, kind="stable")
        reach = np.maximum.accumulate(p1[order])
        new = np.r_[True, p0[order][1:] >= reach[:-1]]
        unit_sorted = np.cumsum(new) - 1
        u0 = p0[order][new]
        u1 = reach[np.r_[np.flatnonzero(new)[1:] - 1, order.size - 1]]
        base = np.cumsum(u1 - u0) - (u1 - u0)
        seg_unit = np.empty_like(order)
        seg_unit[order] = unit_sorted
        off = base[seg_unit] + p0 - u0[seg_unit]          # storage offset of each segment
        start = plan.add_units(tile, u0, u1)
        width = int((u1 - u0).sum())
        for piece in split_even([(0, width)], workers, grain):
            s0, s1 = piece[0]
            lo, hi = np.maximum(off, s0), np.minimum(off + seg_e - seg_b, s1)
            m = np.flatnonzero(hi > lo)
            begins = (seg_b + lo - off)[m].tolist()
            regions = [[(b, b + n)] for b, n in zip(begins, (hi - lo)[m].tolist())]
            plan.vertices.append((tile, regions, (lo[m] - s0).tolist(), start + s0, start + s1))
    return plan


def plan(graph, t, kept, dims, P: int, R: int, grain: int, what: str) -> Stage1:
    """The cheaper cut (fewer regions) for this input's layout."""
    q = trailing_kept(t.shape, kept)
    if q > 1:
        tiles = require_mapped(graph, t.flatten(), what)
        outer = sum(_segments(iv, q)[0].size for _, iv in tiles)
        inner = sum(min(P, sum(e - b for b, e in iv)) for _, iv in tiles)
        if outer <= inner:
            return plan_outer(graph, t, kept, q, grain, what)
    return plan_inner(graph, t, kept, dims, P, R, what)
