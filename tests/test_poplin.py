"""poplin: planned matrix products and convolutions on simulated tiles, against numpy.

Shapes come from hypothesis (odd sizes, 1-element, sizes not divisible by tile counts,
tall/skinny); gradients are checked against numerical differentiation; plans must fit tile
memory (or fail with a clear TileMemoryError); results and cycles are deterministic.
"""
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import MODES, bits
from hypothesis import given, settings
from hypothesis import strategies as st

import ipulab
from ipulab import poplar, poplin, poputil
from ipulab.errors import GraphError, TileMemoryError
from ipulab.poplar import program as prog
from ipulab.poplin.codelets import ReducePartials, rows_product

RNG = np.random.default_rng(1234)


def _host(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _input(g, shape, name, dtype=poplar.FLOAT):
    t = g.add_variable(dtype, list(shape), name)
    poputil.map_tensor_linearly(g, t)
    return t


def _matmul(dev, ha, hb, created=True, options=None, mode=None, dtype=poplar.FLOAT):
    """Build, run and read back a @ b; returns (result, engine, plan)."""
    g = poplar.Graph(dev.target)
    if created:
        a = poplin.create_mat_mul_input_lhs(g, dtype, ha.shape, hb.shape, "a", options)
        b = poplin.create_mat_mul_input_rhs(g, dtype, ha.shape, hb.shape, "b", options)
    else:
        a, b = _input(g, ha.shape, "a", dtype), _input(g, hb.shape, "b", dtype)
    seq = prog.Sequence()
    c = poplin.mat_mul(g, a, b, seq, "c", options)
    g.create_host_write("a", a), g.create_host_write("b", b), g.create_host_read("c", c)
    e = poplar.Engine(g, seq, mode or {})
    e.load(dev)
    e.write_tensor("a", ha), e.write_tensor("b", hb)
    e.run()
    groups = ha.shape[0] if ha.ndim == 3 else 1
    plan = poplin.plan_mat_mul(dev.target, ha.shape[-2], ha.shape[-1], hb.shape[-1], dtype,
                               options, groups=groups)
    return e.read_tensor("c"), e, plan


def _close(got, want, k, rtol=1e-5):
    scale = np.sqrt(max(k, 1)) * max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * 10 * scale)


dims = st.integers(1, 40)


@settings(max_examples=25)
@given(m=dims, k=st.integers(0, 70), n=dims, created=st.booleans())
def test_mat_mul_matches_numpy(dev16, m, k, n, created):
    ha, hb = _host((m, k)), _host((k, n))
    c, e, plan = _matmul(dev16, ha, hb, created)
    assert c.shape == (m, n)
    _close(c, ha.astype(np.float64) @ hb, k)
    prof = e.profile()
    assert prof.memory_total.max() <= dev16.target.bytes_per_tile
    assert plan.memory["total"] <= plan.memory_available
    if created:      # inputs where the plan wants them: the prediction is the simulation
        assert plan.total_cycles == prof.total_cycles
        assert plan.memory["total"] == prof.memory_total.max()


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 200, 1), (300, 2, 1), (1, 3, 250),
                                   (97, 1, 89), (6, 7, 8), (5, 0, 3)])
def test_mat_mul_edge_shapes(dev16, m, k, n):
    ha, hb = _host((m, k)), _host((k, n))
    c, _, _ = _matmul(dev16, ha, hb, created=False)
    _close(c, ha.astype(np.float64) @ hb, k)


def test_transposed_and_sliced_operands(dev16):
    g = poplar.Graph(dev16.target)
    a, b = _input(g, (9, 13), "a"), _input(g, (11, 20), "b")
    seq = prog.Sequence()
    c = poplin.mat_mul(g, a.transpose(), b[:9, ::2], seq)      # (13 x 9) @ (9 x 10)
    g.create_host_write("a", a), g.create_host_write("b", b), g.create_host_read("c", c)
    e = poplar.Engine(g, seq)
    e.load(dev16)
    ha, hb = _host((9, 13)), _host((11, 20))
    e.write_tensor("a", ha), e.write_tensor("b", hb)
    e.run()
    _close(e.read_tensor("c"), ha.T.astype(np.float64) @ hb[:9, ::2], 9)


