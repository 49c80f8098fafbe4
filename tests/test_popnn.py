"""popnn: non-linearities, pooling and softmax cross-entropy computed on simulated tiles,
against float64 numpy references; gradients against numerical differentiation; numerical
stability; work placed where the data lives; the codelet modes agree bit for bit."""
import math

import numpy as np
import pytest
from helpers import MODES, bits
from hypothesis import given, settings
from hypothesis import strategies as st
from nn_helpers import (LAYOUTS, Lab, cross_entropy_reference, numerical_gradient,
                        pool_grad_reference, pool_reference)

from ipulab import poplar, popnn
from ipulab.errors import GraphError
from ipulab.popnn import poolcodelets

FEW = settings(max_examples=20, deadline=None)
NLS = ("relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "softmax", "softmax_stable")


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


REFERENCE = {
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                                  (x + 0.044715 * x ** 3))),
    "softmax": _softmax,
    "softmax_stable": _softmax,
}


def _close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol)


# --- non-linearities -----------------------------------------------------------------------------
@FEW
@given(nl=st.sampled_from(NLS), shape=st.lists(st.integers(1, 9), min_size=1, max_size=3),
       how=st.sampled_from(LAYOUTS), seed=st.integers(0, 2 ** 16))
def test_non_linearity_and_gradient(dev8, nl, shape, how, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, shape).astype(np.float32)
    x[np.abs(x) < 1e-3] = 0.5             # relu's kink: numerical derivatives need a margin
    dy = rng.standard_normal(shape).astype(np.float32)
    lab = Lab(dev8)
    tx, tdy = lab.feed(x, how, seed), lab.feed(dy, "spread")
    y = popnn.non_linearity(lab.g, nl, tx, lab.seq)
    dx = popnn.non_linearity_input_gradient(lab.g, nl, tx if nl.startswith("gelu") else y, tdy,
                                            lab.seq)
    assert lab.g.get_tile_mapping(y) == lab.g.get_tile_mapping(tx)     # mapped like its input
    lab.fetch(y=y, dx=dx)
    out = lab.run()
    f = REFERENCE[nl]
    _close(out["y"], f(x.astype(np.float64)))
    want = numerical_gradient(lambda v: float((f(v) * dy).sum()), x)
    _close(out["dx"], want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("nl", NLS)
def test_non_linearity_in_place(dev8, nl):
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    lab = Lab(dev8)
    t = lab.feed(x, "spread")
    popnn.non_linearity_in_place(lab.g, nl, t, lab.seq)
    lab.fetch(t=t)
    _close(lab.run()["t"], REFERENCE[nl](x.astype(np.float64)))


def test_stable_softmax_with_extreme_logits(dev8):
    x = np.array([[1e4, -1e4, 0.0, 9999.0], [88.0, 89.0, 90.0, -3e38], [0, 0, 0, 0]], np.float32)
    lab = Lab(dev8)
    t = lab.feed(x, "spread")
    y = popnn.non_linearity(lab.g, "softmax_stable", t, lab.seq)
    lab.fetch(y=y)
    got = lab.run()["y"]
    assert np.isfinite(got).all()
    _close(got, _softmax(x.astype(np.float64)))


def test_half_non_linearities(dev8):
    x = np.linspace(-3, 3, 15, dtype=np.float32).reshape(3, 5)
    lab = Lab(dev8)
    t = lab.feed(x, "spread", dtype=poplar.HALF)
    y = popnn.non_linearity(lab.g, "gelu", t, lab.seq)
    s = popnn.non_linearity(lab.g, "softmax_stable", t, lab.seq)
    assert y.dtype == poplar.HALF and s.dtype == poplar.HALF
    lab.fetch(y=y, s=s)
    out = lab.run()
    xh = x.astype(np.float16).astype(np.float64)
    _close(out["y"], REFERENCE["gelu"](xh), rtol=2e-3, atol=2e-3)
    _close(out["s"], _softmax(xh), rtol=2e-3, atol=2e-3)


# --- pooling -------------------------------------------------------------------------------------
@st.composite
def pool_cases(draw):
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, kernel[0] // 2)), draw(st.integers(0, kernel[1] // 2)))
    h = draw(st.integers(max(1, kernel[0] - 2 * padding[0]), 9))
    w = draw(st.integers(max(1, kernel[1] - 2 * padding[1]), 9))
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 3)), h, w)
    return shape, kernel, stride, padding


@FEW
@given(case=pool_cases(), kind=st.sampled_from(["max", "avg"]), include_pad=st.booleans(),
       how=st.sampled_from(LAYOUTS), seed=st.integers(0, 2 ** 16))
