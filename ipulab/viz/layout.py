"""Where tiles go on screen, and how tiles are grouped when there are too many to draw one by one.

Both are plain numpy, shared by every figure:
- `tile_grid`: a physical-looking floor plan. Each IPU is a block of tile columns (a Mk2/Bow IPU:
  1,472 tiles = 46 columns x 32 rows); IPUs sit side by side with a gap, four to a row of IPUs
  (one Bow-2000 / IPU-M2000 per row).
- `tile_groups`: contiguous ranges of tiles that never straddle an IPU while there are at least as
  many groups as IPUs; figures show a group's max (time) or sum (bytes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .base import plural

IPUS_PER_ROW = 4


def ipu_shape(tiles_per_ipu: int) -> tuple[int, int]:
    """(rows, columns) of tiles on one IPU: the divisor of tiles_per_ipu nearest its square root
    (1,472 -> 32 x 46, 1,216 -> 32 x 38, 4 -> 2 x 2); a near-square grid with a short last column
    when no divisor gives a sensible shape (a prime number of tiles, say)."""
    n = max(int(tiles_per_ipu), 1)
    rows = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    if n // rows > 3 * rows:
        rows = math.isqrt(n - 1) + 1
    return rows, -(-n // rows)


@dataclass(frozen=True)
class TileGrid:
    """Screen position of every tile: x = tile column, y = tile row (0 at the top)."""

    rows: int            # tile rows per IPU
    cols: int            # tile columns per IPU
    gap: int             # empty columns/rows between IPUs
    ipus_per_row: int
    num_ipus: int
    tile: np.ndarray
    ipu: np.ndarray
    x: np.ndarray
    y: np.ndarray

    @property
    def width(self) -> int:
        n = min(self.num_ipus, self.ipus_per_row)
        return n * self.cols + (n - 1) * self.gap

    @property
    def height(self) -> int:
        n = -(-self.num_ipus // self.ipus_per_row)
        return n * self.rows + (n - 1) * self.gap

    def ipu_origin(self) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the top-left tile slot of each IPU."""
        i = np.arange(self.num_ipus)
        return ((i % self.ipus_per_row) * (self.cols + self.gap),
                (i // self.ipus_per_row) * (self.rows + self.gap))


def tile_grid(num_tiles: int, tiles_per_ipu: int, ipus_per_row: int = IPUS_PER_ROW) -> TileGrid:
    rows, cols = ipu_shape(tiles_per_ipu)
    num_ipus = max(-(-num_tiles // tiles_per_ipu), 1)
    gap = max(1, round(0.08 * cols))
    tile = np.arange(num_tiles, dtype=np.int64)
    ipu, local = np.divmod(tile, tiles_per_ipu)
    col, row = np.divmod(local, rows)
    x = (ipu % ipus_per_row) * (cols + gap) + col
    y = (ipu // ipus_per_row) * (rows + gap) + row
    return TileGrid(rows, cols, gap, ipus_per_row, num_ipus, tile, ipu, x, y)


@dataclass(frozen=True)
class TileGroups:
    """Contiguous tile ranges [starts[i], ends[i]) that cover every tile once."""

    starts: np.ndarray
    ends: np.ndarray
    tiles_per_ipu: int

    def __len__(self) -> int:
        return int(self.starts.size)

    @property
    def lo(self) -> np.ndarray:
        return self.starts

    @property
    def hi(self) -> np.ndarray:
        """Last tile of each group (inclusive)."""
        return self.ends - 1

    @property
    def sizes(self) -> np.ndarray:
        return self.ends - self.starts

    def of(self, tiles) -> np.ndarray:
        """Group index of each tile."""
        return np.searchsorted(self.starts, np.asarray(tiles, np.int64), side="right") - 1

    def max(self, per_tile: np.ndarray) -> np.ndarray:
        """Max over each group's tiles, along the last axis."""
        return np.maximum.reduceat(per_tile, self.starts, axis=-1)

    def sum(self, per_tile: np.ndarray) -> np.ndarray:
        return np.add.reduceat(per_tile, self.starts, axis=-1)

    def describe(self, noun: str) -> str:
        """'4 rows, one per tile' or '64 rows of up to 92 tiles' (noun: what a group is drawn as)."""
        size = int(self.sizes.max()) if len(self) else 0
        if size <= 1:
            return f"{plural(len(self), noun)}, one per tile"
        return f"{plural(len(self), noun)} of up to {size:,} tiles"

    def labels(self) -> list[str]:
        """'tiles 0-91' (or 'tile 5' for a group of one), with the IPU when there are several."""
        multi = self.ends[-1] > self.tiles_per_ipu if len(self) else False
        out = []
        for lo, hi in zip(self.lo.tolist(), self.hi.tolist()):
            text = f"tile {lo}" if lo == hi else f"tiles {lo}–{hi}"
            if multi:
                a, b = lo // self.tiles_per_ipu, hi // self.tiles_per_ipu
                text += f" (IPU {a})" if a == b else f" (IPUs {a}–{b})"
            out.append(text)
        return out


def tile_groups(num_tiles: int, tiles_per_ipu: int, max_groups: int) -> TileGroups:
    """At most max_groups contiguous groups of tiles; groups stay within one IPU when there are
    at least as many groups as IPUs (else whole IPUs are grouped)."""
    num_ipus = max(-(-num_tiles // tiles_per_ipu), 1)
    max_groups = max(int(max_groups), 1)
    if max_groups >= num_ipus:
        per_ipu = min(max_groups // num_ipus, tiles_per_ipu)
        size = -(-tiles_per_ipu // per_ipu)
        local = np.arange(0, tiles_per_ipu, size, dtype=np.int64)
        starts = (np.arange(num_ipus, dtype=np.int64)[:, None] * tiles_per_ipu + local).ravel()
    else:
        per_group = -(-num_ipus // max_groups)
        starts = np.arange(0, num_ipus, per_group, dtype=np.int64) * tiles_per_ipu
    starts = starts[starts < num_tiles]
    ends = np.append(starts[1:], num_tiles)
    return TileGroups(starts, ends, tiles_per_ipu)
