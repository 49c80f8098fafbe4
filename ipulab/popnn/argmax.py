"""popnn.arg_max: the index of the largest value of each row, where the row lives."""
from __future__ import annotations

from ..poplar import FLOAT, INT, Input, Output, Regions, VectorList, Vertex
from ..poplar import program as prog
from ..poputil import map_rows, row_owners, row_pieces, typed_variant


def _argmax_rows(logits, out):
    for j in range(len(out)):
        xs = logits[j]
        os = out[j]
        n = len(os)
        C = len(xs) // n
        for r in range(n):
            best = xs[r * C]
            arg = 0
            for c in range(1, C):
                if xs[r * C + c] > best:
                    best = xs[r * C + c]
                    arg = c
            os[r] = arg


class ArgMaxRows(Vertex):
    """out[j][r] = the first index of the largest value in row r of logits[j] (rows of
    C = len(logits[j]) // len(out[j]) values), as popnn.calc_loss counts a correct answer."""

    fields_dtype = FLOAT
    logits = Input(VectorList[FLOAT])
    out = Output(VectorList[INT])
    compute = staticmethod(_argmax_rows)

    @staticmethod
    def cycle_estimate(logits=(), out=()):
        # [MODEL] 10 to enter; per region 6; per row 4 (pointers, store); a compare and a
        # conditional move per value
        return 10 + sum(6 + 4 * n + 2 * k for n, k in zip(out, logits))


def arg_max(graph, logits, seq, name: str = "arg_max"):
    """A new INT [B] tensor: the class with the largest logit in each row of logits [B, C],
    computed where each row lives (one compute set); PopLibs' popnn::argMax."""
    B, C = logits.shape
    pred = graph.add_variable(INT, [B], f"{name}/out")
    owners = row_owners(graph, logits.flatten(), C, name)
    map_rows(graph, pred, owners, 1)
    cls = typed_variant(ArgMaxRows, logits.dtype, ("logits",), "Half")
    cs = graph.add_compute_set(name)
    work = row_pieces(graph, owners)
    graph.add_vertices(cs, cls, work.tile, {
        "logits": Regions(logits.flatten(), work.begins * C, work.ends * C, work.counts),
        "out": Regions(pred, work.begins, work.ends, work.counts)})
    seq.add(prog.Execute(cs))
    return pred
