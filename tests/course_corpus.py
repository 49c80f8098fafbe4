"""A corpus of WRONG answers to the course's questions: each must fail its check with the
intended message, without raising. KIND names the mistake (the categories of COURSE.md)."""
import re

import numpy as np

from ipulab import gcl, nn, poplar, poplin, popops, poputil
from ipulab.course.codelets import AddTo, Divide, Dot, Double, SumPartials, SumVertex
from ipulab.poplar import program as prog
from ipulab.popops.expr import _1, _2, _3

OFF_BY_ONE, MISSING_EXCHANGE, WRONG_TILE, RACE, REDUCTION_ORDER, OUT_OF_BOUNDS = (
    "off-by-one mapping", "missing exchange", "wrong tile", "racing writes",
    "wrong reduction order", "out of bounds")
TOO_SLOW, WRONG_VALUE, MISCONCEPTION, API_MISUSE = (
    "too slow", "wrong value", "misconception", "API misuse")

CORPUS = []   # (question id, kind, label, answer, [fragments the message must contain])


def wrong(qid, kind, label, *fragments):
    def add(answer):
        CORPUS.append((qid, kind, label, answer, list(fragments)))
        return answer
    return add


# --- ex01 ------------------------------------------------------------------------------------
@wrong("ex01.sum_squares", OUT_OF_BOUNDS, "loops one element too far",
       "Out-of-bounds", "vertex 0", "on tile 0", "`s += inp[i] * inp[i]`")
