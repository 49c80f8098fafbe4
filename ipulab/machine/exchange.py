"""Compiled copy plans: element moves merged into contiguous runs, run by one numba call."""
from __future__ import annotations

from functools import cached_property

import numpy as np

from .cost import exchange_cost
from .kernels import copy_runs, element_runs


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
        """From element addresses and tiles (merged into runs here)."""
        src, dst = np.ascontiguousarray(src, np.int64), np.ascontiguousarray(dst, np.int64)
        src_tile = np.ascontiguousarray(src_tile, np.int64)
        dst_tile = np.ascontiguousarray(dst_tile, np.int64)
        starts = element_runs(src, dst, src_tile, dst_tile)
        length = np.diff(np.append(starts, src.size)).astype(np.int64)
        self._set_runs(target, src[starts], dst[starts], length, src_tile[starts],
                       dst_tile[starts], elem_bytes)

    @classmethod
    def from_runs(cls, target, src_start, dst_start, length, src_tile, dst_tile,
                  elem_bytes: int) -> "CopyPlan":
        """From runs already merged (e.g. by kernels.slot_runs), without element arrays."""
        plan = cls.__new__(cls)
        plan._set_runs(target, src_start, dst_start, length, src_tile, dst_tile, elem_bytes)
        return plan

    def _set_runs(self, target, src_start, dst_start, length, src_tile, dst_tile, elem_bytes):
        self.src_start, self.dst_start, self.length = src_start, dst_start, length
        self.src_tile, self.dst_tile = src_tile, dst_tile
        self.elem_bytes = elem_bytes
        self.bytes = self.length * elem_bytes
        self.num_elements = int(length.sum())
        # A copy reads everything before it writes anything: stage through a buffer if the
        # destination overlaps the source (e.g. shifting a tensor by one element).
        self.staged = intervals_overlap(self.src_start, self.length, self.dst_start, self.length)
        # What run() reads: the runs as uint32 when the addresses fit (they always do but in
        # arenas of 4G elements), which numba indexes without the check for a negative index
        # that it makes on every signed one: a third off the time of a gather of short runs.
        tables = [src_start, dst_start, length]
        if self.staged:
            tables.insert(1, np.cumsum(length) - length)     # where each run waits in between
        top = max((int(t.max()) + int(length.max()) for t in tables if t.size), default=0)
        itype = np.uint32 if top < 2**32 else np.int64
        self._runs = tuple(np.ascontiguousarray(t, itype) for t in tables)
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
            src, tmp_start, dst, length = self._runs
            tmp = np.empty(self.num_elements, src_arena.dtype)
            copy_runs(src_arena, tmp, src, tmp_start, length)
            copy_runs(tmp, dst_arena, tmp_start, dst, length)
        else:
            copy_runs(src_arena, dst_arena, *self._runs)

    def traffic(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(src_tile, dst_tile, bytes) per run that leaves its tile."""
        moved = self.src_tile != self.dst_tile
        return self.src_tile[moved], self.dst_tile[moved], self.bytes[moved]