@settings(max_examples=8)
@given(groups=st.integers(1, 5), m=st.integers(1, 12), k=st.integers(1, 30),
       n=st.integers(1, 12), created=st.booleans())
def test_grouped_mat_mul(dev16, groups, m, k, n, created):
    ha, hb = _host((groups, m, k)), _host((groups, k, n))
    c, _, _ = _matmul(dev16, ha, hb, created)
    assert c.shape == (groups, m, n)
    _close(c, np.matmul(ha.astype(np.float64), hb), k)


def test_mat_mul_grouped_needs_rank_3(dev16):
    g = poplar.Graph(dev16.target)
    with pytest.raises(GraphError, match="rank-3"):
        poplin.mat_mul_grouped(g, _input(g, (2, 3), "a"), _input(g, (3, 4), "b"),
                               prog.Sequence())


def test_half_mat_mul_rounds_once(dev16):
    ha = _host((10, 300)).astype(np.float16)
    hb = _host((300, 7)).astype(np.float16)
    c, _, plan = _matmul(dev16, ha, hb, dtype=poplar.HALF)
    assert c.dtype == np.float16 and plan.dtype == poplar.HALF
    want = (ha.astype(np.float64) @ hb.astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(c.astype(np.float64), want.astype(np.float64),
                               rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("grouped", [False, True])
def test_mat_mul_acc(dev16, grouped):
    lead = (3,) if grouped else ()
    ha, hb, hc = _host(lead + (7, 40)), _host(lead + (40, 9)), _host(lead + (7, 9))
    g = poplar.Graph(dev16.target)
    a, b, c = _input(g, ha.shape, "a"), _input(g, hb.shape, "b"), _input(g, hc.shape, "c")
    seq = prog.Sequence()
    assert poplin.mat_mul_acc(g, c, -0.5, a, b, seq) is c
    for name, t in (("a", a), ("b", b), ("c", c)):
        g.create_host_write(name, t)
    g.create_host_read("c_out", c)
    e = poplar.Engine(g, seq)
    e.load(dev16)
    e.write_tensor("a", ha), e.write_tensor("b", hb), e.write_tensor("c", hc)
    e.run()
    _close(e.read_tensor("c_out"), hc - 0.5 * np.matmul(ha.astype(np.float64), hb), 40)


def test_mismatched_operands_are_rejected(dev16):
    g = poplar.Graph(dev16.target)
    a, b = _input(g, (3, 4), "a"), _input(g, (5, 6), "b")
    with pytest.raises(GraphError, match="do not multiply"):
        poplin.mat_mul(g, a, b, prog.Sequence())
    h = _input(g, (4, 2), "h", poplar.HALF)
    with pytest.raises(GraphError, match="HALF"):
        poplin.mat_mul(g, a, h, prog.Sequence())
    with pytest.raises(GraphError, match="unknown matmul option"):
        poplin.plan_mat_mul(dev16.target, 3, 4, 5, options={"bogus": 1})
    with pytest.raises(GraphError, match="split"):
        poplin.plan_mat_mul(dev16.target, 3, 4, 5, options={"split": (4, 4, 4)})


# --- plans ----------------------------------------------------------------------------------
@settings(max_examples=40)
@given(m=st.integers(1, 5000), k=st.integers(1, 5000), n=st.integers(1, 5000),
       groups=st.integers(1, 4), arch=st.sampled_from(["ipu1", "ipu2"]))
def test_plans_never_exceed_tile_memory(m, k, n, groups, arch):
    target = ipulab.devices.ipu(arch, tiles_per_ipu=16).target
    try:
        plan = poplin.plan_mat_mul(target, m, k, n, groups=groups)
    except TileMemoryError as err:
        assert "does not fit" in str(err) and err.needed > err.available
        return
    assert plan.memory["total"] <= plan.memory_available < target.bytes_per_tile
    assert plan.tiles_used <= target.num_tiles
    temporaries = plan.memory["partials"] + plan.memory["exchange_buffers"]
    assert temporaries <= 0.6 * target.bytes_per_tile or "availableMemoryProportion" in plan.note


def test_simulated_memory_matches_the_plan_near_the_limit():
    dev = ipulab.devices.ipu("ipu1", tiles_per_ipu=4)
    ha, hb = _host((200, 160)), _host((160, 180))
    opts = {"availableMemoryProportion": 1.0}
    c, e, plan = _matmul(dev, ha, hb, options=opts)
    _close(c, ha.astype(np.float64) @ hb, 160)
    used = e.profile().memory_total.max()
    assert used <= plan.memory["total"] <= plan.memory_available
    assert used > 0.5 * dev.target.bytes_per_tile       # the plan really is near the limit


def test_too_large_a_problem_is_a_clear_tile_memory_error(dev16):
    with pytest.raises(TileMemoryError, match="does not fit on 16 tiles"):
        poplin.plan_mat_mul(dev16.target, 4000, 4000, 4000)
    g = poplar.Graph(dev16.target)
    with pytest.raises(TileMemoryError):
        poplin.create_mat_mul_input_lhs(g, poplar.FLOAT, [4000, 4000], [4000, 4000], "a")


def test_forced_split_is_predicted_as_simulated(dev16):
    ha, hb = _host((24, 48)), _host((48, 18))
    for split in [(1, 1, 1), (2, 2, 2), (1, 8, 2), (3, 1, 5), (16, 1, 1)]:
        c, e, plan = _matmul(dev16, ha, hb, options={"split": split})
        assert tuple(plan.split)[1:] == split
        assert plan.total_cycles == e.profile().total_cycles
        _close(c, ha.astype(np.float64) @ hb, 48)


def test_full_bow_plan_reaches_over_half_of_peak():
    target = ipulab.devices.ipu("bow").target
    plan = poplin.plan_mat_mul(target, 1024, 1024, 1024)
    assert plan.utilisation > 0.5
    assert plan.tiles_used <= 1472 and plan.memory["total"] <= plan.memory_available
    assert plan.split.k > 1 and plan.cycles["reduction_exchange"] > 0
    assert "split" in plan.summary() and plan.to_dict()["tiles_used"] == plan.tiles_used
    assert plan.macs_per_cycle == target.chip.fp32_flops_per_cycle_per_tile // 2


def test_plans_are_kept_by_what_decides_them(dev16, monkeypatch):
    """A product asked for again is not searched again (a pipeline asks for the same few many
    times), on an equal target too; an edit to one plan's dicts leaves the next as planned, and
    another cost model, size, option or virtual graph's tiles is planned afresh."""
    from dataclasses import replace

    from ipulab.poplin import plan as plans
    searched = []
    real = plans._planned
    monkeypatch.setattr(plans, "_planned", lambda *a: searched.append(a[1:]) or real(*a))
    monkeypatch.setattr(plans, "_plans", {})
    first = poplin.plan_mat_mul(dev16.target, 24, 48, 18)
    first.cycles["total"], first.memory["total"] = -1, -1
    again = poplin.plan_mat_mul(ipulab.devices.ipu("ipu2", 16).target, 24, 48, 18)
    assert len(searched) == 1 and again.total_cycles > 0 and again.memory["total"] > 0
    assert again == poplin.plan_mat_mul(dev16.target, 24, 48, 18)
    slower = ipulab.Target(dev16.target.chip, 1, 16, replace(dev16.target.cost,
                                                               exchange_setup_cycles=999))
    poplin.plan_mat_mul(slower, 24, 48, 18)
    poplin.plan_mat_mul(dev16.target, 24, 48, 19)
    poplin.plan_mat_mul(dev16.target, 24, 48, 18, options={"split": (2, 2, 2)})
    half = poplar.Graph(dev16.target).create_virtual_graph(8, 16).target   # a shard's 8 tiles
    assert poplin.plan_mat_mul(half, 24, 48, 18).num_tiles == 8
    assert len(searched) == 5
    monkeypatch.setattr(plans, "PLANS_KEPT", 2)
    poplin.plan_mat_mul(dev16.target, 8, 8, 8)
    assert len(plans._plans) == 2 and len(searched) == 6


# --- determinism and codelet modes -----------------------------------------------------------
def test_determinism(dev16):
    ha, hb = _host((33, 70)), _host((70, 21))
    first, e1, _ = _matmul(dev16, ha, hb)
    e1.run()
    again = e1.read_tensor("c")
    second, e2, _ = _matmul(dev16, ha, hb)
    assert np.array_equal(bits(first), bits(again)) and np.array_equal(bits(first), bits(second))
    assert e1.profile().total_cycles == e2.profile().total_cycles


@pytest.mark.parametrize("mode", ["checked", "python"])
def test_codelet_modes_agree(dev16, mode):
    ha, hb = _host((8, 30)), _host((30, 5))
    want, e_c, _ = _matmul(dev16, ha, hb)
    got, e_m, _ = _matmul(dev16, ha, hb, mode=MODES[mode])
    # blocks this small go to rows_product, not BLAS: the same bits in every mode
    np.testing.assert_array_equal(bits(got), bits(want))
    assert e_m.profile().total_cycles == e_c.profile().total_cycles


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 11), k=st.integers(0, 40), n=st.integers(1, 30), data=st.data())
def test_rows_product_sums_in_order_in_float32(m, k, n, data):
    """SIMD lanes or not, each c[i, j] is ((0 + a[i,0] b[0,j]) + a[i,1] b[1,j]) + ..., rounded
    to float32 at every step, for any row range (and nothing outside it is written)."""
    r0 = data.draw(st.integers(0, m - 1))
    r1 = data.draw(st.integers(r0, m))
    a, b = _host(m * k), _host(k * n)
    c = np.full(m * n, np.nan, np.float32)
    rows_product(a, b, c, k, n, r0, r1)
    want = np.full((m, n), np.nan, np.float32)
    want[r0:r1] = 0
    for kk in range(k):
        want[r0:r1] += a.reshape(m, k)[r0:r1, kk:kk + 1] * b.reshape(k, n)[kk]
    np.testing.assert_array_equal(bits(c), bits(want.ravel()))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), q=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_reduce_partials_sums_each_output_in_order_in_float32(dev4, mode, n, q, seed):
    """out[j] = ((p[j] + p[n + j]) + p[2n + j]) + ..., rounded to float32 at every step, in
    every codelet mode: with few outputs (one at a time) and with many (partial by partial)."""
    rng = np.random.default_rng(seed)
    host = (rng.standard_normal(q * n) * 10.0 ** rng.integers(-3, 4, q * n)).astype(np.float32)
    g = poplar.Graph(dev4.target)
    partials = g.add_variable(poplar.FLOAT, [q * n], "partials")
    out = g.add_variable(poplar.FLOAT, [n], "out")
    g.set_tile_mapping(partials, 1)
    g.set_tile_mapping(out, 1)
    cs = g.add_compute_set("reduce")
    g.add_vertex(cs, ReducePartials, {"partials": partials, "out": out}, tile=1)
    g.create_host_write("partials", partials)
    g.create_host_read("out", out)
    e = poplar.Engine(g, prog.Execute(cs), mode[1])
    e.load(dev4)
    e.write_tensor("partials", host)
    e.run()
    want = host[:n].copy()
    for i in range(1, q):
        want += host[i * n:(i + 1) * n]
    np.testing.assert_array_equal(bits(e.read_tensor("out")), bits(want))


