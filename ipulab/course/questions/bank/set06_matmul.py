"""Exercise set 06 · matrix products: a codelet with a cycle estimate, predicting a matrix-vector
product, splitting rows with a reduction, the best split, and poplin's planned inputs."""
import functools

import numpy as np

from .... import poplar, poputil
from ....poplar import program as prog
from ...codelets import Dot, SumPartials
from ..messages import Fail, fmt
from ..kit import Kit, call, grade_par, predicted, require_codelet
from ..registry import Par, exercise_set, question
from .outputs import compare_filled, filled

exercise_set("ex06", "06_matmul_on_1472_tiles.ipynb", "Matrix products",
             "A codelet that prices itself, a prediction, a split matrix-vector product with a "
             "reduction, the best split, and poplin's planned inputs.")


# --- 1 ---------------------------------------------------------------------------------------
@question(
    "ex06.dot_estimate", title="A codelet that prices itself", kind="codelet", prices=True,
    statement="""
Complete the codelet `MyDot`: `out = a · x`, accumulated in a **float32** running total in
index order (the check compares bit for bit with `s = np.float32(0.0)`, then `s += a[j] * x[j]`
for j = 0, 1, …, on a vector where a float64 total rounds differently), and a
`cycle_estimate(a, x, out)` that tells the simulator a vertex costs 10 worker cycles plus one
per element of `a`. `cycle_estimate` receives, for each field, its number of elements as an int:
its parameter `a` is that number itself (`len(a)` of an int fails). The check fills `out`
with -7777.0 before each run.
""",
    hints=[
        "compute: a float32 running total (s = np.float32(0.0)), s += a[j] * x[j] over j, then "
        "out[0] = s.",
        "cycle_estimate is a @staticmethod whose parameters are the field names; each receives "
        "that field's number of elements (an int).",
        "@staticmethod\\ndef cycle_estimate(a, x, out):\\n    return 10 + a",
    ])
def _dot_estimate(cls):
    require_codelet(cls, {"a": "input", "x": "input", "out": "output"})
    if getattr(cls, "cycle_estimate", None) is None:
        raise Fail(f"{cls.__name__} has no cycle_estimate: add a @staticmethod "
                   "cycle_estimate(a, x, out) returning the worker cycles of one vertex")
    rng = np.random.default_rng(601)
    lengths = [1, 5, 16, 33]
    kit = Kit(2)
    n = sum(lengths)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    a = kit.var("a", poplar.FLOAT, [n], tile=0)
    x = kit.var("x", poplar.FLOAT, [n], tile=0)
    out = kit.var("out", poplar.FLOAT, [len(lengths)], tile=0, read=True)
    cs = kit.g.add_compute_set("dots")
    for k in range(len(lengths)):
        piece = slice(int(bounds[k]), int(bounds[k + 1]))
        kit.g.add_vertex(cs, cls, {"a": a[piece], "x": x[piece], "out": out[k]}, tile=0)
    kit.compile(prog.Execute(cs))
    for case in range(3):
        av = rng.uniform(-1, 1, n).astype(np.float32)
        xv = rng.uniform(-1, 1, n).astype(np.float32)
        if case == 2:           # 2**24 + 1 + 1 + 1 + 1: float32 loses every 1, float64 none
            av[bounds[1]:bounds[2]], xv[bounds[1]:bounds[2]] = [2.0**24, 1, 1, 1, 1], 1
        got = kit.run(a=av, x=xv, out=filled(len(lengths)))["out"]
        want = [_running_total(av[bounds[k]:bounds[k + 1]], xv[bounds[k]:bounds[k + 1]])
                for k in range(len(lengths))]
        compare_filled(kit, "out", got, np.array(want), rtol=1e-5, atol=1e-6,
                       context=lambda k: f" (len(a) = {lengths[k]})")
        if case == 2 and got[1] != want[1]:
            raise Fail(f"out[1] = {fmt(got[1])} for a = [2**24, 1, 1, 1, 1] and x = 1s; a float32 "
                       f"running total gives {fmt(want[1])} (2**24 + 1 rounds back to 2**24 in "
                       "float32). Your total is kept in float64 (in a codelet, s = 0.0 is a "
                       "float64), or summed in another order: start from np.float32(0.0) and "
                       "add a[j] * x[j] for j in order.")
    stats = kit.profile.codelet_cycles()[cls.__name__]
    want_cycles = sum(10 + m for m in lengths)
    if stats["cycles"] != want_cycles:
        raise Fail(f"the results are right, but your {len(lengths)} vertices (len(a) = "
                   f"{lengths}) cost {stats['cycles']:,} worker cycles in total; 10 plus one a "
                   f"element each gives {want_cycles:,}. Remember what cycle_estimate's "
                   "parameters receive: each field's number of elements, an int.")
    return "correct results and estimates for vectors of 1 to 33 elements"


