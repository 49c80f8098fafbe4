"""Exercise set 04 · the Poplar graph API: mappings, the exchanges vertices imply, a codelet bug,
streams and loops, and a matrix-vector product that keeps every worker busy."""
import numpy as np

from .... import poplar
from ....poplar import program as prog
from ...codelets import SumVertex
from ..messages import Fail, short
from ..kit import Kit, call, exchange_note, grade_par, predicted, require_codelet
from ..registry import Par, exercise_set, question
from .outputs import SENTINEL, compare_filled, filled

exercise_set("ex04", "04_poplar_graph_api.ipynb", "The Poplar graph API",
             "Map tensors, predict an implicit exchange, fix a codelet, stream data through a "
             "loop, and build a balanced matrix-vector product.")


# --- 1 ---------------------------------------------------------------------------------------
@question(
    "ex04.row_mapping", title="Map rows round-robin", kind="graph",
    statement="""
Write `map_rows(g, t)`: map the 2-D tensor `t` so that row `i` lives on tile `i % T`, where
`T = g.target.num_tiles`. (It returns nothing; the check reads `g.get_tile_mapping(t)`.)
""",
    hints=[
        "g.set_tile_mapping(tensor, tile) maps every element of a tensor (or of a view, such as "
        "one row t[i]) to one tile.",
        "Loop over the rows: for i in range(t.shape[0]).",
        "for i in range(t.shape[0]): g.set_tile_mapping(t[i], i % g.target.num_tiles).",
    ])
def _row_mapping(map_rows):
    for rows, cols, tiles in ((12, 5, 4), (7, 3, 3), (9, 8, 8)):
        kit = Kit(tiles)
        t = kit.var("t", poplar.FLOAT, [rows, cols])
        call(map_rows, kit.g, t, what="map_rows(g, t)")
        tile_of = kit.tiles_of("t").reshape(rows, cols)
        for i in range(rows):
            if (tile_of[i] < 0).any():
                raise Fail(f"with {rows} rows on {tiles} tiles, row {i} (elements {i * cols}–"
                           f"{(i + 1) * cols - 1}) is not mapped to any tile")
            found = sorted(set(tile_of[i].tolist()))
            if found != [i % tiles]:
                raise Fail(f"with {rows} rows on {tiles} tiles, row {i} (elements {i * cols}–"
                           f"{(i + 1) * cols - 1}) lives on tile {', '.join(map(str, found))}, "
                           f"expected tile {i % tiles} (= {i} % {tiles})")
    return "every row on tile i % T, for three shapes"


# --- 2 ---------------------------------------------------------------------------------------
@question(
    "ex04.tutorial_exchange", title="Predict: the exchange a vertex implies", kind="predict",
    statement="""
`v1` has 6 FLOAT elements, element `j` on tile `j`. In one compute set, vertex `i` (a
`SumVertex` on tile `i`) sums `v1[i:]` into `v2[i]`, which lives on tile `i`. Predict the
exchange cycles of **tile 0** in that step (`profile.exchange_cycles[0]`).
""",
    hints=[
        "A vertex reads only its own tile's memory: the compiler brings the elements of v1[i:] "
        "that live elsewhere into a buffer on tile i, before the compute phase.",
        "Tile 0 needs v1[1] … v1[5] (5 floats from other tiles); what it sends out is its own "
        "v1[0] — to nobody, since only vertex 0 reads it.",
        "ceil(max(20 bytes in, 0 out) / 4) + 16.",
    ])
def _tutorial_exchange(answer):
    kit = Kit(6)
    v1 = kit.var("v1", poplar.FLOAT, [6], tile=[[(j, j + 1)] for j in range(6)])
    v2 = kit.var("v2", poplar.FLOAT, [6], tile=[[(j, j + 1)] for j in range(6)])
    cs = kit.g.add_compute_set("sum")
    for i in range(6):
        kit.g.add_vertex(cs, SumVertex, {"in": v1[i:], "out": v2[i]}, tile=i)
    kit.run(prog.Execute(cs))
    truth = int(kit.profile.exchange_cycles[0])
    return predicted(answer, truth, {
        5: "5 cycles moves the 20 bytes; every exchanging tile also pays a setup of 16 cycles.",
        24 // 4 + 16: "tile 0 holds v1[0] itself: only the 5 others cross the exchange.",
        150 + truth: "that includes the sync; the question asks for the exchange cycles.",
        16: "tile 0 does receive data: vertex 0 reads v1[0:], and only v1[0] is on tile 0.",
    })


