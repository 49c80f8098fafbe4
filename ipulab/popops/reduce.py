"""popops.reduce: a tensor reduced over any of its dimensions, in two stages.

Stage 1, on the tiles where the input lives (see reduceplan): each tile reduces its own
elements into partials, stored on that tile, up to 6 vertices per tile, one per group of
outputs (or slice of output columns).

Stage 2, a second compute set: the output is mapped linearly and each piece of it (up to 6
per tile) combines the partials that cover it, gathered from the tiles that made them by the
exchange. When every output has exactly one partial, stage 1 writes the output directly
(mapped where it was computed) and there is no second stage.

Floats accumulate in float32 (HALF too), always in the same order: deterministic.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import Regions, Tensor
from ..poplar import program as prog
from ..poplar import types as T
from ..poplar.vertices import per_vertex, ragged
from ..poputil import (grain_of, map_tensor_linearly, per_tile_runs, split_even,
                       tile_intervals)
from . import expr as E
from .elementwise import map
from .fill import fill
from .operation import Operation
from .reducecodelet import accumulator, identity, reduce_codelet
from .reduceplan import plan


def _dims(t: Tensor, dims, what: str) -> list[int]:
    dims = [dims] if isinstance(dims, (int, np.integer)) else list(dims)
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not \
                -t.rank <= d < t.rank:
            raise GraphError(f"{what}: {d!r} is not a dimension of '{t.name}' (rank {t.rank})")
        out.append(int(d) % t.rank)
    if len(set(out)) != len(out):
        raise GraphError(f"{what}: dimension listed twice in {dims}")
    return sorted(out)


def _out_dtype(dtype, op: Operation, what: str):
    if op.is_logical:
        return T.BOOL
    if dtype is T.BOOL:
        raise GraphError(f"{what}: {op.name} needs numbers, and '{what}' got BOOL; use "
                         "LOGICAL_AND / LOGICAL_OR, or cast to INT first")
    return dtype


def reduce(graph, t, dims, op, seq, name: str = "") -> Tensor:
    """t reduced over dims with op (popops.Operation or "add", "max", ...): a new tensor of
    t's shape without those dimensions. dims=[] applies the operation to single elements
    (a copy; squares for SQUARE_ADD)."""
    op = Operation.parse(op)
    name = name or f"reduce_{op.value}"
    what = f"reduce '{name}'"
    if not isinstance(t, Tensor):
        raise GraphError(f"{what}: expected a tensor, got {type(t).__name__}")
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    dims = _dims(t, dims, what)
    out_dtype = _out_dtype(t.dtype, op, what)
    if not dims:
        e = E._1 * E._1 if op is Operation.SQUARE_ADD else E._1
        return map(graph, E.cast(e, out_dtype), [t], seq, name)
    kept = [d for d in range(t.rank) if d not in dims]
    out = graph.add_variable(out_dtype, [t.shape[d] for d in kept], f"{name}/out")
    P, R = out.num_elements(), int(np.prod([t.shape[d] for d in dims]))
    if P == 0:
        return out
    if R == 0:
        map_tensor_linearly(graph, out)
        fill(graph, out, identity(op, out_dtype), seq, name)
        return out
    stage1 = plan(graph, t, kept, dims, P, R, grain_of(accumulator(t.dtype, op)), what)
    unit_tile, p0, p1 = stage1.arrays()
    cover = np.zeros(P + 1, np.int64)
    np.add.at(cover, p0, 1)
    np.add.at(cover, p1, -1)
    single = bool((np.cumsum(cover)[:P] == 1).all())
    # storage position s of stage 1's partials lives at element position[s] of `partials`
    if single:
        partials = out.flatten()
        width = p1 - p0
        position = np.arange(stage1.size) + np.repeat(p0 - (np.cumsum(width) - width), width)
    else:
        partials = graph.add_variable(accumulator(t.dtype, op), [stage1.size],
                                      f"{name}/partials")
        position = np.arange(stage1.size)
    graph.set_tile_mapping(partials, per_tile_runs(np.repeat(unit_tile, p1 - p0), position,
                                                   graph.target.num_tiles))
    codelet = reduce_codelet(op, t.dtype, partials.dtype, stage1.outer)
    specs = [(tile, regions, dst, position[s0:s1])
             for tile, regions, dst, s0, s1 in stage1.vertices]
    _add_vertices(graph, codelet, specs, stage1.source, partials,
                  name if single else f"{name}/partials", seq)
    if not single:
        _final(graph, op, partials, stage1.outer, p0, p1, out, seq, name)
    return out


def _add_vertices(graph, codelet, specs, source, target, cs_name, seq) -> None:
    """A compute set of reduction vertices, added in one call. specs: per vertex (tile, its
    `in` regions, each a list of (begin, end) intervals of source's flattened elements, its
    dst offsets or None, the positions of target's flattened elements it writes); the dst
    offsets of all of them go in one INT constant on their tiles."""
    graph.add_codelets(codelet)
    cs = graph.add_compute_set(cs_name)
    tiles = np.array([s[0] for s in specs], np.int64)
    intervals = [iv for _, regions, _, _ in specs for region in regions for iv in region]
    begins = np.array([b for b, _ in intervals], np.int64)
    sizes = np.array([e - b for b, e in intervals], np.int64)
    per_region = np.array([len(region) for _, regions, _, _ in specs for region in regions],
                          np.int64)
    conns = {"in": Regions.from_indices(source, ragged(begins, sizes),
                                        per_vertex(sizes, per_region),
                                        [len(regions) for _, regions, _, _ in specs]),
             "out": Regions.from_indices(target, np.concatenate([s[3] for s in specs]),
                                         [len(s[3]) for s in specs])}
    if specs[0][2] is not None:
        counts = np.array([len(dst) for _, _, dst, _ in specs], np.int64)
        dst_all = graph.add_constant(T.INT, [int(counts.sum())],
                                     [d for _, _, dst, _ in specs for d in dst], f"{cs_name}/dst")
        graph.set_tile_mapping(dst_all, per_tile_runs(np.repeat(tiles, counts),
                                                      np.arange(counts.sum()),
                                                      graph.target.num_tiles))
        starts = np.cumsum(counts) - counts
        conns["dst"] = Regions(dst_all, starts, starts + counts)
    graph.add_vertices(cs, codelet.__name__, tiles, conns)
    seq.add(prog.Execute(cs))


def _final(graph, op, partials, outer, p0, p1, out, seq, name):
    """Stage 2: the output, mapped linearly; each piece of it combines, in unit order, the
    partials that cover it: element-wise slices after an outer stage 1 (ReduceOuter), or one
    gathered region per output after an inner one."""
    base = np.cumsum(p1 - p0) - (p1 - p0)
    op2 = Operation.ADD if op is Operation.SQUARE_ADD else op
    # linearly: after an inner stage 1, down to one 64-bit vector per tile so the combining
    # spreads over many tiles; after an outer one, Poplar's default (128 bytes a tile at
    # least), as each piece of output takes a region from every unit overlapping it
    grain = grain_of(out.dtype)
    map_tensor_linearly(graph, out, *((None, None) if outer else (grain, grain)))
    out_flat = out.flatten()
    by_p0 = np.argsort(p0, kind="stable")
    sorted_p0, widest = p0[by_p0], int((p1 - p0).max())
    specs = []
    for tile, intervals in tile_intervals(graph, out_flat):
        for piece in split_even(intervals, graph.target.num_worker_contexts):
            for a, b in piece:
                near = by_p0[np.searchsorted(sorted_p0, a - widest, "right"):
                             np.searchsorted(sorted_p0, b)]
                units = np.sort(near[p1[near] > a])      # in unit order: a fixed order
                if outer:
                    lo, hi = np.maximum(p0[units], a), np.minimum(p1[units], b)
                    start = (base[units] + lo - p0[units]).tolist()
                    regions = [[(s, s + n)] for s, n in zip(start, (hi - lo).tolist())]
                    dst = (lo - a).tolist()
                else:
                    regions = [[(s, s + 1) for s in base[units[p0[units] == p]].tolist()]
                               for p in range(a, b)]
                    dst = None
                specs.append((tile, regions, dst, np.arange(a, b)))
    codelet = reduce_codelet(op2, partials.dtype, out.dtype, outer=outer)
    _add_vertices(graph, codelet, specs, partials, out_flat, f"{name}/final", seq)
