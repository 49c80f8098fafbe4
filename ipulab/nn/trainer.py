"""Trainer: ONE graph for a whole training step, compiled once, fed through FIFOs.

    trainer = nn.Trainer(model, ipulab.devices.ipu("bow"), batch_size=16, lr=0.05)
    history = trainer.fit(x_train, y_train, epochs=5)
    acc, loss = trainer.evaluate(x_test, y_test)
    trainer.predict(x_test[:8]); trainer.get_weights(); trainer.profile()

The options fill one nn.TrainConfig (config.py; or pass config= whole). The graph
(step.py) holds the weights (and the optimizer's state) as variables, the current batch as an input
tensor, a training-step program and an evaluation-step program, compiled once into one Engine
the first time the sample shape is known (pass input_shape= to build at construction). fit()
connects the epoch's batches to the FIFOs and runs the training step once per step: no Python
per tile, vertex or element. The live dashboard is ipulab.widgets.TrainingDashboard(trainer).
"""
from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple

import numpy as np

from ..errors import DataError, EngineError, GraphError, TileMemoryError
from ..poplar import Engine
from .config import TrainConfig
from .model import Sequential
from .optim import create as create_optimizer
from .tensor_parallel import scheme
from .step import EVAL, TRAIN, StepGraph

# A graph name that belongs to a layer: "3.weight", "mb0/3.Conv2d/conv/out", "grad_sum/3.bias",
# "2.self_attn.in_proj_weight"
_LAYER = re.compile(r"(?:^|/)(\d+)\.(?:weight|bias|[A-Z]\w*/|[a-z_]\w*\.)")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


class Evaluation(NamedTuple):
    """What evaluate() returns: accuracy in [0, 1] and the mean loss."""

    accuracy: float
    loss: float


def _config(config, options: dict) -> TrainConfig:
    """The config: given whole, or filled from the keywords (not both)."""
    if config is None:
        return TrainConfig(**options)
    if not isinstance(config, TrainConfig):
        raise GraphError(f"Trainer: config must be an nn.TrainConfig, not "
                         f"{type(config).__name__}")
    changed = [k for k, v in options.items() if v is not _DEFAULTS[k] and v != _DEFAULTS[k]]
    if changed:
        raise GraphError(f"Trainer: give the options as keywords or as config=, not both "
                         f"({', '.join(changed)} given with config=)")
    return config


