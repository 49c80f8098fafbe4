"""The operations a transformer needs, computed on simulated tiles, against float64 numpy and
PyTorch: popops.multi_slice / multi_update_add (embedding lookup and its gradient),
popnn.layer_norm and its gradients, popnn.softmax (scaled, causal) and its gradient, exact
GELU (erf), token cross-entropy, and the grouped products of attention; fp32 and fp16, every
codelet mode, and the misuse errors."""
import math

import numpy as np
import pytest
import torch
from helpers import MODES, bits
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nn_helpers import LAYOUTS, Lab

import ipulab
from ipulab import poplar, poplin, popnn, popops
from ipulab.errors import GraphError

FEW = settings(max_examples=12, deadline=None)
DTYPES = {"fp32": poplar.FLOAT, "fp16": poplar.HALF}
# (rtol, atol) against float64 of the rounded inputs: float32 arithmetic, or results stored
# in half precision (and HALF maps rounding after every operation)
TOL = {"fp32": (1e-5, 1e-5), "fp16": (4e-3, 4e-3)}


def _host(a, precision):
    """a rounded to the precision's storage, as the host writes it."""
    return np.asarray(a, np.float32).astype(DTYPES[precision].host)


def _close(got, want, precision, scale=1.0, rscale=1.0):
    rtol, atol = TOL[precision]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol * rscale,
                               atol=atol * scale)


@pytest.fixture(scope="module")
def dev():
    return ipulab.devices.ipu("bow", tiles_per_ipu=16)


# --- multi_slice / multi_update_add -----------------------------------------------------------
@FEW
@given(V=st.integers(1, 40), d=st.integers(1, 20), N=st.integers(1, 70),
       precision=st.sampled_from(list(DTYPES)), how=st.sampled_from(LAYOUTS),
       seed=st.integers(0, 2 ** 16))
def test_multi_slice_picks_rows_and_zeros_outside(dev, V, d, N, precision, how, seed):
    rng = np.random.default_rng(seed)
    table = _host(rng.standard_normal((V, d)), precision)
    ids = rng.integers(-2, V + 2, N).astype(np.int32)
    lab = Lab(dev)
    out = popops.multi_slice(lab.g, lab.feed(table, how, seed), lab.feed(ids, "spread"),
                             lab.seq)
    assert out.shape == (N, d) and out.dtype == DTYPES[precision]
    lab.fetch(out=out)
    got = lab.run()["out"]
    inside = (ids >= 0) & (ids < V)
    want = np.zeros((N, d), table.dtype)
    want[inside] = table[ids[inside]]
    assert np.array_equal(bits(got), bits(want))           # a copy: exact


@FEW
@given(V=st.integers(1, 30), d=st.integers(1, 12), N=st.sampled_from([1, 5, 33, 300]),
       scale=st.sampled_from([1.0, -0.5]), precision=st.sampled_from(list(DTYPES)),
       seed=st.integers(0, 2 ** 16))
def test_multi_update_add_adds_rows_at_the_offsets(dev, V, d, N, scale, precision, seed):
    """Few offsets go straight into the table, many through per-group partials: both add
    every update (repeated offsets too) and skip offsets outside the table."""
    rng = np.random.default_rng(seed)
    t0 = _host(rng.standard_normal((V, d)), precision)
    s = _host(rng.standard_normal((N, d)), precision)
    ids = rng.integers(-1, V + 1, N).astype(np.int32)
    lab = Lab(dev)
    t = lab.feed(t0, "chunks", seed)
    popops.multi_update_add(lab.g, t, lab.feed(s, "spread"), lab.feed(ids, "poplar"), scale,
                            lab.seq)
    lab.fetch(t=t)
    got = lab.run()["t"]
    want = t0.astype(np.float64)
    inside = (ids >= 0) & (ids < V)
    np.add.at(want, ids[inside], scale * s[inside].astype(np.float64))
    _close(got, want, precision, scale=max(1.0, math.sqrt(N / V)))


