"""Exercise set 01 · one tile: a first codelet, six barrel-scheduled workers, tile memory."""
import numpy as np

from .... import poplar
from ....poplar import program as prog
from ...codelets import SumVertex
from ..messages import Fail, short
from ..kit import Kit, call, elements, grade_par, predicted, require_codelet
from ..registry import Par, exercise_set, question
from .outputs import SENTINEL, compare_filled, filled, sentinel_note

exercise_set("ex01", "01_one_tile.ipynb", "One tile",
             "A first codelet of your own, then the six workers of a tile and its memory.")


# --- 1 ---------------------------------------------------------------------------------------
@question(
    "ex01.sum_squares", title="A codelet: the sum of squares", kind="codelet",
    statement="""
Complete the codelet `SumSquares`: `out` = the sum of the squares of the elements of `in`.
The fields are given; write `compute`. The check places several vertices of it on one and two
tiles, over vectors of different lengths and random values, and runs them with bounds checking,
each compute set twice in a row (`prog.Repeat(2, ...)`). Before each run it fills `out` with
-7777.0, a value no right answer leaves: an output does not start at 0, `compute` must set it.
""",
    hints=[
        "Start from SumVertex of notebook 01: a running total, a loop over the input, and one "
        "write of out[0] at the end.",
        "Inside the loop add x * x, not x. Loop over the elements (`for x in inp`) or over "
        "range(len(inp)) — not len(inp) + 1, and not from 1.",
        "s = 0.0, then `for x in inp: s += x * x`, then `out[0] = s` (a scalar field arrives as a "
        "one-element array).",
    ])
def _sum_squares(cls):
    require_codelet(cls, {"in": "input", "out": "output"})
    rng = np.random.default_rng(101)
    # 1. several vertices on one tile, integer values (exact in any order), lengths 1 to 13
    lengths = [3, 1, 8, 5, 13, 2, 7]
    kit = Kit(tiles=2)
    n = sum(lengths)
    kit.var("x", poplar.FLOAT, [n], tile=0)
    kit.var("out", poplar.FLOAT, [len(lengths)], tile=0, read=True)
    cs = kit.g.add_compute_set("sum_squares")
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    for k in range(len(lengths)):
        kit.g.add_vertex(cs, cls, {"in": kit.tensors["x"][bounds[k]:bounds[k + 1]],
                                   "out": kit.tensors["out"][k]}, tile=0)
    kit.compile(prog.Repeat(2, prog.Execute(cs)))     # a codelet that adds to out shows it
    for case in range(2):
        x = rng.integers(-9, 10, n).astype(np.float32)
        got = kit.run(x=x, out=filled(len(lengths)))["out"]
        want = np.array([np.sum(x[bounds[k]:bounds[k + 1]].astype(np.float64) ** 2)
                         for k in range(len(lengths))])
        compare_filled(kit, "out", got, want, repeats=2,
                       context=lambda k: f" for in = {short(x[bounds[k]:bounds[k + 1]])}")
    # 2. random floats, one vertex per tile on two tiles
    kit2 = Kit(tiles=2)
    kit2.var("x", poplar.FLOAT, [2, 40], tile=None)
    for t in range(2):
        kit2.g.set_tile_mapping(kit2.tensors["x"][t], t)
    kit2.var("out", poplar.FLOAT, [2], tile=None, read=True)
    cs = kit2.g.add_compute_set("sum_squares")
    for t in range(2):
        kit2.g.set_tile_mapping(kit2.tensors["out"][t], t)
        kit2.g.add_vertex(cs, cls, {"in": kit2.tensors["x"][t], "out": kit2.tensors["out"][t]}, tile=t)
    x = rng.uniform(-1, 1, (2, 40)).astype(np.float32)
    got = kit2.run(prog.Repeat(2, prog.Execute(cs)), x=x, out=filled(2))["out"]
    compare_filled(kit2, "out", got, (x.astype(np.float64) ** 2).sum(axis=1), rtol=1e-5,
                   repeats=2, context=lambda k: f" for in = {short(x[k])}")
    return "correct for 9 vertices on 2 tiles, vectors of 1 to 40 elements"


# --- 2 ---------------------------------------------------------------------------------------
WORKER_ESTIMATES = [40, 40, 30, 30, 20, 20, 10, 10]


def _tile_compute(estimates):
    kit = Kit(tiles=1)
    rows = kit.var("rows", poplar.FLOAT, [len(estimates), 4], tile=0)
    sums = kit.var("sums", poplar.FLOAT, [len(estimates)], tile=0)
    cs = kit.g.add_compute_set("workers")
    for i, cycles in enumerate(estimates):
        v = kit.g.add_vertex(cs, SumVertex, {"in": rows[i], "out": sums[i]}, tile=0)
        kit.g.set_perf_estimate(v, cycles)
    kit.run(prog.Execute(cs))
    return kit.profile


@question(
    "ex01.worker_cycles", title="Predict: eight vertices, six workers", kind="predict",
    statement=f"""
Eight vertices run on one tile in one compute set, with estimates (in worker cycles)
`{WORKER_ESTIMATES}`. All their data is on the tile. Predict the tile's **compute cycles**
(`profile.compute_cycles[0]`): a number.
""",
    hints=[
        "The compiler deals vertices to the 6 workers largest first, each to the least-loaded "
        "worker; the tile's time is 6 × the busiest worker's total.",
        "After the first six vertices the workers hold 40, 40, 30, 30, 20, 20. Where do the two "
        "10s go?",
        "The 10s go to the workers holding 20 (the least loaded), which end at 30. The busiest "
        "worker still holds 40, so the tile takes 6 × 40 cycles.",
    ])
