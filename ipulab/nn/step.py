"""The graph of a training run: ONE graph holding the weights, a batch and two programs.

  0  training step: batch in (host -> device FIFOs), forward, softmax cross-entropy
     (popnn.calc_loss), backward through every layer, gradient all-reduce over replicas,
     the optimizer's update (nn/optim); loss and the number of correct answers out (device ->
     host FIFOs)
  1  evaluation step: batch in, forward (Dropout off), loss, arg_max; loss, correct count and
     predictions out

Host handles: write/<key> and read/<key> for every weight (state_dict keys; with RTS
write/weights/shard and read/weights/shard instead, see sharding.py),
the optimizer's state on chip: write/<kind>/<what> (write/sgd/velocity with momentum;
write/adam/m, write/adam/v and write/adam/step; adamw/..., lamb/...), made by the optimizer;
off chip the remote buffers sgd/velocity, adam/m, ... instead (the step count stays on chip);
write/dropout/seed with Dropout. FIFOs: <prefix>/x,
<prefix>/labels, <prefix>/loss, <prefix>/correct (and eval/predictions), prefix train or eval.

A model whose output has a score per position (samples (S, classes), e.g. a GPT's (S, V))
takes a target per position: labels [B, S], the loss is the mean over all B * S positions
and correct counts positions. A model starting with nn.Embedding takes INT token ids.
"""
from __future__ import annotations

import numpy as np

from .. import popnn, popops, poputil
from ..errors import GraphError
from ..poplar import FLOAT, HALF, INT, UNSIGNED_INT, Graph, concat
from ..poplar import program as prog
from ..popops.expr import _1
from . import optim, tensor_parallel
from .build import all_reduce_gradients, build_backward, build_forward, flat, split, \
    uses_dropout
from .pipeline import StepResult, make_stages, pipelined_forward, pipelined_step, stage_of, \
    stage_spans
from .phased import Phases
from .sharding import ShardedWeights

TRAIN, EVAL = 0, 1          # program indices in the engine