# --- 3 ---------------------------------------------------------------------------------------
BUGGY_CUMSUM = '''class CumSum(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(inp, out):
        out[0] = inp[0]
        for i in range(1, len(inp) + 1):
            out[i] = out[i - 1] + inp[i]'''


@question(
    "ex04.fix_cumsum", title="Debug a codelet", kind="codelet",
    statement=f"""
This codelet should write the running sums `out[i] = in[0] + … + in[i]`, but it fails in checked
mode (run it with `{{"debug.checkedCodelets": "true"}}` or in python mode to see where):

```python
{BUGGY_CUMSUM}
```

Fix it (same fields). The check runs several vertices over vectors of 1 to 16 elements.
""",
    hints=[
        "Run it in python mode (options={'debug.codeletMode': 'python'}): the CodeletError "
        "names the line and the index that is out of bounds.",
        "A Vector of n elements has indices 0 … n-1. What is the last i the loop reaches?",
        "The loop should be range(1, len(inp)).",
    ])
def _fix_cumsum(cls):
    require_codelet(cls, {"in": "input", "out": "output"})
    rng = np.random.default_rng(403)
    lengths = [1, 4, 9, 16, 2]
    n = sum(lengths)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    kit = Kit(2)
    x = kit.var("x", poplar.FLOAT, [n], tile=0)
    out = kit.var("out", poplar.FLOAT, [n], tile=0, read=True)
    cs = kit.g.add_compute_set("cumsum")
    for k in range(len(lengths)):
        piece = slice(int(bounds[k]), int(bounds[k + 1]))
        kit.g.add_vertex(cs, cls, {"in": x[piece], "out": out[piece]}, tile=0)
    kit.compile(prog.Execute(cs))
    for _ in range(2):
        values = rng.integers(-9, 10, n).astype(np.float32)
        got = kit.run(x=values, out=filled(n))["out"]
        want = np.concatenate([np.cumsum(values[bounds[k]:bounds[k + 1]])
                               for k in range(len(lengths))])
        def vector(i):
            k = int(np.searchsorted(bounds, i, "right")) - 1
            return f" (its vector: in = {short(values[bounds[k]:bounds[k + 1]])})"

        compare_filled(kit, "out", got, want, exact=True, context=vector)
    return "fixed: correct for vectors of 1 to 16 elements, with bounds checking on"


# --- 4 ---------------------------------------------------------------------------------------
@question(
    "ex04.stream_double", title="Streams and a loop", kind="graph",
    statement="""
`s_in` is a host-to-device FIFO and `s_out` a device-to-host FIFO, both of 4 FLOATs per copy.
Write `stream_double(g, s_in, s_out, times)` returning a program that, `times` times: copies 4 values
from `s_in` into a tensor on the device, doubles them with the given `Double` codelet, and copies
them to `s_out`. Create and map the tensor yourself. The host arrays are read and written
circularly, as in Poplar.
""",
    hints=[
        "You need one variable of 4 FLOATs (map it!), a compute set with a Double vertex on it, "
        "and three programs in a Sequence: Copy(s_in, v), Execute(cs), Copy(v, s_out).",
        "prog.Repeat(times, body) runs body `times` times.",
        "v = g.add_variable(poplar.FLOAT, [4], 'v'); g.set_tile_mapping(v, 0); cs = "
        "g.add_compute_set('double'); g.add_vertex(cs, Double, {'x': v}, tile=0); return "
        "prog.Repeat(times, prog.Sequence([prog.Copy(s_in, v), prog.Execute(cs), "
        "prog.Copy(v, s_out)])).",
    ])
