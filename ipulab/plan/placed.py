"""Tensors placed element by element: where the small scale follows a transformer's data.

A transformer's step moves its activations through layouts that decide its cost: the
embedding's lookup leaves its rows in a grid of column blocks, every residual add keeps the
layout of the stream it adds to, a layer norm and a softmax work on each row where its middle
element lives, a product leaves its result in its plan's blocks. A count of tiles per tensor
(tiles.Layout) cannot follow that, so the layers nn runs on tokens are priced on Placed
tensors: for every element, the tile it lives on and its address (its variable and position
in it), in the tensor's logical order. Views (reshape, transpose, slices, concat, broadcast)
move both arrays as poplar's views move element ids; new tensors are placed by the rules the
libraries follow (poputil's linear mapping, a tensor mapped like another, rows to their owner
tiles, a product's blocks as poplin.matmul.Blocks lays them out).

Addresses say what poplar's lowering decides: a vertex reads a region in place only when its
elements are consecutive in one variable and on its tile (see lowering.py).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..poplin.matmul import Blocks
from ..poputil import calc_linear_tile_mapping


class Placed:
    """A tensor's elements: `where` (tile of each) and `ids` (address of each, unique per
    element of a variable), both of the tensor's shape, and its type (a poplar type)."""

    __slots__ = ("where", "ids", "dtype")

    def __init__(self, where: np.ndarray, ids: np.ndarray, dtype):
        self.where, self.ids, self.dtype = where, ids, dtype

    @property
    def nbytes(self) -> int:
        return self.dtype.size

    # --- what tiles.Layout also says ------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.where.shape

    @property
    def elements(self) -> int:
        return int(self.where.size)

    @property
    def tiles(self) -> int:
        """Tiles from the first to the last one holding an element (a Layout's count)."""
        return int(self.where.max()) + 1 if self.where.size else 1

    def per_tiles(self, T: int) -> np.ndarray:
        """Elements on each of the first T tiles."""
        return np.bincount(self.where.ravel(), minlength=T)[:T]

    def bytes_on(self, T: int, align: int = 8) -> np.ndarray:
        """Bytes of its elements on each of the first T tiles, each tile's part aligned (as a
        variable is allocated)."""
        b = self.per_tiles(T) * self.nbytes
        return -(-b // align) * align

    # --- views ------------------------------------------------------------------------------
    def _view(self, f) -> "Placed":
        return Placed(f(self.where), f(self.ids), self.dtype)

    def reshape(self, shape) -> "Placed":
        return self._view(lambda a: a.reshape(tuple(shape)))

    def flatten(self) -> "Placed":
        return self.reshape((-1,))

    def dim_shuffle(self, perm) -> "Placed":
        return self._view(lambda a: np.transpose(a, perm))

    def __getitem__(self, index) -> "Placed":
        return self._view(lambda a: a[index])

    def broadcast(self, shape) -> "Placed":
        return self._view(lambda a: np.broadcast_to(a, tuple(shape)))



def concat(parts, axis: int = 0) -> Placed:
    """poplar.concat: a view joining the parts along axis."""
    return Placed(np.concatenate([p.where for p in parts], axis),
                  np.concatenate([p.ids for p in parts], axis), parts[0].dtype)


VARIABLE_BITS = 40          # an address: variable number << 40 | position in it


class Addresses:
    """Fresh addresses for new variables: each variable's elements numbered consecutively
    from (its number << VARIABLE_BITS), so no two variables are ever contiguous and an
    address says its variable."""

    def __init__(self):
        self.count = 0

    def new(self, shape, where: np.ndarray, dtype, order: np.ndarray | None = None) -> Placed:
        """A variable of `shape` with element i on where[i] (logical order); `order` the
        storage position of each logical element (default: logical order)."""
        n = int(np.prod(shape, dtype=np.int64))
        self.count += 1
        base = self.count << VARIABLE_BITS
        ids = base + (np.arange(n, dtype=np.int64) if order is None else
                      np.asarray(order, np.int64).ravel())
        return Placed(np.asarray(where, np.int64).reshape(shape), ids.reshape(shape), dtype)

    # --- the libraries' placement rules -----------------------------------------------------
    def linear(self, shape, dtype, num_tiles: int, grain: int | None = None,
               min_elements: int | None = None) -> Placed:
        """poputil.map_tensor_linearly over num_tiles tiles (its own algorithm)."""
        n = int(np.prod(shape, dtype=np.int64))
        graph = SimpleNamespace(target=SimpleNamespace(num_tiles=num_tiles))
        tensor = SimpleNamespace(dtype=dtype, name="",
                                 num_elements=lambda: n)
        mapping = calc_linear_tile_mapping(graph, tensor, min_elements, grain)
        where = np.zeros(n, np.int64)
        for tile, intervals in enumerate(mapping):
            for b, e in intervals:
                where[b:e] = tile
        return self.new(shape, where, dtype)

    def like(self, t: Placed, dtype=None, shape=None) -> Placed:
        """poputil.new_like: a new variable mapped element by element like t."""
        return self.new(shape or t.shape, t.where.ravel(), dtype or t.dtype)

    def rows(self, owners: np.ndarray, width: int, shape, dtype) -> Placed:
        """poputil.map_rows: rows of `width` elements, each on its owner tile."""
        return self.new(shape, np.repeat(np.asarray(owners, np.int64), width), dtype)

    def product(self, plan, dtype, grouped: bool) -> Placed:
        """A product's result as poplin lays it out: C block (g, i, j) stored contiguously,
        cut into pk chunks over its tiles (g, i, j, kk)."""
        bl = Blocks(plan)
        pk = plan.split.k
        G, M, N = plan.dims.groups, plan.dims.m, plan.dims.n
        ids, starts = bl.layout(bl.m, bl.n)
        gi, i, j = (np.searchsorted(b, np.arange(b[-1]), "right") - 1
                    for b in (bl.g, bl.m, bl.n))
        size = (np.diff(bl.g)[:, None, None] * np.diff(bl.m)[None, :, None]
                * np.diff(bl.n)[None, None, :])
        block = (gi[:, None, None], i[None, :, None], j[None, None, :])
        offset = ids - starts[block]                    # position within its block
        kk = ((offset + 1) * pk - 1) // size[block]     # poplin.matmul._piece's formula
        where = bl.tile(gi[:, None, None], i[None, :, None], j[None, None, :], kk)
        out = self.new((G, M, N), where, dtype, order=ids)
        return out if grouped else out.reshape((M, N))

    def on_tiles(self, tiles, values: int, dtype) -> Placed:
        """A small constant of `values` elements on each of the given tiles (a row each:
        poputil.tile_constant)."""
        tiles = np.asarray(tiles, np.int64)
        return self.new((tiles.size, values), np.repeat(tiles, values), dtype)


def row_owners(t: Placed, width: int) -> np.ndarray:
    """poputil.row_owners: the tile of each row's middle element."""
    flat = t.where.ravel()
    rows = flat.size // width
    return flat[np.arange(rows, dtype=np.int64) * width + width // 2]
