"""Ring collectives across replicas, built from cross-replica copies and popops map vertices:
all-reduce, and its two halves on their own, reduce-scatter and all-gather.

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
Each chunk is reduced ONCE, by one replica, and only copied afterwards. (gcl.reduce_scatter
starts the ring one chunk earlier, so replica j ends with chunk j, and pads the tensor with
zeros to r full chunks, as PopLibs does.)

All-gather, steps s = 0 .. r-2, each ONE exchange: at s = 0 replica j writes its reduced chunk
j+1 into its own result and into replica j+1's; then replica j forwards the chunk j+1-s it
received in the step before. Copies move bits, so every replica ends with the same bits.
(gcl.all_gather does the same with every replica's whole tensor as its chunk.)

Cost: 2(r-1) exchanges, each moving about n/r elements per replica over the link to the next
replica (the IPU-Links when the replicas sit on different IPUs), plus r-1 compute sets.

The all-reduce's steps go into the sequence as one prog.RingAllReduce: the profile shows each
step, and in compiled mode a sum of FLOAT tensors runs in one kernel call (machine/ring.py)
that leaves every bit as the steps would (a Pod16 training step's took 0.8 ms, now 0.2-0.4).
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import Tensor, concat
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


def _check_tensor(graph, t, seq, what: str) -> None:
    if not isinstance(t, Tensor):
        raise GraphError(f"{what}: expected a tensor, got {type(t).__name__}")
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    graph.check_tensor(t)
    tiles = graph.get_top_level_graph().tiles_of(t)
    if (tiles < 0).any():
        raise GraphError(f"{what}: tensor '{t.name}' has {int((tiles < 0).sum())} elements "
                         "on no tile; map it first (poputil.map_tensor_linearly)")


def _check(graph, t, op, seq, what: str) -> Operation:
    op = Operation.parse(op)
    _check_tensor(graph, t, seq, what)
    if op not in _COMBINE:
        raise GraphError(f"{what}: {op.name} is not a cross-replica operation; square with "
                         "popops.square first, then all-reduce with ADD")
    if op.is_logical != (t.dtype is T.BOOL):
        raise GraphError(f"{what}: {op.name} on '{t.name}' of type {t.dtype}: the logical "
                         "operations take BOOL tensors, the others numbers")
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


def shard_size(n: int, replicas: int) -> int:
    """Elements per replica when n elements are cut into `replicas` equal shards, the last
    padded (as PopART pads replicated tensor sharding: 30 over 4 -> 8 each)."""
    return -(-int(n) // int(replicas))


def reduce_scatter(graph, t, op, seq, name: str = "") -> Tensor:
    """A new tensor of shard_size(n, r) elements: on replica i, chunk i of t (flattened, n
    elements, padded with zeros to r chunks) reduced with op across the replicas; the pad of
    the last chunk holds the zeros reduced. The ring's first half (see all_reduce): r - 1
    exchanges and combines. With one replica, a flat copy of t."""
    name = name or "reduce_scatter"
    op = _check(graph, t, op, seq, f"reduce_scatter '{name}'")
    g = graph.get_top_level_graph()
    r, n = g.replication_factor, t.num_elements()
    if n == 0:
        raise GraphError(f"reduce_scatter '{name}': tensor '{t.name}' has no elements")
    m = shard_size(n, r)
    flat = t.flatten()
    if r == 1:
        out = graph.clone(flat, f"{name}/out")
        seq.add(prog.Copy(flat, out, name=f"{name}/copy"))
        return out
    if r * m > n:
        pad = g.add_constant(t.dtype, [r * m - n], 0, f"{name}/pad")
        g.set_tile_mapping(pad, int(g.tiles_of(flat)[-1]))
        flat = concat([flat, pad])
    return _reduce_scatter(g, flat, m, [m] * r, op, -1, seq, name)[0]


def all_gather(graph, t, seq, name: str = "") -> Tensor:
    """A new tensor [r, *t.shape], the same on every replica: row i is replica i's t (each
    row mapped like t). The ring's second half: r - 1 exchanges."""
    name = name or "all_gather"
    _check_tensor(graph, t, seq, f"all_gather '{name}'")
    g = graph.get_top_level_graph()
    r = g.replication_factor
    out = g.add_variable(t.dtype, [r, *t.shape], f"{name}/out")
    g.set_tile_mapping(out, np.tile(g.tiles_of(t), r))
    all_gather_to_destination(graph, t, out, seq, name)
    return out


