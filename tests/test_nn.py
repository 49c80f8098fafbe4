"""ipulab.nn: a training step on simulated tiles matches a plain numpy reference of the same
network step for step; weights round-trip in PyTorch's state_dict form; evaluation, prediction
and Dropout behave; the default CNN learns digits."""
import time

import numpy as np
import pytest
from nn_reference import Reference

import ipulab
from ipulab import nn
from ipulab.errors import DataError, EngineError, GraphError, TileMemoryError


@pytest.fixture(scope="module")
def digits():
    return ipulab.data.digits()


@pytest.fixture(scope="module")
def bow():
    """One full Bow IPU (1,472 tiles)."""
    return ipulab.devices.ipu("bow")


@pytest.fixture(scope="module")
def bow16():
    return ipulab.devices.ipu("bow", tiles_per_ipu=16)


def issue_cnn():
    """The network of issue 5's reference test."""
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 10))


def wider_net():
    """Strided convolution without bias, average pooling, a standalone ReLU, Linear + ReLU."""
    return nn.Sequential(nn.Conv2d(1, 6, 3, stride=2, padding=1, bias=False), nn.AvgPool2d(2),
                         nn.ReLU(), nn.Flatten(), nn.Linear(6 * 2 * 2, 16), nn.ReLU(),
                         nn.Dropout(0.0), nn.Linear(16, 10))


def pooled_net():
    """Overlapping max pooling (stride 1) straight on the input, padded average pooling
    (which counts the padding, as PyTorch), then a 2x2 convolution."""
    return nn.Sequential(nn.MaxPool2d(2, stride=1), nn.AvgPool2d(3, stride=2, padding=1),
                         nn.Conv2d(1, 3, 2), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 3 * 3, 10))


def _reference_losses(model, weights, x, y, steps, batch, lr, momentum):
    ref = Reference(model, weights, lr, momentum)
    out = [ref.step(x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch])
           for s in range(steps)]
    return np.array([o[0] for o in out]), np.array([o[1] for o in out]), ref


# --- the step matches numpy -------------------------------------------------------------------
@pytest.mark.parametrize("net, lr, momentum, full", [
    (issue_cnn, 0.1, 0.0, True),
    (issue_cnn, 0.05, 0.9, False),
    (wider_net, 0.1, 0.5, False),
    (pooled_net, 0.2, 0.0, False),
])
def test_20_steps_match_the_numpy_reference(digits, bow, bow16, net, lr, momentum, full):
    x, y = digits[0][:320], digits[1][:320]
    model = net()
    tr = nn.Trainer(model, bow if full else bow16, batch_size=16, lr=lr, momentum=momentum,
                    seed=3)
    w0 = tr.get_weights()
    h = tr.fit(x, y, epochs=1, shuffle=False)
    losses, correct, ref = _reference_losses(model, w0, x, y, 20, 16, lr, momentum)
    assert len(h["loss"]) == 20
    np.testing.assert_allclose(h["loss"], losses, rtol=1e-5, atol=0)
    np.testing.assert_array_equal(np.array(h["accuracy"]) * 16, correct)
    assert losses[-1] < losses[0]                       # it learns
    w = tr.get_weights()
    for k in w0:
        np.testing.assert_allclose(w[k], ref.w[k], rtol=1e-4, atol=1e-5, err_msg=k)
    # the model on the host follows the trainer
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v, w[k])


