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

    shared: optional (tiles, bytes, owners, offsets) of variables that are not always live (see
    poplar/liveness.py): each sits at its offset into its tile's not-always-live area, which is
    placed after the other variables and ends where its highest member ends. Offsets are
    chosen so that members whose bytes meet on a tile are never live at the same time.
    `shared_bytes` is that area's size per tile (counted in "variables"). The per-owner views
    (allocations_on, largest_on, largest_owner) list each member with its own bytes.
    """

    def __init__(self, num_tiles: int, bytes_per_tile: int, alignment: int,
                 tiles, sizes, categories, owners, owner_names: list[str], shared=None):
        self.num_tiles, self.bytes_per_tile, self.alignment = num_tiles, bytes_per_tile, alignment
        self.owner_names = owner_names
        tiles, sizes, categories, owners = _nonempty(tiles, sizes, categories, owners)
        m_tile, m_size, m_owner, m_offset = _nonempty(*(shared or ((),) * 4))
        # one not-always-live area per tile, up to where its highest member ends
        area = np.zeros(num_tiles, np.int64)
        if m_tile.size:
            ends = m_offset + self._align(m_size)
            order = np.lexsort((ends, m_tile))          # each tile's highest end last
            last = np.r_[m_tile[order][1:] != m_tile[order][:-1], True]
            area[m_tile[order][last]] = ends[order][last]
        regions = np.flatnonzero(area)
        r_size = area[regions]
        n, variables = tiles.size, CATEGORY["variables"]
        s_tile = np.concatenate([tiles, regions])
        s_size = np.concatenate([sizes, r_size])
        s_cat = np.concatenate([categories, np.full(regions.size, variables)])
        address = self._place(s_tile, s_size, s_cat)
        self.by_category = np.bincount(s_cat * num_tiles + s_tile, weights=self._align(s_size),
                                       minlength=len(CATEGORIES) * num_tiles).astype(
            np.int64).reshape(len(CATEGORIES), num_tiles)
        self.total = self.by_category.sum(axis=0)
        self.shared_bytes = area
        # the listed allocations: requests, and each shared variable at its area's address
        # plus its offset
        area_address = np.zeros(num_tiles, np.int64)
        area_address[regions] = address[n:]
        tile = np.concatenate([tiles, m_tile])
        address = np.concatenate([address[:n], area_address[m_tile] + m_offset])
        order = np.lexsort((address, tile))            # stable: ties keep request order
        self.tile, self.address = tile[order], address[order]
        self.size = np.concatenate([sizes, m_size])[order]
        self.category = np.concatenate(
            [categories, np.full(m_tile.size, variables)])[order]
        self.owner = np.concatenate([owners, m_owner])[order]
        self.aligned = self._align(self.size)

    def _align(self, n: np.ndarray) -> np.ndarray:
        return -(-n // self.alignment) * self.alignment

    def _place(self, tiles, sizes, categories) -> np.ndarray:
        """Addresses: per tile, in category order, then request order, each aligned."""
        order = np.lexsort((categories, tiles))        # stable: request order within
        aligned = self._align(sizes[order])
        starts = np.cumsum(aligned) - aligned
        first = np.searchsorted(tiles[order], tiles[order], side="left")
        address = np.empty(tiles.size, np.int64)
        address[order] = starts - starts[first]
        return address

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name: self.by_category[i] for i, name in enumerate(CATEGORIES)}

    def allocations_on(self, tile: int) -> list[tuple[int, int, str, str]]:
        """(address, bytes, category, owner) of every allocation on a tile, by address
        (variables that are not always live may share an address)."""
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
        """Raise TileMemoryError for the tile that is most over its budget, if any; it names
        the largest owners there (a variable that is not always live with its own bytes)."""
        over = self.total - self.bytes_per_tile
        if over.size and over.max() > 0:
            tile = int(np.argmax(over))
            raise TileMemoryError(tile, int(self.total[tile]), self.bytes_per_tile,
                                  self.largest_on(tile))


def _nonempty(tiles, sizes, *rest) -> list[np.ndarray]:
    """The requests (parallel arrays) of more than zero bytes."""
    arrays = [np.asarray(x, np.int64) for x in (tiles, sizes, *rest)]
    keep = arrays[1] > 0
    return [x[keep] for x in arrays]