def test_multi_update_add_takes_a_scale_tensor(dev):
    lab = Lab(dev)
    t = lab.feed(np.ones((3, 2), np.float32))
    popops.multi_update_add(lab.g, t, lab.feed(np.ones((2, 2), np.float32)),
                            lab.feed(np.array([2, 2], np.int32)),
                            lab.feed(np.array([-0.25], np.float32)), lab.seq)
    lab.fetch(t=t)
    assert np.array_equal(lab.run()["t"], [[1, 1], [1, 1], [0.5, 0.5]])


def test_multi_update_add_splits_many_offsets_into_groups(dev):
    """512 offsets on 16 tiles: per-group float partials, then one add into the table."""
    lab = Lab(dev)
    t = lab.feed(np.zeros((8, 4), np.float32))
    ids = np.arange(512, dtype=np.int32) % 8
    popops.multi_update_add(lab.g, t, lab.feed(np.ones((512, 4), np.float32)),
                            lab.feed(ids), 0.25, lab.seq, "embed_grad")
    lab.fetch(t=t)
    assert np.array_equal(lab.run()["t"], np.full((8, 4), 16.0, np.float32))
    names = [s.name for s in lab.engine.profile().steps]
    assert names == ["embed_grad", "embed_grad/sum"]


@pytest.mark.parametrize("call, message", [
    (lambda g, t, i, s, seq: popops.multi_slice(g, t.flatten(), i, seq), "matrix"),
    (lambda g, t, i, s, seq: popops.multi_slice(g, t, s, seq), "offsets"),
    (lambda g, t, i, s, seq: popops.multi_update_add(g, t, s.slice(0, 2), i, 1.0, seq),
     "one row of the table"),
    (lambda g, t, i, s, seq: popops.multi_update_add(g, t, s, i, "1", seq), "scale must be"),
    (lambda g, t, i, s, seq: popops.multi_update_add(g, t, s, i, i, seq),
     "a scale tensor must be FLOAT with one element"),
])
def test_slicing_misuse_is_named(dev, call, message):
    lab = Lab(dev)
    t, i = lab.feed(np.zeros((4, 3), np.float32)), lab.feed(np.zeros(5, np.int32))
    s = lab.feed(np.zeros((5, 3), np.float32))
    with pytest.raises(GraphError, match=message):
        call(lab.g, t, i, s, lab.seq)


# --- layer norm -------------------------------------------------------------------------------
def _layer_norm_reference(x, gamma, beta, dy, eps=1e-5):
    x, gamma, beta, dy = (np.asarray(a, np.float64) for a in (x, gamma, beta, dy))
    mean = x.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
    xh = (x - mean) * inv
    g = dy * gamma
    dx = inv * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))
    axes = tuple(range(x.ndim - 1))
    return xh * gamma + beta, mean[..., 0], inv[..., 0], dx, (dy * xh).sum(axes), dy.sum(axes)


@FEW
@given(shape=st.lists(st.integers(1, 7), min_size=1, max_size=3),
       precision=st.sampled_from(list(DTYPES)), how=st.sampled_from(LAYOUTS),
       seed=st.integers(0, 2 ** 16))
@example(shape=[3, 5, 2], precision="fp32", how="poplar", seed=1)   # a row of 1.641, 1.652
def test_layer_norm_and_gradients(dev, shape, precision, how, seed):
    rng = np.random.default_rng(seed)
    d = shape[-1]
    x = _host(rng.standard_normal(shape) * 3 + 1, precision)
    gamma, beta = _host(rng.standard_normal(d), precision), _host(rng.standard_normal(d),
                                                                  precision)
    dy = _host(rng.standard_normal(shape), precision)
    lab = Lab(dev)
    tx, tdy = lab.feed(x, how, seed), lab.feed(dy, "spread")
    tg, tb = lab.feed(gamma, "tile", seed), lab.feed(beta)
    y, mean, inv = popnn.layer_norm(lab.g, tx, tg, tb, lab.seq)
    dx, dg, db = popnn.layer_norm_gradients(lab.g, tx, tdy, mean, inv, tg, lab.seq)
    dg2, db2 = popnn.layer_norm_param_gradients(lab.g, tx, tdy, mean, inv, lab.seq)
    assert mean.dtype == inv.dtype == poplar.FLOAT and mean.shape == tuple(shape[:-1])
    assert y.dtype == dx.dtype == dg.dtype == DTYPES[precision]
    lab.fetch(y=y, mean=mean, inv=inv, dx=dx, dg=dg, db=db, dg2=dg2, db2=db2)
    out = lab.run()
    want = _layer_norm_reference(x, gamma, beta, dy)
    rows = int(np.prod(shape[:-1]))
    # x - mean in float32 loses |x| / sigma of its relative precision (a row of two close
    # values: 1.641 and 1.652 lose 300 of it): what is computed from it, relatively as much
    cond = max(1.0, float(np.max(np.abs(x) * np.asarray(want[2])[..., None])))
    for key, w, scale, rscale in (
            ("y", want[0], 1, cond), ("mean", want[1], 1, 1), ("inv", want[2], 1, 1),
            ("dx", want[3], 10, cond), ("dg", want[4], rows, cond), ("db", want[5], rows, 1),
            ("dg2", want[4], rows, cond), ("db2", want[5], rows, 1)):
        if precision == "fp32" or key not in ("mean", "inv"):
            _close(out[key], w, precision, scale, rscale)


