"""Exercise set 02 · BSP supersteps: work where the data lives, phases as long as the slowest
tile, no races, and the order of supersteps."""
import numpy as np

from .... import poplar
from ....poplar import program as prog
from ...codelets import SumVertex
from ..messages import Fail
from ..kit import Kit, call, exchange_note, grade_par, held, predicted
from ..registry import Par, exercise_set, question
from .outputs import compare_filled, filled

exercise_set("ex02", "02_bsp_supersteps.ipynb", "BSP supersteps",
             "Many tiles: compute where the data lives, predict a superstep, avoid races, and "
             "order supersteps.")


def _blocks(rng, n, tiles, order):
    """A mapping of n elements in contiguous blocks of random sizes, block k on tile order[k]."""
    cuts = np.sort(rng.choice(np.arange(1, n), len(order) - 1, replace=False))
    cuts = np.concatenate([[0], cuts, [n]])
    mapping = [[] for _ in range(tiles)]
    for k, tile in enumerate(order):
        mapping[tile] = [(int(cuts[k]), int(cuts[k + 1]))]
    return mapping


# --- 1 ---------------------------------------------------------------------------------------
@question(
    "ex02.local_sums", title="Sum where the data lives", kind="graph",
    statement="""
`x` is spread over the tiles in contiguous blocks of **different** sizes, in no particular tile
order (some tiles may hold nothing). `partials` has one element per tile; `partials[t]` lives on
tile `t`. Write `local_sums(g, x, partials)`: one compute set in which vertices of `SumVertex` make
`partials[t]` = the sum of the elements of `x` held by tile `t` — 0 for a tile that holds
nothing — **each vertex reading only its own tile's memory** (no exchange). Return the program.
Read the mapping with `g.get_tile_mapping(x)`. The check fills `partials` with -7777.0 before
each run: every element must be written, the empty tiles' zeros too.
""",
    hints=[
        "g.get_tile_mapping(x) returns, for each tile t, the list of (begin, end) intervals of x "
        "that tile t holds.",
        "For each tile with an interval (begin, end), add one SumVertex reading x[begin:end] and "
        "writing partials[t] — on tile t itself, where both live. A tile with no interval still "
        "needs its 0: a SumVertex over an empty slice sums nothing.",
        "for t, intervals in enumerate(g.get_tile_mapping(x)): for (b, e) in intervals or "
        "[(0, 0)]: g.add_vertex(cs, SumVertex, {'in': x[b:e], 'out': partials[t]}, tile=t).",
    ])
def _local_sums(build):
    rng = np.random.default_rng(201)
    for tiles, n, order in ((4, 50, [0, 1, 2, 3]), (8, 90, [5, 2, 7, 0, 3])):
        kit = Kit(tiles)
        x = kit.var("x", poplar.FLOAT, [n], tile=_blocks(rng, n, tiles, order))
        partials = kit.var("partials", poplar.FLOAT, [tiles], tile=[[(t, t + 1)] for t in range(tiles)],
                           read=True)
        kit.compile(call(build, kit.g, x, partials, what="local_sums(g, x, partials)"))
        tile_of = kit.tiles_of("x")
        for _ in range(2):
            values = rng.integers(-20, 21, n).astype(np.float32)
            got = kit.run(x=values, partials=filled(tiles))["partials"]
            want = np.array([values[tile_of == t].sum() for t in range(tiles)])
            compare_filled(kit, "partials", got, want, exact=True,
                           context=lambda t: f" (tile {t} holds {held(kit, 'x', t)})")
        if kit.profile.exchange_cycles.sum():
            raise Fail("the sums are right, but data crossed the exchange: a vertex must read "
                       "only its own tile's memory." + exchange_note(kit))
    return "correct on 4 and 8 tiles with uneven, shuffled blocks — and no exchange"


# --- 2 ---------------------------------------------------------------------------------------
STEP = {0: (7, 20), 1: (6, 30), 2: (1, 100)}     # tile: (vertices, estimate); tile 3: nothing


