"""Mapping: how a model is laid out on a system's IPUs (t · p · r), and what is kept where.

    m = plan.parse_mapping("p=4,layers=3/7/7/7,r=4,state=off-chip", optimizer="lamb")
    m = plan.Mapping(tensor_parallel=(8, 8), replicas=4, rts=True, phases=96)
    m.resolve(spec, system, global_batch)     # layers per stage, micro-batch and GA filled in

IPUs = t × p × r: t IPUs share each layer (tensor sharding, 1-D or 2-D t1 × t2), p pipeline
stages of consecutive layers, r data-parallel replicas (IPU_FACTS, Large-model mapping). The
batch algebra is micro-batch × r × gradient accumulation = global batch, and a pipeline of p
stages needs GA ≥ 2p − 1 (PopTorch's rule). Every rule broken raises PlanError naming it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import PlanError

OPTIMIZERS = ("sgd", "adam", "lamb")
PRECISIONS = ("fp16", "fp32")
STATES = ("on-chip", "off-chip")


def is_power_of_two(n: int) -> bool:
    return isinstance(n, int) and n >= 1 and n & (n - 1) == 0


@dataclass(frozen=True)
class Mapping:
    """t (tensor_parallel, (t1, t2); t2 = 1 for 1-D), p (pipeline) with layers per stage,
    r (replicas), rts (weights and optimizer state sharded over the replicas), phases (1: not
    phased), where the optimizer state lives, micro-batch and gradient accumulation (None:
    from the model's defaults and the global batch), precision, optimizer, recompute."""

    tensor_parallel: tuple = (1, 1)
    pipeline: int = 1
    replicas: int = 1
    layers_per_stage: tuple | None = None
    rts: bool = False
    phases: int = 1
    optimizer_state: str = "on-chip"
    micro: int | None = None
    ga: int | None = None
    precision: str = "fp16"
    optimizer: str = "sgd"
    recompute: bool = True
    layers_per_phase: tuple | None = None     # None: ceil(layers / phases) consecutive layers

    @property
    def t(self) -> int:
        return self.tensor_parallel[0] * self.tensor_parallel[1]

    @property
    def ipus(self) -> int:
        return self.t * self.pipeline * self.replicas

    @property
    def phased(self) -> bool:
        return self.phases > 1

    def replace(self, **changes) -> "Mapping":
        return dataclasses.replace(self, **changes)

    def label(self) -> str:
        """Short text: t 8x8 · p 1 · r 4 · rts · phases 96 · state off-chip."""
        t1, t2 = self.tensor_parallel
        parts = [f"t {t1}" + (f"x{t2}" if t2 > 1 else ""), f"p {self.pipeline}",
                 f"r {self.replicas}"]
        if self.layers_per_stage and self.pipeline > 1:
            parts[1] += " [" + ",".join(map(str, self.layers_per_stage)) + "]"
        parts += ["rts"] * self.rts + [f"phases {self.phases}"] * self.phased
        return " · ".join(parts + [f"state {self.optimizer_state}"])

    def placement(self) -> list[tuple[int, int, int]]:
        """(replica, stage, shard) of every IPU: replicas outermost, then stages, then shards
        (a layer's t shards are neighbours on the IPU-Links, as timing.py assumes)."""
        t, p = self.t, self.pipeline
        return [(i // (t * p), i // t % p, i % t) for i in range(self.ipus)]

    def check_sizes(self, num_ipus: int) -> None:
        """PlanError unless every size is a power of two and t·p·r is the system's IPUs."""
        named = {"t1": self.tensor_parallel[0], "t2": self.tensor_parallel[1],
                 "p": self.pipeline, "r": self.replicas}
        for name, v in named.items():
            if not is_power_of_two(v):
                raise PlanError(f"mapping: {name} = {v} is not a power of two (t, p and r are "
                                "powers of two, as the Pods' sizes)")
        if self.ipus != num_ipus:
            raise PlanError(f"mapping: t·p·r = {self.t}·{self.pipeline}·{self.replicas} = "
                            f"{self.ipus} IPUs, but the system has {num_ipus} (t·p·r must "
                            "equal the IPUs)")

    def resolve(self, spec, num_ipus: int, global_batch: int | None = None) -> "Mapping":
        """This mapping checked against a model and a system of num_ipus IPUs, with layers per
        stage, micro-batch and GA decided (phased execution keeps the optimizer state in
        Streaming Memory with the weights); PlanError naming the first rule broken."""
        self.check_sizes(num_ipus)
        _check_model(self, spec)
        stages = self.layers_per_stage or balanced_stages(spec, self.pipeline)
        _check_stages(stages, self.pipeline, spec.num_layers)
        micro, ga = _batch(self, spec, global_batch)
        state = "off-chip" if self.phased else self.optimizer_state
        return self.replace(layers_per_stage=tuple(stages), micro=micro, ga=ga,
                            optimizer_state=state)


def _check_model(m: Mapping, spec) -> None:
    """The rules between a mapping and a model: phases, shards, replicas for RTS."""
    if not 1 <= m.phases <= spec.num_layers:
        raise PlanError(f"mapping: phases = {m.phases} but the model has {spec.num_layers} "
                        "layers (a phase holds at least one layer: phases ≤ layers)")
    if m.pipeline > spec.num_layers:
        raise PlanError(f"mapping: p = {m.pipeline} stages for {spec.num_layers} layers (each "
                        "stage needs a layer)")
    heads = spec.dims.get("heads")
    if heads and heads % m.tensor_parallel[0]:
        raise PlanError(f"mapping: t1 = {m.tensor_parallel[0]} does not divide the "
                        f"{heads} attention heads (each shard takes whole heads)")
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
    """(micro-batch, GA) with micro × r × GA = global and GA ≥ 2p − 1 for a pipeline."""
    micro = m.micro or spec.micro
    if m.ga is not None:
        ga = m.ga
        if global_batch is not None and micro * m.replicas * ga != global_batch:
            raise PlanError(f"mapping: micro {micro} × r {m.replicas} × GA {ga} = "
                            f"{micro * m.replicas * ga}, not the global batch {global_batch} "
                            "(micro × r × GA = global)")
    else:
        total = global_batch or spec.global_batch
        if total % (micro * m.replicas):
            raise PlanError(f"mapping: the global batch {total} does not split into micro-"
                            f"batches of {micro} on {m.replicas} replicas (micro × r × GA = "
                            "global)")
        ga = max(1, total // (micro * m.replicas))
    if m.pipeline > 1 and ga < 2 * m.pipeline - 1:
        raise PlanError(f"mapping: gradient accumulation {ga} is below 2p − 1 = "
                        f"{2 * m.pipeline - 1} for p = {m.pipeline} stages (the pipeline rule "
                        "GA ≥ 2p − 1)")
    return micro, ga


def balanced_stages(spec, p: int) -> list[int]:
    """Layers per stage for p stages: the contiguous split that makes the largest stage
    smallest (parameters for a transformer, whose memory is its weights; FLOPs for an nn
    model), the extra block counted on stage 0; later stages filled first."""
    if p == 1:
        return [spec.num_layers]
    key = (lambda b: b.params) if spec.kind == "transformer" else (lambda b: b.flops)
    w = [key(b) for b in spec.blocks]
    head = key(spec.extra) if spec.extra else 0
    sums = sorted({sum(w[i:j]) for i in range(len(w)) for j in range(i + 1, len(w) + 1)}
                  | {head + sum(w[:j]) for j in range(1, len(w) + 1)})
    for cap in sums:
        stages = _fill_from_back(w, head, p, cap)
        if stages:
            return stages
    return _fill_from_back(w, head, p, float("inf"))


def _fill_from_back(w: list, head: float, p: int, cap: float) -> list[int] | None:
    counts, end = [], len(w)
    for stage in range(p - 1, 0, -1):
        n = 1
        while end - n > stage and sum(w[end - n - 1:end]) <= cap:
            n += 1
        if sum(w[end - n:end]) > cap:
            return None
        counts.append(n)
        end -= n
    if head + sum(w[:end]) > cap or end < 1:
        return None
    return [end] + counts[::-1]


_KEYS = ("t", "p", "layers", "r", "rts", "phases", "state", "micro", "ga")


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
        if v not in STATES:
            raise PlanError(f"mapping: state is on-chip or off-chip, not {v!r}")
        fields["optimizer_state"] = v
    else:
        name = {"p": "pipeline", "r": "replicas"}.get(key, key)
        fields[name] = _int_value(key, v)


def parse_mapping(text: str, **defaults) -> Mapping:
    """A Mapping from `ipulab plan --mapping`'s text: comma-separated key=value with keys
    t (8 or 8x8), p, layers (3/7/7/7), r, rts (alone, or rts=on/off), phases, state
    (on-chip/off-chip), micro, ga. defaults: other Mapping fields (optimizer, precision)."""
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
    """A Mapping with its option values checked (optimizer, precision, state)."""
    m = Mapping(**fields)
    for name, allowed in (("optimizer", OPTIMIZERS), ("precision", PRECISIONS),
                          ("optimizer_state", STATES)):
        if getattr(m, name) not in allowed:
            raise PlanError(f"mapping: {name} must be one of {', '.join(allowed)}, not "
                            f"{getattr(m, name)!r}")
    if m.layers_per_stage is not None and len(m.layers_per_stage) != m.pipeline:
        raise PlanError(f"mapping: layers={'/'.join(map(str, m.layers_per_stage))} gives "
                        f"{len(m.layers_per_stage)} stages but p = {m.pipeline}")
    return m
