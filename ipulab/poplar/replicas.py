"""Replica addressing: replica 0's compiled plans -> every replica's.

A replicated graph (replication_factor r) is compiled ONCE, for replica 0, and every plan is
then replicated by offsetting element addresses and tiles: replica i's tiles are
[i*R, (i+1)*R) (R tiles a replica), and in each storage arena replica i's copy of the
variables starts at i*V (V = the variables' size in that arena) while every exchange buffer
of n elements is allocated r times in a row (replica i's copy at +i*n). A replicated plan
is ONE plan holding all replicas' runs, so a run still makes one numba call per codelet
batch and per copy plan, however many replicas there are.

Exchange buffers live only during their compute set's step, so on the host they share one
scratch space, right after the variables, as on the tiles. On an unreplicated graph every
compute set's buffers start there: the arena stays the size of the variables and the largest
buffer set, small enough for the host's caches. On a replicated graph the buffers of
consecutive compute sets follow one another for up to SCRATCH_SPAN elements before the space
is used again: replica 0 can then run a compute set while replica 3 runs the one before it
(bsp.ReplicaSegment), neither writing what the other reads. Each compute set reports what it
took (scratch_used) so that runs which would share space are not run side by side.
"""
from __future__ import annotations

import numpy as np

from ..machine.exchange import CopyPlan

SCRATCH_SPAN = 1 << 21      # elements of an arena's scratch filled before it is used again


class Replicas:
    """The address spaces of a replicated graph, and replica 0's plans made every replica's.

    r: replicas; R: tiles of one replica; V: {arena: the variables' size}; sizes: {arena: the
    size the host arena needs}, grown by the buffers."""

    def __init__(self, state):
        self.target = state.target
        self.r = state.replication_factor
        self.R = self.target.num_tiles // self.r
        self.V = {k: a.size for k, a in state.arenas.items()}
        self.sizes = {k: self.r * v for k, v in self.V.items()}
        self._scratch = dict(self.sizes)
        self.new_scratch()

    def new_scratch(self) -> None:
        """Start a compute set's exchange buffers: right after the variables, or on a
        replicated graph after the last compute set's (back at the variables once SCRATCH_SPAN
        is filled). Per arena, the region starts and their replica strides (the variables,
        then each buffer of the compute set) and where its next buffer goes."""
        for k, v in self.V.items():
            if self.r == 1 or self._scratch[k] - self.r * v > SCRATCH_SPAN:
                self._scratch[k] = self.r * v
        self._opened = dict(self._scratch)
        self._regions = {k: ([0], [v]) for k, v in self.V.items()}

    def scratch_used(self) -> tuple:
        """(arena, start, end) of the scratch the current compute set's buffers take, every
        replica's copy."""
        return tuple((k, self._opened[k], end) for k, end in self._scratch.items()
                     if end > self._opened[k])

    def buffer(self, key: str, n: int) -> int:
        """Replica 0's address of a new n-element buffer (allocated once per replica) in the
        current compute set's scratch space."""
        start = self._scratch[key]
        self._scratch[key] += self.r * n
        self.sizes[key] = max(self.sizes[key], self._scratch[key])
        if self.r > 1:
            self._regions[key][0].append(start)
            self._regions[key][1].append(n)
        return start

    def strides(self, key: str, addrs: np.ndarray) -> np.ndarray:
        """Per replica-0 address: how far replica 1's copy of it is (V or a buffer's size)."""
        starts, strides = self._regions[key]
        i = np.searchsorted(np.asarray(starts, np.int64), addrs, side="right") - 1
        return np.asarray(strides, np.int64)[np.maximum(i, 0)]

    def addrs(self, key: str, addrs) -> np.ndarray:
        """Replica 0's addresses -> every replica's, replica by replica."""
        addrs = np.asarray(addrs, np.int64)
        if self.r == 1:
            return addrs
        stride = self.strides(key, addrs)
        return np.concatenate([addrs + i * stride for i in range(self.r)])

    def tiles(self, tiles) -> np.ndarray:
        tiles = np.asarray(tiles, np.int64)
        if self.r == 1:
            return tiles
        return np.concatenate([tiles + i * self.R for i in range(self.r)])

    def per_tile(self, per_tile: np.ndarray) -> np.ndarray:
        """A per-tile array of replica 0 (zero elsewhere) -> the same on every replica."""
        if self.r == 1:
            return per_tile
        return np.tile(np.asarray(per_tile)[:self.R], self.r)

    def plan(self, plan: CopyPlan, key: str) -> CopyPlan:
        """Replica 0's copy plan -> ONE plan moving the same data on every replica (it keeps
        replica 0's runs and each run's strides)."""
        if self.r == 1:
            return plan
        return plan.replicated(self.r, self.strides(key, plan.src_start),
                               self.strides(key, plan.dst_start), self.R)