def test_pooling_and_gradients(dev8, case, kind, include_pad, how, seed):
    shape, kernel, stride, padding = case
    rng = np.random.default_rng(seed)
    x = rng.permutation(np.arange(np.prod(shape))).reshape(shape).astype(np.float32) / 7 - 3
    want, _ = pool_reference(x, kind, kernel, stride, padding, include_pad)
    dy = rng.standard_normal(want.shape).astype(np.float32)
    lab = Lab(dev8)
    tx, tdy = lab.feed(x, how, seed), lab.feed(dy, "spread")
    y = popnn.pooling.pool(lab.g, kind, tx, kernel, stride, padding, lab.seq,
                           count_include_pad=include_pad)
    dx = popnn.pooling.pool_input_gradient(lab.g, kind, tx, y, tdy, kernel, stride, padding,
                                           lab.seq, count_include_pad=include_pad)
    assert y.shape == want.shape == popnn.pooling.output_shape(shape, kernel, stride, padding)
    lab.fetch(y=y, dx=dx)
    out = lab.run()
    _close(out["y"], want)
    # distinct values: pooling is differentiable here, so the gradient is checked numerically
    numeric = numerical_gradient(lambda v: float((pool_reference(
        v, kind, kernel, stride, padding, include_pad)[0] * dy).sum()), x)
    _close(out["dx"], numeric, atol=1e-5)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling_pytorch_names_ties_nan_and_shape_only_avg_gradient(dev8, kind):
    x = np.zeros((2, 3, 6, 5), np.float32)
    x[0, 0, 2:4, 2:4] = [[1, 2], [2, 2]]           # ties: the first max (row by row) wins
    x[1, 1, 0:2, 0:2] = [[-1, np.nan], [3, np.nan]]   # nan wins, and takes the gradient
    dy = np.arange(2 * 3 * 3 * 2, dtype=np.float32).reshape(2, 3, 3, 2) + 1
    lab = Lab(dev8)
    tx, tdy = lab.feed(x, "chunks", 3), lab.feed(dy, "tile")
    if kind == "max":
        y = popnn.max_pool2d(lab.g, tx, 2, lab.seq)
        dx = popnn.max_pool2d_backward(lab.g, tx, y, tdy, 2, lab.seq)
    else:
        y = popnn.avg_pool2d(lab.g, tx, 2, lab.seq)
        dx = popnn.avg_pool2d_backward(lab.g, tdy, x.shape, 2, lab.seq)
    lab.fetch(y=y, dx=dx)
    out = lab.run()
    _close(out["y"], pool_reference(x, kind, (2, 2), (2, 2), (0, 0))[0])
    want = pool_grad_reference(x, dy, kind, (2, 2), (2, 2), (0, 0))
    _close(out["dx"], want)
    if kind == "max":       # every window of zeros routes to its first element
        assert out["dx"][1, 2, 0, 0] == dy[1, 2, 0, 0] and out["dx"][1, 2, 1, 1] == 0
        assert out["dx"][0, 0, 2, 3] == dy[0, 0, 1, 1] and out["dx"][0, 0, 3, 2] == 0
        assert np.isnan(out["y"][1, 1, 0, 0]) and out["dx"][1, 1, 0, 1] == dy[1, 1, 0, 0]


def test_pooling_half(dev8):
    x = (np.arange(2 * 2 * 5 * 4, dtype=np.float32).reshape(2, 2, 5, 4) % 7) / 3
    lab = Lab(dev8)
    tx = lab.feed(x, "spread", dtype=poplar.HALF)
    y = popnn.avg_pool2d(lab.g, tx, 3, lab.seq, stride=1, padding=1)
    m = popnn.max_pool2d(lab.g, tx, 2, lab.seq)
    lab.fetch(y=y, m=m)
    out = lab.run()
    xh = x.astype(np.float16)
    assert out["y"].dtype == np.float16
    _close(out["y"], pool_reference(xh, "avg", (3, 3), (1, 1), (1, 1))[0], rtol=2e-3, atol=1e-3)
    _close(out["m"], pool_reference(xh, "max", (2, 2), (2, 2), (0, 0))[0], rtol=0, atol=0)