@pytest.mark.parametrize("momentum, precision", [(0.0, "fp32"), (0.9, "fp32"), (0.9, "fp16")])
def test_4_replicas_match_the_reference_on_the_global_batch(digits, momentum, precision):
    """Data parallel on a Bow-2000 (one replica per IPU): each step takes 4 x 16 samples,
    replica i the i-th 16; the loss is the mean over all 64, as one model trained on 64."""
    x, y = digits[0][:20 * 64], digits[1][:20 * 64]
    model = issue_cnn()
    tr = nn.Trainer(model, ipulab.devices.bow2000(tiles_per_ipu=16), replicas=4,
                    batch_size=16, lr=0.1, momentum=momentum, precision=precision, seed=3)
    w0 = tr.get_weights()
    h = tr.fit(x, y, epochs=1, shuffle=False)
    losses, correct, ref = _reference_losses(model, w0, x, y, 20, 64, 0.1, momentum)
    if precision == "fp32":
        np.testing.assert_allclose(h["loss"], losses, rtol=1e-5, atol=0)
        np.testing.assert_array_equal(np.array(h["accuracy"]) * 64, correct)
    else:
        np.testing.assert_allclose(h["loss"], losses, rtol=2e-3)
    w = tr.get_weights()
    for k in w0:
        np.testing.assert_allclose(w[k], ref.w[k], rtol=1e-4, atol=1e-5 if precision ==
                                   "fp32" else 2e-2, err_msg=k)
    # evaluation and prediction over the replicas, padding the last global batch
    x_te, y_te = digits[2][:100], digits[3][:100]
    logits, _ = Reference(model, w, 0.1).forward(x_te, train=False)
    if precision == "fp32":
        np.testing.assert_array_equal(tr.predict(x_te), logits.argmax(1))
        assert tr.evaluate(x_te, y_te).loss == pytest.approx(Reference.loss(logits, y_te)[0],
                                                             rel=1e-5)
    prof = tr.profile()
    assert prof.inter_ipu_exchange_cycles.max() > 0              # the all-reduce's links
    per_ipu = prof.compute_cycles.reshape(4, -1).max(1)
    assert (per_ipu > 0).all()                                     # every IPU computes


def test_shuffle_is_seeded_and_drops_the_partial_batch(digits, bow16):
    x, y = digits[0][:100], digits[1][:100]
    model = issue_cnn()
    a = nn.Trainer(model, bow16, batch_size=16, lr=0.1, seed=1)
    w0 = a.get_weights()
    ha = a.fit(x, y, epochs=2, shuffle=True, seed=5)
    assert len(ha["loss"]) == 2 * (100 // 16)
    b = nn.Trainer(issue_cnn(), bow16, batch_size=16, lr=0.1)
    b.set_weights(w0)
    hb = b.fit(x, y, epochs=2, shuffle=True, seed=5)
    assert ha["loss"] == hb["loss"]
    # the same as the reference fed the same permutations
    rng = np.random.default_rng(5)
    order = np.concatenate([rng.permutation(100)[:96] for _ in range(2)])
    losses, _, _ = _reference_losses(model, w0, x[order], y[order], 12, 16, 0.1, 0.0)
    np.testing.assert_allclose(ha["loss"], losses, rtol=1e-5)


# --- weights ----------------------------------------------------------------------------------
def test_state_dict_keys_and_initialisation_like_torch():
    model = nn.default_cnn()
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    assert shapes == {"0.weight": (16, 1, 3, 3), "0.bias": (16,), "3.weight": (32, 16, 3, 3),
                      "3.bias": (32,), "7.weight": (10, 128), "7.bias": (10,)}
    w = model.state_dict()
    for k, fan_in in (("0", 9), ("3", 16 * 9), ("7", 128)):
        bound = 1 / np.sqrt(fan_in)
        for name in ("weight", "bias"):
            a = w[f"{k}.{name}"]
            assert a.dtype == np.float32 and np.abs(a).max() <= bound
        assert np.abs(w[f"{k}.weight"]).max() > 0.8 * bound      # spread over the range
    # seeded: the same weights for the same seed, others for another
    again = nn.default_cnn()
    again.reset_parameters(0)
    for k in w:
        np.testing.assert_array_equal(w[k], again.state_dict()[k])
    again.reset_parameters(1)
    assert not np.array_equal(w["0.weight"], again.state_dict()["0.weight"])
    assert repr(model).splitlines()[1] == "  (0): Conv2d(1, 16, kernel_size=3, padding=1)"


def test_get_set_weights_round_trip(digits, bow16):
    model = issue_cnn()
    tr = nn.Trainer(model, bow16, batch_size=16, lr=0.1, seed=7)
    assert tr.engine is None                                 # built at the first data
    w0 = tr.get_weights()
    np.testing.assert_array_equal(w0["4.bias"], model.state_dict()["4.bias"])
    tr.fit(digits[0][:64], digits[1][:64], shuffle=False)
    trained = tr.get_weights()
    assert not np.array_equal(trained["0.weight"], w0["0.weight"])
    tr.set_weights(w0)
    for k, v in tr.get_weights().items():
        np.testing.assert_array_equal(v, w0[k])
    # setting the trained weights back gives the trained model's predictions
    tr.set_weights(trained)
    other = nn.Trainer(issue_cnn(), bow16, batch_size=16)
    other.set_weights(trained)
    np.testing.assert_array_equal(tr.predict(digits[2]), other.predict(digits[2]))
    # torch-like arrays of other float types are accepted and stored as float32
    tr.set_weights({k: v.astype(np.float64) for k, v in w0.items()})
    assert tr.get_weights()["0.weight"].dtype == np.float32
    with pytest.raises(DataError, match=r"missing \['4.bias'\]"):
        tr.set_weights({k: v for k, v in w0.items() if k != "4.bias"})
    with pytest.raises(DataError, match="unexpected"):
        tr.set_weights({**w0, "5.weight": w0["4.weight"]})
    with pytest.raises(DataError, match=r"'0.weight' has shape \[4, 1, 9\].*\[4, 1, 3, 3\]"):
        tr.set_weights({**w0, "0.weight": w0["0.weight"].reshape(4, 1, 9)})


def test_set_weights_restarts_momentum(digits, bow16):
    x, y = digits[0][:64], digits[1][:64]
    tr = nn.Trainer(issue_cnn(), bow16, batch_size=16, lr=0.05, momentum=0.9)
    w0 = tr.get_weights()
    first = list(tr.fit(x, y, shuffle=False)["loss"])
    tr.set_weights(w0)
    assert tr.fit(x, y, shuffle=False)["loss"][4:] == first


# --- evaluation and prediction ----------------------------------------------------------------
def test_predict_and_evaluate_match_the_reference(digits, bow16):
    x_tr, y_tr, x_te, y_te = digits
    model = issue_cnn()
    tr = nn.Trainer(model, bow16, batch_size=16, lr=0.1)
    tr.fit(x_tr[:320], y_tr[:320])
    x, y = x_te[:50], y_te[:50]                    # 50 = 3 batches of 16 and 2 padded
    logits, _ = Reference(model, tr.get_weights(), 0.1).forward(x, train=False)
    loss, _, correct = Reference.loss(logits, y)
    pred = tr.predict(x)
    assert pred.dtype == np.int64 and pred.shape == (50,)
    np.testing.assert_array_equal(pred, logits.argmax(1))
    ev = tr.evaluate(x, y)
    acc, l_mean = ev
    assert ev.accuracy == acc == correct / 50
    assert l_mean == pytest.approx(loss, rel=1e-5)
    # evaluating does not train
    np.testing.assert_array_equal(tr.predict(x), pred)


# --- dropout ------------------------------------------------------------------------------------
def dropout_net(p=0.5):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(p),
                         nn.Linear(32, 10))