def _running_total(a, x) -> np.float32:
    """a · x as the statement asks: a float32 running total, in index order."""
    s = np.float32(0.0)
    for aj, xj in zip(a, x):
        s = np.float32(s + np.float32(aj * xj))
    return s


# --- 2 ---------------------------------------------------------------------------------------
PREDICT_T, PREDICT_COLS = 8, 64


def _rows_engine_profile():
    kit = Kit(PREDICT_T)
    A = kit.var("A", poplar.FLOAT, [PREDICT_T, PREDICT_COLS])
    x = kit.var("x", poplar.FLOAT, [PREDICT_COLS])
    y = kit.var("y", poplar.FLOAT, [PREDICT_T])
    poputil.map_tensor_linearly(kit.g, x, 1, 1)
    cs = kit.g.add_compute_set("dots")
    for i in range(PREDICT_T):
        kit.g.set_tile_mapping(A[i], i)
        kit.g.set_tile_mapping(y[i], i)
        kit.g.add_vertex(cs, Dot, {"a": A[i], "x": x, "out": y[i]}, tile=i)
    kit.run(prog.Execute(cs))
    return kit.profile


@question(
    "ex06.predict_rows", title="Predict: one vertex per row", kind="predict",
    statement=f"""
Notebook 06, section 2, on {PREDICT_T} tiles: `A` is {PREDICT_T} × {PREDICT_COLS}, row `i` and
`y[i]` on tile `i`; `x` ({PREDICT_COLS} floats) is spread with
`map_tensor_linearly(g, x, 1, 1)`; one `Dot` (estimate `10 + len(a)`) per row. Predict
`profile.total_cycles`.
""",
    hints=[
        "One superstep: sync (150), exchange, compute — each as long as its slowest tile.",
        "Exchange: each tile receives the COLS − COLS/T elements of x it lacks (4 bytes each, 4 "
        "bytes per cycle, + 16). Compute: 6 × (10 + COLS), plus copying the tile's own piece of "
        "x into the vertex's buffer at 8 bytes per cycle.",
        "150 + (56 + 16) + (6 × 74 + 4).",
    ])
def _predict_rows(answer):
    p = _rows_engine_profile()
    truth = int(p.total_cycles)
    return predicted(answer, truth, {
        truth - 4: "close: the vertex reads x from one buffer, so the tile's own 8 elements of x "
                   "are copied into it first, at 8 bytes per cycle (4 cycles).",
        truth - 150: "you left out the sync (150 cycles).",
        truth - 72: "you left out the exchange: most of x lives on other tiles.",
        150 + 64 + 16 + 6 * 74 + 4: "each tile already holds COLS/T elements of x; it only "
                                    "receives the rest.",
    })


# --- 3 ---------------------------------------------------------------------------------------
def _split_kit(tiles, rows, cols):
    kit = Kit(tiles)
    A = kit.var("A", poplar.FLOAT, [rows, cols])
    x = kit.var("x", poplar.FLOAT, [cols])
    y = kit.var("y", poplar.FLOAT, [rows], read=True)
    poputil.map_tensor_linearly(kit.g, x, 1, 1)
    return kit, A, x, y


