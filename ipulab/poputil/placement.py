"""Where data lives and how work follows it (PopLibs keeps these helpers in poputil).

Per-tile intervals of a tensor, even splits of a tile's elements among its workers, tile
mapping lists built from element positions, new tensors mapped like existing ones, rows and
their owners (popnn's row-wise operations see a tensor as rows of equal width: a row's owner
is the tile holding its middle element, a new tensor is mapped row by row to its owners, and a
tile's rows are cut into at most num_worker_contexts contiguous pieces, one vertex each), and
small constants placed on the tiles that read them.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import GraphError
from ..poplar import Regions
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


class Pieces(NamedTuple):
    """Work cut into pieces, one vertex each: piece p is on tile[p] and covers the intervals
    [begins[r], ends[r]) of its counts[p] runs (in order: poplar.Regions takes them as is)."""

    tile: np.ndarray
    begins: np.ndarray
    ends: np.ndarray
    counts: np.ndarray

    def scaled(self, width: int) -> tuple[np.ndarray, np.ndarray]:
        """The runs' (begins, ends) in units `width` times smaller (rows -> elements)."""
        return self.begins * width, self.ends * width


def pieces(tiles: np.ndarray, parts: int, grain: int = 1) -> Pieces:
    """split_even for every tile at once: tiles[i] is the tile of element i; each tile's
    elements (in order) are cut into at most `parts` contiguous pieces of near-equal size,
    cutting only at multiples of grain. Pieces come tile by tile, tiles in increasing order."""
    tiles = np.asarray(tiles, np.int64)
    order = np.argsort(tiles, kind="stable")
    tile_ids, first, totals = np.unique(tiles[order], return_index=True, return_counts=True)
    n = np.maximum(1, np.minimum(parts, -(-totals // grain)))
    owner = np.repeat(np.arange(tile_ids.size), n - 1)
    k = np.arange(owner.size) - np.repeat(np.cumsum(n - 1) - (n - 1), n - 1) + 1
    cut = (k * totals[owner] // n[owner]) // grain * grain
    keep = (cut > 0) & np.r_[True, (cut[1:] != cut[:-1]) | (owner[1:] != owner[:-1])]
    starts = np.sort(np.concatenate([first, first[owner[keep]] + cut[keep]]))
    is_start = np.zeros(tiles.size, bool)
    is_start[starts] = True
    run_start = is_start | np.r_[True, np.diff(order) != 1]
    begins = order[run_start]
    ends = order[np.r_[np.flatnonzero(run_start)[1:] - 1, order.size - 1]] + 1 \
        if order.size else begins
    piece_of_run = np.cumsum(is_start)[run_start] - 1
    return Pieces(tiles[order][starts], begins, ends,
                  np.bincount(piece_of_run, minlength=starts.size))


def tile_pieces(graph, t, parts: int, grain: int = 1, what: str = "") -> Pieces:
    """pieces() of t's flattened elements where they live (GraphError if some are on no
    tile)."""
    return pieces(element_tiles(graph, t, what or f"tensor '{t.name}'"), parts, grain)


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
    """A tile mapping list: element positions[i] goes to tiles[i] (tiles outside
    0..num_tiles-1 are left out). The runs are found for all tiles at once: a Python step per
    run, none per tile."""
    tiles, positions = np.asarray(tiles, np.int64), np.asarray(positions, np.int64)
    keep = (tiles >= 0) & (tiles < num_tiles)
    tiles, positions = tiles[keep], positions[keep]
    order = np.lexsort((positions, tiles))
    t, p = tiles[order], positions[order]
    out: list[list[tuple[int, int]]] = [[] for _ in range(num_tiles)]
    if p.size == 0:
        return out
    breaks = np.flatnonzero((np.diff(t) != 0) | (np.diff(p) != 1)) + 1
    first, last = np.r_[0, breaks], np.r_[breaks - 1, p.size - 1]
    for tile, begin, end in zip(t[first].tolist(), p[first].tolist(), (p[last] + 1).tolist()):
        out[tile].append((begin, end))
    return out


def grain_of(dtype) -> int:
    """Elements per 64-bit vector: work is split at these boundaries."""
    return max(1, 8 // dtype.size)


def new_like(graph, dtype, shape, like, name: str):
    """A new variable mapped element by element like `like` (same shape), or linearly when
    `like` is None or not fully mapped."""
    out = graph.add_variable(dtype, shape, name)
    tiles = graph.tiles_of(like) if like is not None else None
    if tiles is not None and tiles.size == out.num_elements() and (tiles >= 0).all():
        graph.set_tile_mapping(out, tiles)
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


def map_rows(graph, t, owners: np.ndarray, width: int) -> None:
    """Map t (flattened: rows of `width` elements) row by row to the owners."""
    graph.set_tile_mapping(t, np.repeat(np.asarray(owners, np.int64), width))


def row_pieces(graph, owners: np.ndarray) -> Pieces:
    """The vertices of a row-wise operation: each tile's rows (runs of row numbers) cut into
    at most one contiguous piece per worker context."""
    return pieces(owners, graph.target.num_worker_contexts)


# --- constants on the tiles that read them ------------------------------------------------------
class TileConstant(NamedTuple):
    """One small constant copied onto several tiles: row i of `tensor` lives on tiles[i]."""

    tensor: object
    tiles: np.ndarray

    def regions(self, vertex_tiles) -> Regions:
        """For vertices on the given tiles: each reads the copy on its own tile."""
        size = self.tensor.shape[1]
        row = np.searchsorted(self.tiles, np.asarray(vertex_tiles, np.int64)) * size
        return Regions(self.tensor, row, row + size)


def tile_constant(graph, dtype, values, tiles, name: str) -> TileConstant:
    """The same small constant on each of the given tiles, so vertices read it in place
    instead of through the exchange."""
    values = np.asarray(values).ravel()
    tiles = np.unique(np.asarray(tiles, np.int64))
    c = graph.add_constant(dtype, [tiles.size, values.size], np.tile(values, (tiles.size, 1)),
                           name)
    graph.set_tile_mapping(c, np.repeat(tiles, values.size))
    return TileConstant(c, tiles)


def vertex_constants(graph, dtype, values, sizes, tiles, name: str) -> Regions:
    """One constant holding each vertex's own values (`sizes[v]` of the flat `values` for
    vertex v, which is on tiles[v]), mapped to the vertices' tiles; their regions of it."""
    sizes = np.asarray(sizes, np.int64)
    c = graph.add_constant(dtype, [int(sizes.sum())], np.asarray(values, np.int64), name)
    graph.set_tile_mapping(c, np.repeat(np.asarray(tiles, np.int64), sizes))
    ends = np.cumsum(sizes)
    return Regions(c, ends - sizes, ends)
