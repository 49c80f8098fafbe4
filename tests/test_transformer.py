"""ipulab.nn's transformer layers against PyTorch, loaded from the same state_dict: the keys,
a 2-layer model's logits and gradients, ten SGD steps of losses and weights; the Trainer on
token ids (loss and accuracy per token, predictions per position); recompute, fp16, replicas
and Dropout; the misuse errors."""
import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from transformer_reference import Positional, device_step, gpt, torch_step, torch_weights

import ipulab
from ipulab import nn, poplar
from ipulab.errors import ConfigError, DataError, GraphError

V, S, D, H, F, B = 11, 6, 8, 2, 16, 4           # a tiny GPT: vocabulary, positions, ...
ARCHS = {"gpt (pre-norm, gelu, causal)": dict(norm_first=True, activation="gelu", causal=True),
         "torch's default (post-norm, relu)": dict(norm_first=False, activation="relu",
                                                   causal=False),
         "post-norm, gelu, causal": dict(norm_first=False, activation="gelu", causal=True)}


@pytest.fixture(scope="module")
def dev():
    return ipulab.devices.ipu("bow", tiles_per_ipu=16)


def tokens(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, V, (n, S)), rng.integers(0, V, (n, S))


def twins(seed=0, **arch):
    torch.manual_seed(seed)
    ours, theirs = gpt(V, S, D, H, F, **arch)
    ours.load_state_dict(torch_weights(theirs))
    return ours, theirs


# --- the layers are PyTorch's ------------------------------------------------------------------
def test_state_dict_keys_and_shapes_are_torch_sequential():
    ours, theirs = gpt(V, S, D, H, F)
    assert ours.param_shapes() == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert "2.self_attn.in_proj_weight" in ours.param_shapes()
    assert ours.param_shapes()["2.self_attn.in_proj_weight"] == (3 * D, D)
    # our own initial weights load into torch as they are
    theirs.load_state_dict({k: torch.tensor(v) for k, v in ours.state_dict().items()})


@pytest.mark.parametrize("arch", list(ARCHS))
def test_logits_and_gradients_equal_torch(dev, arch):
    ours, theirs = twins(**ARCHS[arch])
    x, y = tokens(B)
    logits, loss, grads = device_step(ours, ours.state_dict(), x, y, dev)
    want_logits, want_loss, want_grads = torch_step(theirs, x, y)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=2e-6)
    assert loss == pytest.approx(want_loss, rel=1e-6)
    assert list(grads) == list(want_grads)
    for key, want in want_grads.items():
        np.testing.assert_allclose(grads[key], want, rtol=1e-4, atol=1e-6 * np.abs(want).max(),
                                   err_msg=key)


@settings(max_examples=4, deadline=None)
@given(vocab=st.integers(2, 9), positions=st.integers(1, 5), heads=st.integers(1, 3),
       per_head=st.integers(2, 3), ffn=st.integers(1, 6), batch=st.integers(1, 3),
       arch=st.sampled_from(list(ARCHS)), seed=st.integers(0, 2 ** 16))
@example(vocab=2, positions=2, heads=1, per_head=2, ffn=4, batch=1,
         arch="gpt (pre-norm, gelu, causal)", seed=12752)     # gradients that nearly cancel
def test_any_small_block_equals_torch(dev, vocab, positions, heads, per_head, ffn, batch, arch,
                                      seed):
    torch.manual_seed(seed)
    d = heads * per_head
    ours, theirs = gpt(vocab, positions, d, heads, ffn, layers=1, **ARCHS[arch])
    rng = np.random.default_rng(seed)
    x, y = (rng.integers(0, vocab, (batch, positions)) for _ in range(2))
    logits, loss, grads = device_step(ours, torch_weights(theirs), x, y, dev)
    want_logits, want_loss, want_grads = torch_step(theirs, x, y)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=5e-6)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    # per_head >= 2: a layer norm of one feature is exactly 0, which torch rounds to ~1e-5;
    # a gradient that sums terms of the largest's size to nearly 0 (the position table's, of
    # two tokens) keeps their fp32 rounding: 2e-5 of the largest (seen: 1.1e-5)
    largest = max(np.abs(g).max() for g in want_grads.values())
    for key, want in want_grads.items():
        np.testing.assert_allclose(grads[key], want, rtol=1e-4, atol=2e-5 * largest,
                                   err_msg=key)


def test_fp16_logits_and_gradients_are_close_to_torch(dev):
    ours, theirs = twins(**ARCHS["gpt (pre-norm, gelu, causal)"])
    x, y = tokens(B)
    logits, loss, grads = device_step(ours, ours.state_dict(), x, y, dev, poplar.HALF)
    want_logits, want_loss, want_grads = torch_step(theirs, x, y)
    np.testing.assert_allclose(logits, want_logits, atol=0.03)
    assert loss == pytest.approx(want_loss, rel=5e-3)
    for key, want in want_grads.items():
        assert np.abs(grads[key] - want).max() <= 0.05 * np.abs(want).max() + 1e-4, key


