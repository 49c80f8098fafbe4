"""Exercise set 03 · the exchange: the cost of bytes, broadcast by multicast, gather, all-to-all."""
import numpy as np

from .... import poplar
from ....poplar import program as prog
from ..messages import Fail
from ..kit import Kit, call, grade_par, predicted
from ..registry import Par, exercise_set, question
from .outputs import compare_filled, filled

exercise_set("ex03", "03_the_exchange.ipynb", "The exchange",
             "Predict what bytes cost, broadcast in one superstep, and move blocks all-to-all.")


def _copy_profile(n, dtype, src_tiles, dst_tile, tiles=8):
    kit = Kit(tiles)
    srcs = [kit.var(f"x{i}", dtype, [n], tile=t) for i, t in enumerate(src_tiles)]
    dst = kit.var("y", dtype, [len(src_tiles), n], tile=dst_tile)
    kit.run(prog.Copy(poplar.concat(srcs), dst.flatten()))
    return kit.profile


# --- 1 ---------------------------------------------------------------------------------------
@question(
    "ex03.copy_cycles", title="Predict: one copy between two tiles", kind="predict",
    statement="""
A `prog.Copy` moves 750 **HALF** values from a tensor on tile 2 to a tensor on tile 5. Predict
`profile.exchange_cycles[5]`, the receiving tile's exchange cycles.
""",
    hints=[
        "Only bytes count: a tile's exchange cost is ceil(max(bytes in, bytes out) / 4) + 16.",
        "A HALF is 2 bytes. Tile 5 receives 750 of them and sends nothing.",
        "ceil(1500 / 4) + 16.",
    ])
def _copy_cycles(answer):
    p = _copy_profile(750, poplar.HALF, [2], 5)
    truth = int(p.exchange_cycles[5])
    return predicted(answer, truth, {
        750 * 4 // 4 + 16: "that counts a HALF as 4 bytes; it is 2.",
        1500 // 4: "you left out the fixed setup of 16 cycles every exchanging tile pays.",
        truth + 150: "that is the whole step (sync included); the question asks for tile 5's "
                     "exchange cycles.",
    })


# --- 2 ---------------------------------------------------------------------------------------
@question(
    "ex03.broadcast", title="Broadcast in one superstep", kind="graph",
    statement="""
`buf` has one row per tile, row `i` on tile `i`. Row 0 holds data. Write `broadcast(g, buf)`
returning a program that copies row 0 into **every** other row — in **one** superstep (one
executed step) — and leaves row 0 alone (no copy writes it: a copy from row 0 onto itself reads
and writes the same elements). The check fills the other rows with -7777.0 first and runs it on
4 and 8 tiles with rows of 5 and 64 floats.
""",
    hints=[
        "The exchange multicasts: tile 0 sends its row once and every tile that needs it listens, "
        "so one Copy can feed all the other rows at once.",
        "A Copy needs the same number of elements on both sides. buf[0].broadcast(k, 0) is a "
        "view that repeats row 0 k times (it stores nothing).",
        "return prog.Copy(buf[0].broadcast(rows - 1, 0), buf[1:]) with rows = buf.shape[0].",
    ])
def _broadcast(build):
    rng = np.random.default_rng(302)
    for tiles, n in ((4, 5), (8, 64)):
        kit = Kit(tiles)
        buf = kit.var("buf", poplar.FLOAT, [tiles, n], tile=[[(i * n, (i + 1) * n)]
                                                            for i in range(tiles)], read=True)
        program = call(build, kit.g, buf, what="broadcast(g, buf)")
        _leaves_row_0(kit, program, buf)
        init = filled((tiles, n))
        init[0] = rng.standard_normal(n).astype(np.float32)
        got = kit.run(program, buf=init)["buf"]
        want = np.broadcast_to(init[0], (tiles, n))
        missing = [i for i in range(1, tiles) if (got[i] == init[i]).all()]
        if missing:
            raise Fail(f"on {tiles} tiles, row(s) {missing} of buf (on tile(s) {missing}) were "
                       "never written: they still hold their initial values. Nothing was copied "
                       "to those tiles — a missing exchange. Did your copy cover every row?")
        compare_filled(kit, "buf", got, want, exact=True, case=f" on {tiles} tiles")
        steps = len(kit.profile.steps)
        if steps != 1:
            raise Fail(f"correct, but on {tiles} tiles your broadcast takes {steps} supersteps "
                       f"({kit.profile.total_cycles:,} cycles), each with its own sync and setup. "
                       "The exchange multicasts: one Copy from row 0 to all the others is one "
                       "superstep, whatever the number of destinations.")
    return "correct on 4 and 8 tiles, in one superstep"


