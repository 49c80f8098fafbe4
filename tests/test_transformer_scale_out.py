"""Tensor parallelism for transformers (nn/megatron.py: Megatron-LM's split, 1-D and PopXL's
2-D) with every other scale-out mechanism: each run trains as the one-IPU run of the same
model, data and optimizer does over 10 steps (losses and weights within fp32 rounding; fp16
runs against the one-IPU fp16 run), including the tiny published shape of Graphcore's PopXL
GPT-3 (hidden 64, 2 layers, 4 heads, sequence 8, vocabulary 128, TP 2x2 x DP 2) on a Pod16.
The profile shows one all-reduce per sublayer each way; the weights live on their shards."""
import numpy as np
import pytest

import ipulab
from ipulab import nn, plan, poplar
from ipulab.errors import ConfigError
from ipulab.nn.megatron import Megatron, layouts
from ipulab.nn.shards import view

V, S, D, H, F, B = 12, 6, 8, 4, 16, 4      # vocabulary, positions, width, heads, ff, batch
STEPS = 10
# Adam's, AdamW's and LAMB's eps is 1e-4 here: the gradient of the keys' bias (in_proj_bias
# [d:2d]) is exactly zero in exact arithmetic (a softmax does not see a shift of a row), so
# what any device computes for it is rounding noise, different for every order of summation,
# which eps = 1e-8 would scale into steps of the full lr; the other gradients are >> 1e-4.
OPTIMIZERS = {"sgd": dict(lr=0.1, momentum=0.9), "adam": dict(lr=0.01, eps=1e-4),
              "adamw": dict(lr=0.01, weight_decay=0.01, eps=1e-4),
              "lamb": dict(lr=0.02, eps=1e-4)}


def gpt(dropout=0.0, norm_first=True, activation="gelu", d=D, heads=H, ff=F, vocab=V,
        positions=S):
    return nn.Sequential(
        nn.Embedding(vocab, d), nn.PositionalEmbedding(positions, d),
        *[nn.TransformerEncoderLayer(d, heads, ff, dropout=dropout, activation=activation,
                                     norm_first=norm_first, causal=True) for _ in range(2)],
        nn.LayerNorm(d), nn.Linear(d, vocab))


def tokens(n, seed=0, vocab=V, positions=S):
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, (n, positions)), rng.integers(0, vocab, (n, positions))


def one_ipu():
    return ipulab.devices.ipu("bow", tiles_per_ipu=4)


def pod16():
    return ipulab.devices.pod(16, tiles_per_ipu=4)


def train(model, device, data, batch, **options):
    """(losses, weights, evaluation, trainer) of STEPS steps in order from the model's seed-0
    weights; the evaluation (its own program: no Dropout, micro-batched in a pipeline) of the
    first 8 sequences after them."""
    x, y = data
    model.reset_parameters(0)
    tr = nn.Trainer(model, device, batch_size=batch, seed=5, **options)
    h = tr.fit(x[:STEPS * batch * tr.replicas], y[:STEPS * batch * tr.replicas], shuffle=False)
    return np.array(h["loss"]), tr.get_weights(), tr.evaluate(x[:8], y[:8]), tr


@pytest.fixture(scope="module")
def data():
    return tokens(STEPS * B, 1)


@pytest.fixture(scope="module")
def reference(data):
    """The one-IPU runs, by optimizer and precision (built once for the module)."""
    runs = {}

    def get(optimizer, precision="fp32"):
        if (optimizer, precision) not in runs:
            runs[optimizer, precision] = train(gpt(), one_ipu(), data, B, precision=precision,
                                               optimizer=optimizer, **OPTIMIZERS[optimizer])[:3]
        return runs[optimizer, precision]
    return get


def close(run, ref, fp16=False):
    """The losses, every weight and the evaluation after as the one-IPU run's: within fp32
    rounding (its differences are the order in which partial sums are added), or half's in
    fp16."""
    (losses, weights, evaluation), (want_losses, want, want_evaluation) = run[:3], ref[:3]
    rtol = 3e-3 if fp16 else 2e-5
    np.testing.assert_allclose(losses, want_losses, rtol=rtol, atol=0)
    assert evaluation.loss == pytest.approx(want_evaluation.loss, rel=rtol)
    for key, w in want.items():
        scale = np.abs(w).max()
        np.testing.assert_allclose(weights[key], w, rtol=0, atol=(3e-2 if fp16 else 5e-5) * scale,
                                   err_msg=key)


