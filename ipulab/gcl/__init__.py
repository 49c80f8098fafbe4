"""GCL, Graphcore's collective communication library: all-reduce across the replicas of a
replicated graph, as a ring over the replicas' IPU-Links.

    g = poplar.Graph(dev, replication_factor=4)
    ...
    total = gcl.all_reduce(g, grads, "add", seq)        # a new tensor, the same on every replica
    gcl.all_reduce_in_place(g, grads, popops.Operation.ADD, seq)
"""
from .collectives import (all_reduce, all_reduce_cross_replica, all_reduce_in_place,
                          all_reduce_in_place_cross_replica)

__all__ = ["all_reduce", "all_reduce_in_place", "all_reduce_cross_replica",
           "all_reduce_in_place_cross_replica"]