def _programs(program):
    """Every program inside `program` (a Sequence's, a Repeat's, ...), itself first."""
    yield program
    children = program.children() if isinstance(program, prog.Program) else \
        program if isinstance(program, (list, tuple)) else ()
    for child in children:
        yield from _programs(child)


def _leaves_row_0(kit, program, buf):
    """Fail if a copy or a vertex writes row 0, the source of the broadcast."""
    row0 = buf[0].ids.ravel()
    for p in _programs(program):
        dst = getattr(p, "dst", None) if isinstance(p, prog.Copy) else None
        if isinstance(dst, poplar.Tensor) and np.intersect1d(dst.ids, row0).size:
            raise Fail(f"your program copies onto row 0 ({p.name!r}): row 0 is the source, and "
                       "the statement asks to copy it into every OTHER row. A copy that writes "
                       "the elements it reads is a read/write conflict, and moves bytes for "
                       "nothing: copy into buf[1:] only.")
    if (kit.writers("buf").reshape(buf.shape)[0] >= 0).any():
        raise Fail("a vertex writes row 0 of buf: row 0 is the source; copy it into the other "
                   "rows only.")


# --- 3 ---------------------------------------------------------------------------------------
@question(
    "ex03.gather_cycles", title="Predict: a gather onto one tile", kind="predict",
    statement="""
Tiles 1 to 7 each hold their own row of 64 floats; one `prog.Copy` gathers the seven rows into a
tensor on tile 0. Predict `profile.exchange_cycles[0]`.
""",
    hints=[
        "Multicast helps only when many tiles want the SAME bytes. Here tile 0 wants seven "
        "different rows.",
        "Tile 0 takes in 7 × 64 × 4 bytes at 4 bytes per cycle, plus the setup.",
        "7 × 256 / 4 + 16.",
    ])
def _gather_cycles(answer):
    p = _copy_profile(64, poplar.FLOAT, list(range(1, 8)), 0)
    truth = int(p.exchange_cycles[0])
    return predicted(answer, truth, {
        64 + 16: "that is one row: a receiver cannot listen to seven different rows at once; its "
                 "bytes in add up.",
        7 * 64: "you left out the fixed setup of 16 cycles.",
        7 * 64 * 4 + 16: "the exchange moves 4 bytes per cycle per tile.",
        truth + 150: "that includes the sync; the question asks for tile 0's exchange cycles.",
    })


# --- 4 ---------------------------------------------------------------------------------------
TRANSPOSE_TILES, TRANSPOSE_K = 8, 16
TRANSPOSE_PAR = Par(cycles=286)


@question(
    "ex03.transpose", title="Performance: all-to-all", kind="performance",
    statement=f"""
`a` and `b` are [T, T, k] tensors with `a[i]` and `b[i]` on tile `i`. Write `transpose(g, a, b)`
returning a program after which `b[j, i] = a[i, j]` for all `i, j` (every tile sends one block to
every other tile). **Par** with T = {TRANSPOSE_TILES}, k = {TRANSPOSE_K}:
{TRANSPOSE_PAR.cycles:,} cycles, within 1.2×.
""",
    par=TRANSPOSE_PAR,
    hints=[
        "The exchange is fastest when every tile sends and receives at the same time: one Copy "
        "of everything, not T × T small copies (each pays a sync and a setup).",
        "A view can reorder dimensions without copying: a.dim_shuffle([1, 0, 2])[j, i] is a[i, j].",
        "return prog.Copy(a.dim_shuffle([1, 0, 2]), b).",
    ])
def _transpose(build):
    rng = np.random.default_rng(304)
    report = None
    for tiles, k in ((4, 3), (TRANSPOSE_TILES, TRANSPOSE_K)):
        kit = Kit(tiles)
        block = tiles * k
        a = kit.var("a", poplar.FLOAT, [tiles, tiles, k],
                    tile=[[(i * block, (i + 1) * block)] for i in range(tiles)])
        b = kit.var("b", poplar.FLOAT, [tiles, tiles, k],
                    tile=[[(i * block, (i + 1) * block)] for i in range(tiles)], read=True)
        program = call(build, kit.g, a, b, what="transpose(g, a, b)")
        values = rng.standard_normal((tiles, tiles, k)).astype(np.float32)
        got = kit.run(program, a=values, b=filled((tiles, tiles, k)))["b"]
        compare_filled(kit, "b", got, values.transpose(1, 0, 2), exact=True,
                       case=f" (b[j, i] must be a[i, j]; {tiles} tiles)")
        if tiles == TRANSPOSE_TILES:
            report = grade_par(kit.profile, TRANSPOSE_PAR)
    return f"correct on 4 and 8 tiles; {report.text}", {"cycles": report.cycles}