@question(
    "ex02.step_cycles", title="Predict: one superstep on four tiles", kind="predict",
    statement="""
One compute set runs on a 4-tile IPU; all data is local. Tile 0 runs 7 vertices of 20 cycles,
tile 1 runs 6 vertices of 30, tile 2 one vertex of 100, tile 3 nothing. Predict the run's
`profile.total_cycles`.
""",
    hints=[
        "A step is sync, then (here, no exchange) compute. Each phase lasts as long as its "
        "slowest tile. The internal sync costs 150 cycles.",
        "Each tile's compute is 6 × its busiest worker: tile 0 deals 7 vertices to 6 workers, so "
        "one worker runs two.",
        "Tiles: 0 → 6 × 40 = 240, 1 → 6 × 30 = 180, 2 → 6 × 100 = 600. The compute phase is the "
        "maximum; add the sync.",
    ])
def _step_cycles(answer):
    kit = Kit(4)
    rows = kit.var("rows", poplar.FLOAT, [14, 2], tile=0)
    sums = kit.var("sums", poplar.FLOAT, [14], tile=0)
    cs = kit.g.add_compute_set("step")
    i = 0
    for tile, (count, cycles) in STEP.items():
        for _ in range(count):
            kit.g.set_tile_mapping(rows[i], tile)
            kit.g.set_tile_mapping(sums[i], tile)
            v = kit.g.add_vertex(cs, SumVertex, {"in": rows[i], "out": sums[i]}, tile=tile)
            kit.g.set_perf_estimate(v, cycles)
            i += 1
    kit.run(prog.Execute(cs))
    truth = int(kit.profile.total_cycles)
    sync = kit.target.sync_cycles("internal")
    return predicted(answer, truth, {
        truth - sync: "you left out the sync: every step starts with a barrier (150 cycles).",
        sync + 240 + 180 + 600: "that adds up the tiles; the tiles compute in parallel, and a phase "
                                "lasts as long as its slowest tile.",
        sync + 600 + 240: "tile 0's time is 6 × its busiest worker (40), not a sum of rounds.",
        sync + 100: "each worker issues every 6th cycle: a vertex of 100 takes 600 tile cycles.",
    })


# --- 3 ---------------------------------------------------------------------------------------
@question(
    "ex02.no_race", title="Accumulate without a race", kind="graph",
    statement="""
`x` has 4 rows, row `i` on tile `i`; `acc` is one float on tile 0 that already holds a value.
Using the given `AddTo` codelet (`acc += sum(part)`), write `no_race(g, x, acc)` returning a
program after which `acc` = its old value + the sum of all of `x`. One `AddTo` per row, on the
row's tile (the vertex reading row `i` runs on tile `i`). The compiler must accept it.
""",
    hints=[
        "Four vertices in ONE compute set all writing acc would race: the compiler rejects it "
        "(notebook 02, section 6).",
        "Supersteps order everything: a compute set sees every write of the previous one. How "
        "many compute sets do you need?",
        "One compute set per row, each with one AddTo(part=x[i], acc=acc[0]) on tile i; return "
        "prog.Sequence([prog.Execute(cs) for cs in those]).",
    ])
def _no_race(build):
    rng = np.random.default_rng(203)
    for k in (5, 12):
        kit = Kit(4)
        x = kit.var("x", poplar.FLOAT, [4, k], tile=[[(i * k, (i + 1) * k)] for i in range(4)])
        acc = kit.var("acc", poplar.FLOAT, [1], tile=0, read=True)
        kit.compile(call(build, kit.g, x, acc, what="no_race(g, x, acc)"))
        _on_the_rows_tiles(kit)
        for _ in range(2):
            values = rng.integers(-9, 10, (4, k)).astype(np.float32)
            start = np.float32(rng.integers(-50, 50))
            got = kit.run(x=values, acc=np.array([start], np.float32))["acc"]
            if got[0] != start + values.sum():
                reads = kit.readers("x").reshape(4, k).min(axis=1)
                unread = [i for i in range(4) if reads[i] == 0]
                detail = (f" Row(s) {unread} of x are read by no vertex." if unread else
                          " Does every vertex add to acc, and does acc keep its old value?")
                raise Fail(f"acc = {got[0]:.1f}, expected {start:.1f} + sum(x) = "
                           f"{start + values.sum():.1f}.{detail}")
    return "correct: the compiler accepted it and acc holds the whole sum"


