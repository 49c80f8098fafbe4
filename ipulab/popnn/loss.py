"""calc_loss: softmax cross-entropy of logits against integer labels (popnn::calcLoss).

    loss, grad = popnn.calc_loss(g, logits, labels, seq)                  # mean loss, dL/dlogits
    r = popnn.calc_loss(g, logits, labels, seq, num_correct=True)
    r.loss, r.grad, r.per_sample, r.num_correct          # r itself unpacks as (loss, grad)
    r = popnn.calc_loss(g, logits_bsv, tokens_bs, seq)   # per token: [B, S, V] against [B, S]

With token logits [B, S, V] and labels [B, S], every token is a sample: the mean is over all
B * S tokens (PyTorch's cross_entropy over logits.view(-1, V)) and num_correct counts tokens.

One compute set of SoftmaxCrossEntropy vertices does the per-sample work where each row of
logits lives (rows mapped as in popnn._common: a row to the tile holding its middle), in
float32 and numerically stable (log-sum-exp):

    m = max_c x[c]          s = sum_c exp(x[c] - m)
    loss = log(s) + m - x[label]          grad[c] = (exp(x[c] - m) / s - [c == label]) * scale
    correct = (first argmax of x) == label

with scale = 1 / B by default, the gradient of the MEAN loss (pass grad_scale to change it,
e.g. 1 / (replicas * B)). Then popops.reduce sums the per-sample losses (and the correct flags)
across tiles, and a popops.map divides by B. A label outside [0, C) (e.g. -1 for padding) gives
that sample zero loss, zero gradient and counts as not correct; the mean still divides by B.

Cycle estimate ([MODEL], worker-issue cycles): 10 to enter, per region 6, per sample 8 (label,
the gather of x[label], log, stores), per logit 4 passes of about 1 cycle each (max, exp, sum,
scaled store) plus the exp's 8 (popops' cost of a float function) -> 12 per logit.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import FLOAT, INT, Input, Output, Regions, Tensor, VectorList, Vertex
from ..poplar import program as prog
from .. import popops
from ..popops.codegen import f_log
from ..popops.float32_exp import exps
from ..popops.expr import _1
from ..poputil import map_rows, row_owners, row_pieces, tile_constant, typed_variant
from ._common import check_float

LOSS_TYPES = ("softmax_cross_entropy",)


def _softmax_cross_entropy(scale, logits, labels, grad, loss, correct):
    for j in range(len(labels)):
        xs = logits[j]
        ls = labels[j]
        gs = grad[j]
        n = len(ls)
        C = len(xs) // n
        for b in range(n):
            x = xs[b * C:(b + 1) * C]
            g = gs[b * C:(b + 1) * C]
            m = x[0]
            arg = 0
            for c in range(1, C):
                if x[c] > m:
                    m = x[c]
                    arg = c
            exps(g, x, np.float32(1.0), m)
            s = np.float32(0.0)
            for c in range(C):
                s += g[c]
            label = ls[b]
            inside = label >= 0 and label < C
            inv = np.float32(1.0) / s
            for c in range(C):
                hot = np.float32(1.0) if c == label else np.float32(0.0)
                g[c] = (g[c] * inv - hot) * scale[0] if inside else np.float32(0.0)
            if inside:
                loss[j][b] = np.float32(f_log(np.float64(s))) + (m - x[label])
                correct[j][b] = 1 if arg == label else 0
            else:
                loss[j][b] = np.float32(0.0)
                correct[j][b] = 0


class SoftmaxCrossEntropy(Vertex):
    """Per sample b of each region j: loss[j][b], grad[j] row b (scaled) and correct[j][b]
    from the logits row b and labels[j][b]; C = len(logits[j]) // len(labels[j])."""

    fields_dtype = FLOAT
    scale = Input(FLOAT)
    logits = Input(VectorList[FLOAT])
    labels = Input(VectorList[INT])
    grad = Output(VectorList[FLOAT])
    loss = Output(VectorList[FLOAT])
    correct = Output(VectorList[INT])
    compute = staticmethod(_softmax_cross_entropy)

    @staticmethod
    def cycle_estimate(scale, logits=(), labels=(), grad=(), loss=(), correct=()):
        return 10 + sum(6 + 8 * n + 12 * k for n, k in zip(labels, logits))