def _worker_cycles(answer):
    p = _tile_compute(WORKER_ESTIMATES)
    truth = int(p.compute_cycles[0])
    total = sum(WORKER_ESTIMATES)
    return predicted(answer, truth, {
        total: f"{total} is the plain sum of the estimates: 'compute excluding idle threads'. "
               "The tile's time is 6 × its busiest worker.",
        max(WORKER_ESTIMATES): "40 is the busiest worker's own issue slots; a worker issues only "
                               "every 6th cycle of the tile, so multiply by 6.",
        6 * total: "that is one worker running every vertex; the compiler deals them to 6 workers.",
        6 * 50: "that deals the vertices round-robin (40 and 10 on one worker); the compiler deals "
                "largest first, each to the least-loaded worker.",
    })


# --- 3 ---------------------------------------------------------------------------------------
VARIABLES = [("x", poplar.FLOAT, 10), ("flags", poplar.BOOL, 3), ("h", poplar.HALF, 5),
             ("n", poplar.INT, 1)]


@question(
    "ex01.variable_bytes", title="Predict: the bytes of four variables", kind="predict",
    statement="""
Tile 0 holds four variables and nothing else: `x` FLOAT[10], `flags` BOOL[3], `h` HALF[5] and
`n` INT[1]. Predict `profile.memory["variables"][0]`, the bytes the tile spends on variables.
""",
    hints=[
        "Bytes per element: FLOAT 4, HALF 2, INT 4, BOOL 1.",
        "Every allocation starts on an 8-byte boundary (notebook 01: `total` asked for 4 bytes "
        "and took 8).",
        "Round each variable's bytes up to a multiple of 8: 40 → 40, 3 → 8, 10 → 16, 4 → 8.",
    ])
def _variable_bytes(answer):
    kit = Kit(tiles=1)
    for name, dtype, n in VARIABLES:
        kit.var(name, dtype, [n], tile=0)
    kit.run(prog.Sequence())
    truth = int(kit.profile.memory["variables"][0])
    raw = sum(dt.size * n for _, dt, n in VARIABLES)
    return predicted(answer, truth, {
        raw: f"{raw} is the bytes the elements need; every allocation is 8-byte aligned, so each "
             "variable takes its size rounded up to a multiple of 8.",
        4 * 19: "that counts every element as 4 bytes; a HALF is 2 bytes and a BOOL 1.",
    }, unit="bytes")


# --- 4 ---------------------------------------------------------------------------------------
SIX_WORKERS_PAR = Par(cycles=6216, tolerance=1.1)


@question(
    "ex01.six_workers", title="Performance: keep six workers busy", kind="performance",
    statement="""
`x` (N floats) lives on tile 0, with `partials`, a FLOAT[6] tensor on the same tile. Write
`six_workers(g, x, partials)`: add vertices of the given `SumVertex` to a compute set on tile 0 so
that the elements of `partials` add up to the sum of `x` (each element of `x` counted once;
every element of `partials` written, as the check fills it with -7777.0 first), and return the
program. The check runs N = 6,000, 606 and 13. **Par** for N = 6,000:
6,216 cycles; your program must be within 1.1× of it.
""",
    par=SIX_WORKERS_PAR,
    hints=[
        "One vertex runs on one worker, and a tile has six: one vertex for the whole of x leaves "
        "five workers idle (the tile takes 6 × that vertex's estimate).",
        "Cut x into 6 pieces of (nearly) equal size, one SumVertex per piece, each writing its "
        "own element of partials — never two vertices writing the same element.",
        "cuts = [k * N // 6 for k in range(7)]; for k in range(6): add_vertex(cs, SumVertex, "
        "{'in': x[cuts[k]:cuts[k+1]], 'out': partials[k]}, tile=0); return prog.Execute(cs).",
    ])
def _six_workers(build):
    rng = np.random.default_rng(106)
    report = None
    for n in (6000, 606, 13):
        kit = Kit(tiles=1)
        x = kit.var("x", poplar.FLOAT, [n], tile=0)
        partials = kit.var("partials", poplar.FLOAT, [6], tile=0, read=True)
        program = call(build, kit.g, x, partials, what="six_workers(g, x, partials)")
        kit.compile(program)
        values = rng.integers(-9, 10, n).astype(np.float32)
        got = kit.run(x=values, partials=filled(6))["partials"]
        if (got == SENTINEL).any():
            raise Fail(f"for N = {n}, partials = {short(got)}: element(s) "
                       f"{np.flatnonzero(got == SENTINEL).tolist()} were never written."
                       + sentinel_note("partials", got, np.zeros(6)))
        if got.sum(dtype=np.float64) != values.sum(dtype=np.float64):
            reads = kit.readers("x")
            missing, twice = np.flatnonzero(reads == 0), np.flatnonzero(reads > 1)
            detail = ""
            if missing.size:
                detail += (f" {elements('x', missing)} ({missing.size} element(s)) are read by no "
                           "vertex — an off-by-one in your pieces?")
            if twice.size:
                detail += (f" {elements('x', twice)} ({twice.size} element(s)) are read by more "
                           "than one vertex.")
            raise Fail(f"for N = {n}, partials = {short(got)} add up to "
                       f"{got.sum(dtype=np.float64):.1f}, but sum(x) = "
                       f"{values.sum(dtype=np.float64):.1f}.{detail}")
        if n == 6000:
            report = grade_par(kit.profile, SIX_WORKERS_PAR,
                               "\n  How many vertices keep 6 workers busy, and how big should "
                               "each be?")
    return f"correct for N = 6,000, 606 and 13; {report.text}", {"cycles": report.cycles}
