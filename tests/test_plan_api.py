"""The planner's Python API and `ipulab plan` against nn.Trainer runs of the same configuration:
plan.spec_from_model, plan.mapping_from_config(trainer.config) and plan.estimate(spec,
device, mapping, global batch) say the bytes of the fullest IPU (the largest per-IPU sum of
profile.memory_total) and the step's seconds (profile.total_seconds) within 15 %."""
from __future__ import annotations

import json

import pytest

from ipulab import data, devices, nn, plan
from ipulab.cli import main
from ipulab.errors import PlanError

TOLERANCE = 0.15


def mlp(dropout: bool = False):
    layers = [nn.Flatten(), nn.Linear(64, 64), nn.ReLU()] + [nn.Dropout(0.25)] * dropout + \
        [nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)]
    return nn.Sequential(*layers)


def avg_cnn():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64, 10))


def simulated(model, device, **options):
    """A trainer that has run one step (on digits, or token ids for a model of tokens),
    and (bytes of its fullest IPU, its seconds)."""
    x, y, _, _ = data.sort_tokens() if model.takes_tokens else data.digits()
    trainer = nn.Trainer(model, device, **options)
    n = trainer.global_batch_size
    trainer.fit(x[:n], y[:n], shuffle=False)
    p = trainer.profile()
    return trainer, int(p.memory_total.reshape(p.num_ipus, -1).sum(axis=1).max()), \
        float(p.total_seconds)


def assert_close(got, want, what):
    assert abs(got / want - 1) <= TOLERANCE, f"{what}: planner {got:,} vs simulator {want:,}"


GRID = [
    ("cnn", lambda: devices.pod(16, tiles_per_ipu=16), dict(replicas=16, batch_size=8,
                                                             momentum=0.9, execution="phased")),
    ("cnn", lambda: devices.pod(16, tiles_per_ipu=16), dict(replicas=4, batch_size=16,
                                                             pipeline=[3, 6], micro_batches=4)),
    ("cnn", lambda: devices.pod(16, tiles_per_ipu=16), dict(replicas=8, batch_size=16,
                                                             pipeline=2, precision="fp16",
                                                             recompute=True)),
    ("avg", lambda: devices.pod(16, tiles_per_ipu=16), dict(replicas=8, batch_size=16,
                                                             tensor_parallel=2, momentum=0.9,
                                                             optimizer_state="off-chip")),
    ("mlp", lambda: devices.pod(16, tiles_per_ipu=16), dict(replicas=16, batch_size=16,
                                                             momentum=0.9, phases=2, rts=True,
                                                             precision="fp16")),
    ("dropout", lambda: devices.pod(16, tiles_per_ipu=16), dict(replicas=4, batch_size=32,
                                                                 pipeline=2, micro_batches=4)),
    ("mlp", lambda: devices.bow2000(tiles_per_ipu=8), dict(replicas=1, batch_size=32)),
    ("cnn", lambda: devices.pod(16, tiles_per_ipu=64), dict(replicas=4, batch_size=32,
                                                             tensor_parallel=4)),
    # the optimizers' updates as nn builds them: Adam, LAMB's norms (all-reduced under RTS)
    ("cnn", lambda: devices.pod(16, tiles_per_ipu=16), dict(replicas=16, batch_size=16,
                                                             optimizer="adam", lr=1e-3)),
    ("mlp", lambda: devices.pod(16, tiles_per_ipu=16), dict(replicas=16, batch_size=16,
                                                             optimizer="lamb", lr=1e-3)),
    ("mlp", lambda: devices.pod(16, tiles_per_ipu=16), dict(replicas=8, batch_size=16,
                                                             tensor_parallel=2, rts=True,
                                                             optimizer="adamw", lr=1e-3)),
    ("cnn", lambda: devices.pod(16, tiles_per_ipu=16), dict(replicas=16, batch_size=16,
                                                             optimizer="lamb", lr=1e-3,
                                                             rts=True, precision="fp16")),
]
MODELS = {"cnn": nn.default_cnn, "mlp": mlp, "dropout": lambda: mlp(True), "avg": avg_cnn}


@pytest.mark.parametrize("name, device, options", GRID,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(GRID)])
def test_estimate_of_a_trainers_run_agrees_with_its_profile(name, device, options):
    model = MODELS[name]()
    trainer, sim_bytes, sim_seconds = simulated(model, device(), **options)
    spec = plan.spec_from_model(model, (1, 8, 8))
    mapping = plan.mapping_from_config(trainer.config)
    e = plan.estimate(spec, trainer.device, mapping, trainer.global_batch_size)
    assert_close(e.peak_bytes_per_ipu, sim_bytes, "bytes of the fullest IPU")
    assert_close(e.step_seconds, sim_seconds, "seconds of a step")
    # the target the simulator was given is the same system
    again = plan.estimate(spec, trainer.device.target, mapping, trainer.global_batch_size)
    assert again.peak_bytes_per_ipu == e.peak_bytes_per_ipu
    assert again.sram_bytes == trainer.device.target.tiles_per_ipu * 638_976


