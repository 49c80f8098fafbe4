"""The transformer presets, built from the cost classes nn's layers map to (tokens.py,
transformer.py): BERT-Base, BERT-Large, GPT-3 2.7B and 175B, or any stack of identical encoder
layers.

    plan.transformer("mine", layers=4, hidden=256, heads=4, seq=128, vocab=1000)
    plan.bert_large().parameters            # 335,141,888 (Devlin et al.: "340M")

The embeddings and the tied head are the extra block of a preset's first stage ("embedding on
IPU 0", Graphcore's pretrain_large_128.json; docs/machine.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PlanError
from .layers import Block, linear_cost
from .tokens import Embedding, LayerNorm, PositionalEmbedding
from .transformer import EncoderLayer


@dataclass(frozen=True)
class Composite(Block):
    """A block made of layers (their costs in `parts`): its counts are their sums, its
    activations the block's own (Korthikanti et al.)."""

    parts: tuple = ()


def _sum(name: str, parts: list, keep: int, live: int, reduce: int = 0) -> Composite:
    return Composite(name, sum(p.params for p in parts), max(p.largest for p in parts),
                     sum(p.flops for p in parts), keep, live, reduce, tuple(parts))


def encoder_layer(h: int, heads: int, ffn: int, s: int) -> EncoderLayer:
    """One encoder layer of a preset (GELU, post-norm as BERT; its counts do not depend on
    where the norms are)."""
    return EncoderLayer.of(h, heads, ffn, s)


def embeddings(h: int, s: int, vocab: int, positions: int, type_vocab: int, predicted: int,
               pooler: bool) -> Composite:
    """Token, position and type embeddings with their LayerNorm, the head tied to the token
    table (predicted tokens × vocab logits) and BERT's pooler."""
    parts = [Embedding.of(vocab, h, s), PositionalEmbedding.of(positions, h, s),
             Embedding.of(type_vocab, h, s, name="types"), LayerNorm.of(h, s),
             Block("head", 0, 0, 2.0 * h * vocab * predicted, 0, 0)]
    if pooler:
        parts.append(linear_cost("pooler", h, h))
    return _sum("embeddings", parts, s * h, predicted * vocab + s * h)


def _positive(dims: dict, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"model spec {dims.get('name', '')!r}: {name} must be a positive "
                        f"integer, not {value!r}")
    return value


def transformer(name: str, layers: int, hidden: int, heads: int, seq: int, vocab: int,
                ffn: int | None = None, positions: int | None = None, type_vocab: int = 0,
                pooler: bool = False, predicted: int | None = None, micro_batch_size: int = 1,
                global_batch: int = 1, source: str = ""):
    """A transformer of `layers` identical encoder layers (hidden h, heads a, feed-forward
    f = 4h by default, sequence s) and its embeddings and tied head as the extra block."""
    from .spec import ModelSpec
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
    layer = encoder_layer(hidden, heads, ffn, seq)
    extra = embeddings(hidden, seq, vocab, positions, type_vocab, predicted, pooler)
    dims.update(ffn=ffn, positions=positions, type_vocab=type_vocab, predicted=predicted)
    return ModelSpec(name, tuple(layer for _ in range(layers)), extra, "transformer", dims,
                     micro_batch_size, global_batch, source)


def bert_base():
    """BERT-Base (Devlin et al. 2019): 12 layers, h 768, 12 heads, vocab 30,522, 512
    positions, 2 token types, pooler; pretraining at sequence 128 (110 M parameters)."""
    return transformer("bert-base", 12, 768, 12, 128, 30522, positions=512, type_vocab=2,
                       pooler=True, predicted=20, micro_batch_size=8, global_batch=65536,
                       source="Devlin et al. 2019, BERT-Base; Graphcore pretrain configs")


def bert_large():
    """BERT-Large pretraining at sequence 128 as Graphcore's pretrain_large_128.json: 24
    layers, h 1024, 16 heads, 20 masked tokens predicted per sequence, micro-batch 8, global
    batch 65,536 (335.1 M parameters, 12,596,224 per encoder layer; published as "340M")."""
    return transformer("bert-large", 24, 1024, 16, 128, 30522, positions=512, type_vocab=2,
                       pooler=True, predicted=20, micro_batch_size=8, global_batch=65536,
                       source="Devlin et al. 2019; graphcore/examples "
                       "nlp/bert/popart/configs/pretrain_large_128.json")


def gpt3_2_7b():
    """GPT-3 2.7B (Brown et al. 2020, Table 2.1): 32 layers, h 2560, 32 heads, sequence 2048,
    vocab 50,257; micro-batch 1, global batch 512 (Brown et al.: 1 M tokens)."""
    return transformer("gpt3-2.7b", 32, 2560, 32, 2048, 50257, micro_batch_size=1,
                       global_batch=512,
                       source="Brown et al. 2020, Table 2.1; graphcore/examples nlp/gpt3_2.7B")


def gpt3_175b():
    """GPT-3 175B (Brown et al. 2020): 96 layers, h 12,288, 96 heads, sequence 2048; as
    Graphcore's PopXL config: micro-batch 1, global batch 128 (174.6 B parameters,
    12h² + 13h per layer)."""
    return transformer("gpt3-175b", 96, 12288, 96, 2048, 50257, micro_batch_size=1,
                       global_batch=128,
                       source="Brown et al. 2020; graphcore/examples "
                       "nlp/gpt3_175B/popxl/config/pretraining.yml")


PRESETS = {"bert-base": bert_base, "bert-large": bert_large, "gpt3-2.7b": gpt3_2_7b,
           "gpt3-175b": gpt3_175b}
