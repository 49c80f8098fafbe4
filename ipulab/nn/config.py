"""TrainConfig: every option of a training run in one place, checked, with what follows from it.

    cfg = nn.TrainConfig(replicas=2, batch_size=32, precision="fp16", pipeline=[3])
    nn.Trainer(model, device, config=cfg)        # the same as passing the keywords
    cfg.num_stages, cfg.micro_batches, cfg.global_batch_size, cfg.replica_choices(device.target)

The Trainer, `ipulab train`, the training dashboard and the course all read their options from
here, so a rule such as "a replica needs t x p IPUs: tensor_parallel IPUs for each of its
pipeline stages" is written once. A config is frozen: change one with dataclasses.replace
(or config.replace(...)), which checks again.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .. import devices
from ..errors import ConfigError, GraphError
from ..options import OPTIMIZER_STATES, OPTIMIZERS, PRECISIONS
from ..poplar import FLOAT, HALF
from .optim import create as create_optimizer
from .pipeline import balanced_cuts, stage_spans

EXECUTIONS = ("default", "phased")
DEFAULT_RUN_LR = {"sgd": 0.1, "adam": 0.01, "adamw": 0.01, "lamb": 0.02}   # default_run's
TRANSFORMER_RUN_LR = {"sgd": 0.1, "adam": 3e-3, "adamw": 3e-3, "lamb": 0.02}  # transformer_run's
HALF_LOSS_SCALE = 128.0         # fp16's default loss scaling: small gradients survive in half


def _int(v, what: str, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ConfigError(what, f"must be an int >= {lo}", v)
    return int(v)


def _number(v, what: str, ok, rule: str) -> float:
    """v as a float if it is a number (not nan) for which ok(v) holds, else ConfigError."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or math.isnan(v) \
            or not ok(float(v)):
        raise ConfigError(what, rule, v)
    return float(v)


def _betas(v) -> tuple[float, float]:
    """Two numbers in [0, 1), as a tuple (a config stays hashable)."""
    try:
        if isinstance(v, (str, bytes)):
            raise TypeError
        betas = tuple(v)
    except TypeError:
        betas = ()
    if len(betas) != 2 or any(isinstance(b, bool) or not isinstance(b, (int, float, np.number))
                              or math.isnan(b) or not 0 <= b < 1 for b in betas):
        raise ConfigError("betas", "must be two numbers in [0, 1)", v)
    return tuple(float(b) for b in betas)


def _tensor_parallel(v):
    """t (an int, 1-D) or (t1, t2) with t2 > 1 (2-D), from an int, a pair or a string such as
    "4" or "2x2" (the planner's spelling)."""
    rule = "must be an int >= 1, a pair (t1, t2) or a string like '2x2'"
    if isinstance(v, str):
        try:
            v = tuple(int(p) for p in v.lower().split("x"))
        except ValueError:
            raise ConfigError("tensor_parallel", rule, v) from None
    if isinstance(v, (tuple, list)):
        if len(v) not in (1, 2) or any(isinstance(p, bool) or not isinstance(p, (int, np.integer))
                                       or p < 1 for p in v):
            raise ConfigError("tensor_parallel", rule, v)
        t1, t2 = (int(p) for p in (*v, 1)[:2])
        return (t1, t2) if t2 > 1 else t1
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ConfigError("tensor_parallel", rule, v)
    return int(v)


def _pipeline(v):
    """None, a number of stages, or a tuple of the layers where stages begin."""
    if v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool)):
        return v if v is None else _int(v, "pipeline")
    try:
        if isinstance(v, (str, bytes)) or any(isinstance(c, bool) for c in v):
            raise TypeError
        return tuple(int(c) for c in v)
    except (TypeError, ValueError):
        raise GraphError(f"TrainConfig: pipeline must be a list of layer indices where stages "
                         f"begin (e.g. [3, 6]) or a number of stages, not {v!r}") from None