def test_dropout_is_deterministic(digits, bow16):
    x, y = digits[0][:160], digits[1][:160]
    runs = []
    for seed in (11, 11, 12):
        model = dropout_net()
        model.reset_parameters(0)
        tr = nn.Trainer(model, bow16, batch_size=16, lr=0.1, seed=seed)
        runs.append((tr.fit(x, y, shuffle=False)["loss"], tr.get_weights(), tr))
    assert runs[0][0] == runs[1][0]                           # same seed: same masks
    assert runs[0][0] != runs[2][0]                           # another seed: others
    for k, v in runs[0][1].items():
        np.testing.assert_array_equal(v, runs[1][1][k])
    # masks change from step to step: dropout's loss differs from the no-dropout reference
    model = dropout_net()
    model.reset_parameters(0)
    losses, _, _ = _reference_losses(dropout_net(0.0), model.state_dict(), x, y, 10, 16, 0.1, 0)
    assert abs(runs[0][0][0] - losses[0]) > 1e-4
    # evaluation is without dropout: it matches the reference forward pass exactly
    tr = runs[0][2]
    logits, _ = Reference(dropout_net(0.0), tr.get_weights(), 0.1).forward(
        digits[2][:32], train=False)
    np.testing.assert_array_equal(tr.predict(digits[2][:32]), logits.argmax(1))
    loss, _, correct = Reference.loss(logits, digits[3][:32])
    assert tr.evaluate(digits[2][:32], digits[3][:32]).loss == pytest.approx(loss, rel=1e-5)


