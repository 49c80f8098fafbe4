"""Replicated tensor sharding (RTS, TrainConfig(rts=True)): the master weights and the optimizer
state stored once across the replicas instead of once on every replica.

All the weights, joined in state_dict order (n elements), are cut into r shards of
m = gcl.shard_size(n, r) elements, the last padded (PopART's rule: 30 over 4 -> 8 each);
replica i keeps shard i as the variable `weights/shard` [m]. A step then

  1. all-gathers the shards into the full weights every layer reads (gcl.all_gather, a ring
     over the IPU-Links), at the start of the training and the evaluation step;
  2. reduce-scatters the gradients instead of all-reducing them (gcl.reduce_scatter):
     replica i gets shard i of the summed gradient, the half of an all-reduce it needs;
  3. updates its own shard only (the optimizer on m elements; its state is a clone of the
     shard, so the optimizer state is sharded too, on-chip or off-chip).

Tensor boundaries then fall inside the shards, at places that differ from replica to replica,
while every replica runs the same graph. An optimizer that works element by element (SGD,
Adam) does not mind; LAMB needs a norm per weight tensor, so for it every tensor is sharded on
its own (per_tensor, as PopART shards each weight): tensor k of n_k elements is cut into r
chunks of m_k = shard_size(n_k, r), and shard i is chunk i of every tensor, one after the
other. Tensor k's slice is then at the same place [o_k, o_k + m_k) of every replica's shard,
its sum of squares there is a partial sum, and LAMB all-reduces the partial sums across the
replicas (optim/lamb.py). The padding is per tensor (at most r - 1 elements each).

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
    master copy is elsewhere, e.g. Streaming Memory). per_tensor: shard every weight tensor on
    its own, so that each shard holds a slice of each tensor at the same place on every
    replica (for LAMB's norms per tensor; see the module)."""

    def __init__(self, g, weights: dict, prefix: str = "", host: bool = True,
                 per_tensor: bool = False):
        self.g, self.shapes = g, {k: tuple(t.shape) for k, t in weights.items()}
        self.r, self.prefix, self.per_tensor = g.replication_factor, prefix, per_tensor
        self.n = sum(t.num_elements() for t in weights.values())
        # the parts sharded one by one (elements, and elements per shard): all, or each tensor
        self.sizes = [t.num_elements() for t in weights.values()] if per_tensor else [self.n]
        self.chunks = [gcl.shard_size(n, self.r) for n in self.sizes]
        self.m = sum(self.chunks)
        self.shard = g.add_variable(FLOAT, [self.m], f"{prefix}weights/shard")
        poputil.map_tensor_linearly(g, self.shard)
        if host:
            g.create_host_write("write/weights/shard", self.shard)
            g.create_host_read("read/weights/shard", self.shard)
        parts = [w.flatten() for w in weights.values()] if per_tensor else \
            [flat(list(weights.values()))]
        padded = []
        for key, part, n, chunk in zip(weights if per_tensor else [""], parts, self.sizes,
                                       self.chunks):
            pad = self.r * chunk - n
            if pad:   # where the gathered padding lands (read by no one)
                tail = g.add_variable(FLOAT, [pad], f"{prefix}weights/gathered_pad"
                                      + (f"/{key}" if key else ""))
                g.set_tile_mapping(tail, int(g.tiles_of(part)[-1]))
                part = concat([part, tail])
            padded.append(part)
        self.gathered = self._in_shard_order(padded)

    def _in_shard_order(self, parts):
        """The padded parts (r chunks each) as one view in the order of the shards: shard 0
        (chunk 0 of every part), shard 1, ..."""
        if len(parts) == 1:
            return parts[0]
        return concat([p.slice(i * c, (i + 1) * c) for i in range(self.r)
                       for p, c in zip(parts, self.chunks)])

    def gather(self, seq) -> None:
        """Every replica's shard into the full weights, on every replica."""
        gcl.all_gather_to_destination(self.g, self.shard, self.gathered, seq,
                                      f"{self.prefix}weights/all_gather")

    def update(self, grads, optimizer, seq, grad_scale: float, off_chip: bool) -> None:
        """Reduce-scatter the flat gradients and apply this replica's shard of them."""
        if self.per_tensor:
            grads = self._in_shard_order(self._padded(grads))
        mine = gcl.reduce_scatter(self.g, grads, "add", seq, f"{self.prefix}grads/reduce_scatter")
        optimizer.build(self.g, self.shard, mine, seq, f"{self.prefix}{optimizer.kind}",
                        grad_scale=grad_scale, off_chip=off_chip,
                        sizes=self.chunks if self.per_tensor else None, partial=True)

    def _padded(self, grads) -> list:
        """Each tensor's gradients, padded with zeros to r chunks (per_tensor)."""
        out, start = [], 0
        for j, (n, chunk) in enumerate(zip(self.sizes, self.chunks)):
            part = grads.slice(start, start + n)
            start += n
            if self.r * chunk > n:
                zeros = self.g.add_constant(grads.dtype, [self.r * chunk - n], 0,
                                            f"{self.prefix}grads/pad/{j}")
                self.g.set_tile_mapping(zeros, int(self.g.tiles_of(part)[-1]))
                part = concat([part, zeros])
            out.append(part)
        return out

    # --- the host's view ----------------------------------------------------------------------
    def to_shards(self, weights: dict) -> np.ndarray:
        """(r, m) float32: row i is replica i's shard of the weights (zero padding)."""
        values = np.concatenate([np.ravel(weights[k]) for k in self.shapes])
        out = np.zeros((self.r, self.m), np.float32)
        start = col = 0
        for n, chunk in zip(self.sizes, self.chunks):
            part = np.zeros(self.r * chunk, np.float32)
            part[:n] = values[start:start + n]
            out[:, col:col + chunk] = part.reshape(self.r, chunk)
            start, col = start + n, col + chunk
        return out

    def from_shards(self, shards: np.ndarray) -> dict:
        """The weights ({key: array in its shape}) from the (r, m) shards."""
        rows, col, parts = np.reshape(shards, (self.r, self.m)), 0, []
        for n, chunk in zip(self.sizes, self.chunks):
            parts.append(rows[:, col:col + chunk].reshape(-1)[:n])
            col += chunk
        values, start, out = np.concatenate(parts), 0, {}
        for key, shape in self.shapes.items():
            size = int(np.prod(shape, dtype=np.int64))
            out[key] = values[start:start + size].reshape(shape).copy()
            start += size
        return out


__all__ = ["ShardedWeights"]