def test_pooling_placement_follows_the_data(dev16):
    """x on one tile: the pooled output and the gradient live there, and the pooling step
    moves nothing over the exchange; x by rows over tiles: at most 6 vertices per tile."""
    lab = Lab(dev16)
    x = np.random.default_rng(0).standard_normal((2, 4, 8, 8)).astype(np.float32)
    tx = lab.feed(x, "tile", seed=2)                 # tile 13
    y = popnn.max_pool2d(lab.g, tx, 2, lab.seq, name="pool_on_one_tile")
    dx = popnn.max_pool2d_backward(lab.g, tx, y, y, 2, lab.seq, name="grad_on_one_tile")
    spread = lab.feed(np.zeros((3, 5, 16, 4), np.float32), "spread")
    popnn.avg_pool2d(lab.g, spread, 2, lab.seq, stride=1, name="spread_pool")
    tiles = lambda t: {k for k, iv in enumerate(lab.g.get_tile_mapping(t)) if iv}  # noqa: E731
    assert tiles(y) == tiles(dx) == {13}
    lab.fetch(y=y)
    lab.run()
    prof = lab.engine.profile()
    local = [s for s in prof.steps if s.name in ("pool_on_one_tile", "grad_on_one_tile")]
    assert len(local) == 2
    for step in local:          # zero phases are not recorded: compute and sync only
        assert {kind for kind, _ in step.phases} == {"sync", "compute"}
    summary = prof.graph
    for cs in ("pool_on_one_tile", "spread_pool"):
        vids = summary.vertices_in(cs)
        per_tile = np.bincount(summary.vertex_tile[vids], minlength=16)
        assert 1 <= per_tile.max() <= 6
    assert len(set(summary.vertex_tile[summary.vertices_in("spread_pool")])) == 16


def test_pooling_cycle_estimates(dev8):
    geometry = len(popnn.pooling.Window.of((1, 1, 6, 6), 3, 1, 1).geometry("max"))
    assert poolcodelets.taps_of(geometry) == 9
    assert poolcodelets.MaxPool.cycle_estimate(geometry, 4, (30, 12), (24, 8)) == \
        10 + (6 + 24 * 11) + (6 + 8 * 11)
    assert poolcodelets.AvgPool.cycle_estimate(geometry, 2, (30,), (24,)) == 10 + 6 + 24 * 12
    assert poolcodelets.AvgPoolGrad.cycle_estimate(geometry, 2, (5,), (7,)) == \
        10 + 4 + 6 + 5 * 11
    lab = Lab(dev8)
    tx = lab.feed(np.ones((1, 1, 6, 6), np.float32), "tile")
    popnn.max_pool2d(lab.g, tx, 3, lab.seq, stride=1, padding=1, name="p")
    lab.run()
    stats = lab.engine.profile().vertex_stats["MaxPool"]
    # one tile: the 6 rows cut into 6 one-row vertices, each 10 + 6 + 6 * (9 + 2)
    assert stats == {"count": 6, "cycles": 6 * (10 + 6 + 6 * 11)}


def test_pooling_errors(dev8):
    lab = Lab(dev8)
    x = lab.feed(np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(GraphError, match="more than half the kernel"):
        popnn.max_pool2d(lab.g, x, 2, lab.seq, padding=2)
    with pytest.raises(GraphError, match="does not fit"):
        popnn.max_pool2d(lab.g, x, 5, lab.seq)
    with pytest.raises(GraphError, match="NCHW"):
        popnn.max_pool2d(lab.g, x[0], 2, lab.seq)
    with pytest.raises(GraphError, match="unknown pooling type"):
        popnn.pooling.pool(lab.g, "min", x, 2, 2, 0, lab.seq)
    with pytest.raises(GraphError, match="needs the forward input"):
        popnn.pooling.pool_input_gradient(lab.g, "max", x.shape, None, x, 2, 2, 0, lab.seq)
    with pytest.raises(GraphError, match="gives"):
        popnn.avg_pool2d_backward(lab.g, x, (1, 1, 4, 4), 2, lab.seq)
    with pytest.raises(GraphError, match="FLOAT or HALF"):
        popnn.max_pool2d(lab.g, lab.feed(np.zeros((1, 1, 2, 2), np.int32)), 2, lab.seq)


# --- softmax cross-entropy -----------------------------------------------------------------------
@FEW
@given(b=st.integers(1, 9), c=st.integers(1, 12), scale=st.sampled_from([1.0, 30.0, 1e4]),
       how=st.sampled_from(LAYOUTS), seed=st.integers(0, 2 ** 16))
def test_calc_loss(dev8, b, c, scale, how, seed):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((b, c)) * scale).astype(np.float32)
    labels = rng.integers(0, c, b).astype(np.int32)
    lab = Lab(dev8)
    tl, ty = lab.feed(logits, how, seed), lab.feed(labels, "spread")
    r = popnn.calc_loss(lab.g, tl, ty, lab.seq, num_correct=True)
    loss, grad = r
    assert loss.shape == () and grad.shape == (b, c) and r.num_correct.dtype == poplar.INT
    lab.fetch(loss=loss, grad=grad, per_sample=r.per_sample, correct=r.num_correct)
    out = lab.run()
    want = cross_entropy_reference(logits, labels)
    tol = 2e-6 * max(1.0, float(np.abs(logits).max()))        # float32 of m - x[label]
    assert np.isfinite(out["per_sample"]).all()
    _close(out["per_sample"], want, atol=tol)
    _close(out["loss"], want.mean(), atol=tol)
    assert out["correct"] == int((logits.argmax(1) == labels).sum())
    onehot = np.eye(c)[labels]
    _close(out["grad"], (_softmax(logits.astype(np.float64)) - onehot) / b, atol=1e-6)