# --- convolution -------------------------------------------------------------------------------
def ref_conv(x, w, stride, padding):
    (sh, sw), (ph, pw) = stride, padding
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho, wo = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    out = np.zeros((n, o, ho, wo))
    for dy in range(kh):
        for dx in range(kw):
            patch = xp[:, :, dy:dy + (ho - 1) * sh + 1:sh, dx:dx + (wo - 1) * sw + 1:sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, dy, dx])
    return out


def _conv_engine(dev, xs, ws, stride, padding):
    """Forward, backward-input and backward-weights in one program; returns a runner."""
    g = poplar.Graph(dev.target)
    x, w = _input(g, xs, "x"), _input(g, ws, "w")
    seq = prog.Sequence()
    out = poplin.conv2d(g, x, w, seq, stride, padding)
    go = _input(g, out.shape, "go")
    dx = poplin.conv2d_backward_input(g, go, w, xs, seq, stride, padding)
    dw = poplin.conv2d_backward_weights(g, x, go, ws, seq, stride, padding)
    assert dx.shape == tuple(xs) and dw.shape == tuple(ws)
    for name, t in (("x", x), ("w", w), ("go", go)):
        g.create_host_write(name, t)
    for name, t in (("out", out), ("dx", dx), ("dw", dw)):
        g.create_host_read(name, t)
    e = poplar.Engine(g, seq)
    e.load(dev)

    def run(hx, hw, hgo):
        e.write_tensor("x", hx), e.write_tensor("w", hw), e.write_tensor("go", hgo)
        e.run()
        return e.read_tensor("out"), e.read_tensor("dx"), e.read_tensor("dw")
    return run, out.shape


