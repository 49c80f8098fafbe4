"""Ring all-reduce across replicas, built from cross-replica copies and popops map vertices.

The tensor (flattened, n elements) is cut into r chunks of m = ceil(n / r) elements (the last
ones may be shorter or empty); chunk c is elements [c*m, (c+1)*m). Replica j's neighbour in
the ring is replica j+1 (mod r). Two m-element buffers per replica, `recv` and `mine`, are
spread over the tiles that hold the tensor.

Reduce-scatter, steps s = 0 .. r-2, each ONE exchange then ONE compute set:
  exchange   replica j sends to replica j+1's recv: its own chunk j when s = 0, else its
             recv (the partial of chunk j-s); and copies its own chunk j-s-1 into its mine;
  compute    recv = recv op mine, on every replica (the same vertices on all of them).
After it, replica j's recv holds chunk j+1 fully reduced, in ring order:
  chunk c = ((x_c op x_{c+1}) op x_{c+2}) ... op x_{c-1}      (x_k is replica k's chunk c).
Each chunk is reduced ONCE, by one replica, and only copied afterwards.

All-gather, steps s = 0 .. r-2, each ONE exchange: at s = 0 replica j writes its reduced chunk
j+1 into its own result and into replica j+1's; then replica j forwards the chunk j+1-s it
received in the step before. Copies move bits, so every replica ends with the same bits.

Cost: 2(r-1) exchanges, each moving about n/r elements per replica over the link to the next
replica (the IPU-Links when the replicas sit on different IPUs), plus r-1 compute sets.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import Tensor
from ..poplar import program as prog
from ..poplar import types as T
from ..popops import expr as E
from ..popops.elementwise import map_in_place
from ..poputil import per_tile_runs
from ..popops.operation import Operation

_COMBINE = {
    Operation.ADD: lambda a, b: a + b,
    Operation.MUL: lambda a, b: a * b,
    Operation.MAX: E.maximum,
    Operation.MIN: E.minimum,
    Operation.LOGICAL_AND: E.logical_and,
    Operation.LOGICAL_OR: E.logical_or,
}


def _check(graph, t, op, seq, what: str) -> Operation:
    op = Operation.parse(op)
    if not isinstance(t, Tensor):
        raise GraphError(f"{what}: expected a tensor, got {type(t).__name__}")
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    graph.check_tensor(t)
    if op not in _COMBINE:
        raise GraphError(f"{what}: {op.name} is not a cross-replica operation; square with "
                         "popops.square first, then all-reduce with ADD")
    if op.is_logical != (t.dtype is T.BOOL):
        raise GraphError(f"{what}: {op.name} on '{t.name}' of type {t.dtype}: the logical "
                         "operations take BOOL tensors, the others numbers")
    tiles = graph.get_top_level_graph().tiles_of(t)
    if (tiles < 0).any():
        raise GraphError(f"{what}: tensor '{t.name}' has {int((tiles < 0).sum())} elements "
                         "on no tile; map it first (poputil.map_tensor_linearly)")
    return op


def all_reduce(graph, t, op, seq, name: str = "") -> Tensor:
    """A new tensor mapped like t: t reduced with op across all replicas, element by element
    (op: popops.Operation or "add", "mul", "max", "min", "logical_and", "logical_or").
    The result is identical, bit for bit, on every replica. With one replica, a copy of t."""
    name = name or "all_reduce"
    op = _check(graph, t, op, seq, f"all_reduce '{name}'")
    out = graph.clone(t, f"{name}/out")
    if graph.replication_factor == 1:
        seq.add(prog.Copy(t, out, name=f"{name}/copy"))
    else:
        _ring(graph.get_top_level_graph(), t, out, op, seq, name)
    return out


def all_reduce_in_place(graph, t, op, seq, name: str = "") -> None:
    """t = t reduced with op across all replicas (see all_reduce), written into t itself."""
    name = name or "all_reduce_in_place"
    op = _check(graph, t, op, seq, f"all_reduce_in_place '{name}'")
    if graph.replication_factor > 1:
        _ring(graph.get_top_level_graph(), t, t, op, seq, name)


# Poplar's names (gcl::allReduceCrossReplica, gcl::allReduceInPlaceCrossReplica)
all_reduce_cross_replica = all_reduce
all_reduce_in_place_cross_replica = all_reduce_in_place


def _ring(g, t, out, op: Operation, seq, name: str) -> None:
    r = g.replication_factor
    n = t.num_elements()
    if n == 0:
        return
    m = -(-n // r)
    flat, res = t.flatten(), out.flatten()
    size = [max(0, min(m, n - c * m)) for c in range(r)]

    def chunk(v, c):
        return v.slice(c * m, c * m + size[c])

    # the buffers: element k where the tensor's element k*r lives, so every tile of the
    # tensor holds about 1/r of them and the combining work is spread like the data
    tiles = g.tiles_of(flat)[np.minimum(np.arange(m) * r, n - 1)]
    mapping = per_tile_runs(tiles, np.arange(m), g.target.num_tiles)
    recv = g.add_variable(t.dtype, [m], f"{name}/recv")
    mine = g.add_variable(t.dtype, [m], f"{name}/mine")
    g.set_tile_mapping(recv, mapping)
    g.set_tile_mapping(mine, mapping)

    combine = prog.Sequence()
    map_in_place(g, _COMBINE[op](E._1, E._2), [recv, mine], combine, f"{name}/combine")

    for s in range(r - 1):                        # reduce-scatter
        moves = []
        for j in range(r):
            nxt, c, own = (j + 1) % r, (j - s) % r, (j - s - 1) % r
            if size[c]:
                src = chunk(flat, c) if s == 0 else recv.slice(0, size[c])
                moves.append((j, src, nxt, recv.slice(0, size[c])))
            if size[own]:
                moves.append((j, chunk(flat, own), j, mine.slice(0, size[own])))
        seq.add(prog.CrossReplicaCopy(moves, f"{name}/reduce_scatter{s}"))
        seq.add(combine)
    for s in range(r - 1):                        # all-gather
        moves = []
        for j in range(r):
            nxt, c = (j + 1) % r, (j + 1 - s) % r
            if not size[c]:
                continue
            if s == 0:
                src = recv.slice(0, size[c])
                moves.append((j, src, j, chunk(res, c)))
            else:
                src = chunk(res, c)
            moves.append((j, src, nxt, chunk(res, c)))
        seq.add(prog.CrossReplicaCopy(moves, f"{name}/all_gather{s}"))