GRID = {   # name: (tensor parallelism, replicas, optimizer, other options)
    "t2 sgd": (2, 1, "sgd", {}),
    "t4 adam": (4, 1, "adam", {}),
    "t2x2 adamw r2": ((2, 2), 2, "adamw", {}),
    "t1x4 lamb": ("1x4", 1, "lamb", {}),
    "t2 pipeline lamb": (2, 1, "lamb", dict(pipeline=[3], micro_batches=2)),
    "t2x2 pipeline recompute sgd": ("2x2", 1, "sgd", dict(pipeline=[3], micro_batches=2,
                                                         recompute=True)),
    "t2 rts r2 adam": (2, 2, "adam", dict(rts=True)),
    "t2x2 rts off-chip r2 lamb": ((2, 2), 2, "lamb", dict(rts=True, optimizer_state="off-chip")),
    "t4 off-chip sgd": (4, 1, "sgd", dict(optimizer_state="off-chip")),
    "t2 phases adamw": (2, 1, "adamw", dict(phases=2)),
    "t2x2 phases rts r2 sgd": ((2, 2), 2, "sgd", dict(phases=2, rts=True)),
    "t4 recompute r4 adam": (4, 4, "adam", dict(recompute=True)),
}


@pytest.mark.parametrize("name", list(GRID))
def test_tensor_parallel_trains_as_one_ipu(name, data, reference):
    t, r, optimizer, options = GRID[name]
    run = train(gpt(), pod16(), data, B // r, replicas=r, tensor_parallel=t,
                optimizer=optimizer, **OPTIMIZERS[optimizer], **options)
    close(run, reference(optimizer))


@pytest.mark.parametrize("t, optimizer", [(2, "adam"), ((2, 2), "sgd")], ids=["t2", "t2x2"])
def test_fp16_with_loss_scaling_trains_as_one_ipu(t, optimizer, data, reference):
    run = train(gpt(), pod16(), data, B, tensor_parallel=t, precision="fp16",
                recompute=True, optimizer=optimizer, **OPTIMIZERS[optimizer])
    close(run, reference(optimizer, "fp16"), fp16=True)


@pytest.mark.parametrize("t, arch", [(2, dict(norm_first=False, activation="relu")),
                                     ((2, 2), {})], ids=["t2 post-norm relu", "t2x2 gpt"])
def test_dropout_masks_are_the_one_ipu_runs(t, arch, data):
    """Dropout in attention, feed-forward and block outputs: drawn on the whole tensors the
    shards' pieces make, so the masks (and the training) are the one-IPU run's."""
    runs = [train(gpt(dropout=0.2, **arch), device, data, B, **OPTIMIZERS["sgd"], **kw)
            for device, kw in ((one_ipu(), {}), (pod16(), dict(tensor_parallel=t)))]
    close(runs[1], runs[0])
    no_dropout = train(gpt(**arch), one_ipu(), data, B, **OPTIMIZERS["sgd"])[0]
    assert np.abs(runs[0][0] - no_dropout).max() > 1e-3          # the masks do something


def test_the_tiny_popxl_gpt3_on_a_pod16():
    """GPT-3's PopXL "tiny" config: hidden 64, 2 layers, 4 heads, sequence 8, vocabulary 128,
    TP 2x2 x DP 2 (8 of a Pod16's IPUs), Adam: the one-IPU run's losses and weights."""
    model = (lambda: gpt(d=64, heads=4, ff=256, vocab=128, positions=8))
    data = tokens(STEPS * 4, 2, vocab=128, positions=8)
    options = dict(optimizer="adam", lr=1e-3, eps=1e-4)
    ref = train(model(), ipulab.devices.ipu("bow", tiles_per_ipu=8), data, 4, **options)
    run = train(model(), ipulab.devices.pod(16, tiles_per_ipu=8), data, 2, replicas=2,
                tensor_parallel="2x2", **options)
    close(run, ref)
    tr = run[3]
    assert tr.config.tensor_parallel == (2, 2) and tr.config.replica_ipus == 4
    m = plan.mapping_from_config(tr.config)
    assert (m.tensor_parallel, m.replicas, m.ipus) == ((2, 2), 2, 8)


# --- where the all-reduces are, and where the weights live ------------------------------------
def _all_reduces(profile, block: int) -> dict:
    """{(sublayer scope, pass): all-reduces} of layer `block` in a step's profile (each is a
    reduce-scatter exchange, an add and an all-gather exchange)."""
    out = {}
    for step in profile.steps:
        name = step.name
        if step.kind != "copy" or f"{block}.TransformerEncoderLayer/" not in name or \
                "/reduce_scatter" not in name:
            continue
        where = name.split(f"{block}.TransformerEncoderLayer/", 1)[1].split("/reduce_scatter")[0]
        key = ("backward" if "input_grad" in where or "grad/" in where else "forward", where)
        out[key] = out.get(key, 0) + 1
    return out


