"""Exercise set 05 · profiling: read memory and time from a Profile, and balance the work."""
import numpy as np

from .... import poplar
from ....poplar import program as prog
from ...codelets import RowDot, SumVertex
from ..messages import Fail
from ..kit import Kit, call, grade_par, predicted
from ..registry import Par, exercise_set, question
from .outputs import compare_filled, filled

exercise_set("ex05", "05_profiling.ipynb", "Profiling",
             "Find the fullest tile and the slowest phase from a profile, predict how busy the "
             "workers are, and balance triangular work.")

CATEGORIES = ("code", "constants", "variables", "vertex_state", "exchange_buffers")


def _memory_programs():
    """Three runs whose fullest tile is filled by a different category each time."""
    out = []
    kit = Kit(4)                                            # 1. a big variable on tile 2
    kit.var("big", poplar.FLOAT, [3000], tile=2)
    kit.var("small", poplar.FLOAT, [300], tile=1)
    kit.run(prog.Sequence())
    out.append(kit.profile)
    kit = Kit(4)                                            # 2. a table of constants on tile 1
    table = kit.g.add_constant(poplar.FLOAT, [2500], np.arange(2500, dtype=np.float32), "table")
    kit.g.set_tile_mapping(table, 1)
    kit.var("x", poplar.FLOAT, [1500], tile=3)
    kit.run(prog.Sequence())
    out.append(kit.profile)
    kit = Kit(4)                                            # 3. tile 3 sums data held elsewhere
    x = kit.var("x", poplar.FLOAT, [3000], tile=[[(0, 1000)], [(1000, 2000)], [(2000, 3000)], []])
    total = kit.var("total", poplar.FLOAT, [1], tile=3)
    cs = kit.g.add_compute_set("remote sum")
    kit.g.add_vertex(cs, SumVertex, {"in": x, "out": total[0]}, tile=3)
    kit.run(prog.Execute(cs))
    out.append(kit.profile)
    return out


# --- 1 ---------------------------------------------------------------------------------------
@question(
    "ex05.fullest_tile", title="Read memory: the fullest tile", kind="profile",
    statement=f"""
Write `fullest(profile)` returning `(tile, category)`: the tile that uses the most memory
(`profile.memory_total`), and the category that takes most of **that tile's** bytes — one of
{", ".join(repr(c) for c in CATEGORIES)} (`profile.memory[category]` is an array with one entry
per tile). The check calls it on three different runs.
""",
    hints=[
        "np.argmax(profile.memory_total) is the fullest tile.",
        "profile.memory is a dict: category -> per-tile array. Look at each category's entry for "
        "that one tile.",
        "t = int(np.argmax(profile.memory_total)); return t, max(profile.memory, key=lambda c: "
        "profile.memory[c][t]).",
    ])
def _fullest(fullest):
    for run, profile in enumerate(_memory_programs(), 1):
        got = call(fullest, profile, what="fullest(profile)")
        tile = int(np.argmax(profile.memory_total))
        cat = max(CATEGORIES, key=lambda c: profile.memory[c][tile])
        if not (isinstance(got, tuple) and len(got) == 2):
            raise Fail(f"fullest(profile) should return a pair (tile, category), got {got!r}")
        g_tile, g_cat = got
        if g_tile != tile:
            raise Fail(f"run {run}: you said tile {g_tile}, but tile {tile} holds the most: "
                       f"{int(profile.memory_total[tile]):,} B (tile {g_tile} holds "
                       f"{int(profile.memory_total[g_tile]) if 0 <= g_tile < profile.num_tiles else 0:,} B)")
        if g_cat != cat:
            mine = {c: int(profile.memory[c][tile]) for c in CATEGORIES if profile.memory[c][tile]}
            raise Fail(f"run {run}: tile {tile} is right, but its bytes by category are {mine}: "
                       f"the largest is {cat!r}, not {g_cat!r}")
    return "right on all three runs (variables, constants, exchange buffers)"


