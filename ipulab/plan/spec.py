"""ModelSpec: what the planner needs to know of a model, as blocks of parameters and work.

    plan.bert_large().parameters            # 335,141,888 (IPU_FACTS: "335.1 M")
    plan.transformer("mine", layers=4, hidden=256, heads=4, seq=128, vocab=1000)
    plan.spec_from_model(nn.default_cnn(), (1, 8, 8))   # an nn model, read duck-typed

A model is a sequence of blocks (a transformer's encoder layers, or an nn model's layers) and
an optional `extra` block that lives on the first pipeline stage (a transformer's embeddings
and tied head: "embedding on IPU 0", IPU_FACTS, Large-model mapping). Each block says, per
sample: its forward FLOPs, the activation elements kept for the backward pass when recomputing
(the block's input), those alive while its backward runs, and those a tensor-sharded block
all-reduces between its shards. The planner never imports nn (same floor): a model is read
through its layers' class names and attributes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import PlanError


@dataclass(frozen=True)
class Block:
    """One block: parameters, its largest weight tensor, forward FLOPs per sample, and the
    activation elements per sample kept (recompute), live (backward) and all-reduced (tensor
    sharding, per pass)."""

    name: str
    params: int
    largest: int
    flops: float
    keep: int
    live: int
    reduce: int = 0
    kind: str = ""          # an nn layer's class name (the small-scale mode prices it)
    shape: tuple = ()       # its dimensions: Conv2d (c, o, kh, kw, ho, wo, bias),
                            # Linear (in, out, bias), pooling (c, ho, wo, kh, kw)


@dataclass(frozen=True)
class ModelSpec:
    """A model for the planner: its blocks, the first stage's extra block, and the defaults of
    its published training runs (micro-batch, global batch), with where they come from."""

    name: str
    blocks: tuple
    extra: Block | None = None
    kind: str = "layers"                  # "transformer" or "layers" (an nn model)
    dims: dict = field(default_factory=dict)
    micro: int = 1
    global_batch: int = 1
    source: str = ""

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    @property
    def parameters(self) -> int:
        return sum(b.params for b in self.blocks) + (self.extra.params if self.extra else 0)

    def flops_per_sample(self) -> float:
        """Forward FLOPs of one sample through every block."""
        return sum(b.flops for b in self.blocks) + (self.extra.flops if self.extra else 0.0)


def _positive(dims: dict, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"model spec {dims.get('name', '')!r}: {name} must be a positive "
                        f"integer, not {value!r}")
    return value


def transformer(name: str, layers: int, hidden: int, heads: int, seq: int, vocab: int,
                ffn: int | None = None, positions: int | None = None, type_vocab: int = 0,
                pooler: bool = False, predicted: int | None = None, micro: int = 1,
                global_batch: int = 1, source: str = "") -> ModelSpec:
    """A transformer of `layers` identical blocks (hidden h, heads a, feed-forward f = 4h by
    default, sequence s) and its embeddings + tied head as the extra block.

    Per layer: attention 4h² + 4h, feed-forward 2hf + f + h, two LayerNorms 4h parameters
    (12h² + 13h when f = 4h, IPU_FACTS); forward FLOPs 2·s·(4h² + 2hf) + 4s²h (Narayanan et
    al. 2021, eq. 1 with f = 4h); activations (Korthikanti et al. 2022, "Reducing activation
    recomputation", fp16 bytes halved to elements): 17·s·h live per sample with selective
    recompute (the s² attention terms recomputed, sequence-parallel when sharded), s·h kept at
    the block's input, 2·s·h all-reduced by tensor sharding per pass (Megatron: one after
    attention, one after the feed-forward)."""
    dims = dict(name=name, layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab)
    for k, v in list(dims.items())[1:]:
        _positive(dims, k, v)
    ffn = _positive(dims, "ffn", 4 * hidden if ffn is None else ffn)
    positions = _positive(dims, "positions", seq if positions is None else positions)
    predicted = _positive(dims, "predicted", seq if predicted is None else predicted)
    if hidden % heads:
        raise PlanError(f"model spec {name!r}: hidden {hidden} is not divisible by heads "
                        f"{heads} (each head gets hidden / heads features)")
    if seq > positions:
        raise PlanError(f"model spec {name!r}: seq {seq} is longer than its {positions} "
                        "position embeddings")
    if predicted > seq:
        raise PlanError(f"model spec {name!r}: {predicted} predicted tokens in a sequence of "
                        f"{seq}")
    h, s = hidden, seq
    layer = Block("layer", 4 * h * h + 2 * h * ffn + 9 * h + ffn, h * ffn + ffn,
                  2.0 * s * (4 * h * h + 2 * h * ffn) + 4.0 * s * s * h, s * h, 17 * s * h,
                  2 * s * h)
    head_params = (vocab + positions + type_vocab) * h + 2 * h + (h * h + h if pooler else 0)
    extra = Block("embeddings", head_params, vocab * h, 2.0 * h * vocab * predicted
                  + (2.0 * h * h if pooler else 0.0), s * h, predicted * vocab + s * h)
    dims.update(ffn=ffn, positions=positions, type_vocab=type_vocab, predicted=predicted)
    return ModelSpec(name, tuple(layer for _ in range(layers)), extra, "transformer", dims,
                     micro, global_batch, source)


def bert_base() -> ModelSpec:
    """BERT-Base (Devlin et al. 2019): 12 layers, h 768, 12 heads, vocab 30,522, 512
    positions, 2 token types, pooler; pretraining at sequence 128 (110 M parameters)."""
    return transformer("bert-base", 12, 768, 12, 128, 30522, positions=512, type_vocab=2,
                       pooler=True, predicted=20, micro=8, global_batch=65536,
                       source="Devlin et al. 2019, BERT-Base; Graphcore pretrain configs")


def bert_large() -> ModelSpec:
    """BERT-Large pretraining at sequence 128 as Graphcore's pretrain_large_128.json: 24
    layers, h 1024, 16 heads, 20 masked tokens predicted per sequence, micro-batch 8, global
    batch 65,536 (IPU_FACTS: 335.1 M parameters, 12,596,224 per encoder layer)."""
    return transformer("bert-large", 24, 1024, 16, 128, 30522, positions=512, type_vocab=2,
                       pooler=True, predicted=20, micro=8, global_batch=65536,
                       source="Devlin et al. 2019; graphcore/examples "
                       "nlp/bert/popart/configs/pretrain_large_128.json")


def gpt3_2_7b() -> ModelSpec:
    """GPT-3 2.7B (Brown et al. 2020, Table 2.1): 32 layers, h 2560, 32 heads, sequence 2048,
    vocab 50,257; micro-batch 1, global batch 512 (Brown et al.: 1 M tokens)."""
    return transformer("gpt3-2.7b", 32, 2560, 32, 2048, 50257, micro=1, global_batch=512,
                       source="Brown et al. 2020, Table 2.1; graphcore/examples nlp/gpt3_2.7B")


def gpt3_175b() -> ModelSpec:
    """GPT-3 175B (Brown et al. 2020): 96 layers, h 12,288, 96 heads, sequence 2048; as
    Graphcore's PopXL config: micro-batch 1, global batch 128 (IPU_FACTS: 174.6 B parameters,
    12h² + 13h per layer)."""
    return transformer("gpt3-175b", 96, 12288, 96, 2048, 50257, micro=1, global_batch=128,
                       source="Brown et al. 2020; graphcore/examples "
                       "nlp/gpt3_175B/popxl/config/pretraining.yml")


PRESETS = {"bert-base": bert_base, "bert-large": bert_large, "gpt3-2.7b": gpt3_2_7b,
           "gpt3-175b": gpt3_175b}


def from_dims(dims: dict) -> ModelSpec:
    """A transformer from a dict of dimensions (a JSON file's content): name, layers, hidden,
    heads, seq, vocab and optionally ffn, positions, type_vocab, pooler, predicted, micro,
    global_batch."""
    if not isinstance(dims, dict):
        raise PlanError(f"a model spec is a JSON object of transformer dimensions, not "
                        f"{type(dims).__name__}")
    need = ("layers", "hidden", "heads", "seq", "vocab")
    missing = [k for k in need if k not in dims]
    allowed = set(need) | {"name", "ffn", "positions", "type_vocab", "pooler", "predicted",
                           "micro", "global_batch", "source"}
    unknown = sorted(set(dims) - allowed)
    if missing or unknown:
        parts = ([f"missing {missing}"] if missing else []) + \
            ([f"unknown keys {unknown}"] if unknown else [])
        raise PlanError(f"model spec: {'; '.join(parts)} (a transformer needs "
                        f"{', '.join(need)})")
    return transformer(**{"name": "custom", **dims})


def _conv_block(layer, i: int, shape: tuple) -> tuple[Block, tuple]:
    c, hgt, wid = shape
    (kh, kw), (sh, sw), (ph, pw) = layer.kernel_size, layer.stride, layer.padding
    ho, wo = (hgt + 2 * ph - kh) // sh + 1, (wid + 2 * pw - kw) // sw + 1
    o, bias = layer.out_channels, int(bool(layer.bias))
    fan = c * kh * kw + bias
    out = (o, ho, wo)
    n_in, n_out = c * hgt * wid, o * ho * wo
    return Block(f"{i}.Conv2d", o * fan, o * fan, 2.0 * fan * n_out, n_in,
                 n_in + fan * ho * wo + n_out, n_out, "Conv2d", (c, o, kh, kw, ho, wo, bias)), out


def _block_of(layer, i: int, shape: tuple) -> tuple[Block, tuple]:
    """The block of one nn layer (read by class name and attributes) and its output shape."""
    kind = type(layer).__name__
    n_in = math.prod(shape)
    if kind == "Conv2d":
        return _conv_block(layer, i, shape)
    if kind == "Linear":
        fan = layer.in_features + int(bool(layer.bias))
        o = layer.out_features
        return Block(f"{i}.Linear", o * fan, o * fan, 2.0 * fan * o, n_in, n_in + o, o,
                     "Linear", (layer.in_features, o, int(bool(layer.bias)))), (o,)
    if kind in ("MaxPool2d", "AvgPool2d"):
        (kh, kw), (sh, sw), (ph, pw) = layer.kernel_size, layer.stride, layer.padding
        out = (shape[0], (shape[1] + 2 * ph - kh) // sh + 1, (shape[2] + 2 * pw - kw) // sw + 1)
        n_out = math.prod(out)
        return Block(f"{i}.{kind}", 0, 0, float(n_out * kh * kw), n_in, n_in + n_out, 0, kind,
                     (out[0], out[1], out[2], kh, kw)), out
    if kind == "Flatten":
        return Block(f"{i}.Flatten", 0, 0, 0.0, 0, 0, 0, kind, (n_in,)), (n_in,)
    if kind in ("ReLU", "Dropout"):
        return Block(f"{i}.{kind}", 0, 0, float(n_in), n_in, 2 * n_in, 0, kind, (n_in,)), shape
    raise PlanError(f"the planner does not know layer {i} ({kind}); it reads Conv2d, Linear, "
                    "MaxPool2d, AvgPool2d, ReLU, Dropout and Flatten")


def spec_from_model(model, sample_shape, name: str = "model", micro: int = 16,
                    global_batch: int | None = None) -> ModelSpec:
    """The spec of an nn.Sequential-like model (iterable of layers) for samples of
    sample_shape: one block per layer, read from its class name and attributes."""
    shape = tuple(int(s) for s in sample_shape)
    blocks = []
    for i, layer in enumerate(model):
        block, shape = _block_of(layer, i, shape)
        blocks.append(block)
    if not blocks:
        raise PlanError("spec_from_model: the model has no layers")
    return ModelSpec(name, tuple(blocks), None, "layers",
                     {"sample_shape": tuple(int(s) for s in sample_shape)}, micro,
                     global_batch or micro, "an ipulab.nn model")
