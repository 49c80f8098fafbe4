"""Work placement shared by popnn and poprand: which tile owns each row, up to one vertex per
worker on a tile, small constants that live on the tiles that read them, typed codelet variants.

Rows: popnn's row-wise operations (pooling, losses) see a tensor as rows of equal width. A
row's *owner* is the tile holding its middle element; a new tensor is mapped row by row to its
owners (close to where the input lives, but never splitting a row), and the rows of a tile are
cut into at most `num_worker_contexts` contiguous pieces, one vertex each.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar.vertex import Vector, VectorList
from ..popops.mapping import per_tile_runs, require_mapped, split_even


# --- where rows live --------------------------------------------------------------------------
def element_tiles(graph, t, what: str) -> np.ndarray:
    """The tile of each of t's flattened elements (GraphError if some are on no tile)."""
    tiles = np.empty(t.num_elements(), np.int64)
    for tile, intervals in require_mapped(graph, t, what):
        for b, e in intervals:
            tiles[b:e] = tile
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


# --- codelet variants ---------------------------------------------------------------------------
_variants: dict = {}


def typed_variant(base: type, dtype, attrs, suffix: str) -> type:
    """base with the fields named in attrs retyped to dtype (one class per pair, made once).

    The compute function is shared; numba compiles each class once per process, and only
    when a graph uses it."""
    key = (base, dtype.name)
    if dtype == base.fields_dtype:
        return base
    if key not in _variants:
        ns = {"__module__": base.__module__, "__doc__": f"{base.__name__} on {dtype} data.",
              "fields_dtype": dtype}
        for attr in attrs:
            f = next(x for x in base.fields if x.attr == attr)
            shape = {"vector": Vector, "vector_list": VectorList}.get(f.kind)
            ns[attr] = type(f)(dtype if shape is None else shape[dtype], name=f.name)
        _variants[key] = type(base.__name__ + suffix, (base,), ns)
    return _variants[key]


def check_float(t, what: str) -> None:
    """t must be FLOAT or HALF."""
    if t.dtype.name not in ("FLOAT", "HALF"):
        raise GraphError(f"{what}: '{t.name}' is {t.dtype}; this operation takes FLOAT or "
                         "HALF tensors (popops.cast first)")


__all__ = ["element_tiles", "row_owners", "row_runs", "map_rows", "row_pieces",
           "tile_constant", "vertex_constants", "typed_variant", "check_float"]