class LossResult(tuple):
    """(loss, grad), with .loss, .grad, .per_sample (FLOAT [B]) and .num_correct (INT scalar,
    or None unless asked for)."""

    def __new__(cls, loss, grad, per_sample, num_correct):
        self = super().__new__(cls, (loss, grad))
        self.per_sample, self.num_correct = per_sample, num_correct
        return self

    @property
    def loss(self) -> Tensor:
        return self[0]

    @property
    def grad(self) -> Tensor:
        return self[1]


def _check(graph, logits, labels, seq, loss_type, what):
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    for t in (logits, labels):
        if not isinstance(t, Tensor):
            raise GraphError(f"{what}: expected tensors, got {type(t).__name__}")
        graph.check_tensor(t)
    if str(loss_type).lower() not in LOSS_TYPES:
        raise GraphError(f"{what}: unknown loss type {loss_type!r}; ipulab has "
                         f"{', '.join(LOSS_TYPES)} (logits in, softmax applied inside)")
    check_float(logits, what)
    if logits.rank not in (2, 3) or labels.shape != logits.shape[:-1]:
        raise GraphError(f"{what}: logits must be [B, C] and labels [B] (or tokens: [B, S, C] "
                         f"and [B, S]), not {list(logits.shape)} and {list(labels.shape)}")
    if labels.dtype != INT:
        raise GraphError(f"{what}: labels '{labels.name}' are {labels.dtype}; calc_loss takes "
                         "INT labels (popops.cast first)")
    if min(logits.shape) < 1:
        raise GraphError(f"{what}: logits {list(logits.shape)} need at least one sample and "
                         "one class")


def calc_loss(graph, logits, labels, seq, loss_type: str = "softmax_cross_entropy",
              name: str = "", num_correct: bool = False,
              grad_scale: float | None = None) -> LossResult:
    """Softmax cross-entropy of logits [B, C] (FLOAT or HALF) against INT labels [B], or of
    token logits [B, S, C] against INT labels [B, S] (each token a sample).

    Returns (loss, grad): the mean loss over the samples (FLOAT scalar) and its gradient with
    respect to the logits (logits' shape and type, mapped row by row like the logits). The
    result also has .per_sample (FLOAT, labels' shape) and, with num_correct=True,
    .num_correct (INT scalar: how many samples have argmax == label; ties go to the first
    class)."""
    name = name or "loss"
    what = f"calc_loss '{name}'"
    _check(graph, logits, labels, seq, loss_type, what)
    tokens = logits.shape if logits.rank == 3 else None
    if tokens:                                   # every token a sample
        logits, labels = logits.flatten(0, 2), labels.flatten()
    B, C = logits.shape
    scale = 1.0 / B if grad_scale is None else float(grad_scale)
    grad = graph.add_variable(logits.dtype, [B, C], f"{name}/grad")
    per_sample = graph.add_variable(FLOAT, [B], f"{name}/per_sample")
    correct = graph.add_variable(INT, [B], f"{name}/correct")
    owners = row_owners(graph, logits.flatten(), C, what)
    map_rows(graph, grad, owners, C)
    map_rows(graph, per_sample, owners, 1)
    map_rows(graph, correct, owners, 1)
    work = row_pieces(graph, owners)
    scales = tile_constant(graph, FLOAT, [scale], work.tile, f"{name}/scale")
    cls = typed_variant(SoftmaxCrossEntropy, logits.dtype, ("logits", "grad"), "Half")
    cs = graph.add_compute_set(f"{name}/softmax_cross_entropy")
    rows = {key: Regions(t, work.begins * width, work.ends * width, work.counts)
            for key, t, width in (("logits", logits.flatten(), C), ("labels", labels, 1),
                                  ("grad", grad.flatten(), C), ("loss", per_sample, 1),
                                  ("correct", correct, 1))}
    graph.add_vertices(cs, cls, work.tile, {"scale": scales.regions(work.tile), **rows})
    seq.add(prog.Execute(cs))
    total = popops.reduce(graph, per_sample, [0], "add", seq, f"{name}/sum")
    mean = popops.map(graph, _1 / float(B), [total], seq, f"{name}/mean")
    count = popops.reduce(graph, correct, [0], "add", seq, f"{name}/num_correct") \
        if num_correct else None
    if tokens:
        grad, per_sample = grad.reshape(list(tokens)), per_sample.reshape(list(tokens[:-1]))
    return LossResult(mean, grad, per_sample, count)
