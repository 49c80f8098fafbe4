"""Where data lives and how work follows it (PopLibs keeps these helpers in poputil).

Per-tile intervals of a tensor, even splits of a tile's elements among its workers, tile
mapping lists built from element positions, new tensors mapped like existing ones, rows and
their owners (popnn's row-wise operations see a tensor as rows of equal width: a row's owner
is the tile holding its middle element, a new tensor is mapped row by row to its owners, and a
tile's rows are cut into at most num_worker_contexts contiguous pieces, one vertex each), and
small constants placed on the tiles that read them.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from .tile_mapping import map_tensor_linearly


# --- tiles and intervals ------------------------------------------------------------------------
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


# --- where rows live ----------------------------------------------------------------------------
def element_tiles(graph, t, what: str) -> np.ndarray:
    """The tile of each of t's flattened elements (GraphError if some are on no tile)."""
    tiles = graph.tiles_of(t)
    missing = int((tiles < 0).sum())
    if missing:
        raise GraphError(f"{what}: tensor '{t.name}' has {missing} of {t.num_elements()} "
                         "elements on no tile; map it first (g.set_tile_mapping or "
                         "poputil.map_tensor_linearly)")
    return tiles


def row_owners(graph, t, width: int, what: str) -> np.ndarray:
    """For t seen as rows of `width` elements: the tile holding each row's middle element."""
    tiles = element_tiles(graph, t, what)
    rows = tiles.size // width if width else 0
    return tiles[np.arange(rows, dtype=np.int64) * width + width // 2]


def row_runs(graph, owners: np.ndarray) -> list[list[tuple[int, int]]]:
    """Per tile, the [begin, end) runs of the rows it owns."""
    return per_tile_runs(owners, np.arange(owners.size), graph.target.num_tiles)


def map_rows(graph, t, owners: np.ndarray, width: int) -> None:
    """Map t (flattened: rows of `width` elements) row by row to the owners."""
    graph.set_tile_mapping(t, [[(a * width, b * width) for a, b in runs]
                               for runs in row_runs(graph, owners)])


def row_pieces(graph, owners: np.ndarray):
    """(tile, [row runs]) for each vertex: each tile's rows cut into at most one contiguous
    piece per worker context (a piece may hold several runs when the tile's rows are not
    contiguous)."""
    workers = graph.target.num_worker_contexts
    for tile, runs in enumerate(row_runs(graph, owners)):
        if runs:
            for piece in split_even(runs, workers):
                yield tile, piece


# --- constants on the tiles that read them ------------------------------------------------------
def tile_constant(graph, dtype, values, tiles, name: str) -> dict:
    """The same small constant on each of the given tiles: {tile: its copy}, so vertices read
    it in place instead of through the exchange."""
    values = np.asarray(values).ravel()
    tiles = sorted(set(int(t) for t in tiles))
    c = graph.add_constant(dtype, [len(tiles), values.size], np.tile(values, (len(tiles), 1)),
                           name)
    mapping = [[] for _ in range(graph.target.num_tiles)]
    for i, tile in enumerate(tiles):
        mapping[tile].append((i * values.size, (i + 1) * values.size))
    graph.set_tile_mapping(c, mapping)
    return {tile: c[i] for i, tile in enumerate(tiles)}


def vertex_constants(graph, dtype, segments, name: str) -> list:
    """One constant holding each vertex's own values, cut into per-vertex slices, each mapped
    to its vertex's tile. segments: [(tile, values)]; returns the slices in that order."""
    sizes = np.array([len(v) for _, v in segments], np.int64)
    flat = np.concatenate([np.asarray(v, np.int64) for _, v in segments]) if segments else []
    c = graph.add_constant(dtype, [int(sizes.sum())], flat, name)
    tiles = np.repeat([tile for tile, _ in segments], sizes)
    graph.set_tile_mapping(c, per_tile_runs(tiles, np.arange(tiles.size),
                                            graph.target.num_tiles))
    ends = np.cumsum(sizes)
    return [c.slice(int(e - n), int(e)) for e, n in zip(ends, sizes)]