@dataclass(frozen=True)
class TrainConfig:
    """How to train: the system, data parallelism, pipelining, precision and the optimizer.

    replicas: data-parallel copies, each step takes replicas x batch_size samples (None: as
    many as the system's IPUs hold, one IPU per pipeline stage each). pipeline: the layers
    where stages begin, or a number of stages to balance by work; stage s runs on IPU s of
    its replica. micro_batches: the micro-batches of a step (given with pipeline=; None: one
    per stage), resolved to their number when the config is made (1 without a pipeline);
    each has batch_size / micro_batches samples (the planner's micro_batch_size).
    recompute: keep only block inputs for the backward pass. precision: "fp32" or "fp16"
    (HALF activations and gradients, float32 master weights, loss_scaling: default 128 in
    fp16). seed: initial weights and Dropout masks. system and tiles_per_ipu: the device to
    build when none is given (devices.system names). epochs: how long `ipulab train` and the
    dashboard train by default.

    The optimizer (nn/optim; README, "Training"; tests/test_optim.py), run on the tiles:
    optimizer: "sgd" (default), "adam", "adamw" or "lamb". lr: the learning rate of any of
    them. momentum: SGD's (0 with the others). weight_decay (None: 0, AdamW's 0.01), betas
    (None: (0.9, 0.999)) and eps (None: 1e-8, LAMB's 1e-6) as torch.optim names them: Adam
    adds weight_decay * w to the gradient (L2), AdamW decays the weights apart from it, LAMB
    adds it to its update before the trust ratio (You et al. 2019, as Graphcore's BERT); SGD
    takes weight_decay as L2 too, and no betas or eps. The decay applies to every weight.
    state_per_parameter: the float32 state values per weight (SGD: 1 with momentum, else 0;
    the others: 2, their moments).

    Scale-out (README, "Scaling out"; tests/test_scale_out.py):
    optimizer_state: "on-chip" (default) or "off-chip": the optimizer's state per weight
    (SGD's velocity, the moments m and v) lives in Streaming Memory, a remote buffer per
    replica, loaded into tile memory for the update and stored after it (Adam's and LAMB's
    step count, one float, stays on chip). Without momentum SGD has no state: "off-chip" is
    then allowed and changes nothing (state_off_chip is False).
    rts: replicated tensor sharding (needs replicas > 1): the master weights and the optimizer
    state stored as one shard per replica (padded: n elements -> ceil(n / replicas) each);
    the weights are all-gathered before use and the gradients reduce-scattered instead of
    all-reduced; each replica updates its own shard (nn/sharding.py). With LAMB every weight
    tensor is sharded on its own, and the sums of squares of its norms all-reduced.
    tensor_parallel: t IPUs per pipeline stage sharing every layer with weights: a CNN's
    Conv2d and Linear split by output channels (nn/tensor_parallel.py); a transformer's
    attention heads and feed-forward as Megatron-LM splits them (nn/megatron.py). 2-D,
    (t1, t2) or "2x2": t1 splits the heads and the feed-forward, t2 the hidden dimension, as
    Graphcore's PopXL GPT-3 (transformers only). A replica then uses t x num_stages IPUs
    (t = t1 x t2), and t x p x r IPUs in all.
    phases: k > 1 runs the model as k phases (contiguous layers, about equal weights each)
    whose weights and optimizer state (whatever optimizer_state says) live in Streaming
    Memory, sharded over the replicas with rts, loaded before each phase's forward and
    backward and stored after its update (nn/phased.py); 1: not phased. At most one phase
    per layer with weights; not with pipeline= (the phases run one after another on the
    same IPUs instead). execution="phased" with phases=1: one phase per layer with weights
    (the finest cut); "default" runs phased only when phases > 1.
    """

    replicas: int | None = 1
    batch_size: int = 16
    lr: float = 0.05
    momentum: float = 0.0
    optimizer: str = "sgd"
    weight_decay: float | None = None
    betas: tuple | None = None
    eps: float | None = None
    precision: str = "fp32"
    loss_scaling: float | None = None
    pipeline: int | tuple | None = None
    micro_batches: int | None = None
    recompute: bool = False
    seed: int = 0
    system: str | None = None
    tiles_per_ipu: int | None = None
    epochs: int = 1
    optimizer_state: str = "on-chip"
    rts: bool = False
    tensor_parallel: int | tuple = 1
    phases: int = 1
    execution: str = "default"

    def __post_init__(self):
        fix = (lambda name, value: object.__setattr__(self, name, value))
        if self.replicas is not None:
            fix("replicas", _int(self.replicas, "replicas"))
        fix("batch_size", _int(self.batch_size, "batch_size"))
        fix("seed", _int(self.seed, "seed", 0))
        fix("epochs", _int(self.epochs, "epochs"))
        fix("tensor_parallel", _tensor_parallel(self.tensor_parallel))
        fix("phases", _int(self.phases, "phases"))
        if self.execution not in EXECUTIONS:
            raise ConfigError("execution", f"must be one of {', '.join(EXECUTIONS)}",
                              self.execution)
        if self.phased and self.pipeline is not None:
            raise ConfigError("phases", "runs the phases one after another on the same IPUs: "
                              "it does not combine with pipeline=", self.phases)
        fix("recompute", bool(self.recompute))
        fix("rts", bool(self.rts))
        self._check_rts()
        fix("lr", _number(self.lr, "lr", lambda v: 0 < v < math.inf,
                          "must be a positive number"))
        fix("momentum", _number(self.momentum, "momentum", lambda v: 0 <= v < 1,
                                "must be in [0, 1)"))
        for name, allowed in (("optimizer", OPTIMIZERS), ("precision", PRECISIONS),
                              ("optimizer_state", OPTIMIZER_STATES)):
            if getattr(self, name) not in allowed:
                raise ConfigError(name, f"must be one of {', '.join(allowed)}",
                                  getattr(self, name))
        self._check_optimizer(fix)
        if self.loss_scaling is not None:
            fix("loss_scaling", _number(self.loss_scaling, "loss_scaling",
                                        lambda v: 0 < v < 65504, "must be in (0, 65504)"))
        fix("pipeline", _pipeline(self.pipeline))
        if self.micro_batches is None:
            fix("micro_batches", self.num_stages)
        else:
            fix("micro_batches", _int(self.micro_batches, "micro_batches"))
            if self.pipeline is None and self.micro_batches > 1:
                raise GraphError("TrainConfig: micro_batches= goes with pipeline=[...]")
            self._check_micro()
        if self.system is not None and self.system not in devices.SYSTEM_NAMES:
            raise ConfigError("system", f"must be one of {', '.join(devices.SYSTEM_NAMES)}",
                              self.system)
        if self.tiles_per_ipu is not None:
            fix("tiles_per_ipu", _int(self.tiles_per_ipu, "tiles_per_ipu"))

    def _check_optimizer(self, fix) -> None:
        """weight_decay, betas and eps in range; momentum only with SGD, betas and eps only
        with the others."""
        if self.weight_decay is not None:
            fix("weight_decay", _number(self.weight_decay, "weight_decay",
                                        lambda v: 0 <= v < math.inf, "must be a number >= 0"))
        if self.eps is not None:
            fix("eps", _number(self.eps, "eps", lambda v: 0 < v < math.inf,
                               "must be a positive number"))
        if self.betas is not None:
            fix("betas", _betas(self.betas))
        if self.optimizer == "sgd":
            for name in ("betas", "eps"):
                if getattr(self, name) is not None:
                    raise ConfigError(name, "must be None with optimizer='sgd' (Adam's and "
                                      "LAMB's; SGD has momentum)", getattr(self, name))
        elif self.momentum:
            raise ConfigError("momentum", f"must be 0 with optimizer={self.optimizer!r} "
                              f"(SGD's; {self.optimizer} has betas)", self.momentum)

    def _check_rts(self) -> None:
        if self.rts and self.replicas == 1:
            raise ConfigError("rts", "shards the weights across replicas: it needs replicas > 1",
                              "rts=True with replicas=1")

    def _check_micro(self) -> None:
        if self.batch_size % self.micro_batches:
            raise GraphError(f"TrainConfig: batch_size {self.batch_size} does not split into "
                             f"{self.micro_batches} micro-batches")

    @classmethod
    def default_run(cls, **changes) -> "TrainConfig":
        """The course's run (`ipulab train` with no options): a Bow-2000, one replica per IPU,
        16 images each, SGD lr 0.1 with momentum 0.9, 5 epochs (~96.7 % on digits).
        SGD without momentum at lr 0.05 reaches only ~30 % after one epoch. With another
        optimizer, no momentum and its own lr: Adam and AdamW 0.01, LAMB 0.02 (each ~97-98 %
        on digits after the 5 epochs; LAMB's lr is the step relative to each tensor's norm)."""
        return cls._recipe(dict(system="bow2000", replicas=None, batch_size=16, epochs=5),
                           "sgd", DEFAULT_RUN_LR, changes)

    @classmethod
    def transformer_run(cls, **changes) -> "TrainConfig":
        """The course's small GPT run (`ipulab train --model transformer`: nn.small_gpt() on
        ipulab.data.sort_tokens(), 4,096 sequences): one Bow IPU, 16 sequences a step, Adam
        lr 0.003, 2 epochs (512 steps): ~99.7 % test token accuracy, ~99.4 % of the answer
        tokens, ~90 % of the 512 answers entirely sorted. The one place its recipe lives.
        Measured alternatives (test token / answer-token accuracy): Adam lr 0.01 97.7 / 95.4,
        0.005 99.4 / 98.8, 0.002 98.6 / 97.3; one epoch at 0.003 96.3 / 92.5; AdamW 0.003
        (weight decay 0.01) 99.2 / 98.3; SGD lr 0.1 with momentum 0.9 (the recipe before
        Adam; `optimizer="sgd"`) 94.5 / 89.0; LAMB 0.02 93.0 / 86.0."""
        return cls._recipe(dict(system="ipu", replicas=1, batch_size=16, epochs=2), "adam",
                           TRANSFORMER_RUN_LR, changes)

    @classmethod
    def _recipe(cls, run: dict, optimizer: str, lrs: dict, changes: dict) -> "TrainConfig":
        """run with the optimizer (as changed) at its own lr (SGD with momentum 0.9), then
        the changes."""
        optimizer = changes.get("optimizer", optimizer)
        run = {**run, "optimizer": optimizer, "lr": lrs.get(optimizer, 0.1)}
        if optimizer == "sgd":
            run["momentum"] = 0.9
        return cls(**{**run, **changes})

    def replace(self, **changes) -> "TrainConfig":
        """A copy with some options changed (checked again)."""
        return dataclasses.replace(self, **changes)

    # --- what follows ----------------------------------------------------------------------
    @property
    def num_stages(self) -> int:
        """Pipeline stages, each on its own IPU of a replica (1 without a pipeline)."""
        if self.pipeline is None:
            return 1
        return self.pipeline if isinstance(self.pipeline, int) else len(self.pipeline) + 1

    @property
    def tensor_parallel_grid(self) -> tuple[int, int]:
        """(t1, t2): (t, 1) for 1-D tensor parallelism."""
        t = self.tensor_parallel
        return tuple(t) if isinstance(t, tuple) else (t, 1)

    @property
    def tensor_parallel_ipus(self) -> int:
        """t = t1 x t2: the IPUs that share every layer of a pipeline stage."""
        t1, t2 = self.tensor_parallel_grid
        return t1 * t2

    @property
    def replica_ipus(self) -> int:
        """IPUs one replica needs: t for each pipeline stage (t x p)."""
        return self.tensor_parallel_ipus * self.num_stages

    @property
    def micro_batch_size(self) -> int:
        """Samples per micro-batch: batch_size / micro_batches."""
        return self.batch_size // self.micro_batches

    @property
    def global_batch_size(self) -> int:
        """Samples per step over all replicas (the replicas must be known: resolve())."""
        if self.replicas is None:
            raise GraphError("TrainConfig: replicas=None is decided by a target: resolve() it")
        return self.replicas * self.batch_size

    @property
    def scale(self) -> float:
        """The loss scaling used: as given, else 128 in fp16 and 1 in fp32."""
        if self.loss_scaling is not None:
            return float(self.loss_scaling)
        return HALF_LOSS_SCALE if self.precision == "fp16" else 1.0

    @property
    def state_per_parameter(self) -> int:
        """The float32 optimizer state kept per weight: SGD 1 with momentum, else 0; Adam,
        AdamW and LAMB 2 (their moments)."""
        return create_optimizer(self).state_per_parameter

    @property
    def state_off_chip(self) -> bool:
        """Whether optimizer state goes to Streaming Memory: asked for, or phased (a phase's
        state streams with its weights), and there is some (SGD keeps a velocity only with
        momentum)."""
        return (self.optimizer_state == "off-chip" or self.phased) and \
            self.state_per_parameter > 0

    @property
    def phased(self) -> bool:
        """Whether the model runs as phases streamed from Streaming Memory."""
        return self.phases > 1 or self.execution == "phased"

    @property
    def dtype(self):
        """The type of activations and gradients: HALF in fp16, FLOAT in fp32."""
        return HALF if self.precision == "fp16" else FLOAT

    def device(self):
        """A device of the named system (and tiles_per_ipu)."""
        if self.system is None:
            raise GraphError("TrainConfig: no system named: give a device, or system=...")
        return devices.system(self.system, self.tiles_per_ipu)

    # --- against a target and a model --------------------------------------------------------
    def replica_choices(self, target) -> list[int]:
        """The replica counts that can run on target: 1 and the divisors of its IPUs that
        leave each replica its t x p IPUs (replica_ipus)."""
        n = target.num_ipus
        return [r for r in range(1, n + 1) if n % r == 0 and r * self.replica_ipus <= max(n, 1)]

    def resolve(self, target) -> "TrainConfig":
        """This config with replicas decided (None: the system's IPUs over t x p). Nothing
        else changes, so nothing is checked again (check() says what does not fit)."""
        if self.replicas is not None:
            return self
        resolved = copy.copy(self)
        object.__setattr__(resolved, "replicas", max(1, target.num_ipus // self.replica_ipus))
        return resolved

    def ipus_per_replica(self, target) -> int:
        return max(1, target.num_ipus // self.resolve(target).replicas)

    def check(self, num_layers: int, target) -> None:
        """GraphError unless the pipeline fits the model's layers and a replica's IPUs (t
        of them per stage), and the batch splits into its micro-batches."""
        ipus, t = self.ipus_per_replica(target), self.tensor_parallel_ipus
        self.resolve(target)._check_rts()
        if t > 1 and t * min(self.num_stages, num_layers) > ipus:
            r = self.resolve(target).replicas
            raise ConfigError("tensor_parallel", (
                f"x {self.num_stages} pipeline stage(s) must fit the {ipus} IPU(s) of a "
                f"replica ({target.num_ipus} IPU(s) over {r} replica(s); a replica needs "
                f"t x p = {t * self.num_stages})"), t)
        ipus //= t
        if self.phases > num_layers:
            raise ConfigError("phases", f"cuts the model's {num_layers} layers: at most "
                              f"{num_layers}", self.phases)
        if isinstance(self.pipeline, int):
            if self.pipeline > min(ipus, num_layers):
                raise GraphError(f"TrainConfig: pipeline={self.pipeline} stages needs "
                                 f"{self.pipeline} IPUs per replica (each replica has {ipus}) "
                                 f"and as many layers (the model has {num_layers})")
        elif self.pipeline is not None:
            stage_spans(self.pipeline, num_layers, ipus)
        self._check_micro()

    def cuts(self, model, sample_shape) -> list[int] | None:
        """The layers where stages begin: as given, or balanced by work for a number of
        stages (None without a pipeline)."""
        if isinstance(self.pipeline, int):
            return balanced_cuts(model, sample_shape, self.pipeline)
        return None if self.pipeline is None else list(self.pipeline)

    def phase_spans(self, model) -> list[tuple[int, int]] | None:
        """[(lo, hi)] layers of each phase, cut where the weights balance, each phase from a
        layer with weights on (None: not phased); ConfigError if the model has fewer layers
        with weights than phases."""
        if not self.phased:
            return None
        weights = [sum(int(np.prod(s)) for s in layer.param_shapes().values())
                   for layer in model.layers]
        starts = [i for i, w in enumerate(weights) if w]
        if self.phases > len(starts):
            raise ConfigError("phases", f"must be at most the model's {len(starts)} layers "
                              f"with weights (every phase streams some)", self.phases)
        k = self.phases if self.phases > 1 else len(starts)
        cuts = balanced_cuts(model, None, k, weights, starts[1:], "phases")
        edges = [0, *cuts, len(model)]
        return list(zip(edges[:-1], edges[1:]))

    def batch_fits(self, batch_size: int, samples: int, replicas: int | None = None) -> bool:
        """Whether one global batch of batch_size per replica fits in `samples` and splits
        into this config's micro-batches."""
        r = self.replicas if replicas is None else replicas
        return r * batch_size <= samples and batch_size % self.micro_batches == 0


__all__ = ["TrainConfig", "PRECISIONS", "OPTIMIZERS", "OPTIMIZER_STATES", "EXECUTIONS"]