def _time_programs():
    """Three runs whose slowest step is slow for a different reason."""
    out = []
    kit = Kit(4)                                      # 1. a long compute
    rows = kit.var("rows", poplar.FLOAT, [3, 4], tile=0)
    sums = kit.var("sums", poplar.FLOAT, [3], tile=0)
    program = prog.Sequence()
    for i, (name, cycles) in enumerate((("small", 10), ("big", 500), ("medium", 100))):
        cs = kit.g.add_compute_set(name)
        kit.g.set_perf_estimate(kit.g.add_vertex(cs, SumVertex, {"in": rows[i], "out": sums[i]},
                                                 tile=0), cycles)
        program.add(prog.Execute(cs))
    kit.run(program)
    out.append(kit.profile)
    kit = Kit(8)                                      # 2. a gather onto tile 0
    src = kit.var("rows", poplar.FLOAT, [7, 512], tile=[[]] + [[(i * 512, (i + 1) * 512)]
                                                                for i in range(7)])
    dst = kit.var("gathered", poplar.FLOAT, [7, 512], tile=0)
    total = kit.var("total", poplar.FLOAT, [1], tile=0)
    cs = kit.g.add_compute_set("sum")
    kit.g.set_perf_estimate(kit.g.add_vertex(cs, SumVertex, {"in": dst[0], "out": total[0]},
                                             tile=0), 100)
    kit.run(prog.Sequence([prog.Execute(cs), prog.Copy(src, dst)]))
    out.append(kit.profile)
    kit = Kit(8)                                      # 3. many tiles exchange a little, one computes
    x = kit.var("x", poplar.FLOAT, [8, 64], tile=[[(i * 64, (i + 1) * 64)] for i in range(8)])
    y = kit.var("y", poplar.FLOAT, [8], tile=[[(i, i + 1)] for i in range(8)])
    shift = kit.g.add_compute_set("shift")
    small = kit.g.add_compute_set("small")
    for t in range(8):
        v = kit.g.add_vertex(shift, SumVertex, {"in": x[(t + 1) % 8], "out": y[t]}, tile=t)
        kit.g.set_perf_estimate(v, 50 if t == 0 else 1)
    kit.g.set_perf_estimate(kit.g.add_vertex(small, SumVertex, {"in": x[0], "out": y[0]},
                                             tile=0), 20)
    kit.run(prog.Sequence([prog.Execute(small), prog.Execute(shift)]))
    out.append(kit.profile)
    return out


# --- 2 ---------------------------------------------------------------------------------------
@question(
    "ex05.slowest_step", title="Read time: the slowest step and phase", kind="profile",
    statement="""
Write `slowest(profile)` returning `(step name, phase kind)`: the executed step with the most
cycles (`profile.steps`, each with `.name`, `.cycles` and `.phases`), and the phase of that step
that lasts longest. Remember what a phase lasts on a BSP machine. The check calls it on three
runs.
""",
    hints=[
        "step.phases is a list of (kind, per_tile_cycles) pairs, one array entry per tile.",
        "Tiles wait for each other at the barrier: a phase lasts as long as its SLOWEST tile — the "
        "maximum over tiles, not the sum.",
        "step = max(profile.steps, key=lambda s: s.cycles); kind, _ = max(step.phases, key=lambda "
        "p: p[1].max()); return step.name, kind.",
    ])
def _slowest(slowest):
    for run, profile in enumerate(_time_programs(), 1):
        got = call(slowest, profile, what="slowest(profile)")
        step = max(profile.steps, key=lambda s: s.cycles)
        kind = max(step.phases, key=lambda p: int(p[1].max()))[0]
        if not (isinstance(got, tuple) and len(got) == 2):
            raise Fail(f"slowest(profile) should return a pair (step name, phase kind), got {got!r}")
        if got[0] != step.name:
            table = ", ".join(f"{s.name!r} {s.cycles:,}" for s in profile.steps)
            raise Fail(f"run {run}: you said step {got[0]!r}; the steps take {table} cycles")
        if got[1] != kind:
            table = ", ".join(f"{k} {int(c.max()):,} (summed over tiles {int(c.sum()):,})"
                              for k, c in step.phases)
            raise Fail(f"run {run}: step {step.name!r} is right, but you said its {got[1]!r} "
                       f"phase is the longest; its phases last (slowest tile) {table}. A phase "
                       "lasts as long as its slowest tile: the maximum, not the sum.")
    return "right on all three runs (compute-bound, exchange-bound, and one slow tile)"


# --- 3 ---------------------------------------------------------------------------------------
BUSY = [20] * 9


@question(
    "ex05.busy_percent", title="Predict: how busy are the workers?", kind="predict",
    statement="""
One tile runs 9 vertices of 20 cycles each in one compute set. Predict the percentage of its
worker slots that do work in that compute phase:
`100 * profile.compute_cycles_excluding_idle[0] / profile.compute_cycles[0]`.
""",
    hints=[
        "'Excluding idle' is the plain sum of the estimates; 'compute' is 6 × the busiest worker.",
        "9 vertices on 6 workers: three workers run two vertices, three run one.",
        "180 / (6 × 40) as a percentage.",
    ])
def _busy(answer):
    kit = Kit(1)
    rows = kit.var("rows", poplar.FLOAT, [len(BUSY), 2], tile=0)
    sums = kit.var("sums", poplar.FLOAT, [len(BUSY)], tile=0)
    cs = kit.g.add_compute_set("busy")
    for i, c in enumerate(BUSY):
        kit.g.set_perf_estimate(kit.g.add_vertex(cs, SumVertex, {"in": rows[i], "out": sums[i]},
                                                 tile=0), c)
    kit.run(prog.Execute(cs))
    p = kit.profile
    truth = 100 * int(p.compute_cycles_excluding_idle[0]) / int(p.compute_cycles[0])
    return predicted(answer, truth, {
        100 * 9 / 6: "more than 100 % is impossible: count worker slots, 6 per round.",
        100 * 180 / (6 * 180): "that puts all 9 vertices on one worker; they are dealt to 6.",
        100.0: "9 is not a multiple of 6: in the second round three workers have nothing to do.",
    }, unit="%", tolerance=0.5)