def _matvec_runs(kit, rng, rows, cols, runs=3):
    out = []
    for _ in range(runs):
        a_host = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
        x_host = rng.uniform(-1, 1, cols).astype(np.float32)
        got = kit.run(A=a_host, x=x_host, y=filled(rows))["y"]
        out.append((a_host.astype(np.float64) @ x_host, got))
    for case, (want, got) in enumerate(out):
        if case and not np.allclose(got, want, rtol=1e-4, atol=1e-4) and np.allclose(
                got, out[case - 1][0], rtol=1e-4, atol=1e-4):
            raise Fail("y holds the PREVIOUS run's product: the compute set that adds up the "
                       "partials ran before the one that computes them. Supersteps run in "
                       "program order; a compute set sees only the writes of earlier ones. "
                       "Execute the partial dots first, then the sums.")
    for case, (want, got) in enumerate(out):
        compare_filled(kit, "y", got, want, rtol=1e-4, atol=1e-4,
                       case=f" (run {case + 1} of {runs})")


@question(
    "ex06.split_matvec", title="Split rows, then reduce", kind="graph",
    statement="""
Write `split_matvec(g, A, x, y, s)` returning a program for `y = A·x` where every row is cut into `s`
pieces (`s` divides the number of tiles and of columns): a first compute set of `Dot` vertices
writes partial sums (a variable you create), a second of `SumPartials` adds each row's `s`
partials into `y[i]`. Map `A`, `y` and your partials yourself; `x` is already spread with
`map_tensor_linearly(g, x, 1, 1)`. With `s = 1` no reduction is needed (the `Dot` vertices
write `y`). The check runs s = 1, 2 and 4 on 8 tiles, several inputs each, and counts the
vertices: `rows × s` `Dot`, each reading `cols / s` elements of a row, and for s > 1 one
`SumPartials` per row, adding its `s` partials and alone writing `y[i]`.
""",
    hints=[
        "Piece j of row i is A[i, cols[j]:cols[j+1]] with cols = [j * C // s ...]; its partial "
        "is partials[j, i]. Put it on a tile of group j (the tiles holding x's piece j).",
        "Two vertices must never write the same element in one compute set: the Dot vertices "
        "write partials, and only the second compute set writes y. Execute the dots first.",
        "Notebook 06's split_rows(dev, s) is the whole answer, with g, A, x, y given.",
    ])
def _split_matvec(build):
    rng = np.random.default_rng(603)
    tiles, rows, cols = 8, 16, 64
    for s in (1, 2, 4):
        kit, A, x, y = _split_kit(tiles, rows, cols)
        kit.compile(call(build, kit.g, A, x, y, s, what="split_matvec(g, A, x, y, s)"))
        try:
            _matvec_runs(kit, rng, rows, cols)
            _split_structure(kit, s, rows, cols)
        except Fail as f:
            raise Fail(f"s = {s}: {f}") from None
    return "correct for s = 1, 2 and 4"


def _split_structure(kit, s, rows, cols):
    """Fail unless the graph is the split the statement asks for: rows × s Dot vertices of
    cols / s elements, then (s > 1) one SumPartials per row adding s partials into y[i]."""
    vertices = kit.g.get_vertices()
    dots = [v for v in vertices if v.codelet is Dot]
    sums = [v for v in vertices if v.codelet is SumPartials]
    if len(dots) != rows * s:
        raise Fail(f"the product is right, but your graph has {len(dots)} Dot vertices: each of "
                   f"the {rows} rows cut into s = {s} pieces makes {rows * s}.")
    for v in dots:
        n = sum(p.num_elements() for p in v.connections()["a"])
        if n != cols // s:
            raise Fail(f"the product is right, but {kit.vertex(v.id)} reads {n} elements of a "
                       f"row; a row of {cols} cut into s = {s} pieces gives pieces of "
                       f"{cols // s}.")
    if s == 1:
        return
    lengths = {sum(p.num_elements() for p in v.connections()["p"]) for v in sums}
    writers = {int(w) for w in kit.writers("y")}
    if len(sums) != rows or lengths != {s} or any(vertices[w].codelet is not SumPartials
                                                  for w in writers if w >= 0):
        raise Fail(f"the product is right, but not by the split asked for: each row's {s} "
                   f"partial sums must be added by one SumPartials vertex (its p: the {s} "
                   f"partials of the row) that alone writes y[i] — {rows} of them, in a second "
                   f"compute set. Your graph has {len(sums)} SumPartials vertices.")


