"""ModelSpec: what the planner needs to know of a model, as its layers' costs.

    plan.bert_large().parameters            # 335,141,888 (Devlin et al.: "340M")
    plan.spec_from_model(nn.default_cnn(), (1, 8, 8))   # any nn.Sequential

A model is a sequence of blocks (cost classes, layers.py: a transformer's encoder layers, or
an nn model's layers) and an optional `extra` block that lives on the first pipeline stage (a
transformer's embeddings and tied head). A model read from nn runs on the simulator
(`simulated`): the planner prices it with the cycle model (step.py) and cuts it into stages
and phases as nn does; a transformer preset is priced at the full scale (fullscale.py).
"""
from __future__ import annotations

import json
import re
from dataclasses import InitVar, dataclass, field
from pathlib import Path

from ..errors import PlanError
from .layers import Block, layers_of
from .loss import CrossEntropyLoss, TokenLoss
from .presets import PRESETS, transformer


@dataclass(frozen=True)
class ModelSpec:
    """A model for the planner: its blocks, the first stage's extra block, and the defaults of
    its published training runs (micro_batch_size, global batch), with where they come from.
    `micro` is the old keyword of micro_batch_size, still taken."""

    name: str
    blocks: tuple
    extra: Block | None = None
    kind: str = "layers"                  # "transformer" or "layers" (an nn model)
    dims: dict = field(default_factory=dict)
    micro_batch_size: int = 1
    global_batch: int = 1
    source: str = ""
    loss: Block | None = None             # the Trainer's loss after the last layer (nn)
    micro: InitVar[int | None] = None

    def __post_init__(self, micro):
        if micro is not None:
            object.__setattr__(self, "micro_batch_size", micro)
        object.__setattr__(self, "micro", self.micro_batch_size)

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    @property
    def parameters(self) -> int:
        return sum(b.params for b in self.blocks) + (self.extra.params if self.extra else 0)

    @property
    def simulated(self) -> bool:
        """Whether every block has a cycle model (the simulator runs this model)."""
        return self.extra is None and all(b.simulated for b in self.blocks)

    def flops_per_sample(self) -> float:
        """Forward FLOPs of one sample through every block."""
        return sum(b.flops for b in self.blocks) + (self.extra.flops if self.extra else 0.0)

    # --- cutting it into stages and phases --------------------------------------------------
    def balanced_stages(self, p: int) -> tuple:
        """Layers per stage for p stages: a simulated model as nn cuts it (balanced_cuts of
        its layers' work, never between a product and its folded ReLU); else the contiguous
        split that makes the largest stage's parameters (its memory) smallest, the extra
        block counted on stage 0, later stages filled first."""
        if p == 1:
            return (self.num_layers,)
        if self.simulated:
            allowed = [b.index for b in self.blocks[1:] if b.cut_before]
            return _counts(_nn_cuts(p, [b.work for b in self.blocks], allowed, "pipeline"),
                           self.num_layers)
        w = [b.params for b in self.blocks]
        head = self.extra.params if self.extra else 0
        sums = sorted({sum(w[i:j]) for i in range(len(w)) for j in range(i + 1, len(w) + 1)}
                      | {head + sum(w[:j]) for j in range(1, len(w) + 1)})
        for cap in sums + [float("inf")]:
            stages = _fill_from_back(w, head, p, cap)
            if stages:
                return tuple(stages)
        raise PlanError(f"cannot cut {self.name} into {p} stages")

    def phase_count(self) -> int:
        """Phases of one layer with weights each (the finest cut)."""
        return max(1, sum(1 for b in self.blocks if b.params))

    def layers_per_phase(self, phases: int) -> tuple | None:
        """Layers of each phase: a simulated model as nn cuts it (weights balanced, each
        phase from a layer with weights on); else None (ceil(layers / phases) consecutive)."""
        if not self.simulated:
            return None
        starts = [b.index for b in self.blocks if b.params]
        if phases > len(starts):
            raise PlanError(f"mapping: phases = {phases} but {self.name} has only "
                            f"{len(starts)} layers with weights (every phase streams some)")
        return _counts(_nn_cuts(phases, [b.params for b in self.blocks], starts[1:], "phases"),
                       self.num_layers)


def _nn_cuts(k: int, work: list, allowed: list, what: str) -> list:
    """nn's cut of a model into k contiguous parts of about equal work (its very function)."""
    from ..errors import GraphError
    from ..nn.pipeline import balanced_cuts
    try:
        return balanced_cuts(None, None, k, work, allowed, what)
    except GraphError as e:
        raise PlanError(f"mapping: {e}") from None


def _counts(cuts: list, layers: int) -> tuple:
    edges = [0, *cuts, layers]
    return tuple(b - a for a, b in zip(edges, edges[1:]))


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


# What a model file may ask of the planner, checked before anything is built: past the
# published models (gpt3-175b: 96 layers, h 12,288, sequence 2048, 174.6 B parameters), with
# room, and small enough that a search ends in seconds (its stage cuts grow as layers³).
BOUNDS = {"layers": 128, "hidden": 32768, "heads": 32768, "ffn": 4 * 32768, "seq": 65536,
          "positions": 65536, "predicted": 65536, "vocab": 2**20, "type_vocab": 2**20}
