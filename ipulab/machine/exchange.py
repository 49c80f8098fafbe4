"""Compiled copy plans: element moves merged into contiguous runs, run by one numba call."""
from __future__ import annotations

from functools import cached_property

import numpy as np

from .cost import exchange_cost
from .kernels import copy_runs


def _runs(src: np.ndarray, dst: np.ndarray, src_tile: np.ndarray, dst_tile: np.ndarray):
    """Start index of every maximal run that is contiguous in src and dst and stays on one tile."""
    n = src.size
    brk = np.ones(n, bool)
    if n > 1:
        brk[1:] = ((np.diff(src) != 1) | (np.diff(dst) != 1)
                   | (src_tile[1:] != src_tile[:-1]) | (dst_tile[1:] != dst_tile[:-1]))
    return np.flatnonzero(brk)


def intervals_overlap(a_start, a_len, b_start, b_len) -> bool:
    """Whether any interval of set a intersects any interval of set b."""
    if a_start.size == 0 or b_start.size == 0:
        return False
    order = np.argsort(a_start, kind="stable")
    s = a_start[order]
    reach = np.maximum.accumulate(s + a_len[order])
    idx = np.searchsorted(s, b_start + b_len, side="left") - 1
    ok = idx >= 0
    return bool(np.any(reach[idx[ok]] > b_start[ok]))


class CopyPlan:
    """Copy src elements to dst elements of one arena, compiled once.

    Runs never cross a tile boundary, so each run has one source and one destination tile and
    the plan knows exactly how many bytes every tile sends and receives.
    """

    def __init__(self, target, src: np.ndarray, dst: np.ndarray, src_tile: np.ndarray,
                 dst_tile: np.ndarray, elem_bytes: int):
        src, dst = np.ascontiguousarray(src, np.int64), np.ascontiguousarray(dst, np.int64)
        starts = _runs(src, dst, src_tile, dst_tile)
        self.length = np.diff(np.append(starts, src.size)).astype(np.int64)
        self.src_start, self.dst_start = src[starts], dst[starts]
        self.src_tile = np.asarray(src_tile, np.int64)[starts]
        self.dst_tile = np.asarray(dst_tile, np.int64)[starts]
        self.bytes = self.length * elem_bytes
        self.num_elements = int(src.size)
        # A copy reads everything before it writes anything: stage through a buffer if the
        # destination overlaps the source (e.g. shifting a tensor by one element).
        self.staged = intervals_overlap(self.src_start, self.length, self.dst_start, self.length)
        if self.staged:
            self._tmp_start = np.cumsum(self.length) - self.length
        self._target = target

    @cached_property
    def cycles(self) -> dict:
        """Per-tile cycles of this copy alone (a compiler costs whole phases of plans at once)."""
        return exchange_cost(self._target, self.src_tile, self.dst_tile, self.bytes,
                             self.src_start)

    def run(self, src_arena: np.ndarray, dst_arena: np.ndarray) -> None:
        if self.num_elements == 0:
            return
        if self.staged:
            tmp = np.empty(self.num_elements, src_arena.dtype)
            copy_runs(src_arena, tmp, self.src_start, self._tmp_start, self.length)
            copy_runs(tmp, dst_arena, self._tmp_start, self.dst_start, self.length)
        else:
            copy_runs(src_arena, dst_arena, self.src_start, self.dst_start, self.length)

    def traffic(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(src_tile, dst_tile, bytes) per run that leaves its tile."""
        moved = self.src_tile != self.dst_tile
        return self.src_tile[moved], self.dst_tile[moved], self.bytes[moved]
