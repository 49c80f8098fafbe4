"""Per-tile memory: every allocation gets a tile, an aligned address, a size and a category."""
from __future__ import annotations

import numpy as np

from ..errors import TileMemoryError

CATEGORIES = ("code", "constants", "variables", "vertex_state", "exchange_buffers")
CATEGORY = {name: i for i, name in enumerate(CATEGORIES)}


class TileMemory:
    """All allocations of one compiled graph, laid out per tile in one vectorised pass.

    Requests are (tile, bytes, category, owner index). On each tile the allocations are placed
    in category order (code first, then constants, variables, vertex state, exchange buffers),
    in request order within a category, each aligned; addresses are byte offsets in the tile.
    """

    def __init__(self, num_tiles: int, bytes_per_tile: int, alignment: int,
                 tiles, sizes, categories, owners, owner_names: list[str]):
        self.num_tiles, self.bytes_per_tile, self.alignment = num_tiles, bytes_per_tile, alignment
        self.owner_names = owner_names
        tiles, sizes = np.asarray(tiles, np.int64), np.asarray(sizes, np.int64)
        categories, owners = np.asarray(categories, np.int8), np.asarray(owners, np.int64)
        keep = sizes > 0
        tiles, sizes, categories, owners = tiles[keep], sizes[keep], categories[keep], owners[keep]
        order = np.lexsort((np.arange(tiles.size), categories, tiles))
        self.tile, self.size = tiles[order], sizes[order]
        self.category, self.owner = categories[order], owners[order]
        self.aligned = aligned = -(-self.size // alignment) * alignment
        ends = np.cumsum(aligned)
        starts = ends - aligned
        first = np.searchsorted(self.tile, self.tile, side="left")  # first allocation of the tile
        self.address = starts - starts[first] if starts.size else starts
        self.by_category = np.zeros((len(CATEGORIES), num_tiles), np.int64)
        np.add.at(self.by_category, (self.category, self.tile), aligned)
        self.total = self.by_category.sum(axis=0)

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name: self.by_category[i] for i, name in enumerate(CATEGORIES)}

    def allocations_on(self, tile: int) -> list[tuple[int, int, str, str]]:
        """(address, bytes, category, owner) of every allocation on a tile, by address."""
        lo, hi = np.searchsorted(self.tile, [tile, tile + 1])
        return [(int(self.address[i]), int(self.size[i]), CATEGORIES[self.category[i]],
                 self.owner_names[self.owner[i]]) for i in range(lo, hi)]

    def largest_on(self, tile: int, n: int = 5) -> list[tuple[str, int]]:
        """The n owners using the most bytes on a tile (aligned, as they count against it)."""
        lo, hi = np.searchsorted(self.tile, [tile, tile + 1])
        per_owner = np.bincount(self.owner[lo:hi], weights=self.aligned[lo:hi],
                                minlength=len(self.owner_names))
        top = np.argsort(-per_owner, kind="stable")[:n]
        return [(self.owner_names[i], int(per_owner[i])) for i in top if per_owner[i] > 0]

    def largest_owner(self) -> tuple[list[str], np.ndarray]:
        """Per tile: the owner using the most bytes there ('' on an empty tile), and its bytes."""
        key = self.tile * (len(self.owner_names) + 1) + self.owner
        pairs, inverse = np.unique(key, return_inverse=True)
        per_pair = np.bincount(inverse, weights=self.aligned).astype(np.int64)
        tiles, owners = divmod(pairs, len(self.owner_names) + 1)
        order = np.lexsort((-per_pair, tiles))
        first = order[np.r_[True, tiles[order][1:] != tiles[order][:-1]]] if order.size else order
        names, nbytes = [""] * self.num_tiles, np.zeros(self.num_tiles, np.int64)
        for i in first.tolist():
            names[tiles[i]] = self.owner_names[owners[i]]
            nbytes[tiles[i]] = per_pair[i]
        return names, nbytes

    def check(self) -> None:
        """Raise TileMemoryError for the tile that is most over its budget, if any."""
        over = self.total - self.bytes_per_tile
        if over.size and over.max() > 0:
            tile = int(np.argmax(over))
            raise TileMemoryError(tile, int(self.total[tile]), self.bytes_per_tile,
                                  self.largest_on(tile))