def _numerical_grad(f, arr, eps):
    """Central differences of the scalar function f at arr (float64)."""
    grad = np.zeros(arr.shape)
    for idx in np.ndindex(*arr.shape):
        hi, lo = arr.copy(), arr.copy()
        hi[idx] += eps
        lo[idx] -= eps
        grad[idx] = (f(hi) - f(lo)) / (2 * eps)
    return grad


@settings(max_examples=12)
@given(n=st.integers(1, 2), c=st.integers(1, 3), o=st.integers(1, 3), h=st.integers(1, 7),
       w=st.integers(1, 7), kh=st.integers(1, 3), kw=st.integers(1, 3),
       sh=st.integers(1, 3), sw=st.integers(1, 3), ph=st.integers(0, 2), pw=st.integers(0, 2))
def test_conv2d_and_its_backward_passes(dev16, n, c, o, h, w, kh, kw, sh, sw, ph, pw):
    if h + 2 * ph < kh or w + 2 * pw < kw:
        with pytest.raises(GraphError, match="does not fit"):
            poplin.conv2d_output_shape((n, c, h, w), (o, c, kh, kw), (sh, sw), (ph, pw))
        return
    xs, ws = (n, c, h, w), (o, c, kh, kw)
    run, out_shape = _conv_engine(dev16, xs, ws, (sh, sw), (ph, pw))
    hx, hw, hgo = _host(xs), _host(ws), _host(out_shape)
    out, dx, dw = run(hx, hw, hgo)
    x64, w64, go64 = (a.astype(np.float64) for a in (hx, hw, hgo))
    np.testing.assert_allclose(out, ref_conv(x64, w64, (sh, sw), (ph, pw)), atol=1e-4)
    # L = sum(conv(x, w) * go) is linear in x and in w: its differences are exact
    gx = _numerical_grad(lambda z: (ref_conv(z, w64, (sh, sw), (ph, pw)) * go64).sum(), x64, 1)
    gw = _numerical_grad(lambda z: (ref_conv(x64, z, (sh, sw), (ph, pw)) * go64).sum(), w64, 1)
    np.testing.assert_allclose(dx, gx, atol=1e-4)
    np.testing.assert_allclose(dw, gw, atol=1e-4)