# --- 4 ---------------------------------------------------------------------------------------
BEST_T, BEST_COLS = 24, 768
BEST_PAR = Par(cycles=1375, tolerance=1.02)


@question(
    "ex06.best_split", title="Performance: the split that minimises cycles", kind="performance",
    statement=f"""
Now make it fast: `best_split(g, A, x, y)` for `A` of {BEST_T} × {BEST_COLS} on {BEST_T} tiles
(`x` spread with `map_tensor_linearly(g, x, 1, 1)`), with your own codelets (`Dot`,
`SumPartials`, or yours — not poplin). Any mapping and split you like, but it must be as fast
as the **fastest split**: the checker builds `split_matvec`'s graph (pieces of a row on the tiles
of `x`'s piece, then one `SumPartials` per row) for every `s` dividing {BEST_T} and {BEST_COLS}
(1, 2, 3, 4, 6, 8, 12, 24) and takes the fastest, **par** {BEST_PAR.cycles:,} cycles; yours
must be within {BEST_PAR.tolerance:g}× of it.
""",
    par=BEST_PAR,
    hints=[
        "One vertex per row uses one worker in six. More pieces per row feed more workers and "
        "fetch less of x, but cost more vertices (10 cycles each) and a bigger reduction.",
        "Count pieces per tile: a multiple of 6 fills every worker's rounds. Try s = 6 and its "
        "neighbours with your split_matvec builder.",
        "def best_split(g, A, x, y): return split_matvec(g, A, x, y, 6) — your answer to "
        "ex06.split_matvec with s = 6.",
    ])
def _best_split(build):
    rng = np.random.default_rng(604)
    kit, A, x, y = _split_kit(BEST_T, BEST_T, BEST_COLS)
    program = call(build, kit.g, A, x, y, what="best_split(g, A, x, y)")
    used = {v.codelet.__module__ for v in kit.g.get_vertices()}
    if any(m.startswith("ipulab.poplin") for m in used):
        raise Fail("this one is by hand: use your own codelets (Dot, SumPartials, ...), not "
                   "poplin — poplin.mat_mul is the next question")
    kit.compile(program)
    _matvec_runs(kit, rng, BEST_T, BEST_COLS, runs=2)
    best = Par(cycles=fastest_split(), tolerance=BEST_PAR.tolerance)
    report = grade_par(kit.profile, best, "\n  Par is the fastest of the splits s = 1, 2, 3, "
                       "4, 6, 8, 12, 24 the checker built: not every s is as fast.")
    return f"correct; {report.text}", {"cycles": report.cycles}


@functools.lru_cache(maxsize=None)
def fastest_split() -> int:
    """The cycles of the fastest split_matvec graph over every s dividing the tiles and the
    columns: the bound of ex06.best_split (the statement's par is this number)."""
    cycles = []
    for s in (d for d in range(1, BEST_T + 1) if BEST_T % d == 0 and BEST_COLS % d == 0):
        kit, A, x, y = _split_kit(BEST_T, BEST_T, BEST_COLS)
        kit.run(_split_program(kit.g, A, x, y, s))
        cycles.append(int(kit.profile.total_cycles))
    return min(cycles)