def all_gather_to_destination(graph, t, destination, seq, name: str = "") -> None:
    """all_gather into an existing tensor of r x t's elements (in flattened order: replica
    0's t, then replica 1's, ...), mapped as the caller chose (gcl's
    allGatherToDestinationCrossReplica)."""
    name = name or "all_gather"
    what = f"all_gather '{name}'"
    _check_tensor(graph, t, seq, what)
    _check_tensor(graph, destination, seq, what)
    g = graph.get_top_level_graph()
    r, n = g.replication_factor, t.num_elements()
    if destination.num_elements() != r * n or destination.dtype is not t.dtype:
        raise GraphError(f"{what}: destination '{destination.name}' must hold {r} x {n} "
                         f"{t.dtype} elements, not {destination.num_elements()} "
                         f"{destination.dtype}")
    rows = destination.flatten()
    if r == 1:
        seq.add(prog.Copy(t.flatten(), rows, name=f"{name}/copy"))
    elif n:
        _all_gather(g, lambda c: t.flatten(), lambda c: rows.slice(c * n, (c + 1) * n),
                    [n] * r, 0, seq, name)


# Poplar's names (gcl::allReduceCrossReplica, gcl::allReduceInPlaceCrossReplica, ...)
all_reduce_cross_replica = all_reduce
all_reduce_in_place_cross_replica = all_reduce_in_place
reduce_scatter_cross_replica = reduce_scatter
all_gather_cross_replica = all_gather
all_gather_to_destination_cross_replica = all_gather_to_destination


def _ring(g, t, out, op: Operation, seq, name: str) -> None:
    """All-reduce = reduce-scatter (replica j ends with chunk j+1) + all-gather of the chunks."""
    r = g.replication_factor
    n = t.num_elements()
    if n == 0:
        return
    m = -(-n // r)
    flat, res = t.flatten(), out.flatten()
    size = [max(0, min(m, n - c * m)) for c in range(r)]
    steps = prog.Sequence()
    recv, mine = _reduce_scatter(g, flat, m, size, op, 0, steps, name)
    _all_gather(g, lambda c: recv.slice(0, size[c]), lambda c: res.slice(c * m, c * m + size[c]),
                size, 1, steps, name)
    seq.add(prog.RingAllReduce(steps.programs, flat, res, recv, mine, op.name.lower(), size, name))


def _reduce_scatter(g, flat, m: int, size: list, op: Operation, shift: int, seq, name: str):
    """The ring's reduce-scatter over chunk c = flat[c*m : c*m + size[c]]: after it replica j's
    `recv` holds chunk (j + 1 + shift) mod r fully reduced. Returns (recv, mine), m elements
    each."""
    r, n = g.replication_factor, flat.num_elements()

    def chunk(v, c):
        return v.slice(c * m, c * m + size[c])

    # the buffers: element k where the tensor's element k*r lives, so every tile of the
    # tensor holds about 1/r of them and the combining work is spread like the data
    tiles = g.tiles_of(flat)[np.minimum(np.arange(m) * r, n - 1)]
    mapping = per_tile_runs(tiles, np.arange(m), g.target.num_tiles)
    recv = g.add_variable(flat.dtype, [m], f"{name}/recv")
    mine = g.add_variable(flat.dtype, [m], f"{name}/mine")
    g.set_tile_mapping(recv, mapping)
    g.set_tile_mapping(mine, mapping)

    combine = prog.Sequence()
    map_in_place(g, _COMBINE[op](E._1, E._2), [recv, mine], combine, f"{name}/combine")

    for s in range(r - 1):
        moves = []
        for j in range(r):
            nxt, c, own = (j + 1) % r, (j - s + shift) % r, (j - s - 1 + shift) % r
            if size[c]:
                src = chunk(flat, c) if s == 0 else recv.slice(0, size[c])
                moves.append((j, src, nxt, recv.slice(0, size[c])))
            if size[own]:
                moves.append((j, chunk(flat, own), j, mine.slice(0, size[own])))
        seq.add(prog.CrossReplicaCopy(moves, f"{name}/reduce_scatter{s}"))
        seq.add(combine)
    return recv, mine


def _all_gather(g, own, row, size: list, shift: int, seq, name: str) -> None:
    """The ring's all-gather: replica j holds own(c) for c = (j + shift) mod r; after it
    every replica's row(c) holds it, for every c (chunks with size[c] == 0 are skipped).
    At s = 0 replica j writes own(c) into its own row(c) and its neighbour's, then forwards
    the row it received in the step before."""
    r = g.replication_factor
    for s in range(r - 1):
        moves = []
        for j in range(r):
            nxt, c = (j + 1) % r, (j + shift - s) % r
            if not size[c]:
                continue
            if s == 0:
                src = own(c)
                moves.append((j, src, j, row(c)))
            else:
                src = row(c)
            moves.append((j, src, nxt, row(c)))
        seq.add(prog.CrossReplicaCopy(moves, f"{name}/all_gather{s}"))