def test_one_all_reduce_per_sublayer_each_way(data):
    """1-D: out_proj's and linear2's outputs all-reduced over t1 forward, in_proj's and
    linear1's input gradients backward; 2-D adds the t2 ones PopXL has."""
    tr = train(gpt(), pod16(), data, B, tensor_parallel=2, lr=0.1)[3]
    for block in (2, 3):
        assert _all_reduces(tr.profile(), block) == {
            ("forward", "self_attn/out_proj/all_reduce/t1"): 1,
            ("forward", "linear2/all_reduce/t1"): 1,
            ("backward", "self_attn/in_proj/input_grad/all_reduce/t1"): 1,
            ("backward", "linear1/input_grad/all_reduce/t1"): 1}
    names = {s.name for s in tr.profile().steps if s.kind == "copy"}
    assert "0.Embedding/all_reduce/t1/reduce_scatter/copy 0" in names   # vocab-parallel
    tr = train(gpt(), pod16(), data, B, tensor_parallel=(2, 2), lr=0.1)[3]
    got = _all_reduces(tr.profile(), 2)
    assert sum(n for (way, _), n in got.items() if way == "forward") == 8
    assert sum(n for (way, _), n in got.items() if way == "backward") == 6
    assert got[("forward", "self_attn/in_proj/all_reduce/t2")] == 1
    assert got[("backward", "self_attn/out_proj/input_grad/all_reduce/t2")] == 1
    assert got[("forward", "norm1/mean/all_reduce/t2")] == 1


def test_weights_live_on_their_shards():
    """t = 2: shard i holds the q, k and v rows of heads 2i, 2i+1 of in_proj_weight, the
    input columns of out_proj.weight of those heads, its rows of linear1 and columns of
    linear2, its rows of the vocabulary; what every shard uses whole (LayerNorm,
    out_proj.bias, the position table) lives on the first IPU."""
    model, pod = gpt(), pod16()
    g = poplar.Graph(pod.target).create_virtual_graph(0, 2 * pod.target.tiles_per_ipu)
    split = Megatron(model, 2)

    def ipus(t):
        return set(np.unique(g.tiles_of(t) // pod.target.tiles_per_ipu).tolist())

    weights = {}
    for key, shape in model.param_shapes().items():
        index, name = key.split(".", 1)
        weights[key] = g.add_variable(poplar.FLOAT, list(shape), key)
        split.map_weight(g, model[int(index)], name, weights[key])
    for key in ("2.self_attn.in_proj_weight", "2.linear1.weight", "2.self_attn.out_proj.weight",
                "2.linear2.weight", "0.weight", "5.weight"):
        assert ipus(weights[key]) == {0, 1}, key
        lay = layouts(model[int(key[0])], 2, 1)[key.split(".", 1)[1]]
        for i in (0, 1):
            assert ipus(view(weights[key], lay, (i, 0))) == {i}, key
    w = weights["2.self_attn.in_proj_weight"]                  # heads 2, 3: their q, k, v
    assert ipus(poplar.concat([w[j * D + D // 2:(j + 1) * D] for j in range(3)])) == {1}
    assert ipus(weights["2.self_attn.out_proj.weight"][:, D // 2:]) == {1}
    for key in ("2.norm1.weight", "2.self_attn.out_proj.bias", "2.linear2.bias", "1.weight"):
        assert ipus(weights[key]) == {0}, key


# --- the configuration --------------------------------------------------------------------------
@pytest.mark.parametrize("given, value, grid", [
    (2, 2, (2, 1)), ("4", 4, (4, 1)), ((4, 1), 4, (4, 1)), ("2x2", (2, 2), (2, 2)),
    ([2, 4], (2, 4), (2, 4)), ("1X4", (1, 4), (1, 4))])
def test_tensor_parallel_forms(given, value, grid):
    c = nn.TrainConfig(tensor_parallel=given)
    assert c.tensor_parallel == value and c.tensor_parallel_grid == grid
    assert c.tensor_parallel_ipus == grid[0] * grid[1] == c.replica_ipus


@pytest.mark.parametrize("bad", [0, "2x", "x2", (2, 2, 2), (0, 2), True, 2.0, "two"])
def test_bad_tensor_parallel_is_one_config_error(bad):
    with pytest.raises(ConfigError, match="tensor_parallel must be an int >= 1, a pair"):
        nn.TrainConfig(tensor_parallel=bad)


def test_what_cannot_be_split_is_named():
    pod = pod16()
    with pytest.raises(ConfigError, match=r"layer 2 \(TransformerEncoderLayer\(8, 4, .*\)\) has "
                                          r"4 heads, which 8 does not divide"):
        nn.Trainer(gpt(), pod, tensor_parallel=8)
    with pytest.raises(ConfigError, match=r"3 heads, which 2 does not divide"):
        nn.Trainer(gpt(d=6, heads=3), pod, tensor_parallel="2x2")
    with pytest.raises(ConfigError, match=r"layer 0 \(Embedding\(3, 8\)\)'s weight \(3 wide\) "
                                          r"over 4 IPUs: too few to split"):
        nn.Trainer(gpt(vocab=3), pod, tensor_parallel=4)
    with pytest.raises(ConfigError, match=r"2-D \(t1 x t2\) for transformers only"):
        nn.Trainer(nn.default_cnn(), pod, tensor_parallel="2x2")
    with pytest.raises(ConfigError, match=r"layer 1 \(Conv2d"):
        nn.Trainer(nn.Sequential(nn.LayerNorm(8), nn.Conv2d(1, 2, 1)), pod, tensor_parallel=2)
    with pytest.raises(ConfigError, match=r"a replica needs t x p = 8"):
        nn.Trainer(gpt(), pod, replicas=4, tensor_parallel="2x2", pipeline=[3])