def test_calc_loss_gradient_is_the_numerical_one(dev8):
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((3, 4)).astype(np.float32)
    labels = np.array([2, 0, 3], np.int32)
    lab = Lab(dev8)
    loss, grad = popnn.calc_loss(lab.g, lab.feed(logits, "spread"), lab.feed(labels), lab.seq)
    lab.fetch(grad=grad)
    numeric = numerical_gradient(lambda z: cross_entropy_reference(z, labels).mean(), logits)
    _close(lab.run()["grad"], numeric, rtol=1e-4, atol=1e-6)


def test_calc_loss_labels_out_of_range_scale_and_half(dev8):
    logits = np.array([[1, 2, 3], [3, 2, 1], [0, 0, 0], [5, 5, 1]], np.float32)
    labels = np.array([2, -1, 0, 1], np.int32)
    lab = Lab(dev8)
    tl = lab.feed(logits, "spread", dtype=poplar.HALF)
    r = popnn.calc_loss(lab.g, tl, lab.feed(labels), lab.seq, num_correct=True, grad_scale=1.0)
    lab.fetch(loss=r.loss, grad=r.grad, per_sample=r.per_sample, correct=r.num_correct)
    out = lab.run()
    assert out["grad"].dtype == np.float16
    ok = labels >= 0
    want = np.zeros(4)
    want[ok] = cross_entropy_reference(logits[ok], labels[ok])
    _close(out["per_sample"], want, atol=1e-6)
    _close(out["loss"], want.sum() / 4, atol=1e-6)
    assert out["correct"] == 2                 # rows 0 and 2 (ties: the first class)
    g = _softmax(logits.astype(np.float64)) - np.eye(3)[np.maximum(labels, 0)]
    g[~ok] = 0
    _close(out["grad"], g, rtol=1e-3, atol=1e-3)


def test_calc_loss_errors(dev8):
    lab = Lab(dev8)
    x = lab.feed(np.zeros((2, 3), np.float32))
    with pytest.raises(GraphError, match="INT labels"):
        popnn.calc_loss(lab.g, x, lab.feed(np.zeros(2, np.float32)), lab.seq)
    with pytest.raises(GraphError, match=r"\[B, C\]"):
        popnn.calc_loss(lab.g, x, lab.feed(np.zeros(3, np.int32)), lab.seq)
    with pytest.raises(GraphError, match="unknown loss type"):
        popnn.calc_loss(lab.g, x, lab.feed(np.zeros(2, np.int32)), lab.seq, "sum_squared")
    with pytest.raises(GraphError, match="unknown non-linearity"):
        popnn.non_linearity(lab.g, "swish", x, lab.seq)
    with pytest.raises(GraphError, match="must match"):
        popnn.non_linearity_input_gradient(lab.g, "relu", x, x[0], lab.seq)
    with pytest.raises(GraphError, match="FLOAT or HALF"):
        popnn.non_linearity(lab.g, "relu", lab.feed(np.zeros(2, np.int32)), lab.seq)


# --- modes and determinism -----------------------------------------------------------------------
def test_codelet_modes_agree_bit_for_bit(dev8):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 7, 5)).astype(np.float32)
    logits = rng.standard_normal((5, 7)).astype(np.float32)
    results = []
    for mode in ("compiled", "python"):
        lab = Lab(dev8)
        tx = lab.feed(x, "chunks", 1)
        y = popnn.pooling.pool(lab.g, "max", tx, 3, 2, 1, lab.seq)
        dx = popnn.pooling.pool_input_gradient(lab.g, "max", tx, y, y, 3, 2, 1, lab.seq)
        a = popnn.avg_pool2d(lab.g, tx, 2, lab.seq, stride=1, count_include_pad=False)
        da = popnn.avg_pool2d_backward(lab.g, a, x.shape, 2, lab.seq, stride=1,
                                       count_include_pad=False)
        r = popnn.calc_loss(lab.g, lab.feed(logits, "spread"), lab.feed(np.arange(5) % 7,
                                                                           dtype=poplar.INT),
                            lab.seq)
        lab.fetch(y=y, dx=dx, a=a, da=da, loss=r.loss, grad=r.grad)
        out = lab.run(MODES[mode])
        results.append((out, lab.engine.profile().total_cycles))
    (first, c1), (second, c2) = results
    assert c1 == c2
    for k in first:
        np.testing.assert_array_equal(bits(first[k]), bits(second[k]))