def test_standalone_layers_in_a_sequential_equal_torch(dev):
    """MultiheadAttention, LayerNorm and GELU as layers of their own, Linear on [B, S, d]."""
    ours = nn.Sequential(nn.Embedding(V, D), nn.MultiheadAttention(D, H, causal=True),
                         nn.LayerNorm(D, eps=1e-3), nn.GELU(), nn.Linear(D, V))

    class Attention(torch.nn.MultiheadAttention):
        def forward(self, x):
            mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])
            return super().forward(x, x, x, attn_mask=mask, need_weights=False,
                                   is_causal=True)[0]

    torch.manual_seed(1)
    theirs = torch.nn.Sequential(torch.nn.Embedding(V, D), Attention(D, H, batch_first=True),
                                 torch.nn.LayerNorm(D, eps=1e-3), torch.nn.GELU(),
                                 torch.nn.Linear(D, V))
    with torch.no_grad():
        for p in theirs.parameters():       # out_proj.bias and in_proj_bias start at zero
            p.add_(0.1 * torch.randn_like(p))
    assert ours.param_shapes() == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    x, y = tokens(B, 1)
    logits, loss, grads = device_step(ours, torch_weights(theirs), x, y, dev)
    want_logits, want_loss, want_grads = torch_step(theirs, x, y)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=2e-6)
    for key, want in want_grads.items():
        np.testing.assert_allclose(grads[key], want, rtol=1e-4, atol=1e-6 * np.abs(want).max(),
                                   err_msg=key)


# --- training -------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["gpt (pre-norm, gelu, causal)",
                                  "torch's default (post-norm, relu)"])
def test_ten_sgd_steps_equal_torch(dev, arch):
    ours, theirs = twins(2, **ARCHS[arch])
    x, y = tokens(10 * B, 2)
    tr = nn.Trainer(ours, dev, batch_size=B, lr=0.2, momentum=0.9)
    history = tr.fit(x, y, shuffle=False)
    opt = torch.optim.SGD(theirs.parameters(), lr=0.2, momentum=0.9)
    losses = []
    for s in range(10):
        _, loss, _ = torch_step(theirs, x[s * B:(s + 1) * B], y[s * B:(s + 1) * B])
        opt.step()
        losses.append(loss)
    np.testing.assert_allclose(history["loss"], losses, rtol=2e-5)
    want = torch_weights(theirs)
    for key, w in tr.get_weights().items():
        np.testing.assert_allclose(w, want[key], rtol=1e-4, atol=2e-5, err_msg=key)


def test_trainer_counts_loss_and_accuracy_per_token(dev):
    ours, theirs = twins(3)
    x, y = tokens(3 * B, 3)
    tr = nn.Trainer(ours, dev, batch_size=B, lr=0.1)
    weights = tr.get_weights()
    pred = tr.predict(x)
    logits = theirs(torch.as_tensor(x)).detach().numpy()
    assert pred.shape == (3 * B, S) and pred.dtype == np.int64
    assert np.array_equal(pred, logits.argmax(-1))
    ev = tr.evaluate(x[:10], y[:10])                          # a padded last batch
    assert ev.accuracy == pytest.approx((pred[:10] == y[:10]).mean())
    want_loss = torch.nn.functional.cross_entropy(
        torch.as_tensor(logits[:10]).reshape(-1, V), torch.as_tensor(y[:10]).reshape(-1))
    assert ev.loss == pytest.approx(want_loss.item(), rel=1e-5)
    h = tr.fit(x, y, shuffle=False)
    assert len(h["loss"]) == 3
    first = (pred[:B] == y[:B]).mean()                  # the first step's batch, before it
    assert h["accuracy"][0] == pytest.approx(first)
    assert tr.get_weights().keys() == weights.keys()


@pytest.mark.parametrize("change", [dict(recompute=True), dict(precision="fp16"),
                                    dict(precision="fp16", recompute=True)])
def test_recompute_and_fp16_train_the_same(dev, change):
    x, y = tokens(4 * B, 4)
    runs = []
    for options in ({}, change):
        ours, _ = twins(4)
        tr = nn.Trainer(ours, dev, batch_size=B, lr=0.1, momentum=0.9, **options)
        runs.append((tr.fit(x, y, shuffle=False)["loss"], tr.get_weights()))
    (base, wb), (other, wo) = runs
    if change == dict(recompute=True):            # the same operations again: the same bits
        assert base == other
        assert all(np.array_equal(wb[k], wo[k]) for k in wb)
    else:
        np.testing.assert_allclose(other, base, rtol=3e-3)
        assert max(np.abs(wb[k] - wo[k]).max() for k in wb) < 2e-3