def test_ipulab_plan_agrees_with_the_simulated_bow2000(capsys):
    """The issue's example: the course CNN on a full-size Bow-2000, 4 replicas, fp16."""
    assert main(["plan", "--model", "cnn", "--system", "bow2000", "--mapping", "r=4",
                 "--global-batch", "64", "--precision", "fp16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [m] = doc["mappings"]
    _, sim_bytes, sim_seconds = simulated(nn.default_cnn(), devices.bow2000(), replicas=4,
                                          batch_size=16, precision="fp16")
    assert_close(m["peak_bytes_per_ipu"], sim_bytes, "bytes of the fullest IPU")
    assert_close(m["step_seconds"], sim_seconds, "seconds of a step")
    assert (m["micro_batch_size"], m["micro_batches"]) == (16, 1)
    assert (m["micro_batch"], m["gradient_accumulation"]) == (16, 1)   # the old names too
    assert any("simulator" in a for a in m["assumptions"])
    assert set(m["memory_per_ipu"][0]) >= {"weights", "activations", "code", "vertex_state",
                                            "exchange_buffers", "constants"}


def test_mapping_from_config_follows_nn():
    model = nn.default_cnn()
    cfg = nn.TrainConfig(replicas=4, batch_size=16, pipeline=[3, 6], micro_batches=4)
    m = plan.mapping_from_config(cfg)
    assert (m.pipeline, m.stage_starts, m.micro_batch_size, m.micro_batches) == \
        (3, (3, 6), 4, 4)
    spec = plan.spec_from_model(model, (1, 8, 8))
    r = m.resolve(spec, 16)               # 12 of 16 IPUs, 3 stages: a run, not a plan
    assert r.layers_per_stage == (3, 3, 2)
    cfg = nn.TrainConfig(replicas=2, batch_size=16, pipeline=3, micro_batches=4)
    cuts = cfg.cuts(model, (1, 8, 8))
    r = plan.mapping_from_config(cfg).resolve(spec, 16)
    assert list(r.layers_per_stage) == [b - a for a, b in zip([0, *cuts], [*cuts, 8])]
    phased = plan.mapping_from_config(nn.TrainConfig(replicas=2, execution="phased"))
    assert phased.resolve(spec, 2).phases == 3            # one per layer with weights
    spans = nn.TrainConfig(phases=2).phase_spans(model)
    assert plan.mapping_from_config(nn.TrainConfig(phases=2)).resolve(spec, 1) \
        .layers_per_phase == tuple(hi - lo for lo, hi in spans)
    with pytest.raises(PlanError, match="resolved config"):
        plan.mapping_from_config(nn.TrainConfig(replicas=None))


def test_three_words_for_the_batch():
    m = plan.parse_mapping("p=2,r=2,micro=4,ga=8")
    assert (m.micro_batch_size, m.micro_batches) == (4, 8)
    assert plan.parse_mapping("micro_batch_size=4,micro_batches=8") == \
        plan.parse_mapping("micro=4,ga=8")
    assert (m.micro, m.ga) == (4, 8)                      # the old names still read
    assert plan.make_mapping(micro=2, ga=3).micro_batches == 3
    spec = plan.transformer("x", 2, 64, 2, 8, 10, micro_batch_size=4)
    assert spec.micro_batch_size == spec.micro == 4
    assert plan.ModelSpec("old", spec.blocks, micro=2).micro_batch_size == 2


def test_one_description_of_a_run():
    cfg = nn.TrainConfig(replicas=4, batch_size=16, precision="fp16", momentum=0.9)
    assert plan.describe_run(cfg, "words") == "4 replicas x batch 16, fp16"
    assert plan.describe_run(cfg, "marker") == "4×16 fp16"
    assert plan.describe_run(cfg) == \
        "t 1 · p 1 · r 4 · batch 16 · fp16 · sgd+momentum · state on-chip"
    piped = cfg.replace(replicas=2, pipeline=[3, 6], micro_batches=4, tensor_parallel=2,
                        recompute=True)
    assert plan.describe_run(piped, "words") == \
        "2 replicas x batch 16, fp16, t 2, 3 stages, 4 micro-batches, recompute"
    m = plan.parse_mapping("t=8x8,r=4,rts,phases=96,state=off-chip", optimizer="adamw")
    assert plan.describe_run(m) == m.label() == \
        "t 8x8 · p 1 · r 4 · fp16 · adamw · recompute · rts · phases 96 · state off-chip"
    with pytest.raises(PlanError, match="style"):
        plan.describe_run(m, "poem")


def test_full_scale_names_its_assumptions_and_adamw_is_adam_sized(capsys):
    gpt = plan.gpt3_2_7b()
    adam = plan.estimate(gpt, "pod64", plan.parse_mapping("t=4,r=16", optimizer="adam"))
    adamw = plan.estimate(gpt, "pod64", plan.parse_mapping("t=4,r=16", optimizer="adamw"))
    assert adam.memory == adamw.memory
    assert any("64 KiB per tile" in a for a in adam.assumptions)
    assert main(["plan", "--model", "gpt3-2.7b", "--system", "pod64", "--optimizer", "adamw",
                 "--mapping", "t=4,r=16"]) == 0
    out = capsys.readouterr().out
    assert "64 KiB per tile, assumed" in out and "adamw" in out


def test_an_unknown_layer_is_named():
    class Square(nn.Layer):
        pass
    with pytest.raises(PlanError, match="layer 1 .Square."):
        plan.spec_from_model(nn.Sequential(nn.Flatten(), Square()), (1, 8, 8))


def test_misuse_is_one_plan_error():
    with pytest.raises(PlanError, match="shape .1, 4, 4.*Linear"):
        plan.spec_from_model(mlp(), (1, 4, 4))
    with pytest.raises(PlanError, match="nn.TrainConfig"):
        plan.mapping_from_config({"replicas": 2})
    with pytest.raises(PlanError, match="no layers"):
        plan.spec_from_model([], (1, 8, 8))


# --- transformers ------------------------------------------------------------------------------
def gpt(norm_first: bool = True, dropout: float = 0.0, activation: str = "gelu",
        causal: bool = True, ffn: int = 256):
    blocks = [nn.TransformerEncoderLayer(64, 4, ffn, dropout=dropout, activation=activation,
                                         norm_first=norm_first, causal=causal)
              for _ in range(2)]
    return nn.Sequential(nn.Embedding(64, 64), nn.PositionalEmbedding(32, 64), *blocks,
                         nn.LayerNorm(64), nn.Linear(64, 64))


GPT_GRID = [
    (nn.small_gpt, lambda: devices.ipu("bow", tiles_per_ipu=64), dict(batch_size=8)),
    (nn.small_gpt, lambda: devices.bow2000(), dict(replicas=4, batch_size=8,
                                                   precision="fp16")),
    (nn.small_gpt, lambda: devices.pod(16, tiles_per_ipu=32), dict(replicas=4, batch_size=8)),
    (nn.small_gpt, lambda: devices.pod(16, tiles_per_ipu=32),
     dict(replicas=2, batch_size=8, pipeline=2, micro_batches=4)),
    (lambda: gpt(norm_first=False, dropout=0.1), lambda: devices.ipu("bow", tiles_per_ipu=64),
     dict(batch_size=8, optimizer="adamw", lr=1e-3)),
    (lambda: gpt(activation="relu", causal=False, ffn=128),
     lambda: devices.bow2000(tiles_per_ipu=64), dict(replicas=1, batch_size=8, momentum=0.9,
                                                      optimizer_state="off-chip")),
    # Megatron's tensor parallelism (nn/megatron.py): heads and feed-forward over t IPUs,
    # the vocabulary split, with replicas and RTS; over a Bow-2000 in a pipeline, fp16
    (nn.small_gpt, lambda: devices.pod(16, tiles_per_ipu=32),
     dict(replicas=4, batch_size=8, tensor_parallel=4, momentum=0.9, rts=True)),
    (nn.small_gpt, lambda: devices.bow2000(tiles_per_ipu=32),
     dict(replicas=1, batch_size=8, tensor_parallel=2, pipeline=2, micro_batches=4,
          precision="fp16")),
    (nn.small_gpt, lambda: devices.pod(16, tiles_per_ipu=32),
     dict(replicas=4, batch_size=4, tensor_parallel="2x2", optimizer="adam", lr=1e-3)),
]


@pytest.mark.parametrize("make, device, options", GPT_GRID,
                         ids=[f"gpt-{i}" for i in range(len(GPT_GRID))])
def test_estimate_of_a_transformer_run_agrees_with_its_profile(make, device, options):
    """One IPU, a Bow-2000 in fp16, replicas spread over 4 IPUs, a pipeline, post-norm with
    Dropout and AdamW, ReLU without the causal mask, a replica over a whole Bow-2000, and
    tensor parallelism (t = 4 with RTS; t = 2 in a pipeline; 2-D 2x2 with Adam)."""
    model = make()
    trainer, sim_bytes, sim_seconds = simulated(model, device(), **options)
    spec = plan.spec_from_model(model, (32,))
    e = plan.estimate(spec, trainer.device, plan.mapping_from_config(trainer.config),
                      trainer.global_batch_size)
    assert_close(e.peak_bytes_per_ipu, sim_bytes, "bytes of the fullest IPU")
    assert_close(e.step_seconds, sim_seconds, "seconds of a step")


def test_ipulab_plan_gpt_agrees_with_the_simulated_ipu(capsys):
    """`ipulab plan --model gpt` on one full-size Bow IPU, as the course's run (batch 16)."""
    assert main(["plan", "--model", "gpt", "--system", "ipu", "--mapping", "r=1",
                 "--global-batch", "16", "--precision", "fp32", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [m] = doc["mappings"]
    assert doc["model"] == "gpt" and doc["parameters"] == nn.small_gpt().num_parameters()
    _, sim_bytes, sim_seconds = simulated(nn.small_gpt(), devices.ipu("bow"),
                                                 batch_size=16)
    assert_close(m["peak_bytes_per_ipu"], sim_bytes, "bytes of the fullest IPU")
    assert_close(m["step_seconds"], sim_seconds, "seconds of a step")
    assert any("simulator" in a for a in m["assumptions"])
    assert main(["plan", "--model", "small-gpt", "--system", "ipu", "--mapping", "r=1",
                 "--global-batch", "16", "--precision", "fp32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mappings"][0]["peak_bytes_per_ipu"] == \
        m["peak_bytes_per_ipu"]


def test_a_transformer_is_read_through_its_layers_cost_classes():
    from ipulab.plan import layers
    from ipulab.plan.transformer import EncoderLayer
    spec = plan.spec_from_model(nn.small_gpt(), (32,))
    kinds = [type(b).__name__ for b in spec.blocks]
    assert kinds == ["Embedding", "PositionalEmbedding", "EncoderLayer", "EncoderLayer",
                     "LayerNorm", "TokenLinear"]
    assert spec.parameters == nn.small_gpt().num_parameters()
    assert spec.loss.positions == 32 and spec.loss.classes == 64
    assert {nn.Embedding, nn.PositionalEmbedding, nn.LayerNorm, nn.GELU,
            nn.MultiheadAttention, nn.TransformerEncoderLayer} <= set(layers.kinds())
    # the presets' encoder layers are the class nn's layers map to
    assert isinstance(plan.bert_large().blocks[0], EncoderLayer)
    attention = plan.spec_from_model(nn.Sequential(nn.Embedding(10, 8),
                                                   nn.MultiheadAttention(8, 2, causal=True),
                                                   nn.GELU(), nn.Linear(8, 10)), (4,))
    assert [type(b).__name__ for b in attention.blocks] == \
        ["Embedding", "MultiheadAttention", "GELU", "TokenLinear"]


def test_transformer_tensor_parallelism_at_small_scale():
    """t is priced as nn builds it: shard 0 holds a quarter of the matrices over 4 IPUs, 1-D
    or 2-D; 1-D keeps the norms, the row-parallel biases and the position table whole on it,
    2-D half of them (t2 = 2 splits the hidden dimension)."""
    spec = plan.spec_from_model(nn.small_gpt(), (32,))
    pod = devices.pod(16, tiles_per_ipu=32)
    one, four, grid = (plan.estimate(spec, pod, plan.make_mapping(
        tensor_parallel=t, replicas=16 // (t[0] * t[1]), micro_batch_size=4, strict=False),
        64 // (t[0] * t[1])) for t in ((1, 1), (4, 1), (2, 2)))
    weights = [e.memory[0]["kinds"]["weights"] for e in (one, four, grid)]
    assert weights[1] < weights[0] / 2 and weights[2] < weights[1]
    assert four.peak_bytes_per_ipu < one.peak_bytes_per_ipu
    assert any("shard 0" in a for a in four.assumptions)
    assert not any("shard 0" in a for a in one.assumptions)
    with pytest.raises(PlanError, match="t1 = 8 does not divide"):
        plan.estimate(spec, pod, plan.make_mapping(tensor_parallel=(8, 1), replicas=2,
                                                   micro_batch_size=4, strict=False), 8)
    with pytest.raises(PlanError, match="convolutions and pooling"):
        plan.spec_from_model(nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Flatten(),
                                           nn.LayerNorm(128), nn.Linear(128, 10)), (1, 8, 8))
