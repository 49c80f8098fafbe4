"""Replica addressing: replica 0's compiled plans -> every replica's.

A replicated graph (replication_factor r) is compiled ONCE, for replica 0, and every plan is
then replicated by offsetting element addresses and tiles: replica i's tiles are
[i*R, (i+1)*R) (R tiles a replica), and in each storage arena replica i's copy of the
variables starts at i*V (V = the variables' size in that arena) while every exchange buffer
of n elements is allocated r times in a row (replica i's copy at +i*n). A replicated plan
is ONE plan holding all replicas' runs, so a run still makes one numba call per codelet
batch and per copy plan, however many replicas there are.

Exchange buffers live only during their compute set's step, so on the host they share one
scratch space, right after the variables, as on the tiles: the arena stays the size of the
variables and the largest buffer set, small enough for the host's caches.
"""
from __future__ import annotations

import numpy as np

from ..machine.exchange import CopyPlan


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
        self.new_scratch()

    def new_scratch(self) -> None:
        """Start a compute set's exchange buffers where every compute set's start: right after
        the variables. Per arena, the region starts and their replica strides (the variables,
        then each buffer of the compute set) and where its next buffer goes."""
        self._scratch = {k: self.r * v for k, v in self.V.items()}
        self._regions = {k: ([0], [v]) for k, v in self.V.items()}

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