@pytest.mark.parametrize("precision, rtol", [("fp32", 1e-5), ("fp16", 2e-3)])
def test_replicas_train_as_one_batch(precision, rtol):
    """2 replicas x 2 sequences = 1 replica x 4: the gradient all-reduce over IPU-Links."""
    x, y = tokens(4 * B, 5)
    runs = []
    for replicas, device in ((1, ipulab.devices.ipu("bow", tiles_per_ipu=16)),
                             (2, ipulab.devices.system("bow2000", 16))):
        ours, _ = twins(5)
        tr = nn.Trainer(ours, device, replicas=replicas, batch_size=B // replicas, lr=0.1,
                        momentum=0.9, precision=precision, recompute=precision == "fp16")
        runs.append((tr.fit(x, y, shuffle=False), tr.get_weights()))
    (h1, w1), (h2, w2) = runs
    np.testing.assert_allclose(h2["loss"], h1["loss"], rtol=rtol)
    for k in w1:
        np.testing.assert_allclose(w2[k], w1[k], rtol=100 * rtol, atol=rtol / 10, err_msg=k)


@pytest.mark.parametrize("options", [
    dict(replicas=1, pipeline=[3], micro_batches=2),              # layers 0-2 | 3-5
    dict(replicas=2, rts=True, momentum=0.9),
    dict(replicas=1, phases=2, momentum=0.9),
    dict(replicas=1, optimizer_state="off-chip", momentum=0.9),
], ids=["pipeline", "rts", "phases", "off-chip state"])
def test_scale_out_by_layers_trains_as_one_ipu(options):
    """What splits by layers or weights already takes a transformer: the same losses and
    weights as one IPU (to fp32 rounding)."""
    x, y = tokens(4 * B, 9)
    runs = []
    for device, kw in ((ipulab.devices.ipu("bow", tiles_per_ipu=16),
                        dict(momentum=options.get("momentum", 0.0))),
                       (ipulab.devices.system("bow2000", 16), options)):
        ours, _ = twins(9)
        batch = B // kw.get("replicas", 1)
        tr = nn.Trainer(ours, device, batch_size=batch, lr=0.1, **kw)
        runs.append((tr.fit(x, y, shuffle=False)["loss"], tr.get_weights()))
    (l1, w1), (l2, w2) = runs
    np.testing.assert_allclose(l2, l1, rtol=1e-5)
    for k in w1:
        np.testing.assert_allclose(w2[k], w1[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_dropout_draws_masks_in_training_only(dev):
    x, y = tokens(2 * B, 6)
    ours, _ = twins(6, dropout=0.2)
    plain, _ = twins(6)
    tr = nn.Trainer(ours, dev, batch_size=B, lr=0.1, seed=7)
    ref = nn.Trainer(plain, dev, batch_size=B, lr=0.1, seed=7)
    assert tr.evaluate(x, y) == ref.evaluate(x, y)       # no Dropout in evaluation
    assert tr.fit(x, y, shuffle=False)["loss"] != ref.fit(x, y, shuffle=False)["loss"]
    again, _ = twins(6, dropout=0.2)
    assert nn.Trainer(again, dev, batch_size=B, lr=0.1, seed=7).fit(
        x, y, shuffle=False)["loss"] == tr.history["loss"]            # repeatable


def test_small_gpt_is_the_course_shape():
    m = nn.small_gpt()
    assert len(m) == 6 and m.takes_tokens
    assert m.shapes((32,))[-1] == (32, 64)
    assert m.num_parameters() == 64 * 64 + 32 * 64 + 2 * (
        4 * 64 * 64 + 4 * 64 + 2 * 64 * 256 + 256 + 64 + 4 * 64) + 2 * 64 + 64 * 64 + 64
    assert "causal=True" in repr(m) and "norm_first=True" in repr(m)


def test_sort_tokens_is_sorting_as_next_token_prediction():
    x, y, xt, yt = ipulab.data.sort_tokens(n_train=20, n_test=5, length=4, values=3, vocab=8)
    assert x.shape == y.shape == (20, 8) and xt.shape == (5, 8)
    q = x[:, :4]
    assert (x[:, 4] == 7).all() and (q < 3).all()
    assert np.array_equal(y[:, :4], q) and np.array_equal(y[:, 4:], np.sort(q, 1))
    assert np.array_equal(x[:, 5:], y[:, 4:7])                 # the answer, one late
    again = ipulab.data.sort_tokens(n_train=20, n_test=5, length=4, values=3, vocab=8)
    assert all(np.array_equal(a, b) for a, b in zip((x, y, xt, yt), again))
    with pytest.raises(DataError, match="vocab must be an int >= 4"):
        ipulab.data.sort_tokens(values=3, vocab=3)


# --- misuse ---------------------------------------------------------------------------------
@pytest.mark.parametrize("make, message", [
    (lambda: nn.TransformerEncoderLayer(64, 5), r"TransformerEncoderLayer: nhead=5 must divide "
                                                r"d_model=64"),
    (lambda: nn.MultiheadAttention(10, 3), "MultiheadAttention: num_heads=3 must divide "
                                           "embed_dim=10"),
    (lambda: nn.TransformerEncoderLayer(8, 2, activation="tanh"), "activation must be"),
    (lambda: nn.TransformerEncoderLayer(8, 2, dropout=1.5), "dropout must be a probability"),
    (lambda: nn.Embedding(0, 4), "num_embeddings must be a positive int"),
    (lambda: nn.LayerNorm(4, eps=-1), "eps must be a positive number"),
])
def test_bad_layer_arguments_are_named(make, message):
    with pytest.raises(GraphError, match=message):
        make()


@pytest.mark.parametrize("model, message", [
    (lambda: nn.Sequential(nn.Embedding(V, D), nn.PositionalEmbedding(S - 1, D)),
     r"layer 1: PositionalEmbedding\(5, 8\) takes samples of shape \(positions <= 5, 8\)"),
    (lambda: nn.Sequential(nn.Embedding(V, D), nn.LayerNorm(D + 1)),
     r"layer 1: LayerNorm\(\(9,\), eps=1e-05\) takes samples whose last dimension is 9"),
    (lambda: nn.Sequential(nn.Embedding(V, D), nn.TransformerEncoderLayer(2 * D, H)),
     r"layer 1: TransformerEncoderLayer\(16, 2, .*\) takes samples of shape \(positions, 16\)"),
    (lambda: nn.Sequential(nn.Embedding(V, D), nn.Linear(D + 1, V)),
     "takes samples of 9 features"),
])
def test_bad_shapes_name_the_layer(model, message):
    with pytest.raises(GraphError, match=message):
        model().shapes((S,))


def test_bad_tokens_and_targets_are_refused(dev):
    ours, _ = twins()
    tr = nn.Trainer(ours, dev, batch_size=B)
    x, y = tokens(B)
    bad = x.copy()
    bad[1, 2] = V
    with pytest.raises(DataError, match=r"token id 11 at \[1, 2\] is out of range for layer 0 "
                                        r"\(Embedding\(11, 8\)\): ids must be in 0..10"):
        tr.fit(bad, y)
    with pytest.raises(DataError, match="token id -1"):
        tr.predict(np.full((1, S), -1))
    with pytest.raises(DataError, match="integer token ids"):
        tr.evaluate(x.astype(np.float32), y)
    with pytest.raises(DataError, match=r"one per position: shape \[4, 6\]"):
        tr.fit(x, y[:, 0])
    with pytest.raises(DataError, match=r"class indices in 0..10"):
        tr.fit(x, y + V)
    assert tr.engine is not None and tr.history["loss"] == []    # nothing ran


def test_tensor_parallel_splits_heads_and_feed_forward():
    """tensor_parallel= takes a transformer (Megatron's split; tests/test_transformer_scale_out.py
    trains it under every mechanism): 2 IPUs of 2 heads... but 3 heads do not split in 2."""
    ours, _ = twins()
    pod = ipulab.devices.system("bow2000", 16)
    assert nn.Trainer(ours, pod, replicas=2, tensor_parallel=2).config.replica_ipus == 2
    odd = nn.Sequential(nn.Embedding(V, 6), nn.TransformerEncoderLayer(6, 3, 8))
    with pytest.raises(ConfigError, match=r"layer 1 \(TransformerEncoderLayer\(6, 3, .*\)\) has 3 "
                                          r"heads, which 2 does not divide"):
        nn.Trainer(odd, pod, replicas=2, tensor_parallel=2)


def test_positional_embedding_has_a_gradient_for_unused_positions(dev):
    """Positions beyond the samples' length get a zero gradient (the weight is [max_len, d])."""
    ours = nn.Sequential(nn.Embedding(V, D), nn.PositionalEmbedding(2 * S, D), nn.Linear(D, V))
    torch.manual_seed(8)
    theirs = torch.nn.Sequential(torch.nn.Embedding(V, D), Positional(2 * S, D),
                                 torch.nn.Linear(D, V))
    x, y = tokens(B, 8)
    _, _, grads = device_step(ours, torch_weights(theirs), x, y, dev)
    _, _, want = torch_step(theirs, x, y)
    assert not grads["1.weight"][S:].any()
    np.testing.assert_allclose(grads["1.weight"], want["1.weight"], rtol=1e-5, atol=1e-7)