def _on_the_rows_tiles(kit):
    """Fail unless every vertex reads its part of x on its own tile (acc may travel)."""
    away = [r for r in kit.remote_reads() if r[2].startswith("x")]
    if away:
        vid, field, name, _, tiles, _ = away[0]
        raise Fail(f"{kit.vertex(vid)} reads {name} (field '{field}'), which lives on tile "
                   f"{', '.join(map(str, tiles))}: the statement asks for one AddTo per row, on "
                   "the row's tile (row i on tile i), so that only acc travels.")


# --- 4 ---------------------------------------------------------------------------------------
NORMALISE_TILES, NORMALISE_PER_TILE = 8, 600
NORMALISE_PAR = Par(cycles=2814)


@question(
    "ex02.normalise", title="Performance: normalise a vector", kind="performance",
    statement=f"""
`x` ({NORMALISE_TILES} × {NORMALISE_PER_TILE} floats) is spread evenly over the
{NORMALISE_TILES} tiles; `y` is mapped like `x`. Write `normalise(g, x, y)` returning a program that
computes `y = x / sum(x)` with the given codelets `SumVertex` and `Divide` (add the variables you
need, e.g. partial sums and a total, and map them). The check runs it on several inputs, one
after the other on the same engine. **Par**: {NORMALISE_PAR.cycles:,} cycles, within 1.2×.
""",
    par=NORMALISE_PAR,
    hints=[
        "Three supersteps: partial sums on every tile, a total on one tile (the exchange gathers "
        "the partials), then every tile scales its own part (the exchange broadcasts the total).",
        "Keep all six workers of every tile busy in the first and last step: six pieces per tile, "
        "one vertex each. Execute the compute sets in the order the data flows.",
        "Notebook 02's build_normalise does exactly this: partials [tiles, 6], total on tile 0, "
        "prog.Sequence([Execute(partial_cs), Execute(total_cs), Execute(scale_cs)]).",
    ])
def _normalise(build):
    rng = np.random.default_rng(204)
    tiles, n = NORMALISE_TILES, NORMALISE_TILES * NORMALISE_PER_TILE
    kit = Kit(tiles)
    per = [[(t * NORMALISE_PER_TILE, (t + 1) * NORMALISE_PER_TILE)] for t in range(tiles)]
    x = kit.var("x", poplar.FLOAT, [n], tile=per)
    y = kit.var("y", poplar.FLOAT, [n], tile=per, read=True)
    kit.compile(call(build, kit.g, x, y, what="normalise(g, x, y)"))
    runs = []
    for _ in range(3):
        values = rng.uniform(0.5, 1.5, n).astype(np.float32)
        runs.append((values, kit.run(x=values, y=filled(n))["y"]))
    for case, (values, got) in enumerate(runs):
        want = values / values.sum(dtype=np.float64)
        if case and not np.allclose(got, want, rtol=1e-4) and np.allclose(
                got, values / runs[case - 1][0].sum(dtype=np.float64), rtol=1e-4):
            raise Fail("y was divided by the PREVIOUS run's total: a compute set read the total "
                       "(or the partial sums) before the compute set that writes them had run. "
                       "Supersteps run in program order, and a compute set sees only the writes "
                       "of earlier ones: execute partial sums → total → divide, in that order.")
    for case, (values, got) in enumerate(runs):
        compare_filled(kit, "y", got, values / values.sum(dtype=np.float64), rtol=1e-4,
                       atol=1e-8, case=f" (run {case + 1} of 3)")
    report = grade_par(kit.profile, NORMALISE_PAR)
    return f"correct on 3 runs; {report.text}", {"cycles": report.cycles}