def test_layer_norm_matches_torch_to_float32_rounding(dev):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 5, 32)).astype(np.float32)
    gamma, beta = rng.standard_normal(32).astype(np.float32), \
        rng.standard_normal(32).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    lab = Lab(dev)
    tx, tg = lab.feed(x), lab.feed(gamma)
    y, mean, inv = popnn.layer_norm(lab.g, tx, tg, lab.feed(beta), lab.seq, eps=1e-5)
    dx, dg, db = popnn.layer_norm_gradients(lab.g, tx, lab.feed(dy), mean, inv, tg, lab.seq)
    lab.fetch(y=y, dx=dx, dg=dg, db=db)
    out = lab.run()
    ln = torch.nn.LayerNorm(32)
    ln.weight.data, ln.bias.data = torch.tensor(gamma), torch.tensor(beta)
    xt = torch.tensor(x, requires_grad=True)
    yt = ln(xt)
    yt.backward(torch.tensor(dy))
    for got, want in ((out["y"], yt), (out["dx"], xt.grad), (out["dg"], ln.weight.grad),
                      (out["db"], ln.bias.grad)):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("make, message", [
    (lambda lab, x: popnn.layer_norm(lab.g, x, lab.feed(np.ones(3, np.float32)),
                                     lab.feed(np.zeros(4, np.float32)), lab.seq),
     r"must be FLOAT \[4\]"),
    (lambda lab, x: popnn.layer_norm(lab.g, x, lab.feed(np.ones(4, np.float16)),
                                     lab.feed(np.zeros(4, np.float16)), lab.seq), "FLOAT"),
    (lambda lab, x: popnn.layer_norm(lab.g, x, lab.feed(np.ones(4, np.float32)),
                                     lab.feed(np.zeros(4, np.float32)), lab.seq, eps=0),
     "eps must be a positive number"),
    (lambda lab, x: popnn.layer_norm(lab.g, lab.feed(np.zeros((2, 4), np.int32)),
                                     lab.feed(np.ones(4, np.int32)),
                                     lab.feed(np.zeros(4, np.int32)), lab.seq), "FLOAT or HALF"),
    (lambda lab, x: popnn.layer_norm_gradients(lab.g, x, x, lab.feed(np.zeros(3, np.float32)),
                                               lab.feed(np.zeros(3, np.float32)),
                                               lab.feed(np.ones(4, np.float32)), lab.seq),
     r"must be FLOAT \[2\] \(from layer_norm\)"),
])
def test_layer_norm_misuse_is_named(dev, make, message):
    lab = Lab(dev)
    x = lab.feed(np.zeros((2, 4), np.float32))
    with pytest.raises(GraphError, match=message):
        make(lab, x)


# --- softmax ----------------------------------------------------------------------------------
def _softmax_reference(x, scale, causal, dy):
    z = scale * np.asarray(x, np.float64)
    if causal:
        S = z.shape[-1]
        z = np.where(np.triu(np.ones((S, S), bool), 1), -np.inf, z)
    e = np.exp(z - z.max(-1, keepdims=True))
    y = e / e.sum(-1, keepdims=True)
    return y, scale * y * (dy - (dy * y).sum(-1, keepdims=True))


