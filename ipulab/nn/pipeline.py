"""Pipeline parallelism: the model cut into stages, one per IPU, fed micro-batches (GPipe).

    Trainer(model, devices.bow2000(), pipeline=[3, 6], micro_batches=4)

puts layers 0-2 on IPU 0, layers 3-5 on IPU 1 and the rest on IPU 2 (pipeline=3 chooses the
boundaries itself, balancing the stages' work: balanced_cuts). A batch is cut into
micro-batches; in the forward phase, time slot t runs stage s on micro-batch t - s, all stages
at once (parallel(): their compute sets share supersteps), and the activations move to the
next IPU over the IPU-Links between slots. The backward phase runs the same schedule in
reverse from the last stage. Each stage adds its micro-batches' weight gradients into an
accumulator; the update uses the sum, so one step equals a step on the whole batch. With
S stages and M micro-batches a phase takes M + S - 1 slots: the "bubble" of S - 1 slots where
some IPUs wait shrinks as M grows, while the activations kept for the backward pass grow with
M (unless recompute=True: then a stage keeps only its input per micro-batch and runs its
forward again just before its backward).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import popnn, popops, poputil
from ..errors import GraphError
from ..poplar import program as prog
from ..poplar import parallel
from ..poplar.tensor import concat
from .build import build_backward, build_forward
from .layers import Conv2d, Linear, ReLU


class Stage(NamedTuple):
    """Layers [lo, hi) of the model on one IPU (graph: that IPU's virtual graph)."""

    lo: int
    hi: int
    graph: object


def stage_spans(pipeline, num_layers: int, ipus: int) -> list[tuple[int, int]]:
    """[(lo, hi)] per stage from the boundaries `pipeline` (the first layer of every stage
    after the first), checked against the layers and the IPUs of one replica."""
    try:
        if isinstance(pipeline, (str, bytes)):
            raise TypeError
        cuts = [int(c) for c in pipeline]
    except (TypeError, ValueError):
        raise GraphError(f"TrainConfig: pipeline must be a list of layer indices where stages "
                         f"begin (e.g. [3, 6]), not {pipeline!r}") from None
    if any(isinstance(c, bool) for c in pipeline) or cuts != sorted(set(cuts)) or \
            (cuts and (cuts[0] < 1 or cuts[-1] >= num_layers)):
        raise GraphError(f"TrainConfig: pipeline boundaries {list(pipeline)} must be increasing "
                         f"layer indices between 1 and {num_layers - 1}")
    if len(cuts) + 1 > ipus:
        raise GraphError(f"TrainConfig: a pipeline of {len(cuts) + 1} stages needs {len(cuts) + 1} "
                         f"IPUs per replica, but each replica has {ipus}")
    edges = [0, *cuts, num_layers]
    return list(zip(edges[:-1], edges[1:]))


def layer_work(model, sample_shape) -> list[int]:
    """Work per layer: multiply-adds for Conv2d and Linear (kernel or input size times
    outputs), output elements for the rest."""
    work = []
    for layer, out in zip(model.layers, model.shapes(sample_shape)[1:]):
        n = int(np.prod(out))
        if isinstance(layer, Conv2d):
            n *= layer.in_channels * int(np.prod(layer.kernel_size))
        elif isinstance(layer, Linear):
            n *= layer.in_features
        work.append(n)
    return work


def balanced_cuts(model, sample_shape, stages: int, work=None, allowed=None,
                  what: str = "pipeline") -> list[int]:
    """Boundaries that cut the model into `stages` contiguous stages of about equal work (the
    largest stage as small as possible), never between a Conv2d or Linear and the ReLU folded
    into it. work: a cost per layer (default: layer_work); allowed: the layers a stage may
    begin at (default: all but a folded ReLU); what: the option, for messages."""
    work = layer_work(model, sample_shape) if work is None else list(work)
    L = len(work)
    if allowed is None:
        allowed = [i for i in range(1, L) if not (model.layers[i - 1].fuses_relu and
                                                  isinstance(model.layers[i], ReLU))]
    if stages - 1 > len(allowed):
        raise GraphError(f"TrainConfig: {what}={stages} stages, but this model of {L} layers can "
                         f"be cut in only {len(allowed) + 1} stages")
    prefix = np.concatenate([[0], np.cumsum(work)])
    edges = [0, *allowed, L]
    # best[k][j]: the smallest possible largest stage when edges[:j+1] hold k+1 stages
    inf = float("inf")
    best = [[inf] * len(edges) for _ in range(stages)]
    back = [[0] * len(edges) for _ in range(stages)]
    for j in range(1, len(edges)):
        best[0][j] = prefix[edges[j]]
    for k in range(1, stages):
        for j in range(k + 1, len(edges)):
            for i in range(k, j):
                cost = max(best[k - 1][i], prefix[edges[j]] - prefix[edges[i]])
                if cost < best[k][j]:
                    best[k][j], back[k][j] = cost, i
    cuts, j = [], len(edges) - 1
    for k in range(stages - 1, 0, -1):
        j = back[k][j]
        cuts.append(edges[j])
    return sorted(cuts)


def make_stages(graph, spans, ipus_per_stage: int = 1) -> list[Stage]:
    """Stage s on IPU s of the (per-replica) graph (on IPUs s*t .. s*t + t-1 with t
    ipus_per_stage: tensor parallelism)."""
    tiles = graph.target.tiles_per_ipu * ipus_per_stage
    return [Stage(lo, hi, graph.create_virtual_graph(s * tiles, (s + 1) * tiles))
            for s, (lo, hi) in enumerate(spans)]


def stage_of(stages, layer: int) -> Stage:
    return next(s for s in stages if s.lo <= layer < s.hi)


class StepResult(NamedTuple):
    """What a training step's forward/backward gives the update and the host."""

    loss: object        # FLOAT [1]: mean loss over the batch
    correct: object     # INT [1]: correct answers in the batch
    grads: dict         # {state_dict key: gradient tensor}


def _like(graph, t, name: str):
    """A new variable shaped and typed like t, mapped linearly on graph (the next IPU)."""
    v = graph.add_variable(t.dtype, list(t.shape), name)
    poputil.map_tensor_linearly(graph, v)
    return v


def pipelined_forward(graph, model, stages, x, params, seq, micro_batches: int, *,
                      train: bool, seed=None, prefix: str = "", on_last=None, tp=None):
    """The forward phase: micro-batch m through stage s in slot t = m + s, the stages of a slot
    in shared supersteps, outputs moved to the next IPU between slots. on_last(m, logits,
    part) adds the last stage's per-micro-batch work (the loss); tp: tensor parallelism
    inside each stage (tensor_parallel.scheme). Returns ({(s, m): builds}, [logits per
    micro-batch])."""
    S, M, B = len(stages), micro_batches, x.shape[0]
    mb = B // M
    inputs = {(0, m): x.slice(m * mb, (m + 1) * mb, 0) for m in range(M)}
    builds, logits = {}, [None] * M
    for t in range(M + S - 1):
        work, moves = [], []
        for s, st in enumerate(stages):
            m = t - s
            if not 0 <= m < M:
                continue
            part = prog.Sequence(name=f"stage {s} forward mb{m}")
            y, builds[s, m] = build_forward(st.graph, model, inputs[s, m], params, part,
                                            train=train, seed=seed, prefix=f"{prefix}mb{m}/",
                                            span=(st.lo, st.hi), micro_batch=m, tp=tp)
            if s == S - 1:
                logits[m] = y
                if on_last is not None:
                    on_last(m, y, part)
            else:
                inputs[s + 1, m] = _like(stages[s + 1].graph, y,
                                         f"{prefix}mb{m}/stage{s + 1}/input")
                moves.append(prog.Copy(y, inputs[s + 1, m],
                                       name=f"{prefix}mb{m}: stage {s} to stage {s + 1}"))
            work.append(part)
        seq.add(parallel(graph, work, f"{prefix}pipeline forward {t}"))
        if moves:
            seq.add(parallel(graph, moves, f"{prefix}pipeline forward {t} to next IPU"))
    return builds, logits


def pipelined_step(graph, model, stages, x, labels, params, seq, *, micro_batches: int,
                   grad_scale: float, seed=None, recompute: bool = False,
                   tp=None) -> StepResult:
    """Forward, loss and backward of one batch through the pipeline, into seq."""
    S, M, B = len(stages), micro_batches, x.shape[0]
    mb = B // M
    last = stages[-1]
    losses = {}

    def loss_of(m, logits, part):
        losses[m] = popnn.calc_loss(last.graph, logits, labels.slice(m * mb, (m + 1) * mb),
                                    part, name=f"mb{m}/loss", num_correct=True,
                                    grad_scale=grad_scale)

    builds, _ = pipelined_forward(graph, model, stages, x, params, seq, M, train=True,
                                  seed=seed, on_last=loss_of, tp=tp)
    loss_sum = popops.reduce(last.graph, concat([losses[m].loss.reshape([1]) for m in range(M)]),
                             [0], "add", seq, "loss/sum")
    loss = popops.map(last.graph, popops.expr._1 / float(M), [loss_sum], seq, "loss/mean")
    correct = popops.reduce(last.graph, concat([losses[m].num_correct.reshape([1])
                                                for m in range(M)]), [0], "add", seq,
                            "loss/num_correct")

    accumulators = {}
    for key, shape in model.param_shapes().items():
        index, name = key.split(".", 1)
        st = stage_of(stages, int(index))       # gradients come in the weights' type
        acc = st.graph.add_variable(params[int(index)][name].dtype, list(shape),
                                    f"grad_sum/{key}")
        poputil.map_tensor_linearly(st.graph, acc)
        accumulators[key] = acc
    if accumulators:
        popops.zero(graph, concat([a.flatten() for a in accumulators.values()]), seq,
                    "grad_sum/zero")
    grads_in = {(S - 1, m): losses[m].grad for m in range(M)}
    for t in range(M + S - 1):                       # backward phase, last stage first
        work, moves = [], []
        for s, st in enumerate(stages):
            m = M - 1 - (t - (S - 1 - s))
            if not 0 <= m < M:
                continue
            part = prog.Sequence(name=f"stage {s} backward mb{m}")
            grads, dx = build_backward(st.graph, builds[s, m], grads_in[s, m], part,
                                       need_input_grad=s > 0, recompute=recompute,
                                       one_block=True)
            for key, g in grads.items():
                popops.scaled_add_to(st.graph, accumulators[key], g, 1.0, part,
                                     f"mb{m}/grad_sum/{key}")
            if s > 0:
                grads_in[s - 1, m] = _like(stages[s - 1].graph, dx, f"mb{m}/stage{s - 1}/grad")
                moves.append(prog.Copy(dx, grads_in[s - 1, m],
                                       name=f"mb{m}: stage {s} to stage {s - 1}"))
            work.append(part)
        seq.add(parallel(graph, work, f"pipeline backward {t}"))
        if moves:
            seq.add(parallel(graph, moves, f"pipeline backward {t} to previous IPU"))
    return StepResult(loss.reshape([1]), correct.reshape([1]), accumulators)


__all__ = ["Stage", "StepResult", "stage_spans", "balanced_cuts", "layer_work", "make_stages", "stage_of", "pipelined_step",
           "pipelined_forward"]