def _split_program(g, A, x, y, s):
    """Each row cut into s pieces, piece j on the tiles of group j, then the partials of row i
    added up on the tile of y[i]."""
    tiles, (rows, cols) = g.target.num_tiles, A.shape
    group, cuts = tiles // s, np.arange(s + 1) * cols // s
    partials = g.add_variable(poplar.FLOAT, [s, rows], "partials") if s > 1 else None
    dots, sums = g.add_compute_set("partial dots"), g.add_compute_set("sum partials")
    for j in range(s):
        for i in range(rows):
            t, piece = j * group + i * group // rows, A[i, cuts[j]:cuts[j + 1]]
            out = partials[j, i] if s > 1 else y[i]
            g.set_tile_mapping(piece, t)
            g.set_tile_mapping(out, t)
            g.add_vertex(dots, Dot, {"a": piece, "x": x[cuts[j]:cuts[j + 1]], "out": out}, tile=t)
    for i in range(rows if s > 1 else 0):
        g.set_tile_mapping(y[i], i * tiles // rows)
        g.add_vertex(sums, SumPartials, {"p": partials[:, i], "out": y[i]}, tile=i * tiles // rows)
    return prog.Sequence([prog.Execute(dots)] + ([prog.Execute(sums)] if s > 1 else []))


# --- 5 ---------------------------------------------------------------------------------------
MM_SHAPE, MM_TILES = (48, 768, 16), 16
MM_PAR = Par(cycles=4312, tolerance=1.05)


@question(
    "ex06.planned_mat_mul", title="Performance: inputs where the plan wants them",
    kind="performance",
    statement=f"""
Write `planned_mat_mul(g, m, k, n, seq)`: create the inputs `a` (m × k) and `b` (k × n), FLOAT, map them,
append `c = poplin.mat_mul(g, a, b, seq)` to `seq`, and return `(a, b, c)`. The check runs
{MM_SHAPE[0]} × {MM_SHAPE[1]} × {MM_SHAPE[2]} on {MM_TILES} tiles. **Par**: the plan's own
prediction, {MM_PAR.cycles:,} cycles, within 1.05×.
""",
    par=MM_PAR,
    hints=[
        "The planner assumes each block of a and b already sits on the tiles that use it; an "
        "even spread (map_tensor_linearly) makes the exchange carry more bytes.",
        "poplin has functions that create an input already mapped the way the plan wants.",
        "a = poplin.create_mat_mul_input_lhs(g, poplar.FLOAT, (m, k), (k, n), 'a'); b = "
        "poplin.create_mat_mul_input_rhs(g, poplar.FLOAT, (m, k), (k, n), 'b'); c = "
        "poplin.mat_mul(g, a, b, seq, 'c').",
    ])
def _planned(build):
    rng = np.random.default_rng(605)
    m, k, n = MM_SHAPE
    kit = Kit(MM_TILES)
    seq = prog.Sequence()
    got = call(build, kit.g, m, k, n, seq, what="planned_mat_mul(g, m, k, n, seq)")
    if not (isinstance(got, tuple) and len(got) == 3):
        raise Fail(f"planned_mat_mul should return (a, b, c), got {type(got).__name__}")
    for name, t, shape in zip("abc", got, ((m, k), (k, n), (m, n))):
        if not isinstance(t, poplar.Tensor) or tuple(t.shape) != shape:
            raise Fail(f"{name} should be a tensor of shape {list(shape)}, got "
                       f"{getattr(t, 'shape', type(t).__name__)}")
        kit.tensors[name] = t
    kit.reads.append("c")
    kit.compile(seq)
    a_host = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b_host = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    out = kit.run(a=a_host, b=b_host, c=filled((m, n)))["c"]
    compare_filled(None, "c", out, a_host.astype(np.float64) @ b_host, rtol=1e-4, atol=1e-4)
    moved = int(kit.profile.exchange_traffic()[2].sum())
    report = grade_par(kit.profile, MM_PAR, f"\n  The exchange moved {moved:,} bytes between "
                       "tiles. Who decides where each block of a and b starts out?")
    return f"correct; {report.text}", {"cycles": report.cycles}