class SumSquaresOob(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(inp, out):
        s = 0.0
        for i in range(len(inp) + 1):
            s += inp[i] * inp[i]
        out[0] = s


@wrong("ex01.sum_squares", OFF_BY_ONE, "skips the first element",
       "(SumSquaresSkip) on tile 0", "wrote out[0]: expected 96.0, got 80.0", "for in = [")
class SumSquaresSkip(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(inp, out):
        s = 0.0
        for i in range(1, len(inp)):
            s += inp[i] * inp[i]
        out[0] = s


@wrong("ex01.sum_squares", API_MISUSE, "writes its Input", "writes to an Input field", "InOut")
class SumSquaresWritesInput(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(inp, out):
        for i in range(len(inp)):
            inp[i] = inp[i] * inp[i]
        out[0] = 0.0


@wrong("ex01.sum_squares", WRONG_VALUE, "adds to out, never sets it",
       "wrote out[0]", "-7777.0 + the right value 2 times", "does not start at 0")
class SumSquaresAccumulates(SumSquaresSkip):
    @staticmethod
    def compute(inp, out):
        for i in range(len(inp)):
            out[0] += inp[i] * inp[i]


def _pieces(g, x, partials, shift=0, same_out=False):
    n = x.shape[0]
    cs = g.add_compute_set("pieces")
    cuts = [k * n // 6 for k in range(7)]
    for k in range(6):
        g.add_vertex(cs, SumVertex, {"in": x[cuts[k] + shift:cuts[k + 1]],
                                     "out": partials[0 if same_out else k]}, tile=0)
    return prog.Execute(cs)


wrong("ex01.six_workers", RACE, "every vertex writes partials[0]",
      "BSP rule broken", "write the same element", "partials[0]", "different compute sets")(
    lambda g, x, partials: _pieces(g, x, partials, same_out=True))
wrong("ex01.six_workers", OFF_BY_ONE, "pieces start one element late",
      "x[0], x[1000], x[2000], x[3000], …", "read by no vertex")(
    lambda g, x, partials: _pieces(g, x, partials, shift=1))


@wrong("ex01.six_workers", TOO_SLOW, "one vertex for all of x",
       "too slow", "5.83× par", "use 17 % of their issue slots")
def one_vertex(g, x, partials):
    cs = g.add_compute_set("one")
    g.add_vertex(cs, SumVertex, {"in": x, "out": partials[0]}, tile=0)
    for k in range(1, 6):               # the other partials: sums of nothing
        g.add_vertex(cs, SumVertex, {"in": x[0:0], "out": partials[k]}, tile=0)
    return prog.Execute(cs)


@wrong("ex01.six_workers", WRONG_VALUE, "one vertex, the other partials never written",
       "element(s) [1, 2, 3, 4, 5] were never written", "-7777.0 is not a result")
def one_partial(g, x, partials):
    cs = g.add_compute_set("one")
    g.add_vertex(cs, SumVertex, {"in": x, "out": partials[0]}, tile=0)
    return prog.Execute(cs)


wrong("ex01.worker_cycles", MISCONCEPTION, "the plain sum", "compute excluding idle")(200)
wrong("ex01.variable_bytes", MISCONCEPTION, "no alignment", "8-byte aligned")(57)


# --- ex02 ------------------------------------------------------------------------------------
def _local(g, x, partials, shift=1):
    cs = g.add_compute_set("local")
    mapping = g.get_tile_mapping(x)
    for t, intervals in enumerate(mapping):
        for b, e in intervals:
            g.add_vertex(cs, SumVertex, {"in": x[b:e], "out": partials[t]},
                         tile=(t + shift) % len(mapping))
    return prog.Execute(cs)


wrong("ex02.local_sums", WRONG_TILE, "each vertex one tile too far",
      "data crossed the exchange", "(SumVertex) on tile 1", "reads x[0:7]", "on tile 0")(_local)


@wrong("ex02.local_sums", OFF_BY_ONE, "equal blocks, ignoring the mapping",
       "wrote partials[0]", "tile 0 holds x[0:7]")
def local_even(g, x, partials):
    cs = g.add_compute_set("local")
    tiles, n = partials.shape[0], x.shape[0]
    for t in range(tiles):
        g.add_vertex(cs, SumVertex, {"in": x[t * n // tiles:(t + 1) * n // tiles],
                                     "out": partials[t]}, tile=t)
    return prog.Execute(cs)


@wrong("ex02.local_sums", WRONG_VALUE, "empty tiles' partial sums never written",
       "partials[1]: expected 0.0, got -7777.0", "(tile 1 holds no element of x)",
       "was never written")
def local_skips_empty(g, x, partials):
    cs = g.add_compute_set("local")
    for t, intervals in enumerate(g.get_tile_mapping(x)):
        for b, e in intervals:
            g.add_vertex(cs, SumVertex, {"in": x[b:e], "out": partials[t]}, tile=t)
    return prog.Execute(cs)


@wrong("ex02.no_race", WRONG_TILE, "every AddTo on tile 0",
       "vertex 1 (AddTo) on tile 0", "reads x[1]", "on the row's tile")
def race_on_tile0(g, x, acc):
    steps = []
    for i in range(4):
        cs = g.add_compute_set(f"row {i}")
        g.add_vertex(cs, AddTo, {"part": x[i], "acc": acc[0]}, tile=0)
        steps.append(prog.Execute(cs))
    return prog.Sequence(steps)


@wrong("ex02.no_race", RACE, "all four AddTo in one compute set",
       "BSP rule broken", "(AddTo, tile 0", "(AddTo, tile 1", "acc[0]")
def race_all(g, x, acc):
    cs = g.add_compute_set("all at once")
    for i in range(4):
        g.add_vertex(cs, AddTo, {"part": x[i], "acc": acc[0]}, tile=i)
    return prog.Execute(cs)


@wrong("ex02.no_race", MISSING_EXCHANGE, "forgets the last row", "Row(s) [3] of x are read by no vertex")
def race_three(g, x, acc):
    steps = []
    for i in range(3):
        cs = g.add_compute_set(f"row {i}")
        g.add_vertex(cs, AddTo, {"part": x[i], "acc": acc[0]}, tile=i)
        steps.append(prog.Execute(cs))
    return prog.Sequence(steps)


def _normalise(g, x, y, pieces=6, order=(0, 1, 2)):
    mapping = g.get_tile_mapping(x)
    tiles = [t for t, iv in enumerate(mapping) if iv]
    partials = g.add_variable(poplar.FLOAT, [len(tiles), pieces], "partials")
    total = g.add_variable(poplar.FLOAT, [1], "total")
    g.set_tile_mapping(total, 0)
    css = [g.add_compute_set(n) for n in ("partial sums", "total", "divide")]
    for row, tile in enumerate(tiles):
        g.set_tile_mapping(partials[row], tile)
        [(b, e)] = mapping[tile]
        cuts = b + (e - b) * np.arange(pieces + 1) // pieces
        for k in range(pieces):
            piece = slice(cuts[k], cuts[k + 1])
            g.add_vertex(css[0], SumVertex, {"in": x[piece], "out": partials[row, k]}, tile=tile)
            g.add_vertex(css[2], Divide, {"in": x[piece], "by": total[0], "out": y[piece]},
                         tile=tile)
    g.add_vertex(css[1], SumVertex, {"in": partials.flatten(), "out": total[0]}, tile=0)
    return prog.Sequence([prog.Execute(css[i]) for i in order])


wrong("ex02.normalise", REDUCTION_ORDER, "total before the partial sums",
      "PREVIOUS run's total", "program order")(
    lambda g, x, y: _normalise(g, x, y, order=(1, 0, 2)))
wrong("ex02.normalise", TOO_SLOW, "one vertex per tile", "too slow", "4.10× par")(
    lambda g, x, y: _normalise(g, x, y, pieces=1))
wrong("ex02.step_cycles", MISCONCEPTION, "forgets the sync", "sync")(600)


# --- ex03 ------------------------------------------------------------------------------------
wrong("ex03.broadcast", MISSING_EXCHANGE, "never copies to the last tile",
      "row(s) [3]", "never written", "a missing exchange")(
    lambda g, buf: prog.Copy(buf[0].broadcast(buf.shape[0] - 2, 0), buf[1:-1]))


@wrong("ex03.broadcast", TOO_SLOW, "a doubling tree", "2 supersteps", "multicasts")
def broadcast_tree(g, buf):
    d, rounds, have = buf.shape[0] - 1, [], 1
    while have < d + 1:
        k = min(have, d + 1 - have)
        rounds.append(prog.Copy(poplar.concat([buf[i] for i in range(k)]),
                                poplar.concat([buf[have + i] for i in range(k)])))
        have += k
    return prog.Sequence(rounds)


wrong("ex03.broadcast", API_MISUSE, "copies row 0 onto itself too",
      "copies onto row 0", "every OTHER row", "buf[1:]")(
    lambda g, buf: prog.Copy(buf[0].broadcast(buf.shape[0], 0), buf))
wrong("ex03.transpose", WRONG_VALUE, "copies without transposing",
      "b[0, 1, 0]: expected", "b[j, i] must be a[i, j]")(lambda g, a, b: prog.Copy(a, b))
wrong("ex03.transpose", TOO_SLOW, "one Copy per block", "too slow", "64 steps")(
    lambda g, a, b: prog.Sequence([prog.Copy(a[i, j], b[j, i]) for i in range(a.shape[0])
                                   for j in range(a.shape[0])]))
wrong("ex03.copy_cycles", MISCONCEPTION, "a HALF as 4 bytes", "HALF as 4 bytes")(766)


# --- ex04 ------------------------------------------------------------------------------------
@wrong("ex04.row_mapping", OFF_BY_ONE, "row i on tile i + 1",
       "row 0 (elements 0–4) lives on tile 1, expected tile 0")
def map_rows_shifted(g, t):
    for i in range(t.shape[0]):
        g.set_tile_mapping(t[i], (i + 1) % g.target.num_tiles)


@wrong("ex04.fix_cumsum", OUT_OF_BOUNDS, "the bug as given",
       "Out-of-bounds", "codelet CumSum: vertex 0 on tile 0", "`out[i] = out[i - 1] + inp[i]`")
class CumSum(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(inp, out):
        out[0] = inp[0]
        for i in range(1, len(inp) + 1):
            out[i] = out[i - 1] + inp[i]


def _stream(g, s_in, s_out, times, mapped=True):
    v = g.add_variable(poplar.FLOAT, [4], "v")
    if mapped:
        g.set_tile_mapping(v, 0)
    cs = g.add_compute_set("double")
    g.add_vertex(cs, Double, {"x": v}, tile=0)
    return prog.Repeat(times, prog.Sequence([prog.Copy(s_in, v), prog.Execute(cs),
                                             prog.Copy(v, s_out)]))


wrong("ex04.stream_double", OFF_BY_ONE, "one iteration short",
      "streamed out 4 time(s), expected 5")(lambda g, i, o, times: _stream(g, i, o, times - 1))
wrong("ex04.stream_double", API_MISUSE, "forgets to map the tensor",
      "not mapped to a tile", "set_tile_mapping")(
    lambda g, i, o, times: _stream(g, i, o, times, mapped=False))


def _matvec(g, A, x, y, shift=0):
    tiles, rows = g.target.num_tiles, A.shape[0]
    cs = g.add_compute_set("matvec")
    for i in range(rows):
        t = i * tiles // rows
        g.set_tile_mapping(A[i], t)
        g.set_tile_mapping(y[i], t)
        g.add_vertex(cs, Dot, {"a": A[i], "x": x, "out": y[i]}, tile=(t + shift) % tiles)
    return prog.Execute(cs)


wrong("ex04.matvec", WRONG_TILE, "vertices one tile away from their rows",
      "too slow", "Data on another tile", "reads A[0]")(
    lambda g, A, x, y: _matvec(g, A, x, y, shift=1))


@wrong("ex04.matvec", TOO_SLOW, "everything on tile 0", "too slow", "2.57× par")
def matvec_tile0(g, A, x, y):
    g.set_tile_mapping(A, 0)
    g.set_tile_mapping(y, 0)
    cs = g.add_compute_set("matvec")
    for i in range(A.shape[0]):
        g.add_vertex(cs, Dot, {"a": A[i], "x": x, "out": y[i]}, tile=0)
    return prog.Execute(cs)


# --- ex05 ------------------------------------------------------------------------------------
@wrong("ex05.fullest_tile", WRONG_VALUE, "argmin instead of argmax",
       "run 1: you said tile 0, but tile 2 holds the most")
def emptiest(profile):
    t = int(np.argmin(profile.memory_total))
    return t, max(profile.memory, key=lambda c: profile.memory[c][t])


@wrong("ex05.fullest_tile", MISCONCEPTION, "the chip's largest category",
       "run 3", "'exchange_buffers', not 'variables'")
def chip_category(profile):
    t = int(np.argmax(profile.memory_total))
    return t, max(profile.memory, key=lambda c: profile.memory[c].sum())


@wrong("ex05.slowest_step", MISCONCEPTION, "sums a phase over tiles",
       "run 3", "the maximum, not the sum")
def summed(profile):
    step = max(profile.steps, key=lambda s: s.cycles)
    kind, _ = max(step.phases, key=lambda p: p[1].sum())
    return step.name, kind


wrong("ex05.balance", TOO_SLOW, "consecutive rows", "too slow", "Work per tile")(
    lambda tiles, per: [[(t * per, (t + 1) * per)] for t in range(tiles)])


@wrong("ex05.balance", OFF_BY_ONE, "folded, one row short", "row(s) [14, 17, 20, 23]",
       "owned by no tile")
def folded_short(tiles, per):
    h, rows = per // 2, tiles * per
    return [[(t * h, (t + 1) * h), (rows - (t + 1) * h, rows - t * h - 1)] for t in range(tiles)]


# --- ex06 ------------------------------------------------------------------------------------
@wrong("ex06.dot_estimate", OUT_OF_BOUNDS, "reads x one element ahead",
       "Out-of-bounds", "MyDotOob", "x[j + 1]")
class MyDotOob(poplar.Vertex):
    a = poplar.Input(poplar.Vector[poplar.FLOAT])
    x = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(a, x, out):
        s = np.float32(0.0)
        for j in range(len(a)):
            s += a[j] * x[j + 1]
        out[0] = s

    @staticmethod
    def cycle_estimate(a, x, out):
        return 10 + a


@wrong("ex06.dot_estimate", MISCONCEPTION, "prices both inputs", "cost 150 worker cycles",
       "each field's number of elements, an int")
class MyDotPricey(poplar.Vertex):
    a = poplar.Input(poplar.Vector[poplar.FLOAT])
    x = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(a, x, out):
        s = np.float32(0.0)
        for j in range(len(a)):
            s += a[j] * x[j]
        out[0] = s

    @staticmethod
    def cycle_estimate(a, x, out):
        return 10 + a + x


@wrong("ex06.dot_estimate", WRONG_VALUE, "a float64 accumulator",
       "out[1] = 16777220.0", "float32 running total gives 16777216.0", "float64")
class MyDotDouble(Dot):
    """The course's Dot (and its estimate), summing in float64."""

    @staticmethod
    def compute(a, x, out):
        s = 0.0
        for j in range(len(a)):
            s += a[j] * x[j]
        out[0] = s


def _split(g, A, x, y, s, race=False, reverse=False, one_step=False, dot=Dot):
    tiles, rows = g.target.num_tiles, A.shape[0]
    group, cols = tiles // s, np.arange(s + 1) * A.shape[1] // s
    partials = g.add_variable(poplar.FLOAT, [s, rows], "partials")
    dots = g.add_compute_set("dots")
    sums = dots if one_step else g.add_compute_set("sums")
    for i in range(rows):
        g.set_tile_mapping(y[i], i * tiles // rows)
    for j in range(s):
        for i in range(rows):
            t = j * group + i * group // rows
            piece = A[i, cols[j]:cols[j + 1]]
            g.set_tile_mapping(piece, t)
            g.set_tile_mapping(partials[j, i], t)
            g.add_vertex(dots, dot, {"a": piece, "x": x[cols[j]:cols[j + 1]],
                                     "out": y[i] if race else partials[j, i]}, tile=t)
    for i in range(rows):
        g.add_vertex(sums, SumPartials, {"p": partials[:, i], "out": y[i]}, tile=i * tiles // rows)
    steps = [prog.Execute(dots)] if race or one_step else [prog.Execute(dots),
                                                           prog.Execute(sums)]
    return prog.Sequence(steps[::-1] if reverse else steps)


wrong("ex06.split_matvec", RACE, "every piece writes y[i]",
      "BSP rule broken", "(Dot, tile", "y[0]")(lambda g, A, x, y, s: _split(g, A, x, y, s, race=True))
wrong("ex06.split_matvec", REDUCTION_ORDER, "sums before the dots",
      "s = 1", "PREVIOUS run's product", "program order")(
    lambda g, A, x, y, s: _split(g, A, x, y, s, reverse=True))


wrong("ex06.split_matvec", MISCONCEPTION, "ignores s: whole rows, no partial sums",
      "s = 2: the product is right, but your graph has 16 Dot vertices", "makes 32")(
    lambda g, A, x, y, s: _matvec(g, A, x, y))              # ex04's one Dot per row


@wrong("ex06.split_matvec", RACE, "the sums in the dots' compute set",
       "reads, as an Input, an element that another vertex", "read/write hazard")
def split_one_step(g, A, x, y, s):
    return _split(g, A, x, y, s, one_step=True)


@wrong("ex06.planned_mat_mul", WRONG_TILE, "inputs spread evenly, not as planned",
       "too slow", "1.52× par", "The exchange moved")
def naive_mat_mul(g, m, k, n, seq):
    a = g.add_variable(poplar.FLOAT, [m, k], "a")
    b = g.add_variable(poplar.FLOAT, [k, n], "b")
    poputil.map_tensor_linearly(g, a)
    poputil.map_tensor_linearly(g, b)
    return a, b, poplin.mat_mul(g, a, b, seq, "c")


wrong("ex06.best_split", TOO_SLOW, "s = 24: the most pieces", "too slow", "1.13× par",
      "fastest of the splits")(lambda g, A, x, y: _split(g, A, x, y, 24))


@wrong("ex06.best_split", API_MISUSE, "calls poplin", "not poplin")
def best_by_poplin(g, A, x, y):
    seq = prog.Sequence()
    c = poplin.mat_mul(g, A, x.reshape([x.shape[0], 1]), seq, "c")
    seq.add(prog.Copy(c.flatten(), y))
    return seq


# --- ex07 ------------------------------------------------------------------------------------
wrong("ex07.fused", TOO_SLOW, "three named operations", "3 compute sets", "ONE expression")(
    lambda g, x, w, b, seq: popops.max(g, popops.add(g, popops.mul(g, x, w, seq), b, seq), 0.0,
                                       seq))
wrong("ex07.fused", WRONG_VALUE, "forgets the relu", "wrote y[0, 3]: expected 0.0")(
    lambda g, x, w, b, seq: popops.map(g, _1 * _2 + _3, [x, w, b], seq))
wrong("ex07.row_norms", WRONG_VALUE, "reduces the rows away", "one value per COLUMN")(
    lambda g, x, seq: popops.sqrt(g, popops.reduce(g, x, [0], popops.Operation.SQUARE_ADD, seq),
                                  seq))
wrong("ex07.row_norms", WRONG_VALUE, "adds instead of adding squares", "n[0]: expected")(
    lambda g, x, seq: popops.sqrt(g, popops.reduce(g, x, [1], "add", seq), seq))


@wrong("ex07.aligned", WRONG_TILE, "w spread linearly, not like x",
       "too slow", "bytes of w crossed the exchange")
def w_linear(g, x):
    w = g.add_variable(poplar.FLOAT, list(x.shape), "w")
    poputil.map_tensor_linearly(g, w)
    return w


wrong("ex07.aligned", API_MISUSE, "returns x itself", "shares elements with x")(lambda g, x: x)
wrong("ex07.conv_macs", MISCONCEPTION, "counts FLOPs", "FLOPs")(21600)


# --- ex08 ------------------------------------------------------------------------------------
def _shard(g, A, x, y, split=None, copy=True):
    """Rows [0, split) on IPU 0 and the rest on IPU 1; x copied to IPU 1 once, or not at all."""
    T, (rows, cols) = g.target.tiles_per_ipu, A.shape
    half = rows // 2 if split is None else split
    ipu0, ipu1 = g.create_virtual_graph(0, T), g.create_virtual_graph(T, 2 * T)
    x1 = ipu1.add_variable(poplar.FLOAT, [cols], "x1")
    poputil.map_tensor_linearly(ipu1, x1)
    cs = g.add_compute_set("sharded matvec")
    for i in range(rows):
        vg, xs, k, n = (ipu0, x, i, half) if i < half else (ipu1, x1 if copy else x, i - half,
                                                            rows - half)
        vg.set_tile_mapping(A[i], k * T // n)
        vg.set_tile_mapping(y[i], k * T // n)
        vg.add_vertex(cs, Dot, {"a": A[i], "x": xs, "out": y[i]}, tile=k * T // n)
    return prog.Sequence([prog.Copy(x, x1)] * copy + [prog.Execute(cs)])


@wrong("ex08.shard_matvec", WRONG_TILE, "everything on IPU 0",
       "A[8, 0] is on tile 2 (IPU 0)", "rows 8 to 15 belong on IPU 1", "8 of the rows")
def matvec_on_ipu0(g, A, x, y):
    T, rows = g.target.tiles_per_ipu, A.shape[0]
    cs = g.add_compute_set("matvec")
    for i in range(rows):
        g.set_tile_mapping(A[i], i * T // rows)
        g.set_tile_mapping(y[i], i * T // rows)
        g.add_vertex(cs, Dot, {"a": A[i], "x": x, "out": y[i]}, tile=i * T // rows)
    return prog.Execute(cs)


wrong("ex08.shard_matvec", OFF_BY_ONE, "one row too many on IPU 0",
      "A[8, 0] is on tile 3 (IPU 0)", "1 of the rows are on the wrong IPU")(
    lambda g, A, x, y: _shard(g, A, x, y, split=A.shape[0] // 2 + 1))
wrong("ex08.shard_matvec", MISSING_EXCHANGE, "IPU 1's vertices read x on IPU 0",
      "x crossed the IPU-Links more than once", "512 bytes",
      "vertex 8 (Dot) on tile 4 (IPU 1)", "reads x (field 'x'), held on IPU 0", "copy x ONCE")(
    lambda g, A, x, y: _shard(g, A, x, y, copy=False))
wrong("ex08.sgd_step", MISSING_EXCHANGE, "no all-reduce",
      "the replicas disagree", "OWN gradient only", "gcl.all_reduce")(
    lambda g, w, grad, lr, seq: popops.scaled_subtract_from(g, w, grad, lr, seq))
wrong("ex08.sgd_step", WRONG_VALUE, "the sum, not the mean",
      "the same w (r = 4 replicas", "your step is 4 times too big")(
    lambda g, w, grad, lr, seq: popops.scaled_subtract_from(
        g, w, gcl.all_reduce(g, grad, "add", seq), lr, seq))


@wrong("ex08.sgd_step", REDUCTION_ORDER, "updates, then all-reduces the weights",
       "4 times too big", "you all-reduced the weights")
def reduce_weights(g, w, grad, lr, seq):
    popops.scaled_subtract_from(g, w, grad, lr / g.replication_factor, seq)
    gcl.all_reduce_in_place(g, w, "add", seq)


wrong("ex08.link_copy", MISCONCEPTION, "an on-chip sync", "sync_cycles('external')")(3785)
wrong("ex08.link_copy", MISCONCEPTION, "one link", "how many links")(7161)
wrong("ex08.ring_cycles", MISCONCEPTION, "every pair one hop", "route(15, 0) has 4 hops")(14190)


@wrong("ex08.embedding_bag", TOO_SLOW, "one copy per id", "too slow", "7.64× par",
       "copied to or from streaming memory 12 time(s)")
def bag_row_by_row(g, table, ids, seq):
    acc = g.add_variable(poplar.FLOAT, [table.num_elements], "acc")
    poputil.map_tensor_linearly(g, acc)
    row = g.clone(acc, "row")
    popops.zero(g, acc, seq)
    for j in range(ids.num_elements()):
        seq.add(prog.Copy(table, row, ids[j:j + 1]))
        popops.add_in_place(g, acc, row, seq)
    return acc


@wrong("ex08.embedding_bag", API_MISUSE, "copies without an offset", "row 0 of the table",
       "without an offset")
def bag_no_offset(g, table, ids, seq):
    row = g.add_variable(poplar.FLOAT, [table.num_elements], "row")
    poputil.map_tensor_linearly(g, row)
    seq.add(prog.Copy(table, row))
    return row


# --- ex09 ------------------------------------------------------------------------------------
def _cnn(pool=nn.AvgPool2d, padding=1, features=None, relu=True, p=0.25):
    """ex09.cnn's network with one mistake."""
    def build_cnn(input_shape, classes):
        c, h, w = input_shape
        first = [nn.Conv2d(c, 8, 3, padding=padding)] + [nn.ReLU()] * relu
        return nn.Sequential(*first, nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=padding),
                             nn.ReLU(), pool(2), nn.Flatten(), nn.Dropout(p),
                             nn.Linear(features or 16 * (h // 4) * (w // 4), classes))
    return build_cnn


wrong("ex09.cnn", WRONG_VALUE, "max pooling in the second block",
      "layer 5 is MaxPool2d(kernel_size=2); the network has an AvgPool2d there")(
    _cnn(pool=nn.MaxPool2d))
wrong("ex09.cnn", OFF_BY_ONE, "a ReLU left out: the layers after it shift by one",
      "layer 1 is MaxPool2d(kernel_size=2); the network has a ReLU there")(_cnn(relu=False))
wrong("ex09.cnn", WRONG_VALUE, "no padding", "after layer 0 (Conv2d(1, 8, kernel_size=3))",
      "(8, 6, 6)", "padding=1")(_cnn(padding=0))
wrong("ex09.cnn", MISCONCEPTION, "in_features fixed for 8 x 8 digits",
      "fails at layer 8 (input_shape (3, 8, 12), 5 classes)", "takes samples of 64 features",
      "from input_shape")(_cnn(features=64))
wrong("ex09.cnn", WRONG_VALUE, "dropout 0.5 (found by training on the simulator)",
      "your model's loss at step 1 is", "Dropout(p=0.5) where the network has Dropout(p=0.25)")(
    _cnn(p=0.5))
wrong("ex09.link_bytes", MISCONCEPTION, "forgets the factor 2 of the all-reduce",
      "you predicted 21,720 bytes", "43,440 bytes", "reduce-scatter AND its all-gather")(
    lambda r, n, precision: (r - 1) * n * 4)
wrong("ex09.link_bytes", OFF_BY_ONE, "r exchanges per phase, not r − 1",
      "never sends a chunk to itself")(lambda r, n, precision: 2 * r * n * 4)
wrong("ex09.link_bytes", WRONG_VALUE, "4 bytes a gradient in fp16",
      "r = 2 replicas", "fp16", "HALF values: 2 bytes each")(
    lambda r, n, precision: 2 * (r - 1) * n * 4)


def _cycles_by_layer(pattern, of=lambda step: step.cycles):
    """layer_cycles that reads a step's layer with `pattern` (a wrong one)."""
    def layer_cycles(profile, num_layers):
        cycles = [0] * num_layers
        for step in profile.steps:
            m = re.match(pattern, step.name)
            if m:
                cycles[int(m.group(1))] += of(step)
        return cycles
    return layer_cycles


wrong("ex09.layer_cycles", MISCONCEPTION, "leaves out the recomputed steps",
      "a 12-layer CNN, 4 replicas, recompute=True", "left out the steps named 'recompute/0.…'")(
    _cycles_by_layer(r"(\d+)\.[A-Z]"))
wrong("ex09.layer_cycles", OFF_BY_ONE, "reads one digit of the layer index",
      "layer 1 (ReLU()) took 0 cycles", "the steps of layer 11 ('11.Linear/")(
    _cycles_by_layer(r"(?:recompute/)?(\d)"))
wrong("ex09.layer_cycles", WRONG_VALUE, "counts the compute phase only",
      "counted only the compute phase")(
    _cycles_by_layer(r"(?:recompute/)?(\d+)\.[A-Z]",
                     lambda step: int(dict(step.phases)["compute"].max())))


def _schedule(backward_in_forward_order=False, slots=None):
    """ex09.schedule with one mistake."""
    def schedule(S, M):
        T = range(slots(S, M) if slots else M + S - 1)
        forward = [{s: t - s for s in range(S) if 0 <= t - s < M} for t in T]
        backward = [{s: (k if backward_in_forward_order else M - 1 - k) for s in range(S)
                     if 0 <= (k := t - (S - 1 - s)) < M} for t in T]
        return {"forward": forward, "backward": backward}
    return schedule


wrong("ex09.schedule", REDUCTION_ORDER, "backward in the forward's order of micro-batches",
      "backward slot 0: the simulator ran {stage 3: mb 3}; you said {stage 3: mb 0}",
      "REVERSE order")(_schedule(backward_in_forward_order=True))
wrong("ex09.schedule", OFF_BY_ONE, "no bubble: M slots a phase", "forward phase has 7 slots",
      "yours has 4", "M + S − 2 = 6")(_schedule(slots=lambda S, M: M))


@wrong("ex09.schedule", API_MISUSE, "waiting stages mapped to None",
       "['forward'][0] maps stage(s) [1, 2, 3] to None", "leave out the stages that wait")
def schedule_with_none(S, M):
    T = range(M + S - 1)
    return {phase: [{s: (t - s if 0 <= t - s < M else None) for s in range(S)} for t in T]
            for phase in ("forward", "backward")}


wrong("ex09.fast_step", TOO_SLOW, "replicated in fp32", "too slow", "1.67× par",
      "fp32: the matrix products run at half the fp16 rate")(
    {"replicas": 4, "batch_size": 64})
wrong("ex09.fast_step", TOO_SLOW, "one replica over all four IPUs", "1.18× par",
      "spans 4 IPUs", "cross the IPU-Links")(
    {"replicas": 1, "batch_size": 256, "precision": "fp16"})
wrong("ex09.fast_step", API_MISUSE, "a repeated boundary: an empty stage",
      "must be increasing", "leave a stage with no layers")(
    {"replicas": 1, "batch_size": 256, "pipeline": [3, 3, 6]})
wrong("ex09.fast_step", API_MISUSE, "more stages than a replica has IPUs",
      "a pipeline of 4 stages needs 4 IPUs per replica, but each replica has 2",
      "replicas x stages may not exceed 4")(
    {"replicas": 2, "batch_size": 128, "pipeline": [2, 3, 6], "precision": "fp16"})
wrong("ex09.fast_step", WRONG_VALUE, "a bigger global batch",
      "a global batch of 1,024 images per step", "fixes it at 256")(
    {"replicas": 4, "batch_size": 256, "precision": "fp16"})


# --- ex11 ------------------------------------------------------------------------------------
wrong("ex11.place", MISCONCEPTION, "in the order asked: a small one takes the big block",
      "after creating ['a'], b (8 IPUs) was refused", "NoFreeIpusError", "aligned block")(
    lambda requests, free: [(name, size, None) for name, size in requests])
wrong("ex11.place", API_MISUSE, "leaves out the last request", "create each one once")(
    lambda requests, free: [(name, size) for name, size in
                            sorted(requests, key=lambda r: -r[1])][:-1])
wrong("ex11.place", WRONG_VALUE, "everything in the first allocation",
      "a (2 IPUs, in ours) was refused", "free: ours: IPUs none")(
    lambda requests, free: [(name, size, next(iter(free))) for name, size in
                            sorted(requests, key=lambda r: -r[1])])

_OUTCOMES = {"six": "PartitionSizeError", "eight": "NoFreeIpusError", "four": "created",
             "theirs": "AllocationError", "again": "PartitionNameError",
             "remove": "UnknownPartitionError", "whole pod": "AllocationError"}
wrong("ex11.refusal", MISCONCEPTION, "16 IPUs read as a bad size",
      "1 of 7 outcomes differ", "'whole pod': you said PartitionSizeError, the controller says "
      "AllocationError", "cannot span allocations")({**_OUTCOMES, "whole pod": "PartitionSizeError"})
wrong("ex11.refusal", MISCONCEPTION, "counts free IPUs, not aligned blocks",
      "'eight': you said created", "counting free IPUs is not enough")(
    {**_OUTCOMES, "eight": "created"})
wrong("ex11.refusal", API_MISUSE, "a label left out", "outcomes should be a dict with the labels")(
    {k: v for k, v in _OUTCOMES.items() if k != "remove"})

_STARTS = {"J1": 0, "J2": 0, "J3": 120, "J4": 20, "J5": 150, "J6": 60}
wrong("ex11.schedule", MISCONCEPTION, "the FIFO schedule", "that is the FIFO schedule")(
    {**_STARTS, "J4": 150, "J6": 150})
wrong("ex11.schedule", MISCONCEPTION, "backfills a job past the head's reservation",
      "J5: you said 50", "cannot start at 50", "J3's reservation")({**_STARTS, "J5": 50})
wrong("ex11.schedule", OFF_BY_ONE, "J6 when it arrives, before J1 has ended",
      "J6: you said 40", "cannot start at 40", "J1, J2 and J4 hold 14 of the 16 IPUs",
      "it needs 8")({**_STARTS, "J6": 40})
wrong("ex11.schedule", MISCONCEPTION, "the head job when J1 ends, as if J2 were not there",
      "J3: you said 60", "cannot start at 60", "J2 holds 4 of the 16 IPUs (until 120)",
      "it needs 16")({**_STARTS, "J3": 60})
wrong("ex11.schedule", MISCONCEPTION, "J5 on the IPUs that J3 holds",
      "J5: you said 130", "J3 holds 16 of the 16 IPUs (until 150)")({**_STARTS, "J5": 130})
wrong("ex11.schedule", OFF_BY_ONE, "J5 after J3 and a wait for nothing",
      "J5: you said 160", "it can start earlier: at 150", "16 IPUs are free for its 4")({**_STARTS, "J5": 160})
wrong("ex11.min_wait", TOO_SLOW, "first come, first served", "too slow", "2.21× par",
      "the longest wait")({"policy": "fifo"})
wrong("ex11.min_wait", TOO_SLOW, "backfill alone", "too slow", "1.81× par")({"policy": "backfill"})
wrong("ex11.min_wait", API_MISUSE, "a policy the scheduler does not have",
      "is not one of fifo, backfill, fair")({"policy": "sjf"})


# --- ex10 ------------------------------------------------------------------------------------
def _resident(bytes_per_weight=2, gradients=True, per_ipu=True):
    """ex10.bytes_per_ipu with one mistake."""
    def resident_bytes(layer_params, layers, t, p, optimizer):
        share = layer_params * (layers // p) // (t if per_ipu else 1)
        state = 4 * {"sgd": 1, "adam": 2, "lamb": 2}[optimizer]
        return share * (bytes_per_weight + 2 * gradients + state)
    return resident_bytes


wrong("ex10.bytes_per_ipu", MISCONCEPTION, "forgets the gradient accumulators",
      "24 layers of 12,596,224 parameters", "left out the gradients")(_resident(gradients=False))
wrong("ex10.bytes_per_ipu", WRONG_VALUE, "fp32 weights (a master copy)",
      "24 layers of 12,596,224 parameters", "fp32 master copy")(_resident(bytes_per_weight=6))
wrong("ex10.bytes_per_ipu", OFF_BY_ONE, "a whole stage on every shard",
      "t = 8, p = 8", "a whole stage")(_resident(per_ipu=False))
wrong("ex10.choose_mapping", WRONG_VALUE, "LAMB's state on 4 stages of 7 layers",
      "does not fit", "In-Processor Memory")("p=4,layers=3/7/7/7,r=4")
wrong("ex10.choose_mapping", API_MISUSE, "t·p·r is not the Pod's 16 IPUs",
      "not a mapping of BERT-Large on a Pod16", "t·p·r")("p=8,r=4")


def _ring(steps=lambda r: 2 * (r - 1), pairs=lambda r: range(r - 1)):
    """ex10.cross_rack with one mistake."""
    def ring_cycles(target, n):
        r = target.num_ipus
        chunk = 4 * -(-n // r)
        return steps(r) * max(target.link_cycles(chunk, j, j + 1) for j in pairs(r)
                              if target.system.rack_of(j) == target.system.rack_of(j + 1))
    return ring_cycles


wrong("ex10.cross_rack", MISCONCEPTION, "every step an IPU-Link hop, never the GW-Links",
      "on a Pod128 (2 rack(s))", "cross racks on the GW-Links")(_ring())
wrong("ex10.cross_rack", OFF_BY_ONE, "half the ring's steps",
      "on a Pod64", "reduce-scatter AND the all-gather")(_ring(steps=lambda r: r - 1))
wrong("ex10.phases", MISCONCEPTION, "one phase's weights, not two",
      "gpt3-175b with t = 8", "the next phase is loaded")(
    lambda layers, params, t, budget: next(k for k in range(1, layers + 1)
                                           if 2 * -(-layers // k) * (params // t) <= budget))
wrong("ex10.fastest", TOO_SLOW, "16 replicas: the gradients round the whole Pod",
      "too slow", "4.00× par")({"replicas": 16, "batch_size": 16, "precision": "fp16"})
wrong("ex10.fastest", API_MISUSE, "a pipeline whose stage does not fit 4 tiles",
      "does not fit in tile memory")(
    {"replicas": 2, "batch_size": 128, "precision": "fp16", "pipeline": [3],
     "micro_batches": 2})


# --- ex12 ------------------------------------------------------------------------------------
@wrong("ex12.causal_softmax", MISCONCEPTION, "exp of the raw scores: overflow",
       "overflows float32", "Subtract the row's maximum")
class CausalSoftmaxNoShift(poplar.Vertex):
    x = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(x, out):
        s = 0.0
        for v in x:
            s += np.exp(v)
        for j in range(len(x)):
            out[j] = np.exp(x[j]) / s
        for j in range(len(x), len(out)):
            out[j] = 0.0


@wrong("ex12.causal_softmax", WRONG_VALUE, "the masked columns never written",
       "wrote out[0, 1]: expected 0.0, got -7777.0", "a masked column, its weight is 0",
       "never wrote it")
class CausalSoftmaxNoMask(poplar.Vertex):
    x = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(x, out):
        e = np.exp(x - np.max(x))          # numpy on the whole row, the masked part forgotten
        out[:len(x)] = e / np.sum(e)


@wrong("ex12.causal_softmax", OUT_OF_BOUNDS, "sums the whole row, reading past x",
       "Out-of-bounds", "CausalSoftmaxWholeRow", "`s += np.exp(x[j] - m)`")
class CausalSoftmaxWholeRow(poplar.Vertex):
    x = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(x, out):
        m = x[0]
        for v in x:
            m = max(m, v)
        s = 0.0
        for j in range(len(out)):
            s += np.exp(x[j] - m)
        for j in range(len(out)):
            out[j] = np.exp(x[j] - m) / s if j < len(x) else 0.0


@wrong("ex12.causal_softmax", OFF_BY_ONE, "leaves the diagonal out of the sum",
       "out[0, 0] is inf", "the diagonal, column i, too")
class CausalSoftmaxSkipsDiagonal(poplar.Vertex):
    x = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(x, out):
        m = np.max(x)
        s = np.sum(np.exp(x[:-1] - m))     # the visible columns but the last: the diagonal
        for j in range(len(x)):
            out[j] = np.exp(x[j] - m) / s
        for j in range(len(x), len(out)):
            out[j] = 0.0


wrong("ex12.split_heads", MISCONCEPTION, "a reshape without dim_shuffle",
      "matrix 0 (sample 0, head 0), row 1, column 0 of your view holds qkv[0, 0, 4]",
      "cuts positions into heads")(
    lambda t, heads: t.reshape([t.shape[0] * heads, t.shape[1], t.shape[2] // heads]))
wrong("ex12.split_heads", WRONG_VALUE, "heads before samples",
      "matrix 1 (sample 0, head 1)", "holds qkv[1, 0, 0]")(
    lambda t, heads: t.reshape([t.shape[0], t.shape[1], heads, t.shape[2] // heads])
    .dim_shuffle([2, 0, 1, 3]).reshape([heads * t.shape[0], t.shape[1], t.shape[2] // heads]))
wrong("ex12.split_heads", API_MISUSE, "the heads left as a dimension of their own",
      "your view has shape [2, 2, 4, 4], expected [4, 4, 4]")(
    lambda t, heads: t.reshape([t.shape[0], t.shape[1], heads, t.shape[2] // heads])
    .dim_shuffle([0, 2, 1, 3]))

wrong("ex12.megatron_bytes", MISCONCEPTION, "the forward pass's all-reduces only",
      "t = 2, 2 sequence(s) of 8 tokens, d_model 32", "16,384 over the IPU-Links",
      "That is half")(lambda t, batch, seq, d: 2 * 2 * (t - 1) * batch * seq * d * 4)
wrong("ex12.megatron_bytes", MISCONCEPTION, "what one IPU of the ring sends",
      "all t IPUs of the replica send at once")(
    lambda t, batch, seq, d: 4 * 2 * (t - 1) * batch * seq * d * 4 // t)
wrong("ex12.megatron_bytes", WRONG_VALUE, "values, not bytes",
      "That is a quarter", "4 per float32 value")(
    lambda t, batch, seq, d: 4 * 2 * (t - 1) * batch * seq * d)

wrong("ex12.fastest", TOO_SLOW, "16 replicas with RTS in fp32", "too slow", "1.47× par",
      "fp32: the products run at half the fp16 rate")(
    {"replicas": 16, "batch_size": 1, "rts": True})
wrong("ex12.fastest", TOO_SLOW, "Megatron's t 4 without RTS", "too slow", "1.28× par",
      "without RTS each of the 4 replicas runs Adam's update on every weight")(
    {"replicas": 4, "batch_size": 4, "tensor_parallel": 4, "precision": "fp16"})
wrong("ex12.fastest", WRONG_VALUE, "a whole replica with Adam on a 4-tile IPU",
      "does not fit in tile memory", "Out of memory on tile")(
    {"replicas": 16, "batch_size": 1, "precision": "fp16"})
wrong("ex12.fastest", API_MISUSE, "a bigger global batch", "a global batch of 64 sequences",
      "fixes it at 16")({"replicas": 16, "batch_size": 4, "rts": True})
wrong("ex12.fastest", API_MISUSE, "more heads' shards than heads",
      "could not be trained", "splits the attention heads over t1 = 8 IPUs")(
    {"replicas": 2, "batch_size": 8, "tensor_parallel": 8})
wrong("ex12.fastest", API_MISUSE, "t 4 with 8 replicas: 32 IPUs",
      "t · p · r = 4 · 1 · 8 = 32 IPUs, but the Pod16 has 16", "Use fewer replicas")(
    {"replicas": 8, "batch_size": 2, "tensor_parallel": 4, "rts": True, "precision": "fp16"})


# --- declared costs (issue 39): the learner's check prices them as the class grade does ---------
# Each passes its par if what it declares counted; the machine's model prices it. Locally the
# message also says what was declared beside the model's figure (DECLARED: those fragments).
DECLARED = {}


def declares(qid, label, *fragments, local=()):
    def add(answer):
        wrong(qid, TOO_SLOW, label, "correct, but too slow", *fragments)(answer)
        DECLARED[qid] = (answer, ["Declared costs do not count", *local, *fragments])
        return answer
    return add


@declares("ex01.six_workers", "one vertex that declares 10 cycles", "36,216 cycles",
          local=["you declared 10 cycles for vertex 0 (SumVertex) on tile 0",
                 "the simulator's model gives SumVertex's 6 vertices 6,066 cycles"])
def _one_vertex_declared(g, x, partials):
    cs = g.add_compute_set("sum")
    g.set_perf_estimate(g.add_vertex(cs, SumVertex, {"in": x, "out": partials[0]}, tile=0), 10)
    for k in range(1, 6):               # the other partials: sums of nothing (written: 0)
        g.add_vertex(cs, SumVertex, {"in": x[0:0], "out": partials[k]}, tile=0)
    return prog.Execute(cs)


@declares("ex04.matvec", "every row on tile 0, each declaring 1 cycle", "1,158 cycles",
          local=["you declared 24 cycles in all for 24 vertices of Dot",
                 "(the first: vertex 0 (Dot) on tile 0", "the simulator's model gives them 1,008"])
def _tile0_declared(g, A, x, y):
    g.set_tile_mapping(A, 0)
    g.set_tile_mapping(y, 0)
    cs = g.add_compute_set("matvec")
    for i in range(A.shape[0]):
        g.set_perf_estimate(g.add_vertex(cs, Dot, {"a": A[i], "x": x, "out": y[i]}, tile=0), 1)
    return prog.Execute(cs)


class DotSaysOne(Dot):
    """The course's Dot, with a cycle_estimate of its own that says one cycle."""

    @staticmethod
    def cycle_estimate(a, x, out):
        return 1


declares("ex06.best_split", "a codelet whose cycle_estimate returns 1", "10,416 cycles",
         local=["your codelet DotSaysOne prices itself (its cycle_estimate)",
                "the simulator's model gives DotSaysOne's 24 vertices"])(
    lambda g, A, x, y: _split(g, A, x, y, 1, dot=DotSaysOne))
