"""GCL, Graphcore's collective communication library: all-reduce, reduce-scatter and
all-gather across the replicas of a replicated graph, as rings over the replicas' IPU-Links.

    g = poplar.Graph(dev, replication_factor=4)
    ...
    total = gcl.all_reduce(g, grads, "add", seq)        # a new tensor, the same on every replica
    gcl.all_reduce_in_place(g, grads, popops.Operation.ADD, seq)
    mine = gcl.reduce_scatter(g, grads, "add", seq)     # replica i: chunk i of the sum
    every = gcl.all_gather(g, mine, seq)                # [r, ...]: every replica's chunk
"""
from .collectives import (all_gather, all_gather_cross_replica, all_gather_to_destination,
                          all_gather_to_destination_cross_replica, all_reduce,
                          all_reduce_cross_replica, all_reduce_in_place,
                          all_reduce_in_place_cross_replica, reduce_scatter,
                          reduce_scatter_cross_replica, shard_size)

__all__ = ["all_reduce", "all_reduce_in_place", "all_reduce_cross_replica",
           "all_reduce_in_place_cross_replica", "reduce_scatter", "reduce_scatter_cross_replica",
           "all_gather", "all_gather_cross_replica", "all_gather_to_destination",
           "all_gather_to_destination_cross_replica", "shard_size"]
