"""The matmul planner: how to split (groups, m, k, n) over tiles, chosen with the cycle model.

A plan cuts C[g] = A[g] @ B[g] (G groups of (M x K) @ (K x N)) into a grid of
pg x pm x pk x pn blocks. Tile (gi, i, j, kk) -- numbered with kk fastest, so the tiles that
share a reduction are neighbours -- owns the product of A block (gi, i, kk) and B block
(gi, kk, j), a partial sum of C block (gi, i, j). Then:

  1. exchange: every tile receives the A and B blocks it uses. With inputs made by
     create_mat_mul_input_lhs/rhs, A block (gi, i, kk) is spread by rows over the pn tiles that
     use it and B block (gi, kk, j) over the pm tiles that use it, so each tile broadcasts its
     piece once (the exchange multicasts) and receives the rest;
  2. compute: one MatMulBlock vertex per group on each tile (a MultiVertex: rows over workers);
  3. (pk > 1) exchange + compute: C block (gi, i, j) is cut into pk chunks and chunk kk is
     summed on tile (gi, i, j, kk) from the pk partials (a reduce-scatter); the result stays
     there, spread over the same tiles. With pk == 1 the block product writes C directly.

The predicted cycles mirror what the compiler will charge (a sync per compute set, exchange
ceil(max(bytes in, bytes out) / 4) + setup with multicast, 6 x the busiest worker, on-tile
copies at 8 B per cycle). The search costs every useful split with upper bounds (the largest
block); the chosen plan is then costed tile by tile, so for inputs mapped as the plan wants,
on one IPU, the prediction IS the simulation, cycle for cycle and byte for byte (inter-IPU
links and inputs mapped otherwise are not modelled). Memory must fit the tile's SRAM less
MEMORY_MARGIN; the temporaries (partials and exchange buffers) should also fit
`availableMemoryProportion` of it, as in Poplar.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from ..errors import GraphError, TileMemoryError
from ..poplar.types import FLOAT, HALF, Type, as_type
from . import codelets

# [MODEL] bytes per tile kept free for what the plan does not count: other tensors' code,
# control code of the rest of the program, small constants.
MEMORY_MARGIN = 8 * 1024
DEFAULT_OPTIONS = {"availableMemoryProportion": 0.6, "split": None}
PARTIALS_BYTES = 4          # partials are float32 whatever the input type
# plans kept, by what decides them (the target's chip, cost model and tiles, a virtual graph's
# too, the dims, type and options): a pipeline or a transformer asks for the same few products
# many times over
PLANS_KEPT = 4096
_plans: dict = {}
ALIGN = 8


class Split(NamedTuple):
    """A size per dimension: parts of the split, or elements of the largest block."""

    groups: int
    m: int
    k: int
    n: int


def _ceil(a, b):
    return -(-a // b)


def _align(x):
    return _ceil(x, ALIGN) * ALIGN


def macs_per_cycle(target, dtype) -> int:
    """MACs per tile cycle of the AMP unit: half the chip's FLOP per cycle per tile."""
    chip = target.chip
    flops = chip.fp16_flops_per_cycle_per_tile if dtype == HALF else \
        chip.fp32_flops_per_cycle_per_tile
    return flops // 2


def parse_options(options) -> dict:
    opts = dict(DEFAULT_OPTIONS)
    for key, value in (options or {}).items():
        if key not in DEFAULT_OPTIONS:
            raise GraphError(f"unknown matmul option {key!r}; known: {', '.join(DEFAULT_OPTIONS)}")
        opts[key] = value
    p = float(opts["availableMemoryProportion"])
    if not 0 < p <= 1:
        raise GraphError(f"availableMemoryProportion must be in (0, 1], not {p}")
    opts["availableMemoryProportion"] = p
    return opts


