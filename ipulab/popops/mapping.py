"""Where data lives and how work follows it: per-tile intervals, even splits, gathered views,
broadcast views, and new tensors mapped like existing ones."""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import concat
from ..poputil import map_tensor_linearly


def tile_intervals(graph, t) -> list[tuple[int, list[tuple[int, int]]]]:
    """(tile, [(begin, end), ...]) over t's flattened elements, for each tile holding some."""
    return [(tile, iv) for tile, iv in enumerate(graph.get_tile_mapping(t)) if iv]


def require_mapped(graph, t, what: str) -> list:
    """tile_intervals of t, or a GraphError if some of its elements are on no tile."""
    tiles = tile_intervals(graph, t)
    mapped = sum(e - b for _, iv in tiles for b, e in iv)
    if mapped != t.num_elements():
        raise GraphError(f"{what}: tensor '{t.name}' has {t.num_elements() - mapped} of "
                         f"{t.num_elements()} elements on no tile; map it first "
                         "(g.set_tile_mapping or poputil.map_tensor_linearly)")
    return tiles


def split_even(intervals, parts: int, grain: int = 1) -> list[list[tuple[int, int]]]:
    """Cut the elements of intervals (taken in order) into at most `parts` contiguous pieces
    of near-equal size, cutting only at multiples of grain; each piece a list of intervals."""
    sizes = np.array([e - b for b, e in intervals], np.int64)
    total = int(sizes.sum())
    n = max(1, min(parts, -(-total // grain)))
    cuts = sorted({min(total, (k * total // n) // grain * grain) for k in range(1, n)} - {0})
    bounds = [0] + cuts + [total]
    starts = np.cumsum(sizes) - sizes          # position of each interval in the sequence
    pieces = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        piece = []
        first = int(np.searchsorted(starts, lo, side="right")) - 1
        for j in range(first, len(intervals)):
            b, e = intervals[j]
            s = int(starts[j])
            if s >= hi:
                break
            piece.append((b + max(0, lo - s), b + min(e - b, hi - s)))
        pieces.append(piece)
    return pieces


def runs(indices) -> list[tuple[int, int]]:
    """Sorted indices as [(begin, end)] runs of consecutive values."""
    idx = np.asarray(indices, np.int64)
    if idx.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(idx) != 1) + 1
    begins = idx[np.r_[0, breaks]]
    ends = idx[np.r_[breaks - 1, idx.size - 1]] + 1
    return list(zip(begins.tolist(), ends.tolist()))


def per_tile_runs(tiles, positions, num_tiles: int) -> list[list[tuple[int, int]]]:
    """A tile mapping list: element positions[i] goes to tiles[i]."""
    tiles, positions = np.asarray(tiles, np.int64), np.asarray(positions, np.int64)
    order = np.lexsort((positions, tiles))
    bounds = np.searchsorted(tiles[order], np.arange(num_tiles + 1))
    return [runs(positions[order[bounds[t]:bounds[t + 1]]]) for t in range(num_tiles)]


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


def grain_of(dtype) -> int:
    """Elements per 64-bit vector: work is split at these boundaries."""
    return max(1, 8 // dtype.size)


def new_like(graph, dtype, shape, like, name: str):
    """A new variable mapped element by element like `like` (same shape), or linearly when
    `like` is None or not fully mapped."""
    out = graph.add_variable(dtype, shape, name)
    mapping = graph.get_tile_mapping(like) if like is not None else None
    if mapping is not None and sum(e - b for iv in mapping for b, e in iv) == out.num_elements():
        graph.set_tile_mapping(out, mapping)
    else:
        map_tensor_linearly(graph, out)
    return out