# --- 4 ---------------------------------------------------------------------------------------
FOLD_TILES, FOLD_ROWS_PER_TILE, FOLD_COLS = 8, 12, 64
FOLD_PAR = Par(cycles=1142)


@question(
    "ex05.balance", title="Performance: balance triangular work", kind="performance",
    statement=f"""
The masked layer of notebook 05, as one compute set: row `i` of a triangular matrix has
`n_i = ceil((i+1)·COLS/ROWS)` weights, and a `RowDot` vertex (cost `10 + 2·n_i`) computes it on
the tile that owns the row. Write `tile_rows(num_tiles, rows_per_tile)` returning, for each
tile, a list of `(first row, end row)` ranges — every row owned by exactly one tile,
`rows_per_tile` rows per tile. **Par** with {FOLD_TILES} tiles × {FOLD_ROWS_PER_TILE} rows
(COLS = {FOLD_COLS}): {FOLD_PAR.cycles:,} cycles, within 1.2×.
""",
    par=FOLD_PAR,
    hints=[
        "Consecutive rows give the last tiles the longest rows: the slowest tile sets the "
        "compute phase, the others wait (a staircase in the BSP trace).",
        "Give every tile the same WORK, not just the same number of rows: pair short rows from "
        "the top with long rows from the bottom.",
        "Fold it: tile t takes rows [t·h, (t+1)·h) and [R-(t+1)·h, R-t·h) with h = rows_per_tile "
        "// 2 and R = num_tiles · rows_per_tile.",
    ])
def _balance(tile_rows):
    rng = np.random.default_rng(504)
    report = None
    for tiles, per in ((4, 6), (FOLD_TILES, FOLD_ROWS_PER_TILE)):
        rows = tiles * per
        ranges = call(tile_rows, tiles, per, what="tile_rows(num_tiles, rows_per_tile)")
        if not isinstance(ranges, (list, tuple)) or len(ranges) != tiles:
            raise Fail(f"tile_rows({tiles}, {per}) should return a list with one entry per tile "
                       f"({tiles}), got {type(ranges).__name__} of length "
                       f"{len(ranges) if hasattr(ranges, '__len__') else '?'}")
        owner = np.full(rows, -1)
        for t, rs in enumerate(ranges):
            for lo, hi in rs:
                for i in range(int(lo), int(hi)):
                    if not 0 <= i < rows:
                        raise Fail(f"tile_rows({tiles}, {per}): tile {t} owns row {i}, but there "
                                   f"are only rows 0 to {rows - 1}")
                    if owner[i] >= 0:
                        raise Fail(f"tile_rows({tiles}, {per}): row {i} is owned by tiles "
                                   f"{owner[i]} and {t}; each row belongs to exactly one tile")
                    owner[i] = t
        if (owner < 0).any():
            missing = np.flatnonzero(owner < 0)
            raise Fail(f"tile_rows({tiles}, {per}): row(s) {missing[:5].tolist()} are owned by no "
                       "tile — an off-by-one in your ranges?")
        counts = np.bincount(owner, minlength=tiles)
        if (counts != per).any():
            raise Fail(f"tile_rows({tiles}, {per}): tile {int(np.argmax(counts != per))} owns "
                       f"{int(counts[np.argmax(counts != per)])} rows; every tile owns {per}")
        cols = FOLD_COLS
        lengths = -(-(np.arange(1, rows + 1) * cols) // rows)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        kit = Kit(tiles)
        L = kit.var("L", poplar.FLOAT, [int(offsets[-1])])
        x = kit.var("x", poplar.FLOAT, [cols], tile=0)
        y = kit.var("y", poplar.FLOAT, [rows], read=True)
        cs = kit.g.add_compute_set("matvec")
        for i in range(rows):
            t = int(owner[i])
            row = L[int(offsets[i]):int(offsets[i + 1])]
            kit.g.set_tile_mapping(row, t)
            kit.g.set_tile_mapping(y[i], t)
            kit.g.add_vertex(cs, RowDot, {"a": row, "x": x, "y": y[i]}, tile=t)
        l_host = rng.standard_normal(int(offsets[-1])).astype(np.float32)
        x_host = rng.standard_normal(cols).astype(np.float32)
        got = kit.run(prog.Execute(cs), L=l_host, x=x_host, y=filled(rows))["y"]
        want = np.array([l_host[offsets[i]:offsets[i + 1]].astype(np.float64)
                         @ x_host[:lengths[i]] for i in range(rows)])
        compare_filled(kit, "y", got, want, rtol=1e-4, atol=1e-4)
        if tiles == FOLD_TILES:
            compute = kit.profile.compute_cycles
            work = np.array([sum(10 + 2 * lengths[i] for i in range(rows) if owner[i] == t)
                             for t in range(tiles)])
            report = grade_par(kit.profile, FOLD_PAR,
                               f"\n  Work per tile (sum of row estimates): {work.tolist()} — the "
                               f"busiest tile has {work.max() / work.mean():.2f}× the mean; the "
                               f"slowest tile's compute is {int(compute.max()):,} cycles.")
    return f"balanced; {report.text}", {"cycles": report.cycles}