def _costs(target, dtype: Type, accumulate: bool, pm, pk, pn, bg, bm, bk, bn,
           a_own, a_in, b_own, b_in, chunk) -> dict:
    """Predicted cycles and memory per tile, from what each tile multiplies (bg groups of
    bm x bk x bn), the elements of A and B it owns and receives, and its chunk of the result.
    Arrays broadcast together: one entry per candidate split, or per tile of one plan."""
    e = dtype.size
    W = target.num_worker_contexts
    c = target.cost
    setup, bpc = c.exchange_setup_cycles, target.exchange_bytes_per_cycle

    def exchange(nbytes):
        return np.where(nbytes > 0, _ceil(nbytes, bpc) + setup, 0)

    # 1. A and B blocks in (own pieces broadcast once, the rest received; a block that is
    #    partly remote is gathered into a buffer, own piece copied in), then the products
    sent = e * (np.where(pn > 1, a_own, 0) + np.where(pm > 1, b_own, 0))
    copied = e * (np.where(a_in > 0, a_own, 0) + np.where(b_in > 0, b_own, 0))
    ex1 = exchange(np.maximum(e * (a_in + b_in), sent))
    macs = macs_per_cycle(target, dtype)
    comp1 = (W * bg * codelets.block_worker_cycles(bm, bk, bn, macs, W)
             + _ceil(copied, c.on_tile_copy_bytes_per_cycle))
    # 2. reduce-scatter of the partials (also for a HALF result or an accumulation)
    phase2 = (pk > 1) | bool(accumulate) | (dtype != FLOAT)
    size = bg * bm * bn
    gathered = np.where(pk > 1, PARTIALS_BYTES * chunk, 0)
    ex2 = exchange(np.where(pk > 1, PARTIALS_BYTES * np.maximum((pk - 1) * chunk, size - chunk),
                            0))
    comp2 = np.where(phase2, W * codelets.reduce_worker_cycles(chunk, pk, accumulate, W)
                     + _ceil(gathered, c.on_tile_copy_bytes_per_cycle), 0)
    syncs = c.sync_internal_cycles * (1 + phase2)

    inputs = _align(e * a_own) + _align(e * b_own)
    buffers = _align(np.maximum(e * (a_in + b_in) + copied, pk * gathered))
    partials = np.where(phase2, _align(PARTIALS_BYTES * size), 0)
    outputs = np.where(phase2, _align(e * chunk), _align(e * size))
    block_state = c.vertex_header_bytes + 4 * c.vector_field_bytes
    reduce_state = (c.vertex_header_bytes + 2 * c.vector_field_bytes
                    + accumulate * c.scalar_field_bytes)
    other = (_align(bg * block_state + phase2 * reduce_state)
             + _align(3 * 4) + accumulate * ALIGN
             + (1 + phase2) * (c.codelet_code_bytes + c.control_code_bytes_per_step))
    return {"sync": syncs, "exchange": ex1, "compute": comp1, "reduction_exchange": ex2,
            "reduction_compute": comp2, "total": syncs + ex1 + comp1 + ex2 + comp2,
            "inputs": inputs, "exchange_buffers": buffers, "partials": partials,
            "outputs": outputs, "other": other,
            "memory": inputs + partials + outputs + buffers + other,
            "temporary": partials + buffers}