def _stream_double(build):
    rng = np.random.default_rng(404)
    for times, n_in in ((5, 12), (3, 8)):
        kit = Kit(2)
        s_in = kit.g.add_host_to_device_fifo("in", poplar.FLOAT, 4)
        s_out = kit.g.add_device_to_host_fifo("out", poplar.FLOAT, 4)
        kit.compile(call(build, kit.g, s_in, s_out, times, what="stream_double(g, s_in, s_out, times)"))
        host_in = rng.integers(-50, 50, n_in).astype(np.float32)
        host_out = filled(4 * times)
        kit.engine.connect_stream("in", host_in)
        kit.engine.connect_stream("out", host_out)
        kit.run()
        want = 2 * host_in[np.arange(4 * times) % n_in]
        written = int((host_out != SENTINEL).sum())
        if written < 4 * times and (host_out[written:] == SENTINEL).all():
            raise Fail(f"with times = {times}, only {written} of {4 * times} values came out of "
                       f"s_out: the loop streamed out {written // 4} time(s), expected {times}")
        compare_filled(None, "host_out", host_out, want, exact=True,
                case=f" (times = {times}, host input {short(host_in)}; out[k] must be "
                     f"2 × in[k % {n_in}])")
    return "correct: values stream in, double and stream out, wrapping around the host array"


# --- 5 ---------------------------------------------------------------------------------------
MATVEC_ROWS, MATVEC_COLS, MATVEC_TILES = 24, 32, 4
MATVEC_PAR = Par(cycles=450)


@question(
    "ex04.matvec", title="Performance: a balanced matrix-vector product", kind="performance",
    statement=f"""
`A` is {MATVEC_ROWS} × {MATVEC_COLS} and `y` has {MATVEC_ROWS} elements, both **unmapped**; `x`
({MATVEC_COLS} floats) lives on tile 0 of a {MATVEC_TILES}-tile IPU. Write `matvec(g, A, x, y)`:
map `A` and `y`, add one `Dot` vertex per row (`y[i] = A[i] · x`) and return the program.
**Par**: {MATVEC_PAR.cycles:,} cycles, within 1.2×.
""",
    par=MATVEC_PAR,
    hints=[
        "A vertex should run on the tile that holds its row of A and its y[i] — otherwise the "
        "exchange moves the row (or the result) too. x has to travel anyway (multicast).",
        f"{MATVEC_ROWS} rows on {MATVEC_TILES} tiles: spread them evenly, so every tile runs 6 "
        "vertices, one per worker.",
        "for i in range(rows): t = i * T // rows; map A[i] and y[i] to t; add_vertex(cs, Dot, "
        "{'a': A[i], 'x': x, 'out': y[i]}, tile=t).",
    ])
def _matvec(build):
    rng = np.random.default_rng(405)
    kit = Kit(MATVEC_TILES)
    A = kit.var("A", poplar.FLOAT, [MATVEC_ROWS, MATVEC_COLS])
    x = kit.var("x", poplar.FLOAT, [MATVEC_COLS], tile=0)
    y = kit.var("y", poplar.FLOAT, [MATVEC_ROWS], read=True)
    kit.compile(call(build, kit.g, A, x, y, what="matvec(g, A, x, y)"))
    for _ in range(2):
        a_host = rng.uniform(-1, 1, (MATVEC_ROWS, MATVEC_COLS)).astype(np.float32)
        x_host = rng.uniform(-1, 1, MATVEC_COLS).astype(np.float32)
        got = kit.run(A=a_host, x=x_host, y=filled(MATVEC_ROWS))["y"]
        compare_filled(kit, "y", got, a_host.astype(np.float64) @ x_host, rtol=1e-4,
                       atol=1e-5)
    report = grade_par(kit.profile, MATVEC_PAR, exchange_note(kit, ignore=('x',)))
    return f"correct; {report.text}", {"cycles": report.cycles}
