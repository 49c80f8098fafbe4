"""Trainer: ONE graph for a whole training step, compiled once, fed through FIFOs.

    trainer = nn.Trainer(model, ipulab.devices.ipu("bow"), batch_size=16, lr=0.05)
    history = trainer.fit(x_train, y_train, epochs=5)
    acc, loss = trainer.evaluate(x_test, y_test)
    trainer.predict(x_test[:8]); trainer.get_weights(); trainer.profile()

The graph holds the weights (and momentum) as variables, the current batch as an input
tensor, and two programs:

  0  training step: batch in (host -> device FIFOs), forward, softmax cross-entropy
     (popnn.calc_loss), backward through every layer, gradient all-reduce over replicas,
     SGD update; loss and the number of correct answers out (device -> host FIFOs)
  1  evaluation step: batch in, forward (Dropout off), loss, argmax; loss, correct count and
     predictions out

Both are compiled once, into one Engine, the first time the sample shape is known (pass
input_shape= to build at construction). fit() connects the epoch's batches to the FIFOs and
runs program 0 once per step: no Python per tile, vertex or element.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from .. import popnn, popops, poputil
from ..errors import DataError, EngineError, GraphError, TileMemoryError
from ..poplar import FLOAT, HALF, INT, UNSIGNED_INT, Engine, Graph, concat
from ..poplar import program as prog
from ..popops.expr import _1
from .build import all_reduce_gradients, argmax, build_backward, build_forward, flat, split, \
    uses_dropout
from .model import Sequential, check_weights
from .optim import SGD
from .pipeline import StepResult, balanced_cuts, make_stages, pipelined_forward, pipelined_step, \
    stage_of, stage_spans

TRAIN, EVAL = 0, 1          # program indices in the engine
# A graph name that belongs to a layer: "3.weight", "mb0/3.Conv2d/conv/out", "grad_sum/3.bias"
_LAYER = re.compile(r"(?:^|/)(\d+)\.(?:weight|bias|[A-Z]\w*/)")
# The course's default run (DESIGN section 7, issue 5; `ipulab train` with no options):
# nn.default_cnn() on data.digits() on a full Bow-2000, one replica per IPU, 16 images per
# replica (a global batch of 64). SGD without momentum at lr 0.05 reaches only ~30 % after one
# epoch; with momentum 0.9 and lr 0.1 the test accuracy is ~96.7 % after 5 epochs (~98.6 %
# after 8). Trainer itself keeps torch.optim.SGD's momentum default (0).
DEFAULT_RUN = {"system": "bow2000", "replicas": 4, "batch_size": 16, "lr": 0.1,
               "momentum": 0.9, "epochs": 5}
PRECISIONS = ("fp32", "fp16")


class Evaluation(NamedTuple):
    """What evaluate() returns: accuracy in [0, 1] and the mean loss."""

    accuracy: float
    loss: float


def _int(v, what: str, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise GraphError(f"Trainer: {what} must be an int >= {lo}, not {v!r}")
    return int(v)


class Trainer:
    """Trains an nn.Sequential on a simulated device (DESIGN section 7).

    replicas: data-parallel copies; each step takes replicas x batch_size samples (replica i
    the i-th block of batch_size) and the loss reported is the mean over all of them.
    lr, momentum: torch.optim.SGD's.
    precision: "fp32", or "fp16": activations, gradients and the weights used by forward and
    backward are HALF (rounded on every write; matrix products at the fp16 rate), the update
    goes to float32 master weights, and the loss gradient is multiplied by loss_scaling
    (default 128 in fp16, 1 in fp32) so small gradients survive in half precision, and
    divided back out in the update.
    pipeline: the layer indices where pipeline stages begin (e.g. [3, 6]: three stages), or a
    number of stages to balance by work; stage s runs on IPU s of each replica, and each step
    goes through as micro_batches micro-batches (default: one per stage) in a GPipe schedule
    (see nn.pipeline).
    recompute: keep only block inputs (a pipeline stage's input per micro-batch) for the
    backward pass and run the block's forward again just before its backward.
    seed: the initial weights when the model has none yet (PyTorch's default initialisation)
    and the Dropout masks.
    input_shape: one sample's shape, e.g. (1, 8, 8), to build and compile now rather than at
    the first fit/evaluate/predict. options: Engine options (e.g. checked codelets).
    """

    def __init__(self, model, device, replicas: int = 1, batch_size: int = 16, lr: float = 0.05,
                 momentum: float = 0.0, precision: str = "fp32", pipeline=None,
                 recompute: bool = False, seed: int = 0, input_shape=None,
                 loss_scaling: float | None = None, options: dict | None = None,
                 micro_batches: int | None = None):
        if not isinstance(model, Sequential):
            raise GraphError(f"Trainer takes an nn.Sequential, not {type(model).__name__}")
        if not hasattr(device, "target"):
            raise GraphError(f"Trainer needs a device (e.g. ipulab.devices.ipu('bow')), not "
                             f"{type(device).__name__}")
        self.model, self.device = model, device
        self.replicas = _int(replicas, "replicas")
        self.batch_size = _int(batch_size, "batch_size")
        self.seed = _int(seed, "seed", 0)
        self.optimizer = SGD(lr, momentum)
        if precision not in PRECISIONS:
            raise GraphError(f"Trainer: precision must be one of {PRECISIONS}, not "
                             f"{precision!r}")
        self.precision, self.recompute = precision, bool(recompute)
        self.pipeline, self.micro_batches = self._pipeline(pipeline, micro_batches)
        if loss_scaling is None:
            loss_scaling = 128.0 if precision == "fp16" else 1.0
        if isinstance(loss_scaling, bool) or not isinstance(loss_scaling, (int, float)) or \
                not 0 < loss_scaling < 65504:
            raise GraphError(f"Trainer: loss_scaling must be a number in (0, 65504), not "
                             f"{loss_scaling!r}")
        self.loss_scaling = float(loss_scaling)
        self.dtype = HALF if precision == "fp16" else FLOAT
        self.options = dict(options or {})
        if not model.initialized:
            model.reset_parameters(self.seed)
        self.history = {"loss": [], "accuracy": [], "cycles": [], "images_per_second": []}
        self.graph = self.engine = None
        self.input_shape = None
        self._step_profile = None
        self._step_cycles = None
        if input_shape is not None:
            self._build(tuple(int(s) for s in input_shape))

    def _pipeline(self, pipeline, micro_batches):
        """(boundaries or None, micro-batches per step), checked against the model, the batch
        and one replica's IPUs."""
        if pipeline is None:
            if micro_batches is not None:
                raise GraphError("Trainer: micro_batches= goes with pipeline=[...]")
            return None, 1
        ipus = max(1, self.device.target.num_ipus // self.replicas)
        if isinstance(pipeline, (int, np.integer)) and not isinstance(pipeline, bool):
            stages = _int(pipeline, "pipeline (a number of stages)")
            if stages > min(ipus, len(self.model)):
                raise GraphError(f"Trainer: pipeline={stages} stages needs {stages} IPUs per "
                                 f"replica (each replica has {ipus}) and as many layers (the "
                                 f"model has {len(self.model)})")
            pipeline = stages             # the boundaries are chosen once shapes are known
        else:
            stages = len(stage_spans(pipeline, len(self.model), ipus))
            pipeline = [int(c) for c in pipeline]
        m = stages if micro_batches is None else _int(micro_batches, "micro_batches")
        if self.batch_size % m:
            raise GraphError(f"Trainer: batch_size {self.batch_size} does not split into "
                             f"{m} micro-batches")
        return pipeline, m

    @property
    def num_stages(self) -> int:
        """Pipeline stages (IPUs per replica the model is cut over): 1 without a pipeline."""
        if self.pipeline is None:
            return 1
        return self.pipeline if isinstance(self.pipeline, int) else len(self.pipeline) + 1

    # --- properties ---------------------------------------------------------------------------
    @property
    def lr(self) -> float:
        return self.optimizer.lr

    @property
    def momentum(self) -> float:
        return self.optimizer.momentum

    @property
    def global_batch_size(self) -> int:
        return self.replicas * self.batch_size

    def __repr__(self) -> str:
        return (f"Trainer({self.device.target!r}, replicas={self.replicas}, batch_size="
                f"{self.batch_size}, {self.optimizer!r}, precision={self.precision!r}"
                + ("" if self.pipeline is None else
                   f", pipeline={self.pipeline}, micro_batches={self.micro_batches}")
                + (", recompute=True" if self.recompute else "") + ")")

    # --- building the graph -------------------------------------------------------------------
    def _build(self, sample_shape: tuple) -> None:
        model, B = self.model, self.batch_size
        shapes = model.shapes(sample_shape)
        if len(shapes[-1]) != 1:
            raise GraphError(f"the model must end with class scores of shape (classes,), e.g. "
                             f"nn.Linear(..., 10); it gives {shapes[-1]} per sample")
        classes = shapes[-1][0]
        g = Graph(self.device.target, replication_factor=self.replicas)   # one replica's graph
        stages = None
        if isinstance(self.pipeline, int):
            self.pipeline = balanced_cuts(model, sample_shape, self.pipeline)
        if self.pipeline is not None:
            stages = make_stages(g, stage_spans(self.pipeline, len(model), g.target.num_ipus))
        home = (lambda layer: stage_of(stages, layer).graph) if stages else (lambda layer: g)
        dt = self.dtype
        x = g.add_variable(dt, [B, *sample_shape], "input")
        labels = g.add_variable(INT, [B], "labels")
        poputil.map_tensor_linearly(home(0), x)
        poputil.map_tensor_linearly(home(len(model) - 1), labels)
        params, by_key = {}, {}
        for key, shape in model.param_shapes().items():
            index, name = key.split(".")
            t = g.add_variable(FLOAT, list(shape), key)
            poputil.map_tensor_linearly(home(int(index)), t)
            g.create_host_write(f"write/{key}", t)
            g.create_host_read(f"read/{key}", t)
            params.setdefault(int(index), {})[name] = t
            by_key[key] = t
        seed = None
        if uses_dropout(model):
            seed = g.add_variable(UNSIGNED_INT, [2], "dropout/seed")
            g.set_tile_mapping(seed, 0)
            g.create_host_write("write/dropout/seed", seed)

        def fifos(prefix, outputs):
            ins = (g.add_host_to_device_fifo(f"{prefix}/x", dt, x.num_elements()),
                   g.add_host_to_device_fifo(f"{prefix}/labels", INT, B))
            outs = [g.add_device_to_host_fifo(f"{prefix}/{name}", dtype, n)
                    for name, dtype, n in outputs]
            return ins, outs

        keys = list(by_key)
        # fp16: forward and backward use HALF copies of the float master weights, made at
        # the start of every step (one cast over all of them)
        to_half = prog.Sequence(name="weights to half")
        if dt == HALF and keys:
            half = popops.cast(g, flat([by_key[k] for k in keys]), HALF, to_half,
                               "weights/to_half")
            for key, t in zip(keys, split(half, [by_key[k].shape for k in keys])):
                index, name = key.split(".")
                params[int(index)][name] = t

        # program 0: the training step
        (fx, fy), (f_loss, f_correct) = fifos("train", [("loss", FLOAT, 1),
                                                        ("correct", INT, 1)])
        train = prog.Sequence(name="training step")
        train.add(prog.Copy(fx, x))
        train.add(prog.Copy(fy, labels))
        train.add(to_half)
        grad_scale = self.loss_scaling / (self.replicas * B)
        forward = loss = None
        if stages:
            body = prog.Sequence(name="pipeline")
            step = pipelined_step(g, model, stages, x, labels, params, body,
                                  micro_batches=self.micro_batches, grad_scale=grad_scale,
                                  seed=seed, recompute=self.recompute)
            train.add(body)
        else:
            forward, loss_seq = prog.Sequence(name="forward"), prog.Sequence(name="loss")
            logits, builds = build_forward(g, model, x, params, forward, train=True, seed=seed)
            loss = popnn.calc_loss(g, logits, labels, loss_seq, name="loss", num_correct=True,
                                   grad_scale=grad_scale)
            backward = prog.Sequence(name="backward")
            grads, _ = build_backward(g, builds, loss.grad, backward, recompute=self.recompute)
            for p in (forward, loss_seq, backward):
                train.add(p)
            step = StepResult(loss.loss.reshape([1]), loss.num_correct.reshape([1]), grads)
        update = prog.Sequence(name="update")
        if keys:
            grad_flat = all_reduce_gradients(g, flat([step.grads[k] for k in keys]), update,
                                             self.replicas)
            self.optimizer.build(g, flat([by_key[k] for k in keys]), grad_flat, update,
                                 grad_scale=1.0 / self.loss_scaling)
            if self.optimizer.velocity is not None:
                g.create_host_write("write/sgd/velocity", self.optimizer.velocity)
        if seed is not None:      # next step, next masks
            popops.map_in_place(g, _1 + 1, [seed.slice(0, 1)], update, "dropout/next_seed")
        train.add(update)
        train.add(prog.Copy(step.loss, f_loss))
        train.add(prog.Copy(step.correct, f_correct))

        # program 1: the evaluation step (the same forward when nothing differs in training)
        (ex, ey), (e_loss, e_correct, e_pred) = fifos("eval", [
            ("loss", FLOAT, 1), ("correct", INT, 1), ("predictions", INT, B)])
        ev = prog.Sequence(name="evaluation step")
        ev.add(prog.Copy(ex, x))
        ev.add(prog.Copy(ey, labels))
        ev.add(to_half)
        if forward is not None and seed is None:
            ev.add(forward)
            ev.add(loss_seq)
            eval_logits, eval_loss = logits, loss
        else:
            if stages:        # the forward phase of the pipeline, micro-batched
                _, parts = pipelined_forward(g, model, stages, x, params, ev,
                                             self.micro_batches, train=False, prefix="eval/")
                eval_logits = concat(parts)
            else:
                eval_logits, _ = build_forward(g, model, x, params, ev, train=False,
                                               prefix="eval/")
            eval_loss = popnn.calc_loss(home(len(model) - 1), eval_logits, labels, ev,
                                        name="eval/loss", num_correct=True)
        pred = argmax(g, eval_logits, ev, "predictions")
        ev.add(prog.Copy(eval_loss.loss.reshape([1]), e_loss))
        ev.add(prog.Copy(eval_loss.num_correct.reshape([1]), e_correct))
        ev.add(prog.Copy(pred, e_pred))

        engine = self._compile(g, [train, ev])
        engine.load(self.device)
        self.graph, self.engine, self.input_shape = g, engine, sample_shape
        self.classes = classes
        self._write_weights(model.state_dict())
        if seed is not None:
            self._write("write/dropout/seed", np.array(
                [self.seed & 0xFFFFFFFF, (self.seed >> 32) & 0xFFFFFFFF], np.uint32))

    def _compile(self, g, programs) -> Engine:
        """The Engine; a tile that overflows is reported with the layer that fills it most."""
        try:
            return Engine(g, programs, self.options)
        except TileMemoryError as e:
            layer = next((int(m.group(1)) for name, _ in e.largest
                          if (m := _LAYER.search(name))), None)
            if layer is None:
                raise
            hint = "" if self.recompute else " or recompute=True"
            hint = f" Or pipeline the model (pipeline=[...]: stages on more IPUs){hint}." \
                if self.pipeline is None else f" Or use more pipeline stages{hint}."
            err = TileMemoryError(e.tile, e.needed, e.available, e.largest, message=(
                f"layer {layer} ({self.model[layer]!r}) does not fit: {e}{hint}"))
            err.profile = e.profile
            raise err from None

    def _ensure_built(self, sample_shape, what: str) -> None:
        sample_shape = tuple(int(s) for s in sample_shape)
        if self.engine is None:
            self._build(sample_shape)
        elif sample_shape != self.input_shape:
            raise DataError(f"{what}: samples of shape {sample_shape}, but this trainer was "
                            f"built for {self.input_shape}")

    # --- the host side of replication -----------------------------------------------------------
    # A replicated graph describes one replica; the host sees every replica at once: a tensor
    # is written as one block per replica, a FIFO copy moves one block per replica (replica i
    # the i-th). With replicas == 1 the blocks are the arrays themselves.
    def _write(self, handle: str, value: np.ndarray) -> None:
        """The same value into every replica's copy of a tensor."""
        if self.replicas > 1:
            value = np.broadcast_to(value, (self.replicas,) + value.shape)
        self.engine.write_tensor(handle, np.ascontiguousarray(value))

    def _read(self, handle: str) -> np.ndarray:
        """Replica 0's copy of a tensor (the all-reduced update keeps the replicas equal)."""
        value = self.engine.read_tensor(handle)
        return value[0] if self.replicas > 1 else value

    def _per_step(self, values: np.ndarray) -> np.ndarray:
        """A FIFO's output, one value per replica per step -> (steps, replicas)."""
        return values.reshape(-1, self.replicas)

    def _write_weights(self, weights: dict) -> None:
        for key, value in weights.items():
            self._write(f"write/{key}", value)
        if self.optimizer.velocity is not None:       # a fresh start: no momentum yet
            self._write("write/sgd/velocity", np.zeros(
                self.optimizer.velocity.num_elements(), np.float32))

    # --- data ---------------------------------------------------------------------------------
    def _images(self, x, what: str) -> np.ndarray:
        try:
            x = np.ascontiguousarray(x, dtype=np.float32)
        except (TypeError, ValueError):
            raise DataError(f"{what}: images must be an array of numbers") from None
        if x.ndim < 2 or len(x) == 0:
            raise DataError(f"{what}: images must be (n, ...) with n >= 1 samples (NCHW for "
                            f"convolutions), not shape {list(x.shape)}")
        self._ensure_built(x.shape[1:], what)
        if not np.isfinite(x).all():
            raise DataError(f"{what}: images hold inf or nan")
        return x

    def _labels(self, y, n: int, what: str) -> np.ndarray:
        y = np.asarray(y)
        if y.shape != (n,) or y.dtype.kind not in "ui":
            raise DataError(f"{what}: labels must be {n} integers (one per image), not "
                            f"{y.dtype} of shape {list(y.shape)}")
        if y.size and (y.min() < 0 or y.max() >= self.classes):
            raise DataError(f"{what}: labels must be class indices in 0..{self.classes - 1}, "
                            f"found {y.min()}..{y.max()}")
        return y.astype(np.int32)

    # --- training -----------------------------------------------------------------------------
    def fit(self, x, y, epochs: int = 1, shuffle: bool = True, seed: int = 0,
            callback=None) -> dict:
        """Train for `epochs` passes over (x, y); returns (and extends) self.history.

        Each step takes the next replicas x batch_size samples of the epoch's order (shuffled
        with a generator seeded by `seed`, or in order with shuffle=False); a trailing partial
        batch is dropped. history gets one entry per step: "loss" (mean over the global
        batch), "accuracy" (of that batch), "cycles" (simulated cycles of the step) and
        "images_per_second" (simulated, at the device's clock).

        callback(trainer, epoch, step, steps, loss, accuracy), if given, is called after every
        step (epoch and step count from 0; loss and accuracy of that step's global batch);
        when it returns False, training stops after that step (the steps run are recorded)."""
        x = self._images(x, "fit")
        y = self._labels(y, len(x), "fit")
        epochs = _int(epochs, "epochs", 0)
        gb = self.global_batch_size
        steps = len(x) // gb
        if steps == 0:
            raise DataError(f"fit: {len(x)} samples are fewer than one global batch of {gb} "
                            f"({self.replicas} replica(s) x batch_size {self.batch_size})")
        rng = np.random.default_rng(seed)
        e = self.engine
        for epoch in range(epochs):
            order = rng.permutation(len(x)) if shuffle else np.arange(len(x))
            take = order[:steps * gb]
            losses = np.zeros(steps * self.replicas, np.float32)
            correct = np.zeros(steps * self.replicas, np.int32)
            e.connect_stream("train/x", np.ascontiguousarray(x[take], self.dtype.host))
            e.connect_stream("train/labels", np.ascontiguousarray(y[take]))
            e.connect_stream("train/loss", losses)
            e.connect_stream("train/correct", correct)
            stop = False
            for step in range(steps):
                e.run(TRAIN)
                if self._step_profile is None:
                    self._step_profile = e.profile()
                    self._step_cycles = self._step_profile.total_cycles
                if callback is not None:
                    r = slice(step * self.replicas, (step + 1) * self.replicas)
                    if callback(self, epoch, step, steps,
                                float(losses[r].astype(np.float64).mean()),
                                float(correct[r].sum()) / gb) is False:
                        stop, done = True, (step + 1) * self.replicas
                        losses, correct = losses[:done], correct[:done]
                        break
            self._record(losses, correct)
            if stop:
                break
        self.model.load_state_dict(self.get_weights())
        return self.history

    def _record(self, losses, correct) -> None:
        """One history entry per step; each replica reported its own batch's mean loss and
        correct count (all batches have batch_size samples)."""
        gb, cycles = self.global_batch_size, self._step_cycles
        losses = self._per_step(losses.astype(np.float64)).mean(1)
        correct = self._per_step(correct).sum(1)
        h = self.history
        h["loss"] += [float(v) for v in losses]
        h["accuracy"] += [float(c) / gb for c in correct]
        h["cycles"] += [cycles] * len(losses)
        h["images_per_second"] += [gb * self.device.target.clock_hz / cycles] * len(losses)

    # --- evaluation ---------------------------------------------------------------------------
    def _evaluate(self, x, labels):
        """Run the evaluation program over x in global batches (the last one padded with
        label -1, which calc_loss counts as neither loss nor correct): (predictions, summed
        loss, correct count)."""
        n, B, gb = len(x), self.batch_size, self.global_batch_size
        steps = -(-n // gb)
        pad = steps * gb - n
        if pad:
            x = np.concatenate([x, np.zeros((pad,) + x.shape[1:], np.float32)])
            labels = np.concatenate([labels, np.full(pad, -1, np.int32)])
        losses = np.zeros(steps * self.replicas, np.float32)
        correct = np.zeros(steps * self.replicas, np.int32)
        pred = np.zeros(steps * gb, np.int32)
        e = self.engine
        e.connect_stream("eval/x", np.ascontiguousarray(x, self.dtype.host))
        e.connect_stream("eval/labels", np.ascontiguousarray(labels))
        e.connect_stream("eval/loss", losses)
        e.connect_stream("eval/correct", correct)
        e.connect_stream("eval/predictions", pred)
        for _ in range(steps):
            e.run(EVAL)
        # each batch's loss is the mean over B (padding counts zero): back to a sum
        return pred[:n].astype(np.int64), float(np.sum(losses.astype(np.float64) * B)), \
            int(correct.sum())

    def evaluate(self, x, y) -> Evaluation:
        """(accuracy, loss) over (x, y): the fraction classified right and the mean
        softmax cross-entropy, computed on the device without Dropout."""
        x = self._images(x, "evaluate")
        y = self._labels(y, len(x), "evaluate")
        _, loss_sum, correct = self._evaluate(x, y)
        return Evaluation(correct / len(x), loss_sum / len(x))

    def predict(self, x) -> np.ndarray:
        """The predicted class of each image (int64), computed on the device."""
        x = self._images(x, "predict")
        pred, _, _ = self._evaluate(x, np.full(len(x), -1, np.int32))
        return pred

    # --- weights and profile -------------------------------------------------------------------
    def get_weights(self) -> dict:
        """The weights as numpy arrays in PyTorch layout, keyed like
        torch.nn.Sequential(...).state_dict() ("0.weight", "0.bias", ...)."""
        if self.engine is None:
            return self.model.state_dict()
        return {key: self._read(f"read/{key}") for key in self.model.param_shapes()}

    def set_weights(self, weights: dict) -> None:
        """Load weights keyed as get_weights() returns them (PyTorch layout); momentum starts
        again from zero."""
        checked = check_weights(self.model.param_shapes(), weights)
        if self.engine is not None:
            self._write_weights(checked)
        self.model.load_state_dict(checked)

    def dashboard(self, x=None, y=None, x_test=None, y_test=None, epochs: int = 1,
                  seed: int = 0):
        """The live training dashboard (an ipywidgets widget, ipulab.widgets.TrainingDashboard):
        Start / Stop buttons, loss and accuracy updated after every step, the test accuracy
        after every epoch, and the step profile's cycles and memory. Its replicas, batch size
        and precision controls take effect at the next Start, which builds a new trainer from
        the current weights (dashboard.trainer); a table compares the configurations run.
        Without data it trains on ipulab.data.digits() (and tests on its test split)."""
        from ..widgets.training import TrainingDashboard

        if x is None:
            if y is not None:
                raise DataError("dashboard: give both x and y, or neither (digits)")
            from ..data import digits

            x, y, x_test, y_test = digits()
        return TrainingDashboard(self, x, y, x_test, y_test, epochs=epochs, seed=seed)

    def profile(self):
        """The Profile of one training step (the first one run)."""
        if self._step_profile is None:
            raise EngineError("no training step has run yet: call fit() first, then profile()")
        return self._step_profile