# --- half precision -----------------------------------------------------------------------------
def test_fp16_tracks_the_reference_with_half_activations_and_float_master_weights(digits,
                                                                                  bow16):
    x, y = digits[0][:320], digits[1][:320]
    model = issue_cnn()
    h32 = nn.Trainer(issue_cnn(), bow16, batch_size=16, lr=0.1, momentum=0.9)
    h32.set_weights(model.state_dict())
    tr = nn.Trainer(model, bow16, batch_size=16, lr=0.1, momentum=0.9, precision="fp16")
    assert tr.loss_scaling == 128 and h32.loss_scaling == 1
    w0 = tr.get_weights()
    h = tr.fit(x, y, shuffle=False)
    losses, _, ref = _reference_losses(model, w0, x, y, 20, 16, 0.1, 0.9)
    np.testing.assert_allclose(h["loss"], losses, rtol=2e-3)
    assert h["loss"] != h32.fit(x, y, shuffle=False)["loss"]        # really in half
    w = tr.get_weights()
    assert all(v.dtype == np.float32 for v in w.values())
    for k in w:
        np.testing.assert_allclose(w[k], ref.w[k], atol=2e-2, err_msg=k)
    variables = {v["name"]: v["dtype"] for v in tr.profile().graph.variables()}
    assert variables["input"] == "HALF" and variables["0.weight"] == "FLOAT"
    assert variables["weights/to_half/out"] == "HALF"
    # half the bytes for activations and gradients (partials and master weights stay
    # float), and products at the fp16 rate
    p16, p32 = tr.profile(), h32.profile()
    assert p16.memory["variables"].sum() < 0.9 * p32.memory["variables"].sum()
    assert any(name.startswith("MatMulBlockHalf") for name in p16.vertex_stats)
    # evaluation and prediction in half agree with the reference forward pass
    ev = tr.evaluate(digits[2][:64], digits[3][:64])
    logits, _ = Reference(model, w, 0.1).forward(digits[2][:64], train=False)
    assert ev.accuracy == pytest.approx((logits.argmax(1) == digits[3][:64]).mean(), abs=0.04)


def test_fp16_dropout_is_deterministic(digits, bow16):
    x, y = digits[0][:64], digits[1][:64]
    runs = []
    for _ in range(2):
        model = dropout_net(0.3)
        model.reset_parameters(0)
        tr = nn.Trainer(model, bow16, batch_size=16, lr=0.1, precision="fp16", seed=4)
        runs.append(tr.fit(x, y, shuffle=False)["loss"])
    assert runs[0] == runs[1] and np.isfinite(runs[0]).all()


# --- history and profile ----------------------------------------------------------------------
def test_history_and_profile(digits, bow16):
    tr = nn.Trainer(issue_cnn(), bow16, batch_size=16, lr=0.1, input_shape=(1, 8, 8))
    assert tr.engine is not None
    with pytest.raises(EngineError, match="call fit"):
        tr.profile()
    h = tr.fit(digits[0][:100], digits[1][:100], epochs=2)
    assert [len(v) for v in h.values()] == [12] * 4
    prof = tr.profile()
    assert h["cycles"] == [prof.total_cycles] * 12
    assert h["images_per_second"][0] == pytest.approx(16 * prof.clock_hz / prof.total_cycles)
    assert all(0 <= a <= 1 for a in h["accuracy"])
    names = [s.name for s in prof.steps]
    assert "0.Conv2d/conv/products" in names and "sgd/update" in names
    assert not any(n.startswith("0.Conv2d/input_grad") for n in names)   # not needed
    assert prof.host_exchange_cycles.max() > 0
    assert (prof.memory_total <= prof.bytes_per_tile).all()


