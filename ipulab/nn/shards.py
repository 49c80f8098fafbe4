"""The t1 x t2 shards of a pipeline stage under tensor parallelism (nn/megatron.py): their
graphs, the collectives between them, and where a split weight's elements live.

    grid = Grid(stage_graph, 2, 2)        # shard (i1, i2) on the stage's IPU i1 * t2 + i2
    ys = grid.each(seq, "name", lambda k, g, s: ...)        # every shard side by side
    total = grid.all_reduce(seq, "name", {k: partial}, 1)  # summed over t1, on each shard
    piece = view(weight, layout, k)       # shard k's part of a weight; assemble() joins them

A layout is a tuple of Axis, one per dimension of a weight: split over grid dimension 1 (t1)
or 2 (t2), or whole (0), as segments in the weight's order (a fused q, k, v projection has
three per shard).
"""
from __future__ import annotations

from typing import NamedTuple

from .. import popops, poputil
from ..popops.expr import _1, _2, _3, _4, _5, _6, _7, _8, _9
from ..poplar import concat, parallel
from ..poplar import program as prog
from .tensor_parallel import shard_graphs, split_bounds

PLACEHOLDERS = (_1, _2, _3, _4, _5, _6, _7, _8, _9)


# --- where each weight's elements live --------------------------------------------------------
class Axis(NamedTuple):
    """One dimension of a weight: split over grid dimension `dim` (1: t1, 2: t2; 0: whole),
    as segments (owner, lo, hi) in the weight's order (q, k and v: three per owner)."""

    dim: int
    segments: tuple


def axis(n: int, dim: int, parts: int, blocks: int = 1) -> Axis:
    """n elements split over `parts` shards along grid dimension dim (0: whole), in `blocks`
    equal blocks each split so (q, k and v of a fused projection)."""
    if dim == 0 or parts == 1:
        return Axis(0, ((0, 0, n),))
    size = n // blocks
    return Axis(dim, tuple((i, j * size + lo, j * size + hi) for j in range(blocks)
                           for i, (lo, hi) in enumerate(split_bounds(size, parts))))


def view(t, layout, k):
    """Shard k's part of weight t (its segments along every axis, joined)."""
    for a, ax in enumerate(layout):
        i = k[ax.dim - 1] if ax.dim else 0
        parts = [t.slice(lo, hi, a) for o, lo, hi in ax.segments if o == i]
        t = parts[0] if len(parts) == 1 else concat(parts, a)
    return t


def owns(layout, k) -> bool:
    """Whether shard k holds (and maps) its part: the first shard of those that share it."""
    dims = {ax.dim for ax in layout}
    return all(k[d - 1] == 0 for d in (1, 2) if d not in dims)


def assemble(pieces: dict, layout):
    """The whole weight (a view) from its owners' parts {k: part} (the inverse of view)."""
    local = []
    for ax in layout:
        at, segs = {}, []
        for o, lo, hi in ax.segments:
            start = at.get(o, 0)
            segs.append((ax.dim, o, start, start + hi - lo))
            at[o] = start + hi - lo
        local.append(segs)

    def block(chosen):
        k = [0, 0]
        for dim, o, _, _ in chosen:
            if dim:
                k[dim - 1] = o
        t = pieces[tuple(k)]
        for a, (_, _, lo, hi) in enumerate(chosen):
            if (lo, hi) != (0, t.shape[a]):
                t = t.slice(lo, hi, a)
        return t

    def join(parts, a):
        return parts[0] if len(parts) == 1 else concat(parts, a)

    if len(layout) == 1:
        return join([block((s,)) for s in local[0]], 0)
    return join([join([block((r, c)) for c in local[1]], 1) for r in local[0]], 0)


class Grid:
    """The t1 x t2 shards of a stage's graph: shard (i1, i2) on IPU i1 * t2 + i2."""

    def __init__(self, graph, t1: int, t2: int):
        self.graph, self.t1, self.t2 = graph, t1, t2
        self.graphs = shard_graphs(graph, t1 * t2)
        self.shards = [(i1, i2) for i1 in range(t1) for i2 in range(t2)]

    def of(self, k):
        return self.graphs[k[0] * self.t2 + k[1]]

    def groups(self, dim: int) -> list[list]:
        """The shards that differ only in grid dimension dim (1: over t1), group by group."""
        if dim == 1:
            return [[(i1, i2) for i1 in range(self.t1)] for i2 in range(self.t2)]
        return [[(i1, i2) for i2 in range(self.t2)] for i1 in range(self.t1)]

    def each(self, seq, name: str, fn) -> dict:
        """fn(k, graph of k, its sequence) for every shard, side by side (the k-th step of
        each in one superstep, poplar.parallel): {k: what fn returned}."""
        out, seqs = {}, []
        for k in self.shards:
            s = prog.Sequence()
            out[k] = fn(k, self.of(k), s)
            seqs.append(s)
        seq.add(parallel(self.graph, seqs, name))
        return out

    def copies(self, seq, name: str, sources: dict) -> dict:
        """{key: a new variable on shard k's IPU holding t} for sources {key: (k, t)}, all in
        ONE exchange."""
        out, moves = {}, []
        for key, (k, t) in sources.items():
            g = self.of(k)
            out[key] = g.add_variable(t.dtype, list(t.shape), f"{name}/shard{k[0]}.{k[1]}")
            poputil.map_tensor_linearly(g, out[key])
            moves.append(prog.Copy(t, out[key], name=name))
        seq.add(parallel(self.graph, moves, name))
        return out

    def all_reduce(self, seq, name: str, parts: dict, dim: int) -> dict:
        """The sum of parts {k: tensor} over grid dimension dim (1: over t1), on each shard:
        a reduce-scatter (member j of a group receives chunk j of the others' parts and adds
        them, in the group's order) and an all-gather of the sums, every group at once: two
        exchanges and one compute set, 2 (n - 1) / n of a part over the IPU-Links per IPU."""
        groups = self.groups(dim)
        if len(groups[0]) == 1:
            return parts
        flat = {k: t.flatten() for k, t in parts.items()}
        # group by group (their parts may differ in size): chunk j of the sum, on member j
        chunks = {k: split_bounds(flat[k].num_elements(), len(group))
                  for group in groups for k in group}
        owners = {k: group[:len(chunks[k])] for group in groups for k in group}
        got = self.copies(seq, f"{name}/reduce_scatter", {
            (dst, src): (dst, flat[src].slice(lo, hi)) for group in groups
            for (lo, hi), dst in zip(chunks[group[0]], group) for src in group if src != dst})

        def add(k, g, s):
            group = next(gr for gr in groups if k in gr)
            j = group.index(k)
            if j >= len(chunks[k]):
                return None
            lo, hi = chunks[k][j]
            terms = [flat[k].slice(lo, hi) if src == k else got[k, src] for src in group]
            total = terms[0]
            for i in range(1, len(terms), 8):         # ((a + b) + c) + ..., where they lie
                more = terms[i:i + 8]
                total = popops.map(g, sum(PLACEHOLDERS[1:len(more) + 1], PLACEHOLDERS[0]),
                                   [total, *more], s, f"{name}/add")
            return total

        sums = self.each(seq, f"{name}/add", add)
        gathered = self.copies(seq, f"{name}/all_gather", {
            (dst, owner): (dst, sums[owner]) for dst in flat for owner in owners[dst]
            if owner != dst})
        return {k: concat([sums[k] if owner == k else gathered[k, owner]
                           for owner in owners[k]]).reshape(list(parts[k].shape))
                for k in flat}


__all__ = ["Axis", "axis", "view", "owns", "assemble", "Grid"]