@FEW
@given(lead=st.lists(st.integers(1, 4), max_size=2), S=st.integers(1, 9),
       causal=st.booleans(), scale=st.sampled_from([1.0, 0.25, 3.0]),
       precision=st.sampled_from(list(DTYPES)), how=st.sampled_from(LAYOUTS),
       seed=st.integers(0, 2 ** 16))
def test_softmax_and_gradient(dev, lead, S, causal, scale, precision, how, seed):
    rng = np.random.default_rng(seed)
    shape = (*lead, S, S)
    x = _host(rng.standard_normal(shape) * 2, precision)
    dy = _host(rng.standard_normal(shape), precision)
    lab = Lab(dev)
    y = popnn.softmax(lab.g, lab.feed(x, how, seed), lab.seq, scale=scale, causal=causal)
    dx = popnn.softmax_input_gradient(lab.g, y, lab.feed(dy, "spread"), lab.seq, scale=scale,
                                      causal=causal)
    lab.fetch(y=y, dx=dx)
    out = lab.run()
    want_y, want_dx = _softmax_reference(x, scale, causal, dy)
    _close(out["y"], want_y, precision)
    _close(out["dx"], want_dx, precision, scale=max(1.0, scale))
    if causal:
        assert (out["y"][..., np.triu(np.ones((S, S), bool), 1)] == 0).all()


def test_softmax_of_large_scores_stays_finite(dev):
    x = np.array([[[1e4, -1e4], [88.0, 89.0]]], np.float32)
    lab = Lab(dev)
    y = popnn.softmax(lab.g, lab.feed(x), lab.seq)
    lab.fetch(y=y)
    got = lab.run()["y"]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, _softmax_reference(x, 1.0, False, x)[0], rtol=1e-6)


@pytest.mark.parametrize("shape, kw, message", [
    ((2, 3, 4), dict(causal=True), r"causal softmax takes squares"),
    ((2, 3), dict(scale=0.0), "scale must be a finite non-zero number"),
    ((2, 3), dict(scale=float("nan")), "scale must be a finite non-zero number"),
])
def test_softmax_misuse_is_named(dev, shape, kw, message):
    lab = Lab(dev)
    with pytest.raises(GraphError, match=message):
        popnn.softmax(lab.g, lab.feed(np.zeros(shape, np.float32)), lab.seq, **kw)


def test_softmax_gradient_needs_matching_tensors(dev):
    lab = Lab(dev)
    y = lab.feed(np.zeros((2, 3), np.float32))
    with pytest.raises(GraphError, match="must match"):
        popnn.softmax_input_gradient(lab.g, y, lab.feed(np.zeros((3, 2), np.float32)), lab.seq)


# --- GELU -------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", list(DTYPES))
def test_gelu_is_exact_as_torch(dev, precision):
    x = _host(np.linspace(-6, 6, 97), precision)
    dy = _host(np.cos(np.arange(97)), precision)
    lab = Lab(dev)
    tx = lab.feed(x, "spread")
    y = popnn.non_linearity(lab.g, "gelu", tx, lab.seq)
    dx = popnn.non_linearity_input_gradient(lab.g, "gelu", tx, lab.feed(dy), lab.seq)
    lab.fetch(y=y, dx=dx)
    out = lab.run()
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    yt = torch.nn.functional.gelu(xt)                 # approximate="none": erf
    yt.backward(torch.tensor(dy.astype(np.float64)))
    _close(out["y"], yt.detach().numpy(), precision)
    _close(out["dx"], xt.grad.numpy(), precision)