def test_conv_gradients_match_numerical_differentiation(dev16):
    """L = sum(tanh(conv(x, w)) * r): simulated backward passes vs central differences."""
    xs, ws, stride, padding = (2, 2, 6, 5), (3, 2, 3, 2), (2, 1), (1, 0)
    run, out_shape = _conv_engine(dev16, xs, ws, stride, padding)
    hx, hw, r = _host(xs), _host(ws), _host(out_shape).astype(np.float64)

    def loss(x, w):
        return float((np.tanh(ref_conv(x, w, stride, padding)) * r).sum())

    x64, w64 = hx.astype(np.float64), hw.astype(np.float64)
    go = ((1 - np.tanh(ref_conv(x64, w64, stride, padding)) ** 2) * r).astype(np.float32)
    _, dx, dw = run(hx, hw, go)
    np.testing.assert_allclose(dx, _numerical_grad(lambda z: loss(z, w64), x64, 1e-5),
                               rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(dw, _numerical_grad(lambda z: loss(x64, z), w64, 1e-5),
                               rtol=1e-3, atol=1e-4)


def test_mat_mul_gradients_match_numerical_differentiation(dev16):
    """L = sum(sin(a @ b)): dA = dC @ B^T and dB = A^T @ dC, as products of views."""
    ha, hb = _host((5, 7)), _host((7, 4))
    dc = np.cos(ha.astype(np.float64) @ hb).astype(np.float32)
    g = poplar.Graph(dev16.target)
    a, b, gc = _input(g, ha.shape, "a"), _input(g, hb.shape, "b"), _input(g, dc.shape, "dc")
    seq = prog.Sequence()
    da = poplin.mat_mul(g, gc, b.transpose(), seq, "da")
    db = poplin.mat_mul(g, a.transpose(), gc, seq, "db")
    for name, t in (("a", a), ("b", b), ("dc", gc)):
        g.create_host_write(name, t)
    g.create_host_read("da", da), g.create_host_read("db", db)
    e = poplar.Engine(g, seq)
    e.load(dev16)
    e.write_tensor("a", ha), e.write_tensor("b", hb), e.write_tensor("dc", dc)
    e.run()
    a64, b64 = ha.astype(np.float64), hb.astype(np.float64)
    np.testing.assert_allclose(e.read_tensor("da"), _numerical_grad(
        lambda z: np.sin(z @ b64).sum(), a64, 1e-6), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(e.read_tensor("db"), _numerical_grad(
        lambda z: np.sin(a64 @ z).sum(), b64, 1e-6), rtol=1e-4, atol=1e-4)


def test_weights_transpose_chans_flip_xy(dev16):
    """(out, in, kh, kw) -> (in, out, kh, kw) flipped, in a tensor laid out as the
    backward-input product wants its left operand: one copy, then whole blocks gathered."""
    g = poplar.Graph(dev16.target)
    w = _input(g, (5, 3, 3, 2), "w")
    seq = prog.Sequence()
    wt = poplin.weights_transpose_chans_flip_xy(g, w, seq, batch_positions=64, name="wt")
    assert wt.shape == (3, 5, 3, 2) and g.owns(wt)
    g.create_host_write("w", w), g.create_host_read("wt", wt)
    e = poplar.Engine(g, seq)
    e.load(dev16)
    hw = _host((5, 3, 3, 2))
    e.write_tensor("w", hw)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("wt"), hw.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])


