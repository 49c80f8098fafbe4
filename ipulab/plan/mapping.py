"""Mapping: how a model is laid out on a system's IPUs (t · p · r), and what is kept where.

    m = plan.parse_mapping("p=4,layers=3/7/7/7,r=4,state=off-chip", optimizer="lamb")
    m = plan.Mapping(tensor_parallel=(8, 8), replicas=4, rts=True, phases=96)
    m = plan.mapping_from_config(trainer.config)     # the mapping of a simulated run
    m.resolve(spec, num_ipus, global_batch)  # layers per stage and phase, micro-batches filled in
    plan.describe_run(m)                      # 't 1 · p 4 [3,7,7,7] · r 4 · state off-chip'

IPUs = t × p × r: t IPUs share each layer (tensor sharding, 1-D or 2-D t1 × t2), p pipeline
stages of consecutive layers, r data-parallel replicas (Graphcore, "Building Large Models on IPU", 2021).

Three words for the batch, one meaning each: `micro_batch_size`, the samples of a
micro-batch; `micro_batches`, the micro-batches of a step on a replica (gradient
accumulation: GA); `micro_batch`, one micro-batch's index. The batch algebra is
micro_batch_size × r × micro_batches = global batch, and a pipeline of p stages needs
micro_batches ≥ 2p − 1 (PopTorch's rule; `--mapping` spells them micro and ga). Every rule
broken raises PlanError naming it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import PlanError
from ..options import OPTIMIZER_STATES, PRECISIONS
from .optim import OPTIMIZERS

EVERY_LAYER = 0       # phases = 0: one phase per layer with weights (nn's execution="phased")


def is_power_of_two(n: int) -> bool:
    return isinstance(n, int) and n >= 1 and n & (n - 1) == 0


@dataclass(frozen=True)
class Mapping:
    """t (tensor_parallel, (t1, t2); t2 = 1 for 1-D), p (pipeline) with layers per stage (or
    stage_starts: the layers where stages 1, 2, ... begin, as nn.TrainConfig.pipeline gives
    them), r (replicas), rts (weights and optimizer state sharded over the replicas), phases
    (1: not phased; EVERY_LAYER: one per layer with weights) and their layers, where the
    optimizer state lives, micro_batch_size and micro_batches (None: from the model's defaults
    and the global batch), precision, optimizer (momentum: whether SGD keeps a velocity;
    weight_decay: whether it decays the weights, None its default), recompute. strict: the planner's own rule that t, p and r are powers of two filling the
    system; a simulated run's mapping (mapping_from_config) may leave IPUs idle."""

    tensor_parallel: tuple = (1, 1)
    pipeline: int = 1
    replicas: int = 1
    layers_per_stage: tuple | None = None
    rts: bool = False
    phases: int = 1
    optimizer_state: str = "on-chip"
    micro_batch_size: int | None = None
    micro_batches: int | None = None
    precision: str = "fp16"
    optimizer: str = "sgd"
    recompute: bool = True
    layers_per_phase: tuple | None = None     # None: ceil(layers / phases) consecutive layers
    momentum: bool = True
    stage_starts: tuple | None = None
    strict: bool = True
    weight_decay: bool | None = None          # None: the optimizer's default (AdamW's on)

    @property
    def t(self) -> int:
        return self.tensor_parallel[0] * self.tensor_parallel[1]

    # the old names of micro_batch_size and micro_batches (--mapping's keys micro and ga)
    micro = property(lambda self: self.micro_batch_size)
    ga = property(lambda self: self.micro_batches)

    @property
    def ipus(self) -> int:
        return self.t * self.pipeline * self.replicas

    @property
    def phased(self) -> bool:
        return self.phases != 1

    def replace(self, **changes) -> "Mapping":
        return dataclasses.replace(self, **changes)

    def label(self) -> str:
        """Short text: t 8x8 · p 1 · r 4 · rts · phases 96 · state off-chip."""
        from .runs import describe_run
        return describe_run(self)

    def placement(self) -> list[tuple[int, int, int]]:
        """(replica, stage, shard) of every IPU: replicas outermost, then stages, then shards
        (a layer's t shards are neighbours on the IPU-Links, as the full scale assumes)."""
        t, p = self.t, self.pipeline
        return [(i // (t * p), i // t % p, i % t) for i in range(self.ipus)]

    def check_sizes(self, num_ipus: int) -> None:
        """PlanError unless every size is a power of two and t·p·r is the system's IPUs (not
        strict: t·p·r at most the system's IPUs)."""
        named = {"t1": self.tensor_parallel[0], "t2": self.tensor_parallel[1],
                 "p": self.pipeline, "r": self.replicas}
        for name, v in named.items():
            if self.strict and not is_power_of_two(v):
                raise PlanError(f"mapping: {name} = {v} is not a power of two (t, p and r are "
                                "powers of two, as the Pods' sizes)")
        if self.ipus != num_ipus and (self.strict or self.ipus > num_ipus):
            raise PlanError(f"mapping: t·p·r = {self.t}·{self.pipeline}·{self.replicas} = "
                            f"{self.ipus} IPUs, but the system has {num_ipus} (t·p·r must "
                            "equal the IPUs)")

    def resolve(self, spec, num_ipus: int, global_batch: int | None = None) -> "Mapping":
        """This mapping checked against a model and a system of num_ipus IPUs, with layers per
        stage (and per phase), micro_batch_size and micro_batches decided (phased execution
        keeps the optimizer state in Streaming Memory with the weights); PlanError naming the
        first rule broken."""
        self.check_sizes(num_ipus)
        phases = spec.phase_count() if self.phases == EVERY_LAYER else self.phases
        m = self.replace(phases=phases)
        _check_model(m, spec)
        stages = m.layers_per_stage or _starts_to_counts(m.stage_starts, spec.num_layers) or \
            spec.balanced_stages(m.pipeline)
        _check_stages(stages, m.pipeline, spec.num_layers)
        size, count = _batch(m, spec, global_batch)
        state = "off-chip" if m.phased else m.optimizer_state
        per_phase = m.layers_per_phase or (spec.layers_per_phase(phases) if m.phased else None)
        return m.replace(layers_per_stage=tuple(stages), micro_batch_size=size,
                         micro_batches=count, optimizer_state=state, layers_per_phase=per_phase)


def _starts_to_counts(starts, layers: int) -> tuple | None:
    if starts is None:
        return None
    edges = [0, *starts, layers]
    return tuple(b - a for a, b in zip(edges, edges[1:]))


def _check_model(m: Mapping, spec) -> None:
    """The rules between a mapping and a model: phases, shards, replicas for RTS."""
    if not 1 <= m.phases <= spec.num_layers:
        raise PlanError(f"mapping: phases = {m.phases} but the model has {spec.num_layers} "
                        "layers (a phase holds at least one layer: phases ≤ layers)")
    if m.pipeline > spec.num_layers:
        raise PlanError(f"mapping: p = {m.pipeline} stages for {spec.num_layers} layers (each "
                        "stage needs a layer)")
    heads, hidden = spec.dims.get("heads"), spec.dims.get("hidden")
    if heads and heads % m.tensor_parallel[0]:
        raise PlanError(f"mapping: t1 = {m.tensor_parallel[0]} does not divide the "
                        f"{heads} attention heads (each shard takes whole heads)")
    if hidden and hidden % m.tensor_parallel[1]:
        raise PlanError(f"mapping: t2 = {m.tensor_parallel[1]} does not divide the hidden "
                        f"size {hidden} (each shard of t2 takes a slice of it)")
    if m.rts and m.replicas < 2:
        raise PlanError("mapping: rts shards over replicas: it needs r ≥ 2")
    if m.phased and m.pipeline > 1 and m.phases % m.pipeline:
        raise PlanError(f"mapping: phases = {m.phases} do not split over p = {m.pipeline} "
                        "stages (each stage runs the same number of phases)")


def _check_stages(stages, p: int, layers: int) -> None:
    if len(stages) != p or any(s < 1 for s in stages) or sum(stages) != layers:
        raise PlanError(f"mapping: layers per stage {list(stages)} must be {p} counts of at "
                        f"least 1 adding up to the model's {layers} layers")


def _batch(m: Mapping, spec, global_batch: int | None) -> tuple[int, int]:
    """(micro_batch_size, micro_batches) with size × r × micro-batches = global, and
    micro-batches ≥ 2p − 1 for a pipeline (the rules in --mapping's keys: micro × r × GA)."""
    size = m.micro_batch_size or spec.micro_batch_size
    if m.micro_batches is not None:
        count = m.micro_batches
        if global_batch is not None and size * m.replicas * count != global_batch:
            raise PlanError(f"mapping: micro-batches of {size} × r {m.replicas} × {count} "
                            f"micro-batches = {size * m.replicas * count}, not the global "
                            f"batch {global_batch} (micro × r × GA = global)")
    else:
        total = global_batch or spec.global_batch
        if total % (size * m.replicas):
            raise PlanError(f"mapping: the global batch {total} does not split into micro-"
                            f"batches of {size} on {m.replicas} replicas (micro × r × GA = "
                            "global)")
        count = max(1, total // (size * m.replicas))
    if spec.simulated and m.pipeline == 1 and count > 1:     # nn accumulates only in a
        size, count = size * count, 1                           # pipeline: one micro-batch
    if m.pipeline > 1 and count < 2 * m.pipeline - 1 and m.strict:
        raise PlanError(f"mapping: {count} micro-batches per step is below 2p − 1 = "
                        f"{2 * m.pipeline - 1} for p = {m.pipeline} stages (the pipeline rule "
                        "GA ≥ 2p − 1)")
    return size, count


def balanced_stages(spec, p: int) -> list[int]:
    """Layers per stage for p stages, as the model's kind balances them (ModelSpec)."""
    return list(spec.balanced_stages(p))


_KEYS = ("t", "p", "layers", "r", "rts", "phases", "state", "micro", "ga",
         "micro_batch_size", "micro_batches")
# keys and their Mapping fields (micro and ga: the short names of micro_batch_size and
# micro_batches)
_FIELDS = {"p": "pipeline", "r": "replicas", "micro": "micro_batch_size",
           "ga": "micro_batches"}


def _int_value(key: str, v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise PlanError(f"mapping: {key}={v!r} is not a whole number") from None
    if n < 1:
        raise PlanError(f"mapping: {key} must be at least 1, not {n}")
    return n


def _apply(fields: dict, key: str, v: str | None) -> None:
    """One key=value of a mapping string into Mapping's fields."""
    if key == "rts":
        if v not in (None, "on", "off", "true", "false", "1", "0"):
            raise PlanError(f"mapping: rts is on or off, not {v!r}")
        fields["rts"] = v in (None, "on", "true", "1")
    elif v is None:
        raise PlanError(f"mapping: {key} needs a value ({key}=...)")
    elif key == "t":
        parts = v.lower().split("x")
        if len(parts) > 2:
            raise PlanError(f"mapping: t={v} is t or t1xt2 (e.g. t=8 or t=8x8)")
        dims = [_int_value("t", s) for s in parts]
        fields["tensor_parallel"] = (dims[0], dims[1] if len(dims) == 2 else 1)
    elif key == "layers":
        fields["layers_per_stage"] = tuple(_int_value("layers", s) for s in v.split("/"))
    elif key == "state":
        if v not in OPTIMIZER_STATES:
            raise PlanError(f"mapping: state is on-chip or off-chip, not {v!r}")
        fields["optimizer_state"] = v
    else:
        fields[_FIELDS.get(key, key)] = _int_value(key, v)


def parse_mapping(text: str, **defaults) -> Mapping:
    """A Mapping from `ipulab plan --mapping`'s text: comma-separated key=value with keys
    t (8 or 8x8), p, layers (3/7/7/7), r, rts (alone, or rts=on/off), phases, state
    (on-chip/off-chip), micro (= micro_batch_size), ga (= micro_batches). defaults: other
    Mapping fields (optimizer, precision)."""
    fields = dict(defaults)
    for item in filter(None, (s.strip() for s in str(text).split(","))):
        key, _, value = item.partition("=")
        key = key.strip().lower()
        if key not in _KEYS:
            raise PlanError(f"mapping: unknown key {key!r}; keys are {', '.join(_KEYS)}")
        _apply(fields, key, value.strip() if _ else None)
    if "layers_per_stage" in fields and "pipeline" not in fields:
        fields["pipeline"] = len(fields["layers_per_stage"])
    return make_mapping(**fields)


def make_mapping(**fields) -> Mapping:
    """A Mapping with its option values checked (optimizer, precision, state); micro and ga
    are taken for micro_batch_size and micro_batches."""
    for old, field in (("micro", "micro_batch_size"), ("ga", "micro_batches")):
        if old in fields:
            fields[field] = fields.pop(old)
    m = Mapping(**fields)
    for name, allowed in (("optimizer", OPTIMIZERS), ("precision", PRECISIONS),
                          ("optimizer_state", OPTIMIZER_STATES)):
        if getattr(m, name) not in allowed:
            raise PlanError(f"mapping: {name} must be one of {', '.join(allowed)}, not "
                            f"{getattr(m, name)!r}")
    if m.layers_per_stage is not None and len(m.layers_per_stage) != m.pipeline:
        raise PlanError(f"mapping: layers={'/'.join(map(str, m.layers_per_stage))} gives "
                        f"{len(m.layers_per_stage)} stages but p = {m.pipeline}")
    return m