# --- misuse -----------------------------------------------------------------------------------
def test_clear_errors(digits, bow16):
    x, y = digits[0][:64], digits[1][:64]
    with pytest.raises(GraphError, match="pipeline of 2 stages needs 2 IPUs per replica"):
        nn.Trainer(issue_cnn(), bow16, replicas=4, pipeline=[2])
    with pytest.raises(GraphError, match="increasing layer indices between 1 and 4"):
        nn.Trainer(issue_cnn(), bow16, pipeline=[3, 2])
    with pytest.raises(GraphError, match="pipeline must be a list"):
        nn.Trainer(issue_cnn(), bow16, pipeline="3")
    four = ipulab.devices.bow2000(tiles_per_ipu=16)
    with pytest.raises(GraphError, match="batch_size 16 does not split into 3 micro-batches"):
        nn.Trainer(issue_cnn(), four, pipeline=[3], micro_batches=3)
    with pytest.raises(GraphError, match="5 stages needs 5 IPUs per replica, but each .* has 4"):
        nn.Trainer(issue_cnn(), four, pipeline=[1, 2, 3, 4])
    with pytest.raises(GraphError, match="micro_batches= goes with pipeline"):
        nn.Trainer(issue_cnn(), bow16, micro_batches=2)
    with pytest.raises(GraphError, match="loss_scaling"):
        nn.Trainer(issue_cnn(), bow16, precision="fp16", loss_scaling=0)
    with pytest.raises(GraphError, match="precision"):
        nn.Trainer(issue_cnn(), bow16, precision="bf16")
    with pytest.raises(GraphError, match="lr must be a positive"):
        nn.Trainer(issue_cnn(), bow16, lr=0)
    with pytest.raises(GraphError, match="batch_size"):
        nn.Trainer(issue_cnn(), bow16, batch_size=0)
    with pytest.raises(GraphError, match="kernel_size must be an int or a pair"):
        nn.Conv2d(1, 4, 3.0)
    with pytest.raises(GraphError, match="Dropout: p must be"):
        nn.Dropout(1.5)
    with pytest.raises(GraphError, match="not an ipulab.nn layer"):
        nn.Sequential(nn.ReLU(), "relu")
    bad = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                        nn.Linear(64, 10))
    with pytest.raises(GraphError, match=r"layer 3: Linear\(in_features=64.*256"):
        nn.Trainer(bad, bow16, input_shape=(1, 8, 8))
    with pytest.raises(GraphError, match="layer 0: Conv2d.*channels=1"):
        nn.Trainer(issue_cnn(), bow16).fit(np.zeros((16, 3, 8, 8), np.float32), y[:16])
    big = nn.Sequential(nn.Flatten(), nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 4096),
                        nn.Linear(4096, 10))
    with pytest.raises(TileMemoryError, match=r"layer 3 \(Linear\(in_features=4096.*forward: "
                                              "poplin: mat_mul .* does not fit on 4 tiles"):
        nn.Trainer(big, ipulab.devices.ipu("bow", tiles_per_ipu=4), input_shape=(1, 8, 8))
    tr = nn.Trainer(issue_cnn(), bow16)
    with pytest.raises(DataError, match="class indices in 0..9"):
        tr.fit(x, y + 1)
    with pytest.raises(DataError, match="64 integers"):
        tr.fit(x, y[:10])
    with pytest.raises(DataError, match="fewer than one global batch of 16"):
        tr.fit(x[:10], y[:10])
    with pytest.raises(DataError, match=r"built for \(1, 8, 8\)"):
        tr.predict(np.zeros((4, 1, 9, 9), np.float32))
    with pytest.raises(DataError, match="inf or nan"):
        tr.predict(np.full((4, 1, 8, 8), np.nan, np.float32))


# --- it learns ----------------------------------------------------------------------------------
def test_default_cnn_learns_digits_on_one_ipu(digits, bow):
    """>= 95% test accuracy on one full Bow IPU (1,472 tiles), batch 16."""
    x_tr, y_tr, x_te, y_te = digits
    t0 = time.perf_counter()
    tr = nn.Trainer(nn.default_cnn(), bow, batch_size=16, lr=0.05, momentum=0.9,
                    input_shape=(1, 8, 8))
    t_compile = time.perf_counter() - t0
    curve = []
    for epoch in range(5):
        tr.fit(x_tr, y_tr, epochs=1, seed=epoch)
        curve.append(tr.evaluate(x_te, y_te).accuracy)
    ev = tr.evaluate(x_te, y_te)
    elapsed = time.perf_counter() - t0
    print(f"\ndefault CNN on digits, one Bow IPU: test accuracy by epoch "
          f"{', '.join(f'{a:.1%}' for a in curve)}; final loss "
          f"{ev.loss:.3f}; compile {t_compile:.1f} s, total {elapsed:.1f} s; "
          f"{tr.history['cycles'][0]:,} cycles a step, "
          f"{tr.history['images_per_second'][0]:,.0f} images/s simulated")
    assert ev.accuracy >= 0.95
