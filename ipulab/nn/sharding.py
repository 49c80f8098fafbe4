"""Replicated tensor sharding (RTS, TrainConfig(rts=True)): the master weights and the optimizer
state stored once across the replicas instead of once on every replica.

All the weights, joined in state_dict order (n elements), are cut into r shards of
m = gcl.shard_size(n, r) elements, the last padded (PopART's rule: 30 over 4 -> 8 each);
replica i keeps shard i as the variable `weights/shard` [m]. A step then

  1. all-gathers the shards into the full weights every layer reads (gcl.all_gather, a ring
     over the IPU-Links), at the start of the training and the evaluation step;
  2. reduce-scatters the gradients instead of all-reducing them (gcl.reduce_scatter):
     replica i gets shard i of the summed gradient, the half of an all-reduce it needs;
  3. updates its own shard only (SGD on m elements; the velocity is a clone of the shard, so
     the optimizer state is sharded too, on-chip or off-chip).

The full weights are then working copies, written by the gather; only the shards persist.
The host writes and reads the shards (write/weights/shard, read/weights/shard: one row per
replica), and sees the weights as before through to_shards / from_shards.
"""
from __future__ import annotations

import numpy as np

from .. import gcl, poputil
from ..poplar import FLOAT, concat
from .build import flat


class ShardedWeights:
    """The shards of `weights` ({key: FLOAT variable}, in state_dict order) on graph g (a
    replicated graph of r > 1 replicas), and the collectives that use them. prefix starts
    every name (a phase's, phased.py); host: make the host handles of the shard (else its
    master copy is elsewhere, e.g. Streaming Memory)."""

    def __init__(self, g, weights: dict, prefix: str = "", host: bool = True):
        self.g, self.shapes = g, {k: tuple(t.shape) for k, t in weights.items()}
        self.r, self.prefix = g.replication_factor, prefix
        self.n = sum(t.num_elements() for t in weights.values())
        self.m = gcl.shard_size(self.n, self.r)
        self.shard = g.add_variable(FLOAT, [self.m], f"{prefix}weights/shard")
        poputil.map_tensor_linearly(g, self.shard)
        if host:
            g.create_host_write("write/weights/shard", self.shard)
            g.create_host_read("read/weights/shard", self.shard)
        full = flat(list(weights.values()))
        pad = self.r * self.m - self.n
        if pad:       # where the gathered padding lands (read by no one)
            tail = g.add_variable(FLOAT, [pad], f"{prefix}weights/gathered_pad")
            g.set_tile_mapping(tail, int(g.tiles_of(full)[-1]))
            full = concat([full, tail])
        self.gathered = full

    def gather(self, seq) -> None:
        """Every replica's shard into the full weights, on every replica."""
        gcl.all_gather_to_destination(self.g, self.shard, self.gathered, seq,
                                      f"{self.prefix}weights/all_gather")

    def update(self, grads, optimizer, seq, grad_scale: float, off_chip: bool) -> None:
        """Reduce-scatter the flat gradients and apply this replica's shard of them."""
        mine = gcl.reduce_scatter(self.g, grads, "add", seq, f"{self.prefix}grads/reduce_scatter")
        optimizer.build(self.g, self.shard, mine, seq, f"{self.prefix}sgd",
                        grad_scale=grad_scale, off_chip=off_chip)

    # --- the host's view ----------------------------------------------------------------------
    def to_shards(self, weights: dict) -> np.ndarray:
        """(r, m) float32: row i is replica i's shard of the weights (zero padding)."""
        out = np.zeros(self.r * self.m, np.float32)
        out[:self.n] = np.concatenate([np.ravel(weights[k]) for k in self.shapes])
        return out.reshape(self.r, self.m)

    def from_shards(self, shards: np.ndarray) -> dict:
        """The weights ({key: array in its shape}) from the (r, m) shards."""
        values, start, out = np.ravel(shards)[:self.n], 0, {}
        for key, shape in self.shapes.items():
            size = int(np.prod(shape, dtype=np.int64))
            out[key] = values[start:start + size].reshape(shape).copy()
            start += size
        return out


__all__ = ["ShardedWeights"]
