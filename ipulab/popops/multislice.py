"""popops.multi_slice and popops.multi_update_add: rows of a table picked, or added to, at
offsets known only at run time (PopLibs' popops::multiSlice and multiUpdateAdd, slicing
dimension 0 with size 1): an embedding lookup and its gradient.

    out = popops.multi_slice(g, table, ids, seq)              # out[i] = table[ids[i]]
    popops.multi_update_add(g, grad, dy, ids, 1.0, seq)       # grad[ids[i]] += 1.0 * dy[i]

The offsets are data, so the exchange (compiled ahead of time) cannot fetch just the rows they
name. As PopLibs does, the table is cut into column blocks instead: a tile gets a whole column
block (every row, some columns) and the offsets it serves, and picks its rows locally.

multi_slice       out [N, d] is a grid of pr row blocks x pc column blocks, block (r, c) on
                  its own tile, stored contiguously there (a blocked layout; the tensor
                  returned is the [N, d] view). Tile (r, c) receives column block c of the table
                  and the offsets of row block r; one MultiVertex copies the rows, its workers
                  sharing them. The grid minimises the cycle model's estimate: more column
                  blocks mean smaller slices of the table to receive, more row blocks fewer rows
                  per tile.
multi_update_add  t[offsets[i]] += scale * s[i]. Two updates of one row must not race, so only
                  the columns are split: column block c is one vertex, where the block's
                  middle element lives, applying all N updates to its columns in order.

An offset outside [0, V) reads a row of zeros (multi_slice) or is skipped (multi_update_add).
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import FLOAT, HALF, INT, Regions, Tensor
from ..poplar import program as prog
from ..poplar.vertices import ragged
from ..poputil import grain_of, tile_constant, typed_variant
from .slicecodelets import (ENTRY_CYCLES, OFFSET_CYCLES, AddPartials, MultiSlice, MultiUpdateAdd,
                            MultiUpdatePartial)


def _check(graph, t, offsets, seq, what: str) -> Tensor:
    """The offsets flattened to [N]; GraphError for a misuse."""
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    for x in (t, offsets):
        graph.check_tensor(x, what)
    if t.rank != 2 or t.dtype not in (FLOAT, HALF):
        raise GraphError(f"{what}: the table '{t.name}' must be a FLOAT or HALF matrix [rows, "
                         f"columns], not {t.dtype} {list(t.shape)}")
    if offsets.dtype != INT or offsets.rank not in (1, 2) or \
            (offsets.rank == 2 and offsets.shape[1] != 1):
        raise GraphError(f"{what}: offsets '{offsets.name}' must be INT [N] (or [N, 1]), not "
                         f"{offsets.dtype} {list(offsets.shape)}")
    return offsets.flatten()


def _bounds(n: int, parts: int, grain: int = 1) -> np.ndarray:
    """parts + 1 cut points of range(n) into near-equal blocks, cut at multiples of grain."""
    cuts = (np.arange(parts + 1, dtype=np.int64) * n // parts) // grain * grain
    cuts[-1] = n
    return cuts


def _slice_grid(target, N: int, V: int, d: int, dtype) -> tuple[int, int]:
    """(pr, pc): the row x column blocks of multi_slice with the fewest estimated cycles
    (receiving the table slice and offsets, then copying), fewer tiles on a tie."""
    grain, e = grain_of(dtype), dtype.size
    setup, bpc = target.cost.exchange_setup_cycles, target.exchange_bytes_per_cycle
    best = None
    for pc in range(1, min(-(-d // grain), target.num_tiles) + 1):    # a tile per block
        w = -(-d // pc)
        pr = max(1, min(N, target.num_tiles // pc))
        rows = -(-N // pr)
        receive = -(-(e * V * w + 4 * rows) // bpc) + setup
        work = 6 * (ENTRY_CYCLES + -(-rows // 6) * (OFFSET_CYCLES + -(-w * e // 8)))
        key = (receive + work, pr * pc)
        if best is None or key < best[0]:
            best = (key, pr, pc)
    return best[1], best[2]


def multi_slice(graph, t, offsets, seq, name: str = "") -> Tensor:
    """A new [N, d] tensor: row i is t[offsets[i]] for a table t [V, d] (FLOAT or HALF) and
    INT offsets [N] read at run time (an offset outside [0, V) gives a row of zeros)."""
    name = name or "multi_slice"
    offsets = _check(graph, t, offsets, seq, f"multi_slice '{name}'")
    (V, d), N = t.shape, offsets.num_elements()
    var = graph.add_variable(t.dtype, [N * d], f"{name}/out")
    if N * d == 0:
        return var.reshape([N, d])
    pr, pc = _slice_grid(graph.target, N, V, d, t.dtype)
    rb, cb = _bounds(N, pr), _bounds(d, pc, grain_of(t.dtype))
    nr, w = np.diff(rb), np.diff(cb)
    # block (r, c) holds rows rb[r]:rb[r+1] x columns cb[c]:cb[c+1], row-major, from start[r, c]
    sizes = nr[:, None] * w[None, :]
    start = (np.cumsum(sizes) - sizes.ravel()).reshape(sizes.shape)
    tile = np.arange(pr * pc, dtype=np.int64).reshape(pr, pc)
    graph.set_tile_mapping(var, np.repeat(tile.ravel(), sizes.ravel()))
    i, j = np.arange(N), np.arange(d)
    r, c = np.searchsorted(rb, i, "right") - 1, np.searchsorted(cb, j, "right") - 1
    ids = start[r[:, None], c[None, :]] + (i - rb[r])[:, None] * w[c][None, :] + \
        (j - cb[c])[None, :]
    out = var.element_view(ids, f"{name}/out")
    # one vertex per non-empty block: its offsets, column block c of t (V rows), its block
    br, bc = np.nonzero(sizes)
    rows = np.repeat(np.arange(V, dtype=np.int64) * d, br.size).reshape(V, -1).T
    table_begins = (rows + cb[bc][:, None]).ravel()
    cls = typed_variant(MultiSlice, t.dtype, ("table", "out"), "Half")
    cs = graph.add_compute_set(name)
    graph.add_vertices(cs, cls, tile[br, bc], {
        "offsets": Regions(offsets, rb[br], rb[br + 1]),
        "table": Regions(t.flatten(), table_begins, table_begins + np.repeat(w[bc], V),
                         np.full(br.size, V)),
        "out": Regions(var, start[br, bc], start[br, bc] + sizes[br, bc])})
    seq.add(prog.Execute(cs))
    return out


def _update_groups(target, N: int, V: int, w: int, pc: int, dtype) -> int:
    """How many groups of offsets multi_update_add splits N into (1: one stage, straight into
    the table), with the fewest estimated cycles: each group makes a float partial of every
    column block, and a second compute set adds the groups' partials into the table."""
    e, vec = dtype.size, -(-w * dtype.size // 8)
    setup, bpc = target.cost.exchange_setup_cycles, target.exchange_bytes_per_cycle
    best = None
    for groups in range(1, max(1, min(N, target.num_tiles // pc)) + 1):
        n = -(-N // groups)
        receive = -(-n * (4 + e * w) // bpc) + setup
        zero = 0 if groups == 1 else -(-V * w // 2)
        cycles = receive + 6 * (ENTRY_CYCLES + zero + n * (OFFSET_CYCLES + 2 * vec))
        if groups > 1:      # the table block in and out, the other groups' partials in
            cycles += target.cost.sync_internal_cycles + setup + \
                -(-((groups - 1) * 4 * V * w + e * V * w) // bpc) + \
                6 * (ENTRY_CYCLES + -(-V * w // 12) * (groups + 1))
        if best is None or cycles < best[0]:
            best = (cycles, groups)
    return best[1]


def _check_scale(graph, scale, what: str) -> None:
    if isinstance(scale, Tensor):
        graph.check_tensor(scale, what)
        if scale.dtype != FLOAT or scale.num_elements() != 1:
            raise GraphError(f"{what}: a scale tensor must be FLOAT with one element, not "
                             f"'{scale.name}' {scale.dtype} {list(scale.shape)}")
    elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.number)):
        raise GraphError(f"{what}: scale must be a number or a FLOAT tensor of one element, "
                         f"not {scale!r}")


class _UpdatePlan:
    """Where multi_update_add works: column blocks k (columns cb[c[k]]:cb[c[k]] + w[k]) of a
    [V, d] table, groups of offsets (rows gb[g]:gb[g+1] of the updates); vertex (group q,
    block k) on tile q * blocks + k. table[v]: the table rows of vertex v's block."""

    def __init__(self, target, V: int, d: int, N: int, dtype):
        grain = grain_of(dtype)
        cb = _bounds(d, min(-(-d // grain), target.num_tiles), grain)
        self.c = np.flatnonzero(np.diff(cb))
        self.col, self.w = cb[self.c], np.diff(cb)[self.c]
        self.groups = _update_groups(target, N, V, int(self.w.max()), self.c.size, dtype)
        self.gb = _bounds(N, self.groups)
        self.q, self.k = np.divmod(np.arange(self.groups * self.c.size, dtype=np.int64),
                                   self.c.size)
        self.tile = self.q * self.c.size + self.k
        self.V, self.d = V, d

    def table(self, t, blocks) -> Regions:
        """Regions of t: for each of these blocks, its V rows of w columns."""
        V, d = self.V, self.d
        begins = (np.arange(V, dtype=np.int64)[None, :] * d + self.col[blocks][:, None]).ravel()
        return Regions(t.flatten(), begins, begins + np.repeat(self.w[blocks], V),
                       np.full(len(blocks), V))

    def updates(self, s) -> Regions:
        """Regions of s: for each vertex, its group's rows of its block's columns."""
        n = np.diff(self.gb)[self.q]
        begins = ragged(self.gb[self.q], n) * self.d + np.repeat(self.col[self.k], n)
        return Regions(s.flatten(), begins, begins + np.repeat(self.w[self.k], n), n)


def multi_update_add(graph, t, s, offsets, scale, seq, name: str = "") -> None:
    """t[offsets[i]] += scale * s[i] for every i, in place: t [V, d] and s [N, d] of one type
    (FLOAT or HALF), INT offsets [N] read at run time (an offset outside [0, V) is skipped).
    scale: a number, or a FLOAT tensor of one element (read at run time, as PopLibs' scale).

    Work goes to column blocks of the table, one tile each; when there are many offsets they
    are cut into groups, each making a float partial of the block on its own tile, and a
    second compute set adds the partials (in group order) into t; with one group the updates
    go straight into t, in order (HALF then adds in half, as PopLibs' vertex does)."""
    name = name or "multi_update_add"
    what = f"multi_update_add '{name}'"
    offsets = _check(graph, t, offsets, seq, what)
    graph.check_tensor(s, what)
    (V, d), N = t.shape, offsets.num_elements()
    if s.shape != (N, d) or s.dtype != t.dtype:
        raise GraphError(f"{what}: the updates '{s.name}' must be {t.dtype} [{N}, {d}] (one "
                         f"row of the table '{t.name}' per offset), not {s.dtype} "
                         f"{list(s.shape)}")
    _check_scale(graph, scale, what)
    if N * d * V == 0:
        return
    p = _UpdatePlan(graph.target, V, d, N, t.dtype)
    common = {"scale": Regions.whole(scale.flatten(), p.tile.size) if isinstance(scale, Tensor)
              else tile_constant(graph, FLOAT, [float(scale)], p.tile,
                                 f"{name}/scale").regions(p.tile),
              "offsets": Regions(offsets, p.gb[p.q], p.gb[p.q + 1]), "updates": p.updates(s)}
    cs = graph.add_compute_set(name)
    if p.groups == 1:
        cls = typed_variant(MultiUpdateAdd, t.dtype, ("updates", "table"), "Half")
        graph.add_vertices(cs, cls, p.tile, {**common, "table": p.table(t, p.k)})
        seq.add(prog.Execute(cs))
        return
    # the partial of vertex (q, k): contiguous from q * V * d + V * col[k], on its tile
    part = graph.add_variable(FLOAT, [p.groups * V * d], f"{name}/partials")
    graph.set_tile_mapping(part, np.repeat(p.tile, V * p.w[p.k]))
    begin = p.q * V * d + V * p.col[p.k]
    cls = typed_variant(MultiUpdatePartial, t.dtype, ("updates",), "Half")
    graph.add_vertices(cs, cls, p.tile, {**common, "partial": Regions(part, begin,
                                                                     begin + V * p.w[p.k])})
    seq.add(prog.Execute(cs))
    # block k's partials of every group are added into t on tile k (where group 0's is)
    blocks = np.arange(p.c.size, dtype=np.int64)
    pb = (np.arange(p.groups, dtype=np.int64)[None, :] * V * d + V * p.col[:, None]).ravel()
    sums = graph.add_compute_set(f"{name}/sum")
    graph.add_vertices(sums, typed_variant(AddPartials, t.dtype, ("table",), "Half"), blocks, {
        "partials": Regions(part, pb, pb + np.repeat(V * p.w, p.groups),
                            np.full(p.c.size, p.groups)),
        "table": p.table(t, blocks)})
    seq.add(prog.Execute(sums))