MAX_PARAMETERS = 10**12
MAX_FILE_BYTES = 64 * 1024          # a model file is a few lines of dimensions
MAX_NESTING = 1                     # one JSON object of numbers and names


def from_dims(dims: dict, where: str = "model spec") -> ModelSpec:
    """A transformer from a dict of dimensions (a JSON file's content): name, layers, hidden,
    heads, seq, vocab and optionally ffn, positions, type_vocab, pooler, predicted,
    micro_batch_size (or its old name micro), global_batch; within BOUNDS and MAX_PARAMETERS
    (`where` names the file in a refusal)."""
    if not isinstance(dims, dict):
        raise PlanError(f"{where}: a model spec is a JSON object of transformer dimensions, "
                        f"not {type(dims).__name__}")
    need = ("layers", "hidden", "heads", "seq", "vocab")
    missing = [k for k in need if k not in dims]
    allowed = set(need) | {"name", "ffn", "positions", "type_vocab", "pooler", "predicted",
                           "micro", "micro_batch_size", "global_batch", "source"}
    unknown = sorted(set(dims) - allowed)
    if missing or unknown:
        parts = ([f"missing {missing}"] if missing else []) + \
            ([f"unknown keys {unknown}"] if unknown else [])
        raise PlanError(f"{where}: {'; '.join(parts)} (a transformer needs "
                        f"{', '.join(need)})")
    dims = dict(dims)
    if "micro" in dims:
        dims.setdefault("micro_batch_size", dims.pop("micro"))
    _within_bounds(dims, where)
    dims = {"name": "custom", **dims}
    one = transformer(**{**dims, "layers": 1})          # one layer: its parameters, cheaply
    params = dims["layers"] * one.blocks[0].params + one.extra.params
    if params > MAX_PARAMETERS:
        raise PlanError(f"{where}: {params:,} parameters; the planner takes at most "
                        f"{MAX_PARAMETERS:,} (gpt3-175b has 174.6 B)")
    return transformer(**dims)


def _within_bounds(dims: dict, where: str) -> None:
    """Every dimension of BOUNDS that is a number at most its bound (a wrong type is
    transformer()'s to refuse)."""
    for key, bound in BOUNDS.items():
        value = dims.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > bound:
            raise PlanError(f"{where}: {key} {value:,} is more than the planner takes: at "
                            f"most {bound:,}")


def _nesting(text: str) -> int:
    """How deep the JSON text's arrays and objects nest (outside its strings)."""
    depth = deepest = 0
    for c in re.sub(r'"(?:[^"\\]|\\.)*"', '""', text):
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def load_model(name: str, models: dict | None = None) -> ModelSpec:
    """A ModelSpec: a preset, one of `models` (name -> function making a spec) or a JSON
    file of transformer dimensions (untrusted: its size and nesting bounded before it is
    parsed, its dimensions before anything is built)."""
    models = models or {}
    if name in PRESETS:
        return PRESETS[name]()
    if name in models:
        return models[name]()
    path = Path(name)
    if not path.is_file():
        raise PlanError(f"unknown model {name!r}: choose one of "
                        f"{', '.join([*PRESETS, *models])}, or give a JSON file of "
                        "transformer dimensions")
    where = f"model file {name}"
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise PlanError(f"{where}: more than {MAX_FILE_BYTES:,} bytes (a model file is a "
                            "few lines of dimensions)")
        text = data.decode("utf-8")
        if (depth := _nesting(text)) > MAX_NESTING:
            raise PlanError(f"{where}: nested {depth:,} deep; a model file is one JSON object "
                            "of numbers and names, nested no deeper")
        dims = json.loads(text)
    except (OSError, ValueError) as e:
        raise PlanError(f"{where}: not JSON ({e})") from None
    return from_dims({"name": path.stem, **dims} if isinstance(dims, dict) else dims, where)


def spec_from_model(model, sample_shape, name: str = "model", micro_batch_size: int = 16,
                    global_batch: int | None = None) -> ModelSpec:
    """The spec of an nn.Sequential for samples of sample_shape: a cost per layer, of its
    kind's class (layers.KINDS)."""
    shape = tuple(int(s) for s in sample_shape)
    if not len(model):
        raise PlanError("spec_from_model: the model has no layers")
    blocks = tuple(layers_of(model, shape))
    shapes = [tuple(x) for x in model.shapes(shape)]
    classes = shapes[-1]
    placed = any(getattr(b, "placed", False) for b in blocks)
    loss = TokenLoss.of(classes[-1], classes[0] if len(classes) == 2 else 1) if placed else \
        CrossEntropyLoss.of(classes[-1])
    return ModelSpec(name, blocks, None, "layers",
                     {"sample_shape": shape, "shapes": shapes, "tokens": model.takes_tokens,
                      "placed": placed}, micro_batch_size, global_batch or micro_batch_size,
                     "an ipulab.nn model", loss)