def _evaluate(target, dims: Split, dtype: Type, accumulate: bool, pg, pm, pk, pn) -> dict:
    """Upper bounds of the per-tile costs of candidate splits (arrays): the largest block,
    with the smallest own piece for what is received and the largest for what is kept."""
    G, M, K, N = dims
    bg, bm, bk, bn = _ceil(G, pg), _ceil(M, pm), _ceil(K, pk), _ceil(N, pn)
    rows_a, rows_b = bg * bm, bg * bk
    a_in = np.where(pn > 1, (rows_a - rows_a // pn) * bk, 0)
    b_in = np.where(pm > 1, (rows_b - rows_b // pm) * bn, 0)
    ev = _costs(target, dtype, accumulate, pm, pk, pn, bg, bm, bk, bn,
                _ceil(rows_a, pn) * bk, a_in, _ceil(rows_b, pm) * bn, b_in,
                _ceil(bg * bm * bn, pk))
    ev["block"] = (bg, bm, bk, bn)
    return ev


def _piece(index, total, parts):
    """Size of piece `index` when `total` is cut into `parts` as index * total // parts."""
    return (index + 1) * total // parts - index * total // parts


def _exact(target, dims: Split, dtype: Type, accumulate: bool, split: Split) -> dict:
    """Per-tile costs of one plan, tile by tile, as the compiler will charge them; phases and
    memory are the maxima over tiles (memory components are the fullest tile's)."""
    pg, pm, pk, pn = split
    gi, i, j, kk = (x.ravel() for x in np.indices((pg, pm, pn, pk)))   # in tile order
    sizes = [np.diff(np.arange(p + 1, dtype=np.int64) * d // p) for d, p in zip(dims, split)]
    bg, bm, bk, bn = sizes[0][gi], sizes[1][i], sizes[2][kk], sizes[3][j]
    rows_a, rows_b = bg * bm, bg * bk
    a_own, b_own = _piece(j, rows_a, pn) * bk, _piece(i, rows_b, pm) * bn
    a_in = np.where(pn > 1, rows_a * bk - a_own, 0)
    b_in = np.where(pm > 1, rows_b * bn - b_own, 0)
    ev = _costs(target, dtype, accumulate, pm, pk, pn, bg, bm, bk, bn, a_own, a_in, b_own, b_in,
                _piece(kk, bg * bm * bn, pk))
    full = int(np.argmax(ev["memory"]))
    out = {k: int(np.max(v)) for k, v in ev.items() if k in (
        "sync", "exchange", "compute", "reduction_exchange", "reduction_compute")}
    out["total"] = sum(out.values())
    out.update({k: int(ev[k][full]) for k in ("inputs", "exchange_buffers", "partials",
                                               "outputs", "other", "memory", "temporary")})
    return out


SEARCH_SIZE = 300_000    # splits costed per group count, at most (a fraction of a second)


def _candidates(size: int, limit: int) -> np.ndarray:
    """Useful part counts for a dimension: the fewest parts giving each distinct block size."""
    if size <= 1:
        return np.ones(1, np.int64)
    p = np.arange(1, min(size, limit) + 1, dtype=np.int64)
    return np.unique(_ceil(size, np.unique(_ceil(size, p))))


def _thin(lists: list) -> list:
    """Geometric samples of the longest candidate lists (all small counts, fewer large ones)
    until their product is at most SEARCH_SIZE."""
    lists = list(lists)
    while np.prod([x.size for x in lists]) > SEARCH_SIZE:
        i = int(np.argmax([x.size for x in lists]))
        keep = max(8, lists[i].size * 3 // 4)
        lists[i] = lists[i][np.unique(np.geomspace(1, lists[i].size, keep).round().astype(int)
                                      - 1)]
    return lists


@dataclass(frozen=True)
class MatMulPlan:
    """An inspectable matmul plan: split, blocks, predicted cycles and memory per tile.

    cycles: sync, exchange (A/B blocks in), compute (block products), reduction_exchange,
    reduction_compute, total -- each the largest tile's, in cycles, summed BSP-style.
    memory: per-tile bytes of the fullest tile: inputs (own pieces of A and B), partials,
    outputs, exchange_buffers (the larger of the A+B blocks and the gathered partials),
    other (vertex state, code, constants), total; memory_available is what a plan may use.
    """

    arch: str
    num_tiles: int
    dims: Split
    dtype: Type
    accumulate: bool
    split: Split
    block: Split
    cycles: dict
    memory: dict
    memory_available: int
    macs_per_cycle: int
    peak_flops_per_cycle: int = field(repr=False)
    clock_hz: float = field(repr=False)
    note: str = ""

    @property
    def tiles_used(self) -> int:
        s = self.split
        return s.groups * s.m * s.k * s.n

    @property
    def total_cycles(self) -> int:
        return self.cycles["total"]

    @property
    def flops(self) -> int:
        d = self.dims
        return 2 * d.groups * d.m * d.k * d.n

    @property
    def utilisation(self) -> float:
        """Predicted fraction of the target's peak (all its tiles) reached by this plan."""
        return self.flops / max(1, self.total_cycles * self.peak_flops_per_cycle)

    @property
    def seconds(self) -> float:
        return self.total_cycles / self.clock_hz

    def tile(self, gi: int, i: int, j: int, kk: int) -> int:
        """The tile that multiplies A block (gi, i, kk) by B block (gi, kk, j)."""
        s = self.split
        return ((gi * s.m + i) * s.n + j) * s.k + kk

    def bounds(self, dim: str) -> np.ndarray:
        """Block boundaries along 'groups', 'm', 'k' or 'n': parts + 1 increasing offsets."""
        size, parts = getattr(self.dims, dim), getattr(self.split, dim)
        return np.arange(parts + 1, dtype=np.int64) * size // parts

    def summary(self) -> str:
        d, s, b, c, m = self.dims, self.split, self.block, self.cycles, self.memory
        g = f"{d.groups} x " if d.groups > 1 else ""
        lines = [
            f"mat_mul {g}({d.m} x {d.k}) @ ({d.k} x {d.n}) {self.dtype} on {self.arch}, "
            f"{self.num_tiles} tiles",
            f"  split   groups {s.groups} x m {s.m} x k {s.k} x n {s.n} = "
            f"{self.tiles_used} tiles; largest block {b.groups} x {b.m} x {b.k} x {b.n}",
            f"  cycles  exchange {c['exchange']:,}  compute {c['compute']:,}  reduction "
            f"{c['reduction_exchange'] + c['reduction_compute']:,}  sync {c['sync']:,}  "
            f"total {c['total']:,}",
            f"  peak    {self.utilisation:.1%} of {self.arch} peak ({self.macs_per_cycle} MACs per "
            f"cycle per tile)",
            f"  memory  {m['total']:,} B per tile of {self.memory_available:,} (inputs "
            f"{m['inputs']:,}, partials {m['partials']:,}, outputs {m['outputs']:,}, exchange "
            f"buffers {m['exchange_buffers']:,})",
        ]
        if self.note:
            lines.append(f"  note    {self.note}")
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict:
        return {"arch": self.arch, "num_tiles": self.num_tiles, "dims": self.dims._asdict(),
                "dtype": self.dtype.name, "split": self.split._asdict(),
                "block": self.block._asdict(), "tiles_used": self.tiles_used,
                "cycles": dict(self.cycles), "memory": dict(self.memory),
                "memory_available": self.memory_available, "utilisation": self.utilisation,
                "note": self.note}


def _too_big(target, dims, dtype, ev, best: int, budget: int):
    d = dims
    needed = int(ev["memory"][best])
    largest = sorted(((name, int(ev[key][best])) for name, key in (
        ("A and B blocks / gathered partials (exchange buffers)", "exchange_buffers"),
        ("partials", "partials"), ("own A and B pieces", "inputs"), ("outputs", "outputs"))),
        key=lambda x: -x[1])
    return TileMemoryError(0, needed, budget, largest, message=(
        f"poplin: mat_mul of {d.groups} x ({d.m} x {d.k}) @ ({d.k} x {d.n}) {dtype} "
        f"does not fit on {target.num_tiles} tiles: the leanest split still needs "
        f"{needed:,} bytes per tile but {budget:,} are available. Largest parts: "
        + ", ".join(f"{n} ({b:,} B)" for n, b in largest)
        + ". Use more tiles or a smaller problem (or several smaller products)."))


def _forced(split, dims: Split, T: int) -> Split:
    parts = tuple(int(p) for p in split)
    parts = (1,) + parts if len(parts) == 3 else parts
    if len(parts) != 4 or min(parts) < 1 or int(np.prod(parts)) > T or any(
            p > max(1, size) for p, size in zip(parts, dims)):
        raise GraphError(f"split {split} is not (pm, pk, pn) or (pg, pm, pk, pn) of parts >= 1, "
                         f"each at most its dimension of {tuple(dims)}, on at most {T} tiles")
    return Split(*parts)


def _select(ev: dict, tiles: np.ndarray, budget: int, temp_budget: int):
    """(index of the best split or -1, whether it keeps availableMemoryProportion, index of
    the leanest split): fastest within both budgets, else least temporary memory that fits."""
    fits = ev["memory"] <= budget
    leanest = int(np.lexsort((tiles, ev["memory"]))[0])
    if not fits.any():
        return -1, False, leanest
    within = fits & (ev["temporary"] <= temp_budget)
    idx = np.flatnonzero(within if within.any() else fits)
    first = ev["total"][idx] if within.any() else ev["temporary"][idx]
    best = idx[np.lexsort((tiles[idx], ev["total"][idx], first))[0]]
    return int(best), bool(within.any()), leanest


def _search(target, dims: Split, dtype: Type, accumulate: bool, budget: int, temp_budget: int):
    """Cost every split worth trying (at most target.num_tiles tiles, no block thinner than
    the cost model's matmul_grain), a group count at a time; return the finalists'
    (pg, pm, pk, pn) arrays: each count's best and leanest."""
    T = target.num_tiles
    grains = target.cost.matmul_grain
    rows = []
    for pg in _candidates(dims.groups, T):
        pm, pk, pn = np.meshgrid(*_thin([_candidates(d, min(T // pg, _ceil(d, grain)))
                                         for d, grain in zip(dims[1:], grains)]),
                                 indexing="ij")
        keep = pg * pm * pk * pn <= T
        pm, pk, pn = pm[keep], pk[keep], pn[keep]
        ev = _evaluate(target, dims, dtype, accumulate, pg, pm, pk, pn)
        best, _, leanest = _select(ev, pg * pm * pk * pn, budget, temp_budget)
        for i in {best, leanest} - {-1}:
            rows.append((pg, pm[i], pk[i], pn[i]))
    return tuple(np.array(x, np.int64) for x in zip(*sorted(rows)))


def plan_mat_mul(target, m: int, k: int, n: int, dtype=FLOAT, options=None, groups: int = 1,
                 accumulate: bool = False) -> MatMulPlan:
    """Choose how to split a (groups x) (m x k) @ (k x n) product over the target's tiles.

    Every useful split (no block thinner than the cost model's matmul_grain, as PopLibs plans
    in groups of channels) is costed with the cycle model and the fastest whose memory fits the
    tile (less MEMORY_MARGIN) with temporaries within availableMemoryProportion is chosen
    (ties: fewer tiles); if no split meets the proportion, the one with the least temporary
    memory that still fits is taken (plan.note says so), as Poplar does. Raises
    TileMemoryError when nothing fits at all. accumulate: plan for mat_mul_acc.

    options: {"availableMemoryProportion": 0.6, "split": None}; "split" forces (pm, pk, pn)
    or (pg, pm, pk, pn), e.g. to compare predicted and simulated cycles of other splits.
    """
    target = getattr(target, "target", target)
    dtype = as_type(dtype)
    if dtype not in (FLOAT, HALF):
        raise GraphError(f"mat_mul supports FLOAT and HALF, not {dtype}")
    if target.num_worker_contexts != codelets.WORKERS:
        raise GraphError(f"poplin's codelets split work over {codelets.WORKERS} workers; this "
                         f"target has {target.num_worker_contexts}")
    dims = Split(*(int(x) for x in (groups, m, k, n)))
    if min(dims) < 0 or dims.groups < 1:
        raise GraphError(f"mat_mul dimensions must be >= 0 (groups >= 1), got {tuple(dims)}")
    opts = parse_options(options)
    key = (target.chip, target.cost, target.system, target.num_tiles, target.num_ipus,
           target.tiles_per_ipu, dims, dtype, bool(accumulate), repr(sorted(opts.items())))
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _planned(target, dims, dtype, bool(accumulate), opts)
        while len(_plans) > PLANS_KEPT:
            del _plans[next(iter(_plans))]           # the oldest
    # a copy: a caller that edits its plan's dicts leaves the kept one as planned
    return replace(plan, cycles=dict(plan.cycles), memory=dict(plan.memory))


def _planned(target, dims: Split, dtype: Type, accumulate: bool, opts: dict) -> MatMulPlan:
    """plan_mat_mul's search and exact costing, its arguments checked."""
    T = target.num_tiles
    budget = target.bytes_per_tile - MEMORY_MARGIN
    temp_budget = int(opts["availableMemoryProportion"] * target.bytes_per_tile)
    if opts["split"] is not None:
        pg, pm, pk, pn = (np.array([p], np.int64) for p in _forced(opts["split"], dims, T))
    else:
        pg, pm, pk, pn = _search(target, dims, dtype, accumulate, budget, temp_budget)
    ev = _evaluate(target, dims, dtype, accumulate, pg, pm, pk, pn)
    best, within, leanest = _select(ev, pg * pm * pk * pn, budget, temp_budget)
    if best < 0:
        raise _too_big(target, dims, dtype, ev, leanest, budget)
    note = "" if within else (
        f"no split keeps the temporaries (partials and exchange buffers) within "
        f"availableMemoryProportion {opts['availableMemoryProportion']} of tile memory "
        f"({temp_budget:,} B): took the one needing the least")
    split = Split(int(pg[best]), int(pm[best]), int(pk[best]), int(pn[best]))
    exact = _exact(target, dims, dtype, accumulate, split)
    cycles = {key: exact[key] for key in ("sync", "exchange", "compute", "reduction_exchange",
                                          "reduction_compute", "total")}
    memory = {key: exact[key] for key in ("inputs", "partials", "outputs", "exchange_buffers",
                                          "other")}
    memory["total"] = exact["memory"]
    block = Split(*(int(np.broadcast_to(b, pg.shape)[best]) for b in ev["block"]))
    flops = target.chip.fp16_flops_per_cycle_per_tile if dtype == HALF else \
        target.chip.fp32_flops_per_cycle_per_tile
    return MatMulPlan(target.arch, T, dims, dtype, bool(accumulate), split, block, cycles,
                      memory, budget, macs_per_cycle(target, dtype), flops * T,
                      target.clock_hz, note)