class StepGraph:
    """The variables of a training run on a (replicated) graph, and its two programs.

    config: a resolved nn.TrainConfig; cuts: the layers where pipeline stages begin (or None).
    """

    def __init__(self, model, target, config, sample_shape: tuple, cuts):
        shapes = model.shapes(sample_shape)
        if len(shapes[-1]) not in (1, 2):
            raise GraphError(f"the model must end with class scores of shape (classes,), e.g. "
                             f"nn.Linear(..., 10), or one per position (positions, classes); "
                             f"it gives {shapes[-1]} per sample")
        self.model, self.config, self.classes = model, config, shapes[-1][-1]
        self.targets = shapes[-1][:-1]          # () or (S,): a label per position
        self.positions = int(np.prod(self.targets))
        self.g = g = Graph(target, replication_factor=config.replicas)   # one replica's graph
        t = config.tensor_parallel_ipus
        self.tp = tensor_parallel.scheme(model, config.tensor_parallel_grid)
        self.stages = None if cuts is None else \
            make_stages(g, stage_spans(cuts, len(model), g.target.num_ipus // t), t)
        self.group = g if t == 1 or self.stages else \
            g.create_virtual_graph(0, t * g.target.tiles_per_ipu)     # the IPUs of the shards
        dt, B = config.dtype, config.batch_size
        self.x = g.add_variable(INT if model.takes_tokens else dt, [B, *sample_shape], "input")
        self.labels = g.add_variable(INT, [B, *self.targets], "labels")
        poputil.map_tensor_linearly(self.home(0), self.x)
        poputil.map_tensor_linearly(self.home(len(model) - 1), self.labels)
        self.params, self.weights = {}, {}
        spans = config.phase_spans(model)
        per_tensor = optim.KINDS[config.optimizer].norms_per_tensor
        self.phases = spans and Phases(self.group, model, spans, dt, self.tp, config.rts,
                                       per_tensor)
        if not spans:
            self._add_weights(model.param_shapes())
        self._add_buffers(model.buffer_shapes(), bool(spans or config.rts or self.tp or cuts))
        self.sharded = ShardedWeights(g, self.weights, per_tensor=per_tensor) \
            if config.rts and self.weights else None
        self.gather = prog.Sequence(name="weights all-gather")
        if self.sharded:
            self.sharded.gather(self.gather)
        self.seed = None
        if uses_dropout(model):
            self.seed = g.add_variable(UNSIGNED_INT, [2], "dropout/seed")
            g.set_tile_mapping(self.seed, 0)
            g.create_host_write("write/dropout/seed", self.seed)
        self.to_half = self._half_weights()

    def _add_weights(self, shapes: dict) -> None:
        """The weights as variables where their layers live (host handles unless RTS)."""
        g, cfg = self.g, self.config
        for key, shape in shapes.items():
            index, name = key.split(".", 1)
            w = g.add_variable(FLOAT, list(shape), key)
            if self.tp is not None:
                self.tp.map_weight(self.home(int(index)), self.model[int(index)], name, w)
            else:
                poputil.map_tensor_linearly(self.home(int(index)), w)
            if not cfg.rts:
                g.create_host_write(f"write/{key}", w)
                g.create_host_read(f"read/{key}", w)
            self.params.setdefault(int(index), {})[name] = w
            self.weights[key] = w

    def _add_buffers(self, shapes: dict, split: bool) -> None:
        """Buffers (BatchNorm2d's running statistics) as FLOAT variables beside their layer's
        weights, with host handles but no optimizer; refused when the weights are split."""
        if shapes and split:
            index = int(next(iter(shapes)).split(".", 1)[0])
            raise GraphError(f"layer {index} ({self.model[index]!r}) keeps running statistics: "
                             "train it without phases, RTS, pipelining or tensor parallelism")
        for key, shape in shapes.items():
            index, name = key.split(".", 1)
            t = self.g.add_variable(FLOAT, list(shape), key)
            poputil.map_tensor_linearly(self.home(int(index)), t)
            self.g.create_host_write(f"write/{key}", t)
            self.g.create_host_read(f"read/{key}", t)
            self.params.setdefault(int(index), {})[name] = t

    def home(self, layer: int):
        """The graph a layer lives on: its pipeline stage's IPU(s), or the whole replica (its
        first t IPUs with tensor parallelism)."""
        return stage_of(self.stages, layer).graph if self.stages else self.group

    def _half_weights(self):
        """fp16: forward and backward use HALF copies of the float master weights, made at the
        start of every step (one cast over all of them); params then names the copies."""
        seq = prog.Sequence(name="weights to half")
        keys = list(self.weights)
        if self.config.dtype == HALF and keys:
            half = popops.cast(self.g, flat([self.weights[k] for k in keys]), HALF, seq,
                               "weights/to_half")
            for key, t in zip(keys, split(half, [self.weights[k].shape for k in keys])):
                index, name = key.split(".", 1)
                self.params[int(index)][name] = t
        return seq

    def _fifos(self, prefix: str, outputs):
        g = self.g
        ins = (g.add_host_to_device_fifo(f"{prefix}/x", self.x.dtype, self.x.num_elements()),
               g.add_host_to_device_fifo(f"{prefix}/labels", INT, self.labels.num_elements()))
        return ins, [g.add_device_to_host_fifo(f"{prefix}/{name}", dtype, n)
                     for name, dtype, n in outputs]

    def _batch_in(self, name: str, ins):
        seq = prog.Sequence(name=name)
        seq.add(prog.Copy(ins[0], self.x))
        seq.add(prog.Copy(ins[1], self.labels))
        if self.sharded:
            seq.add(self.gather)
        seq.add(self.to_half)
        return seq

    # --- program 0 -------------------------------------------------------------------------
    def training_program(self, optimizer):
        """The training step; also keeps the plain forward (self.forward, self.loss_seq,
        self.logits, self.loss) for an evaluation that can share it."""
        ins, (f_loss, f_correct) = self._fifos("train", [("loss", FLOAT, 1), ("correct", INT, 1)])
        cfg, g = self.config, self.g
        train = self._batch_in("training step", ins)
        grad_scale = cfg.scale / (cfg.global_batch_size * self.positions)
        self.forward = None
        if self.stages:
            body = prog.Sequence(name="pipeline")
            step = pipelined_step(g, self.model, self.stages, self.x, self.labels, self.params,
                                  body, micro_batches=cfg.micro_batches, grad_scale=grad_scale,
                                  seed=self.seed, recompute=cfg.recompute, tp=self.tp)
            train.add(body)
        else:
            step = self._plain_step(train, grad_scale, optimizer)
        train.add(self._update(step, optimizer))
        train.add(prog.Copy(step.loss, f_loss))
        train.add(prog.Copy(step.correct, f_correct))
        return train

    def _plain_step(self, train, grad_scale, optimizer) -> StepResult:
        """Forward, loss and backward of the whole batch (phase by phase when phased: then
        each phase's update is in its backward, and no gradients are left to apply)."""
        g = self.g
        self.forward, self.loss_seq = prog.Sequence(name="forward"), prog.Sequence(name="loss")
        self.logits, builds = self._forward(self.forward, train=True)
        self.loss = popnn.calc_loss(g, self.logits, self.labels, self.loss_seq, name="loss",
                                    num_correct=True, grad_scale=grad_scale)
        backward = prog.Sequence(name="backward")
        if self.phases:
            grads = {}
            self.phases.backward(builds, self.loss.grad, backward, optimizer, self.config)
        else:
            grads, _ = build_backward(self.group, builds, self.loss.grad, backward,
                                      recompute=self.config.recompute)
        for p in (self.forward, self.loss_seq, backward):
            train.add(p)
        return StepResult(self.loss.loss.reshape([1]), self.loss.num_correct.reshape([1]),
                          grads)

    def _update(self, step: StepResult, optimizer):
        """All-reduce the gradients over the replicas, apply them, advance the Dropout seed
        (with RTS: reduce-scatter them and apply this replica's shard)."""
        g, keys, cfg = self.g, list(self.weights), self.config
        update = prog.Sequence(name="update")
        if keys:
            grads = flat([step.grads[k] for k in keys])
            if self.sharded:
                self.sharded.update(grads, optimizer, update, 1.0 / cfg.scale,
                                    cfg.state_off_chip)
            else:
                optimizer.build(g, flat([self.weights[k] for k in keys]),
                                all_reduce_gradients(g, grads, update, cfg.replicas), update,
                                grad_scale=1.0 / cfg.scale, off_chip=cfg.state_off_chip,
                                sizes=[self.weights[k].num_elements() for k in keys])
        if self.seed is not None:      # next step, next masks
            popops.map_in_place(g, _1 + 1, [self.seed.slice(0, 1)], update, "dropout/next_seed")
        return update

    def _forward(self, seq, train: bool, prefix: str = ""):
        """The whole forward pass without a pipeline (phase by phase when phased)."""
        if self.phases:
            return self.phases.forward(self.model, self.x, seq, train, self.seed, prefix)
        return build_forward(self.group, self.model, self.x, self.params, seq, train=train,
                             seed=self.seed, prefix=prefix, tp=self.tp)

    # --- program 1 -------------------------------------------------------------------------
    def evaluation_program(self):
        """The evaluation step: the training step's forward when nothing differs (no Dropout,
        no BatchNorm2d, no pipeline), else a forward of its own (micro-batched through a
        pipeline)."""
        ins, (e_loss, e_correct, e_pred) = self._fifos("eval", [
            ("loss", FLOAT, 1), ("correct", INT, 1),
            ("predictions", INT, self.labels.num_elements())])
        ev = self._batch_in("evaluation step", ins)
        if self.forward is not None and self.seed is None and not self.model.buffer_shapes():
            ev.add(self.forward)
            ev.add(self.loss_seq)
            logits, loss = self.logits, self.loss
        else:
            if self.stages:
                _, parts = pipelined_forward(self.g, self.model, self.stages, self.x,
                                             self.params, ev, self.config.micro_batches,
                                             train=False, prefix="eval/", tp=self.tp)
                logits = concat(parts)
            else:
                logits, _ = self._forward(ev, train=False, prefix="eval/")
            loss = popnn.calc_loss(self.home(len(self.model) - 1), logits, self.labels, ev,
                                   name="eval/loss", num_correct=True)
        if self.targets:                                # a prediction per position
            logits = logits.flatten(0, 2)
        pred = popnn.arg_max(self.g, logits, ev, "predictions")
        ev.add(prog.Copy(loss.loss.reshape([1]), e_loss))
        ev.add(prog.Copy(loss.num_correct.reshape([1]), e_correct))
        ev.add(prog.Copy(pred, e_pred))
        return ev


__all__ = ["StepGraph", "TRAIN", "EVAL"]
