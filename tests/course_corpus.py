"""A corpus of WRONG answers to the course's questions: each must fail its check with the
intended message, without raising. KIND names the mistake (the categories of COURSE.md)."""
from ipulab import poplar
from ipulab.course.codelets import SumVertex
from ipulab.poplar import program as prog

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
    return prog.Execute(cs)


wrong("ex01.worker_cycles", MISCONCEPTION, "the plain sum", "compute excluding idle")(200)
wrong("ex01.variable_bytes", MISCONCEPTION, "no alignment", "8-byte aligned")(57)