def test_conv_rejects_bad_shapes(dev16):
    g = poplar.Graph(dev16.target)
    x, w = _input(g, (1, 3, 5, 5), "x"), _input(g, (2, 4, 3, 3), "w")
    with pytest.raises(GraphError, match="channels"):
        poplin.conv2d(g, x, w, prog.Sequence())
    w2 = _input(g, (2, 3, 3, 3), "w2")
    with pytest.raises(GraphError, match="stride"):
        poplin.conv2d(g, x, w2, prog.Sequence(), stride=0)
    go = _input(g, (1, 2, 4, 4), "go")
    with pytest.raises(GraphError, match="grad_out"):
        poplin.conv2d_backward_input(g, go, w2, (1, 3, 5, 5), prog.Sequence())


def test_plan_conv2d_is_the_forward_product(dev16):
    plan = poplin.plan_conv2d(dev16.target, (8, 16, 32, 32), (32, 16, 3, 3), 1, 1)
    assert tuple(plan.dims) == (1, 32, 16 * 9, 8 * 32 * 32)
    assert plan.memory["total"] <= plan.memory_available


def test_poplibs_benchmark_runs_at_small_sizes():
    """benchmarks/poplibs.py at tiny sizes, so `make bench` cannot rot (it checks results)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import poplibs
    mm = poplibs.bench_matmul(40, 50, 30, arch="ipu2", tiles_per_ipu=16)
    cv = poplibs.bench_conv(2, 3, 6, 4, arch="ipu2", tiles_per_ipu=16)
    assert mm["cycles"] == mm["plan"].total_cycles       # inputs mapped as planned
    for r in (mm, cv):
        assert 0 < r["utilisation"] <= 1 and min(r["t_sim"], r["t_np"]) > 0