# --- token cross-entropy ----------------------------------------------------------------------
@pytest.mark.parametrize("precision", list(DTYPES))
def test_token_cross_entropy_is_the_mean_over_every_token(dev, precision):
    rng = np.random.default_rng(3)
    B, S, V = 3, 5, 7
    logits = _host(rng.standard_normal((B, S, V)) * 2, precision)
    labels = rng.integers(0, V, (B, S)).astype(np.int32)
    lab = Lab(dev)
    r = popnn.calc_loss(lab.g, lab.feed(logits, "spread"), lab.feed(labels), lab.seq,
                        num_correct=True)
    assert r.grad.shape == (B, S, V) and r.per_sample.shape == (B, S)
    lab.fetch(loss=r.loss, grad=r.grad, correct=r.num_correct)
    out = lab.run()
    lt = torch.tensor(logits.astype(np.float64), requires_grad=True)
    loss = torch.nn.functional.cross_entropy(lt.reshape(-1, V),
                                             torch.tensor(labels, dtype=torch.long).reshape(-1))
    loss.backward()
    np.testing.assert_allclose(out["loss"], loss.item(), rtol=1e-6)
    _close(out["grad"], lt.grad.numpy(), precision)
    assert int(out["correct"]) == int((logits.argmax(-1) == labels).sum())


def test_token_loss_needs_a_label_per_token(dev):
    lab = Lab(dev)
    with pytest.raises(GraphError, match=r"\[B, S, C\] and \[B, S\]"):
        popnn.calc_loss(lab.g, lab.feed(np.zeros((2, 3, 4), np.float32)),
                        lab.feed(np.zeros(2, np.int32)), lab.seq)


# --- attention's grouped products ---------------------------------------------------------------
@pytest.mark.parametrize("precision", list(DTYPES))
def test_attention_products_on_head_views(dev, precision):
    """Q K^T and A V over the views attention makes of a [B, S, 3d] projection: heads split
    by reshape and dim_shuffle, K transposed, nothing copied by hand."""
    rng = np.random.default_rng(4)
    B, S, h, hd = 2, 6, 3, 4
    d = h * hd
    qkv = _host(rng.standard_normal((B, S, 3 * d)), precision)
    lab = Lab(dev)
    t = lab.feed(qkv, "spread")
    heads = [t[:, :, i * d:(i + 1) * d].reshape([B, S, h, hd]).dim_shuffle([0, 2, 1, 3])
             .reshape([B * h, S, hd]) for i in range(3)]
    scores = poplin.mat_mul_grouped(lab.g, heads[0], heads[1].dim_shuffle([0, 2, 1]), lab.seq)
    ctx = poplin.mat_mul_grouped(lab.g, scores, heads[2], lab.seq)
    lab.fetch(scores=scores, ctx=ctx)
    out = lab.run()
    q, k, v = (qkv[:, :, i * d:(i + 1) * d].astype(np.float64).reshape(B, S, h, hd)
               .transpose(0, 2, 1, 3).reshape(B * h, S, hd) for i in range(3))
    want_scores = q @ k.transpose(0, 2, 1)
    _close(out["scores"], want_scores, precision, 4)
    _close(out["ctx"], out["scores"].astype(np.float64) @ v, precision, 16)


# --- every codelet mode agrees ------------------------------------------------------------------
@pytest.mark.parametrize("precision", list(DTYPES))
def test_codelet_modes_agree_bit_for_bit(dev, precision):
    rng = np.random.default_rng(5)
    x = _host(rng.standard_normal((2, 6, 6)), precision)
    ids = rng.integers(0, 6, 9).astype(np.int32)
    results = []
    for options in MODES.values():
        lab = Lab(dev)
        tx, tids = lab.feed(x, "chunks", 2), lab.feed(ids)
        gamma = lab.feed(_host(np.linspace(0.5, 1.5, 6), precision))
        y, mean, inv = popnn.layer_norm(lab.g, tx, gamma, gamma, lab.seq)
        dx, dg, _ = popnn.layer_norm_gradients(lab.g, tx, y, mean, inv, gamma, lab.seq)
        p = popnn.softmax(lab.g, tx, lab.seq, scale=0.5, causal=True)
        dp = popnn.softmax_input_gradient(lab.g, p, y, lab.seq, scale=0.5, causal=True)
        rows = popops.multi_slice(lab.g, tx.reshape([12, 6]), tids, lab.seq)
        popops.multi_update_add(lab.g, tx.reshape([12, 6]), rows, tids, 0.5, lab.seq)
        lab.fetch(y=y, dx=dx, dg=dg, p=p, dp=dp, rows=rows, x=tx)
        results.append(lab.run(options))
    for other in results[1:]:
        for key, value in results[0].items():
            assert np.array_equal(bits(value), bits(other[key])), key