class Trainer:
    """Trains an nn.Sequential on a simulated device (docs/training.md).

    The keywords are nn.TrainConfig's (see it for each): replicas, batch_size, lr, momentum,
    precision ("fp32" or "fp16"), pipeline (layers where stages begin, or a number of stages),
    micro_batches, recompute, seed, loss_scaling, the scale-out options optimizer_state
    ("on-chip" or "off-chip"), rts, tensor_parallel, phases and execution ("phased"), and the
    optimizer ("sgd", "adam", "adamw" or "lamb", nn/optim) with weight_decay, betas and eps as
    torch.optim's; or config= a TrainConfig. device: where to train (None: config.system's).
    input_shape: one sample's shape, e.g. (1, 8, 8), to build and compile now rather than at
    the first fit/evaluate/predict. options: Engine options (e.g. checked codelets).
    """

    def __init__(self, model, device=None, replicas: int = 1, batch_size: int = 16,
                 lr: float = 0.05, momentum: float = 0.0, precision: str = "fp32",
                 pipeline=None, recompute: bool = False, seed: int = 0, input_shape=None,
                 loss_scaling: float | None = None, options: dict | None = None,
                 micro_batches: int | None = None, optimizer_state: str = "on-chip",
                 rts: bool = False, tensor_parallel: int = 1, phases: int = 1,
                 execution: str = "default", optimizer: str = "sgd",
                 weight_decay: float | None = None, betas=None, eps: float | None = None,
                 config: TrainConfig | None = None):
        if not isinstance(model, Sequential):
            raise GraphError(f"Trainer takes an nn.Sequential, not {type(model).__name__}")
        config = _config(config, dict(
            replicas=replicas, batch_size=batch_size, lr=lr, momentum=momentum,
            precision=precision, pipeline=pipeline, recompute=recompute, seed=seed,
            loss_scaling=loss_scaling, micro_batches=micro_batches,
            optimizer_state=optimizer_state, rts=rts, tensor_parallel=tensor_parallel,
            phases=phases, execution=execution, optimizer=optimizer,
            weight_decay=weight_decay, betas=betas, eps=eps))
        if device is None:
            device = config.device()
        if not hasattr(device, "target"):
            raise GraphError(f"Trainer needs a device (e.g. ipulab.devices.ipu('bow')), not "
                             f"{type(device).__name__}")
        self.config = config.resolve(device.target)
        self.config.check(len(model), device.target)
        scheme(model, self.config.tensor_parallel_grid)      # ConfigError if it cannot split
        self.model, self.device = model, device
        self.optimizer = create_optimizer(self.config)
        self.options = dict(options or {})
        if not model.initialized:
            model.reset_parameters(self.config.seed)
        self.history = {"loss": [], "accuracy": [], "cycles": [], "images_per_second": []}
        self.graph = self.engine = self.sharded = self.phases = None
        self.input_shape, self.targets = None, ()
        self.step_profile = None       # the Profile of the first training step run
        if input_shape is not None:
            self._build(tuple(int(s) for s in input_shape))

    # --- the configuration --------------------------------------------------------------------
    replicas = property(lambda self: self.config.replicas)
    batch_size = property(lambda self: self.config.batch_size)
    seed = property(lambda self: self.config.seed)
    precision = property(lambda self: self.config.precision)
    recompute = property(lambda self: self.config.recompute)
    loss_scaling = property(lambda self: self.config.scale)
    micro_batches = property(lambda self: self.config.micro_batches)
    num_stages = property(lambda self: self.config.num_stages)
    global_batch_size = property(lambda self: self.config.global_batch_size)
    dtype = property(lambda self: self.config.dtype)
    positions = property(lambda self: int(np.prod(self.targets)))   # labels per sample
    lr = property(lambda self: self.optimizer.lr)
    momentum = property(lambda self: self.config.momentum)

    @property
    def pipeline(self):
        """None, a number of stages (until built), or the layers where stages begin."""
        p = self.config.pipeline
        return list(p) if isinstance(p, tuple) else p

    def __repr__(self) -> str:
        return (f"Trainer({self.device.target!r}, replicas={self.replicas}, batch_size="
                f"{self.batch_size}, {self.optimizer!r}, precision={self.precision!r}"
                + ("" if self.pipeline is None else
                   f", pipeline={self.pipeline}, micro_batches={self.micro_batches}")
                + (", recompute=True" if self.recompute else "") + self._scale_out_repr() + ")")

    def _scale_out_repr(self) -> str:
        """The scale-out options that differ from their defaults, as keywords."""
        c = self.config
        parts = [f"{name}={getattr(c, name)!r}" for name, default in
                 (("tensor_parallel", 1), ("rts", False), ("phases", 1),
                  ("execution", "default"), ("optimizer_state", "on-chip")) if getattr(c, name) != default]
        return "".join(", " + p for p in parts)

    # --- building the graph -------------------------------------------------------------------
    def _build(self, sample_shape: tuple) -> None:
        cuts = self.config.cuts(self.model, sample_shape)
        if cuts is not None:
            self.config = self.config.replace(pipeline=tuple(cuts))
        step = StepGraph(self.model, self.device.target, self.config, sample_shape, cuts)
        programs = [None, None]
        programs[TRAIN] = step.training_program(self.optimizer)
        programs[EVAL] = step.evaluation_program()
        engine = self._compile(step.g, programs)
        engine.load(self.device)
        self.graph, self.engine, self.input_shape = step.g, engine, sample_shape
        self.classes, self.sharded, self.phases = step.classes, step.sharded, step.phases
        self.targets = step.targets           # () or (S,): a label per sample or per position
        self._write_weights(self.model.state())
        if step.seed is not None:
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
        if self.sharded is not None:          # RTS: replica i gets shard i
            self.engine.write_tensor("write/weights/shard", self.sharded.to_shards(weights))
        elif self.phases:                     # phased: every replica's Streaming Memory
            for name, value in self.phases.to_buffers(weights, self.replicas).items():
                self.engine.write_remote_buffer(name, value)
        else:
            for key, value in weights.items():
                self._write(f"write/{key}", value)
        for buffer in self.optimizer.state_buffers:    # a fresh start: no momentum, no
            self.engine.write_remote_buffer(buffer.name, np.zeros(    # moments, step 0
                self.replicas * buffer.num_elements, np.float32))
        for name, t in self.optimizer.state_tensors.items():
            self._write(f"write/{name}", np.zeros(t.num_elements(), np.float32))

    # --- data ---------------------------------------------------------------------------------
    @property
    def _host_dtype(self):
        """The host type of a batch: int32 token ids, or the activations' type."""
        return np.int32 if self.model.takes_tokens else self.dtype.host

    def _images(self, x, what: str) -> np.ndarray:
        if self.model.takes_tokens:
            return self._tokens(x, what)
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

    def _tokens(self, x, what: str) -> np.ndarray:
        """Token ids for a model starting with nn.Embedding: int [n, S], each id a row of
        its table (DataError naming the layer and the first id out of range)."""
        x = np.asarray(x)
        if x.dtype.kind not in "ui" or x.ndim < 2 or len(x) == 0:
            raise DataError(f"{what}: the model starts with {self.model[0]!r}, so samples are "
                            f"integer token ids of shape (n, positions) with n >= 1, not "
                            f"{x.dtype} of shape {list(x.shape)}")
        vocab = self.model[0].num_embeddings
        bad = np.flatnonzero((x < 0) | (x >= vocab))
        if bad.size:
            where = np.unravel_index(bad[0], x.shape)
            raise DataError(f"{what}: token id {x[where]} at {list(map(int, where))} is out of "
                            f"range for layer 0 ({self.model[0]!r}): ids must be in "
                            f"0..{vocab - 1}")
        self._ensure_built(x.shape[1:], what)
        return x.astype(np.int32)

    def _labels(self, y, n: int, what: str) -> np.ndarray:
        y = np.asarray(y)
        shape = (n, *self.targets)
        if y.shape != shape or y.dtype.kind not in "ui":
            each = "one per image" if not self.targets else \
                f"one per position: shape {list(shape)}"
            raise DataError(f"{what}: labels must be {int(np.prod(shape))} integers ({each}), "
                            f"not {y.dtype} of shape {list(y.shape)}")
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
        if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
            raise GraphError(f"Trainer: epochs must be an int >= 0, not {epochs!r}")
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
            e.connect_stream("train/x", np.ascontiguousarray(x[take], self._host_dtype))
            e.connect_stream("train/labels", np.ascontiguousarray(y[take]))
            e.connect_stream("train/loss", losses)
            e.connect_stream("train/correct", correct)
            stop = False
            for step in range(steps):
                e.run(TRAIN)
                if self.step_profile is None:
                    self.step_profile = e.profile()
                if callback is not None:
                    r = slice(step * self.replicas, (step + 1) * self.replicas)
                    if callback(self, epoch, step, steps,
                                float(losses[r].astype(np.float64).mean()),
                                float(correct[r].sum()) / (gb * self.positions)) is False:
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
        correct count (all batches have batch_size samples; accuracy per position)."""
        gb, cycles = self.global_batch_size, self.step_profile.total_cycles
        losses = self._per_step(losses.astype(np.float64)).mean(1)
        correct = self._per_step(correct).sum(1)
        h = self.history
        h["loss"] += [float(v) for v in losses]
        h["accuracy"] += [float(c) / (gb * self.positions) for c in correct]
        h["cycles"] += [cycles] * len(losses)
        h["images_per_second"] += [gb * self.device.target.clock_hz / cycles] * len(losses)

    # --- evaluation ---------------------------------------------------------------------------
    def _evaluate(self, x, labels):
        """Run the evaluation program over x in global batches (the last one padded with
        label -1, which calc_loss counts as neither loss nor correct): (predictions, summed
        loss, correct count)."""
        n, B, gb, P = len(x), self.batch_size, self.global_batch_size, self.positions
        steps = -(-n // gb)
        pad = steps * gb - n
        if pad:
            x = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)])
            labels = np.concatenate([labels, np.full((pad, *labels.shape[1:]), -1, np.int32)])
        losses = np.zeros(steps * self.replicas, np.float32)
        correct = np.zeros(steps * self.replicas, np.int32)
        pred = np.zeros(steps * gb * P, np.int32)
        e = self.engine
        e.connect_stream("eval/x", np.ascontiguousarray(x, self._host_dtype))
        e.connect_stream("eval/labels", np.ascontiguousarray(labels))
        e.connect_stream("eval/loss", losses)
        e.connect_stream("eval/correct", correct)
        e.connect_stream("eval/predictions", pred)
        for _ in range(steps):
            e.run(EVAL)
        # each batch's loss is the mean over B (x P positions; padding counts zero): a sum
        return pred[:n * P].reshape(n, *self.targets).astype(np.int64), \
            float(np.sum(losses.astype(np.float64) * B * P)), int(correct.sum())

    def evaluate(self, x, y) -> Evaluation:
        """(accuracy, loss) over (x, y): the fraction classified right and the mean
        softmax cross-entropy (per position for a model with a label per position),
        computed on the device without Dropout."""
        x = self._images(x, "evaluate")
        y = self._labels(y, len(x), "evaluate")
        _, loss_sum, correct = self._evaluate(x, y)
        n = len(x) * self.positions
        return Evaluation(correct / n, loss_sum / n)

    def predict(self, x) -> np.ndarray:
        """The predicted class of each image (int64), computed on the device; [n, S] for a
        model with a label per position (a token per position)."""
        x = self._images(x, "predict")
        pred, _, _ = self._evaluate(x, np.full((len(x), *self.targets), -1, np.int32))
        return pred

    # --- weights and profile -------------------------------------------------------------------
    def get_weights(self) -> dict:
        """The weights as numpy arrays in PyTorch layout, keyed like
        torch.nn.Sequential(...).state_dict() ("0.weight", "0.bias", ...)."""
        if self.engine is None:
            return self.model.state_dict()
        if self.sharded is not None:
            return self.model.external(self.sharded.from_shards(
                self.engine.read_tensor("read/weights/shard")))
        if self.phases:
            return self.model.external(self.phases.from_buffers(self.engine.read_remote_buffer))
        return {self.model.key(k): self._read(f"read/{k}") for k in self.model.state_shapes()}

    def set_weights(self, weights: dict) -> None:
        """Load weights keyed as get_weights() returns them (PyTorch layout); the optimizer
        starts again (momentum and moments zero, step count 0)."""
        self.model.load_state_dict(weights)
        if self.engine is not None:
            self._write_weights(self.model.state())

    def profile(self):
        """The Profile of one training step (the first one run)."""
        if self.step_profile is None:
            raise EngineError("no training step has run yet: call fit() first, then profile()")
        return self.step_profile
