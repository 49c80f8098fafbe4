"""Compiled copy plans: element moves merged into contiguous runs, run by one numba call."""
from __future__ import annotations

from functools import cached_property
from typing import NamedTuple

import numpy as np

from .cost import exchange_cost
from .kernels import copy_runs, copy_runs_replicated, element_runs, frozen


class Traffic(NamedTuple):
    """What a plan moves between tiles: (src_tile, dst_tile, bytes) per run that leaves its
    tile, for replica 0, repeated `replicas` times `tile_stride` tiles apart."""

    src_tile: np.ndarray
    dst_tile: np.ndarray
    nbytes: np.ndarray
    replicas: int = 1
    tile_stride: int = 0

    def expand(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every replica's runs: (src_tile, dst_tile, bytes)."""
        if self.replicas == 1:
            return self.src_tile, self.dst_tile, self.nbytes
        shift = np.repeat(np.arange(self.replicas, dtype=np.int64) * self.tile_stride,
                          self.src_tile.size)
        return (np.tile(self.src_tile, self.replicas) + shift,
                np.tile(self.dst_tile, self.replicas) + shift,
                np.tile(self.nbytes, self.replicas))


def intervals_overlap(a_start, a_len, b_start, b_len) -> bool:
    """Whether any interval of set a intersects any interval of set b."""
    if a_start.size == 0 or b_start.size == 0:
        return False
    if (a_start + a_len).max() <= b_start.min() or (b_start + b_len).max() <= a_start.min():
        return False          # apart as a whole (a buffer filled from variables, say)
    order = np.argsort(a_start, kind="stable")
    s = a_start[order]
    reach = np.maximum.accumulate(s + a_len[order])
    idx = np.searchsorted(s, b_start + b_len, side="left") - 1
    ok = idx >= 0
    return bool(np.any(reach[idx[ok]] > b_start[ok]))


def merged_runs(starts, length, same=()) -> tuple:
    """Runs that follow on from the one before in every start of `starts` (and have the
    same value in every array of `same`) merged into it: the same copies in the same order,
    in fewer runs. Returns the merged starts, length, then the merged `same` arrays.

    Planning keeps runs apart at tile boundaries (each run's bytes belong to one pair of
    tiles); running them needs no such boundary. An all-reduce's step moves one element per
    tile, and its runs merge twelve to one."""
    length = np.asarray(length)
    if length.size < 2:
        return (*starts, length, *same)
    follows = np.ones(length.size - 1, bool)
    for s in starts:
        follows &= s[:-1] + length[:-1] == s[1:]
    for x in same:
        follows &= x[:-1] == x[1:]
    if not follows.any():
        return (*starts, length, *same)
    first = np.flatnonzero(np.concatenate(([True], ~follows)))
    return (*(s[first] for s in starts), np.add.reduceat(length, first),
            *(x[first] for x in same))


class CopyPlan:
    """Copy src elements to dst elements of one arena, compiled once.

    Runs never cross a tile boundary, so each run has one source and one destination tile and
    the plan knows exactly how many bytes every tile sends and receives. A replicated plan
    (replicated()) holds replica 0's runs and, per run, how far replica i's source and
    destination are (i times the strides): one call still copies every replica's runs.
    """

    replicas = 1
    tile_stride = 0

    def __init__(self, target, src: np.ndarray, dst: np.ndarray, src_tile: np.ndarray,
                 dst_tile: np.ndarray, elem_bytes: int):
        """From element addresses and tiles (merged into runs here)."""
        src, dst = np.ascontiguousarray(src, np.int64), np.ascontiguousarray(dst, np.int64)
        src_tile = np.ascontiguousarray(src_tile, np.int64)
        dst_tile = np.ascontiguousarray(dst_tile, np.int64)
        starts = element_runs(frozen(src), frozen(dst), frozen(src_tile), frozen(dst_tile))
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
        self._runs, _ = self._tables()
        self._target = target

    def _tables(self, strides: tuple = (), replicas: int = 1) -> tuple:
        """What run() reads: (runs, strides), the runs merged where they follow on and, for a
        staged plan, where each waits in between. As uint32 when the addresses fit (they always
        do but in arenas of 4G elements), which numba indexes without the check for a negative
        index that it makes on every signed one: a third off the time of a gather of short
        runs."""
        src, dst, length, *strides = merged_runs((self.src_start, self.dst_start), self.length,
                                                 strides)
        runs = [src, dst, length]
        if self.staged:
            runs.insert(1, np.cumsum(length) - length)
        top = max((int(t.max()) for t in runs if t.size), default=0) + \
            (replicas - 1) * max((int(x.max()) for x in strides if x.size), default=0) + \
            int(length.max(initial=0))
        itype = np.uint32 if top < 2**32 else np.int64
        if strides:         # runs in groups of the same strides: (group starts, strides)
            ss, ds = strides
            first = np.flatnonzero(np.concatenate(([True], (ss[1:] != ss[:-1]) |
                                                   (ds[1:] != ds[:-1]))))
            strides = (np.append(first, ss.size), ss[first], ds[first])
        return (tuple(np.ascontiguousarray(t, itype) for t in runs),
                tuple(np.ascontiguousarray(x, itype) for x in strides))

    def replicated(self, replicas: int, src_stride, dst_stride, tile_stride: int) -> "CopyPlan":
        """This plan (replica 0's) run on every replica: replica i's run r copies from
        src_start[r] + i * src_stride[r] to dst_start[r] + i * dst_stride[r], its tiles
        tile_stride * i further on."""
        if replicas == 1:
            return self
        plan = CopyPlan.__new__(CopyPlan)
        plan.__dict__.update(self.__dict__)
        plan.__dict__.pop("cycles", None)
        plan.replicas, plan.tile_stride = int(replicas), int(tile_stride)
        plan.num_elements = self.num_elements * replicas
        strides = tuple(np.broadcast_to(np.asarray(x, np.int64), self.length.shape)
                        for x in (src_stride, dst_stride))
        plan._runs, plan._strides = self._tables(strides, replicas)
        return plan

    def __getstate__(self) -> dict:
        """What running needs (a stored executable): the run tables, not the planning arrays
        (addresses, tiles and bytes as int64), which cost and traffic were computed from."""
        keep = ("_runs", "_strides", "replicas", "tile_stride", "staged", "num_elements",
                "elem_bytes")
        return {k: v for k, v in self.__dict__.items() if k in keep}

    @cached_property
    def cycles(self) -> dict:
        """Per-tile cycles of replica 0's runs alone (a compiler costs whole phases of plans at
        once)."""
        return exchange_cost(self._target, self.src_tile, self.dst_tile, self.bytes,
                             self.src_start)

    def run(self, src_arena: np.ndarray, dst_arena: np.ndarray) -> None:
        self.run_part(src_arena, dst_arena, 0, self.parts)

    def call(self, src_arena: np.ndarray, dst_arena: np.ndarray, lo: int = 0,
             hi: int | None = None) -> tuple | None:
        """(fn, args): the one kernel call that copies replicas lo <= i < hi (every replica
        by default; a plan of one replica copies all of itself), for a caller that makes it
        many times (None: nothing to copy)."""
        if self.num_elements == 0:
            return None
        if self.replicas == 1:
            lo, hi = 0, self.parts
        elif hi is None:
            hi = self.replicas
        if self.staged:
            return self.run_part, (src_arena, dst_arena, lo, hi)
        if self.replicas > 1:
            return copy_runs_replicated, (src_arena, dst_arena, *self._runs, *self._strides, lo,
                                          hi)
        return copy_runs, (src_arena, dst_arena, *self._runs)

    @property
    def parts(self) -> int:
        """How finely run_part can cut the plan: into replicas, else into runs (a staged plan
        of one replica reads all it copies before it writes: it is one part)."""
        if self.replicas > 1:
            return self.replicas
        return 1 if self.staged else int(self._runs[-1].shape[0])

    def run_part(self, src_arena: np.ndarray, dst_arena: np.ndarray, lo: int, hi: int) -> None:
        """Copy parts lo <= i < hi: replicas of a replicated plan, else runs (lanes.py runs
        parts at once: they write disjoint elements)."""
        if self.num_elements == 0 or lo >= hi:
            return
        if self.staged:
            src, tmp_start, dst, length = self._runs
            n = self.num_elements // self.replicas
            shift = self._run_strides() if self.replicas > 1 else None
            for i in range(lo, hi) if self.replicas > 1 else range(1):
                s, d = (src, dst) if i == 0 else (src + i * shift[0], dst + i * shift[1])
                tmp = np.empty(n, src_arena.dtype)
                copy_runs(src_arena, tmp, s, tmp_start, length)
                copy_runs(tmp, dst_arena, tmp_start, d, length)
        elif self.replicas > 1:
            copy_runs_replicated(src_arena, dst_arena, *self._runs, *self._strides, lo, hi)
        elif hi - lo == self._runs[0].shape[0]:
            copy_runs(src_arena, dst_arena, *self._runs)
        else:
            copy_runs(src_arena, dst_arena, *(t[lo:hi] for t in self._runs))

    def _run_strides(self) -> tuple:
        """Each run's (src, dst) stride, from the groups in self._strides."""
        group, ss, ds = self._strides
        return tuple(np.repeat(x, np.diff(group)) for x in (ss, ds))

    def traffic(self) -> Traffic:
        """What leaves its tile, run by run (replica 0's, and how it repeats)."""
        moved = self.src_tile != self.dst_tile
        return Traffic(self.src_tile[moved], self.dst_tile[moved], self.bytes[moved],
                       self.replicas, self.tile_stride)
