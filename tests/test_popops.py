"""popops: expressions, maps, named operations, reductions, fills and casts, all computed by
generated codelets on simulated tiles and checked against numpy; determinism; and work placed
where the data lives."""
import numpy as np
import pytest
from helpers import MODES, bits
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ipulab import poplar, popops, poputil
from ipulab.errors import GraphError
from ipulab.poplar import program as prog
from ipulab.poplar.types import as_type
from ipulab.popops import expr as E
from ipulab.popops.codegen import generated_codelets
from ipulab.popops.expr import _1, _2, _3

FEW = settings(max_examples=25, deadline=None)
PLACEMENTS = ("linear", "grain", "one", "scatter")


class Case:
    """A graph on a small device, its host inputs and outputs, run in one engine."""

    def __init__(self, dev):
        self.dev, self.g, self.seq = dev, poplar.Graph(dev.target), prog.Sequence()
        self.writes, self.reads = {}, {}

    def var(self, array, how="linear", seed=0):
        """A variable holding array (written before the run), mapped `how`."""
        array = np.asarray(array)
        t = self.g.add_variable(as_type(array.dtype), array.shape, f"in{len(self.writes)}")
        place(self.g, t, how, seed)
        self.writes[t.name] = (t, array)
        self.g.create_host_write(t.name, t)
        return t

    def read(self, t):
        name = f"out{len(self.reads)}"
        self.g.create_host_read(name, t)
        self.reads[name] = t
        return name

    def run(self, options=None, engine=None):
        e = engine or poplar.Engine(self.g, self.seq, options or {})
        e.load(self.dev)
        for name, (t, array) in self.writes.items():
            e.write_tensor(name, array)
        e.run()
        self.engine = e
        return {name: e.read_tensor(name) for name in self.reads}


def place(g, t, how, seed=0):
    n, tiles = t.num_elements(), g.target.num_tiles
    if how == "linear":
        poputil.map_tensor_linearly(g, t, 1, 1)
    elif how == "grain":
        poputil.map_tensor_linearly(g, t, 3, 2)
    elif how == "one":
        g.set_tile_mapping(t, seed % tiles)
    else:   # every element on a random tile
        where = np.random.default_rng(seed).integers(0, tiles, n)
        g.set_tile_mapping(t, [[(int(i), int(i) + 1) for i in np.flatnonzero(where == k)]
                               for k in range(tiles)])


@st.composite
def broadcast_pair(draw, max_dims=3, max_side=7):
    """(output shape, [input shapes]): inputs broadcast to the output (leading dims dropped,
    others set to 1), never a one-element input against a larger output (that case has its
    own codelets and its own test)."""
    out = draw(hnp.array_shapes(min_dims=1, max_dims=max_dims, min_side=1, max_side=max_side))
    shapes = []
    for _ in range(2):
        shape = list(out[draw(st.integers(0, len(out) - 1)):])
        shape = [1 if draw(st.booleans()) else n for n in shape]
        if np.prod(shape) == 1 < np.prod(out):
            shape = list(out)
        shapes.append(tuple(shape))
    return out, shapes


def floats(shape, lo=-8.0, hi=8.0):
    return hnp.arrays(np.float32, shape, elements=st.floats(lo, hi, width=32))


def ints(shape, lo=-50, hi=50):
    return hnp.arrays(np.int32, shape, elements=st.integers(lo, hi))


# --- expressions ------------------------------------------------------------------------------
def test_expressions_build_trees():
    e = E.select(E.exp(_1), _2 * 2, _1 > 0) + 1
    assert str(e) == "(select(exp(_1), (_2 * 2), (_1 > 0)) + 1)"
    assert str(2 - _1) == "(2 - _1)" and str(-_1) == "(-_1)" and str(~(_1 < _2)) == "(~(_1 < _2))"
    assert str(np.float32(0.5) * _1) == "(0.5 * _1)"          # numpy scalars defer to Expr
    assert str(E._12) == "_12" and E.placeholder(12).placeholders() == {12}
    assert str(E.cast(_1, np.int32)) == "cast(_1, INT)"
    assert str(E.max(_1, 3) | E.min(_2, _3)) == "(max(_1, 3) | min(_2, _3))"
    assert str(E.const(2, poplar.HALF) + abs(_1)) == "(const(2, HALF) + abs(_1))"
    assert (_1 + _3).placeholders() == {1, 3}
    assert E.abs(-3) == 3
    with pytest.raises(GraphError, match="truth value"):
        bool(_1 < _2)
    with pytest.raises(GraphError, match="truth value"):
        _ = 0 < _1 < 2
    with pytest.raises(GraphError, match="numbered from 1"):
        E.placeholder(0)
    with pytest.raises(AttributeError):
        E._x


def test_operation_names():
    assert popops.Operation.parse("add") is popops.Operation.ADD
    assert popops.Operation.parse("SQUARE_ADD") is popops.Operation.SQUARE_ADD
    assert popops.Operation.parse("logicalOr") is popops.Operation.LOGICAL_OR
    with pytest.raises(GraphError, match="unknown reduction"):
        popops.Operation.parse("mean")


# --- element-wise operations against numpy -----------------------------------------------------
BINARY_FLOAT = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
    "min": np.minimum, "equal": np.equal, "not_equal": np.not_equal, "gt": np.greater,
    "gteq": np.greater_equal, "lt": np.less, "lteq": np.less_equal,
}


@FEW
@given(data=st.data(), shapes=broadcast_pair(), how=st.sampled_from(PLACEMENTS),
       seed=st.integers(0, 99))
def test_binary_float_ops_broadcast(dev8, data, shapes, how, seed):
    _, (sa, sb) = shapes
    a = data.draw(floats(sa))
    b = data.draw(floats(sb))
    c = Case(dev8)
    ta, tb = c.var(a, how, seed), c.var(b, "linear")
    pos = c.var(np.abs(b) + np.float32(0.5), how, seed + 1)
    names = {op: c.read(getattr(popops, op)(c.g, ta, tb, c.seq)) for op in BINARY_FLOAT}
    div = c.read(popops.div(c.g, ta, pos, c.seq))
    pw = c.read(popops.pow(c.g, pos, ta, c.seq, name="pow"))
    out = c.run()
    for op, fn in BINARY_FLOAT.items():
        np.testing.assert_array_equal(out[names[op]], fn(a, b), err_msg=op)
    p = np.abs(b) + np.float32(0.5)
    np.testing.assert_array_equal(out[div], a / p)
    np.testing.assert_allclose(out[pw], np.power(p.astype(np.float64), a), rtol=2e-7)


UNARY_FLOAT = {"neg": (np.negative, 0), "abs": (np.abs, 0), "square": (np.square, 0),
               "exp": (np.exp, 2e-7), "tanh": (np.tanh, 2e-7), "sigmoid": (None, 2e-7)}


@FEW
@given(data=st.data(), shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=9),
       how=st.sampled_from(PLACEMENTS), seed=st.integers(0, 99))
def test_unary_float_ops(dev8, data, shape, how, seed):
    a = data.draw(floats(shape))
    c = Case(dev8)
    ta = c.var(a, how, seed)
    tp = c.var(np.abs(a), how, seed)
    names = {op: c.read(getattr(popops, op)(c.g, ta, c.seq)) for op in UNARY_FLOAT}
    log, sqrt = c.read(popops.log(c.g, tp, c.seq)), c.read(popops.sqrt(c.g, tp, c.seq))
    out = c.run()
    a64 = a.astype(np.float64)
    for op, (fn, rtol) in UNARY_FLOAT.items():
        want = 1 / (1 + np.exp(-a64)) if op == "sigmoid" else fn(a64 if rtol else a)
        np.testing.assert_allclose(out[names[op]], want, rtol=rtol, atol=0, err_msg=op)
        assert out[names[op]].dtype == np.float32 and out[names[op]].shape == a.shape
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(out[log], np.log(np.abs(a64)), rtol=2e-7)
    np.testing.assert_allclose(out[sqrt], np.sqrt(np.abs(a64)), rtol=2e-7)


@FEW
@given(data=st.data(), shapes=broadcast_pair(max_dims=2, max_side=9),
       how=st.sampled_from(PLACEMENTS))
def test_int_and_bool_ops(dev8, data, shapes, how):
    _, (sa, sb) = shapes
    a, b = data.draw(ints(sa)), data.draw(ints(sb))
    nz = np.where(b == 0, np.int32(7), b)
    c = Case(dev8)
    ta, tb, tnz = c.var(a, how, 3), c.var(b), c.var(nz, how, 4)
    r = {op: c.read(getattr(popops, op)(c.g, ta, tb, c.seq)) for op in ("add", "mul", "lt")}
    div = c.read(popops.div(c.g, ta, tnz, c.seq))
    neg, absv = c.read(popops.neg(c.g, ta, c.seq)), c.read(popops.abs(c.g, ta, c.seq))
    bits_and = c.read(popops.map(c.g, (_1 & _2) | 4, [ta, tb], c.seq))
    ga, gb = popops.gt(c.g, ta, 0, c.seq), popops.lt(c.g, tb, 10, c.seq)
    land = c.read(popops.logical_and(c.g, ga, gb, c.seq))
    lor = c.read(popops.logical_or(c.g, ga, gb, c.seq))
    lnot = c.read(popops.logical_not(c.g, ga, c.seq))
    sel = c.read(popops.select(c.g, ta, tb, ga, c.seq))
    out = c.run()
    for op, fn in (("add", np.add), ("mul", np.multiply), ("lt", np.less)):
        np.testing.assert_array_equal(out[r[op]], fn(a, b), err_msg=op)
        assert out[r[op]].dtype == fn(a, b).dtype
    np.testing.assert_array_equal(out[div], (np.trunc(a / nz)).astype(np.int32))
    np.testing.assert_array_equal(out[neg], -a)
    np.testing.assert_array_equal(out[absv], np.abs(a))
    np.testing.assert_array_equal(out[bits_and], (a & b) | 4)
    np.testing.assert_array_equal(out[land], (a > 0) & (b < 10))
    np.testing.assert_array_equal(out[lor], (a > 0) | (b < 10))
    np.testing.assert_array_equal(out[lnot], ~(a > 0))
    np.testing.assert_array_equal(out[sel], np.where(a > 0, a, b))


def test_one_element_inputs_are_read_as_scalars(dev8):
    rng = np.random.default_rng(6)
    a = rng.normal(size=(5, 9)).astype(np.float32)
    k = np.array([[1.5]], np.float32)
    c = Case(dev8)
    ta, tk, t1 = c.var(a, "grain"), c.var(k, "one", 7), c.var(a[:1, :1].copy(), "one", 2)
    r = [c.read(popops.sub(c.g, ta, tk, c.seq)), c.read(popops.sub(c.g, tk, ta, c.seq)),
         c.read(popops.max(c.g, tk, t1, c.seq)), c.read(popops.mul(c.g, tk.reshape([]), 3.0,
                                                                   c.seq))]
    out = c.run()
    np.testing.assert_array_equal(out[r[0]], a - k)
    np.testing.assert_array_equal(out[r[1]], k - a)
    np.testing.assert_array_equal(out[r[2]], np.maximum(k, a[:1, :1]))
    np.testing.assert_array_equal(out[r[3]], np.float32(4.5))
    prof = c.engine.profile()
    sub = next(step for step in prof.steps if step.name == "sub")
    # the scalar crosses the exchange once per tile, not once per element
    assert dict(sub.phases)["exchange"].max() <= dev8.target.cost.exchange_setup_cycles + 1


@FEW
@given(a=floats((3, 13), -4, 4), b=floats((13,), -4, 4), how=st.sampled_from(PLACEMENTS))
def test_half_ops_round_after_every_operation(dev8, a, b, how):
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    c = Case(dev8)
    ta, tb = c.var(a16, how), c.var(b16, "one", 5)
    s = c.read(popops.map(c.g, _1 * _2 + _1, [ta, tb], c.seq))
    ex = c.read(popops.exp(c.g, ta, c.seq))
    mixed = c.read(popops.add(c.g, ta, c.var(a), c.seq))      # HALF + FLOAT -> FLOAT
    out = c.run()
    assert out[s].dtype == np.float16 and out[mixed].dtype == np.float32
    np.testing.assert_array_equal(out[s], a16 * b16 + a16)     # numpy rounds each op too
    np.testing.assert_allclose(out[ex], np.exp(a16.astype(np.float32)), rtol=1e-3)
    np.testing.assert_array_equal(out[mixed], a16.astype(np.float32) + a)


def test_map_expression_trees_placeholders_and_types(dev16):
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(4, 6)).astype(np.float32) for _ in range(4)]
    n = rng.integers(-9, 9, (4, 6)).astype(np.int32)
    c = Case(dev16)
    ts = [c.var(x, how) for x, how in zip(xs, PLACEMENTS)]
    tn = c.var(n, "one", 3)
    tree = E.select(E.sqrt(E.abs(_1)) * _2, E.tanh(_3) - 0.25, (_1 > E._4) & (_2 < 0.5))
    r1 = c.read(popops.map(c.g, tree, ts, c.seq))
    r2 = c.read(popops.map(c.g, E.cast(_1, np.float32) * 0.5 + E.cast(_2 * 4, np.int32),
                           [tn, ts[0]], c.seq))
    r3 = c.read(popops.map(c.g, _1 * _1 + _2, [ts[1], ts[1]], c.seq))     # one field, read twice
    r4 = c.read(popops.map(c.g, E.placeholder(5) + _1, ts + [ts[2]], c.seq))
    r5 = c.read(popops.map(c.g, E.cast(_1 > 0, np.float32) + 1, [ts[3]], c.seq))
    r6 = c.read(popops.map(c.g, E.const(2.5), [tn], c.seq))                # constant, shaped
    out = c.run()
    a, b, d, e = (x.astype(np.float64) for x in xs)
    want = np.where((a > e) & (b < 0.5), np.sqrt(np.abs(a)) * b, np.tanh(d) - 0.25)
    np.testing.assert_allclose(out[r1], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(out[r2], n * np.float32(0.5) + np.trunc(xs[0] * 4))
    np.testing.assert_array_equal(out[r3], xs[1] * xs[1] + xs[1])
    np.testing.assert_array_equal(out[r4], xs[2] + xs[0])
    np.testing.assert_array_equal(out[r5], (xs[3] > 0) + np.float32(1))
    np.testing.assert_array_equal(out[r6], np.full((4, 6), 2.5, np.float32))
    assert out[r2].dtype == np.float32 and out[r6].dtype == np.float32


def test_one_codelet_per_expression_compiled_once(dev8):
    def build():
        c = Case(dev8)
        a, b = c.var(np.ones((5, 3), np.float32)), c.var(np.ones(3, np.float32))
        c.read(popops.map(c.g, E.exp(_1) * _2 - 0.125, [a, b], c.seq))
        c.read(popops.map(c.g, E.exp(_1) * _2 - 0.125, [b, a], c.seq))   # same tree, again
        return c
    build()
    before = dict(generated_codelets())
    c = build()
    assert generated_codelets() == before      # nothing new: the classes are reused
    out = c.run()
    assert all(np.allclose(v, np.e - 0.125) for v in out.values())
    names = set(c.engine.profile().vertex_stats)
    assert len(names) == 1
    cls = before[names.pop()]
    assert "def compute(out, in1, in2)" in cls.source and "f_exp" in cls.source


def test_python_mode_reads_generated_source_and_agrees_bit_for_bit(dev8):
    rng = np.random.default_rng(1)
    a = rng.normal(size=(7, 5)).astype(np.float32)
    results = []
    for opts in (MODES["python"], MODES["compiled"]):
        c = Case(dev8)
        ta = c.var(a, "scatter", 2)
        th = c.var(a.astype(np.float16), "linear")
        c.read(popops.map(c.g, E.sigmoid(_1) * E.log(E.abs(_1)) / 3 + E.pow(E.abs(_1), 0.3),
                          [ta], c.seq))
        c.read(popops.map(c.g, _1 * _1 - 1, [th], c.seq))
        c.read(popops.reduce(c.g, ta, [0], "square_add", c.seq))
        c.read(popops.reduce(c.g, th, [1], "max", c.seq))
        c.read(popops.reduce(c.g, ta, [0, 1], "mul", c.seq))
        results.append(c.run())
    for k in results[0]:
        np.testing.assert_array_equal(bits(results[0][k]), bits(results[1][k]), err_msg=k)


# --- in place, fills, casts, scaled adds ----------------------------------------------------
def test_map_in_place_fill_zero_cast(dev8):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(6, 11)).astype(np.float32)
    v = rng.normal(size=20).astype(np.float32)
    c = Case(dev8)
    ta, tv = c.var(a, "grain"), c.var(v, "scatter", 1)
    ti = c.var(np.arange(10, dtype=np.int32))
    tb = c.var(np.zeros(5, np.bool_), "one", 2)
    popops.map_in_place(c.g, _1 * 2 + _2, [ta, ta[0]], c.seq)     # broadcast row, read first
    popops.map_in_place(c.g, _1 + _2, [tv[1:], tv[:-1]], c.seq)    # overlapping: via a copy
    popops.fill(c.g, ti[2:5], 7.9, c.seq)                          # converted to INT: 7
    popops.zero(c.g, ti[8:], c.seq)
    popops.fill(c.g, tb[1::2], True, c.seq)
    popops.add_in_place(c.g, ti[:2], 100, c.seq)
    casts = {dt: c.read(popops.cast(c.g, ta, dt, c.seq))
             for dt in (np.int32, np.float16, np.bool_)}
    back = c.read(popops.cast(c.g, tb, poplar.FLOAT, c.seq))
    names = [c.read(t) for t in (ta, tv, ti, tb)]
    out = c.run()
    # the first row of ta is read while being written: every vertex reads the old row
    want_a = a * 2 + a[0]
    want_v = v.copy()
    want_v[1:] = v[1:] + v[:-1]
    want_i = np.arange(10, dtype=np.int32)
    want_i[2:5], want_i[8:], want_i[:2] = 7, 0, want_i[:2] + 100
    want_b = np.array([0, 1, 0, 1, 0], bool)
    for name, want in zip(names, (want_a, want_v, want_i, want_b)):
        np.testing.assert_array_equal(out[name], want)
    np.testing.assert_array_equal(out[casts[np.int32]], np.trunc(want_a).astype(np.int32))
    np.testing.assert_array_equal(out[casts[np.float16]], want_a.astype(np.float16))
    np.testing.assert_array_equal(out[casts[np.bool_]], want_a != 0)
    np.testing.assert_array_equal(out[back], want_b.astype(np.float32))


def test_scaled_add_to_and_subtract_from(dev8):
    rng = np.random.default_rng(3)
    a, b = (rng.normal(size=(9, 5)).astype(np.float32) for _ in range(2))
    c = Case(dev8)
    ta, tb, ta2 = c.var(a, "linear"), c.var(b, "scatter", 3), c.var(a, "grain")
    k = c.var(np.array([0.75], np.float32), "one", 6)
    popops.scaled_add_to(c.g, ta, tb, -0.5, c.seq)
    popops.scaled_add_to(c.g, ta2, tb, k, c.seq)
    popops.scaled_subtract_from(c.g, ta2, tb, k, c.seq)
    popops.scaled_subtract_from(c.g, ta2, tb, 2.0, c.seq)
    ra, ra2 = c.read(ta), c.read(ta2)
    out = c.run()
    np.testing.assert_array_equal(out[ra], a + b * np.float32(-0.5))
    k32 = np.float32(0.75)
    np.testing.assert_array_equal(out[ra2], ((a + b * k32) - b * k32) + b * np.float32(-2.0))


# --- reductions -------------------------------------------------------------------------------
REFERENCE = {
    "add": lambda x, ax: np.sum(x, axis=ax, dtype=x.dtype),
    "mul": lambda x, ax: np.prod(x, axis=ax, dtype=x.dtype),
    "min": lambda x, ax: np.min(x, axis=ax), "max": lambda x, ax: np.max(x, axis=ax),
    "square_add": lambda x, ax: np.sum(x * x, axis=ax, dtype=x.dtype),
    "logical_and": lambda x, ax: np.all(x != 0, axis=ax),
    "logical_or": lambda x, ax: np.any(x != 0, axis=ax),
}


INT_OPS = ("add", "mul")


@st.composite
def reductions(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6))
    dims = draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    if draw(st.booleans()):
        dims = [d - len(shape) for d in dims]      # negative dims count from the end
    return shape, dims


@FEW
@given(case=reductions(), data=st.data(), how=st.sampled_from(PLACEMENTS),
       seed=st.integers(0, 9), tall=st.sampled_from([1, 1, 37]))
def test_reduce_every_op_over_random_dims(dev16, case, data, how, seed, tall):
    shape, dims = case
    if len(shape) < 3:
        shape = (shape[0] * tall,) + shape[1:]       # sometimes tall and skinny
    if how == "scatter" and np.prod(shape) > 64:
        how = "grain"                                # one interval per element: keep it small
    x = data.draw(floats(shape, 0.75, 1.25)) * np.where(np.arange(np.prod(shape)) % 3, 1, -1
                                                      ).reshape(shape).astype(np.float32)
    n = data.draw(ints(shape, -4, 4))
    c = Case(dev16)
    tx, tn = c.var(x, how, seed), c.var(n, how, seed + 1)
    rf = {op: c.read(popops.reduce(c.g, tx, dims, op, c.seq)) for op in REFERENCE}
    ri = {op: c.read(popops.reduce(c.g, tn, dims, popops.Operation.parse(op), c.seq))
          for op in INT_OPS}
    out = c.run()
    axes = tuple(d % len(shape) for d in dims)
    for x_, results, ops in ((x.astype(np.float64), rf, REFERENCE), (n, ri, INT_OPS)):
        for op in ops:
            got = out[results[op]]
            if axes:
                want = REFERENCE[op](x_, axes)
            else:   # dims=[]: the operation on single elements
                want = x_ * x_ if op == "square_add" else (x_ != 0 if "logical" in op else x_)
            assert got.shape == np.shape(want), op
            if x_ is n:
                np.testing.assert_array_equal(got, want, err_msg=op)
            else:
                if op == "mul" and axes:
                    # a float32 product (or a partial one) may overflow where float64's does
                    # not: compare only outputs whose every partial product fits float32
                    fits = REFERENCE["mul"](np.maximum(np.abs(x_), 1.0), axes) < 1e38
                    got, want = np.where(fits, got, 0), np.where(fits, want, 0)
                np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=op)


@pytest.mark.parametrize("shape,dims,stages", [
    ((10, 50), [0], 2),        # columns spread over tiles: outer cut, partials, final
    ((50, 10), [0], 2),
    ((16, 32), [1], 1),        # whole rows on each tile: one stage, output where computed
    ((3, 40, 5), [1], 2),
    ((2, 3, 4, 5), [0, 2], 2),
    ((1000,), [0], 2),         # everything into one value
    ((3, 0), [1], 1),          # nothing to reduce: the identity
    ((0, 3), [1], 0),          # no outputs
])
def test_reduce_layouts_and_stages(dev16, shape, dims, stages):
    x = np.random.default_rng(4).normal(size=shape).astype(np.float32)
    h = x.astype(np.float16)
    c = Case(dev16)
    tx, th = c.var(x), c.var(h)
    r = {op: c.read(popops.reduce(c.g, tx, dims, op, c.seq, name=op))
         for op in ("add", "max", "min", "mul")}
    rh = c.read(popops.reduce(c.g, th, dims, "add", c.seq, name="half"))
    out = c.run()
    for op in r:
        if x.size == 0:   # a reduction of nothing is the identity
            want = np.full([n for d, n in enumerate(shape) if d not in dims],
                           {"add": 0, "mul": 1, "max": -np.inf, "min": np.inf}[op])
        else:
            want = REFERENCE[op](x.astype(np.float64), tuple(dims))
        np.testing.assert_allclose(out[r[op]], want, rtol=2e-5, atol=1e-5, err_msg=op)
    np.testing.assert_allclose(out[rh], h.astype(np.float32).sum(axis=tuple(dims)),
                               rtol=2e-3, atol=2e-3)
    assert out[rh].dtype == np.float16
    steps = [s.name for s in c.engine.profile().steps if s.name.startswith("add")]
    assert len(steps) == stages


@pytest.mark.parametrize("shape, dims", [((64, 48), [1]), ((64, 48), [0]),
                                         ((8, 40, 6), [0, 2])])
def test_reduce_adds_each_compute_sets_vertices_in_one_call(dev16, shape, dims):
    """One vertex group per compute set, however many vertices (a GPT's graph had 80,000
    groups of one when it added them one by one)."""
    c = Case(dev16)
    t = c.var(np.ones(shape, np.float32))
    before = len(c.g._state.vertices.groups)
    popops.reduce(c.g, t, dims, "add", c.seq, name="sum")
    groups = c.g._state.vertices.groups[before:]
    assert sum(g.n for g in groups) > len(groups) == len({g.cs for g in groups})


def test_reduce_errors(dev8):
    c = Case(dev8)
    t = c.var(np.zeros((2, 3), np.float32))
    b = c.var(np.zeros(3, np.bool_))
    with pytest.raises(GraphError, match="not a dimension"):
        popops.reduce(c.g, t, [2], "add", c.seq)
    with pytest.raises(GraphError, match="twice"):
        popops.reduce(c.g, t, [1, -1], "add", c.seq)
    with pytest.raises(GraphError, match="unknown reduction"):
        popops.reduce(c.g, t, [0], "avg", c.seq)
    with pytest.raises(GraphError, match="BOOL"):
        popops.reduce(c.g, b, [0], "add", c.seq)
    with pytest.raises(GraphError, match="Sequence"):
        popops.reduce(c.g, t, [0], "add", [])
    unmapped = c.g.add_variable(poplar.FLOAT, [4], "unmapped")
    with pytest.raises(GraphError, match="on no tile"):
        popops.reduce(c.g, unmapped, [0], "add", c.seq)


def test_map_errors(dev8):
    c = Case(dev8)
    f, i = c.var(np.zeros((2, 3), np.float32)), c.var(np.zeros(4, np.int32))
    with pytest.raises(GraphError, match="uses _3"):
        popops.map(c.g, _1 + _3, [f, f], c.seq)
    with pytest.raises(GraphError, match="do not broadcast"):
        popops.add(c.g, f, i, c.seq)
    with pytest.raises(GraphError, match="pow needs FLOAT"):
        popops.pow(c.g, i, i, c.seq)
    with pytest.raises(GraphError, match="need BOOL"):
        popops.logical_and(c.g, f, f, c.seq)
    with pytest.raises(GraphError, match="shape"):
        popops.map_in_place(c.g, _1 + _2, [f[0], f], c.seq)
    with pytest.raises(GraphError, match="at least one operand"):
        popops.add(c.g, 1, 2, c.seq)
    with pytest.raises(GraphError, match="Sequence"):
        popops.neg(c.g, f, None)
    with pytest.raises(GraphError, match="on no tile"):
        popops.zero(c.g, c.g.add_variable(poplar.FLOAT, [3], "unmapped"), c.seq)


# --- determinism and placement ------------------------------------------------------------
def _pipeline(dev):
    rng = np.random.default_rng(5)
    c = Case(dev)
    x = c.var(rng.normal(size=(37, 23)).astype(np.float32), "grain")
    w = c.var(rng.normal(size=(23,)).astype(np.float32), "one", 3)
    y = popops.map(c.g, E.tanh(_1 * _2) + E.exp(-_1), [x, w], c.seq)
    s = popops.reduce(c.g, y, [0], "add", c.seq)
    m = popops.reduce(c.g, y, [0, 1], "square_add", c.seq)
    popops.scaled_add_to(c.g, w, s, -0.01, c.seq)
    for t in (y, s, m, w):
        c.read(t)
    return c


def test_deterministic_results_and_cycles(dev16):
    c1, c2 = _pipeline(dev16), _pipeline(dev16)
    first = c1.run()
    again = c1.run(engine=c1.engine)        # the same engine, run again from the same inputs
    other = c2.run()                        # the same graph built again
    cycles = {c1.engine.profile().total_cycles, c2.engine.profile().total_cycles}
    for k in first:
        assert bits(first[k]).tobytes() == bits(again[k]).tobytes() == bits(other[k]).tobytes()
    assert len(cycles) == 1


def test_work_is_placed_where_the_output_lives(dev16):
    c = Case(dev16)
    a = c.var(np.ones((40, 7), np.float32), "grain")
    b = c.var(np.ones((40, 7), np.float32), "grain")
    row = c.var(np.ones(7, np.float32), "one", 15)
    s = popops.add(c.g, a, b, c.seq, name="same")
    popops.mul(c.g, a, row, c.seq, name="bcast")
    r = popops.reduce(c.g, a, [1], "add", c.seq, name="rows")
    c.read(s)
    c.run()
    prof = c.engine.profile()
    assert c.g.get_tile_mapping(s) == c.g.get_tile_mapping(a)
    holds = np.array([bool(iv) for iv in c.g.get_tile_mapping(a)])
    steps = {st.name: dict(st.phases) for st in prof.steps}
    assert "exchange" not in steps["same"]                     # inputs already where work runs
    assert (steps["same"]["compute"] > 0).tolist() == holds.tolist()
    assert steps["bcast"]["exchange"].max() > 0               # the row comes from tile 15
    assert (steps["bcast"]["compute"] > 0).tolist() == holds.tolist()
    assert (steps["rows/partials"]["compute"] > 0).tolist() == holds.tolist()
    assert c.g.get_tile_mapping(r) == poputil.calc_linear_tile_mapping(c.g, r, 2, 2)
    graph = prof.graph
    for cs in ("same", "bcast"):
        tiles = graph.vertex_tile[graph.vertices_in(cs)]
        assert np.bincount(tiles).max() <= dev16.target.num_worker_contexts
        assert set(tiles.tolist()) == set(np.flatnonzero(holds).tolist())


def test_cycle_estimate_formula(dev8):
    c = Case(dev8)
    a = c.var(np.ones(30, np.float32), "one", 2)
    b = c.var(np.ones(30, np.float32), "one", 2)
    popops.add(c.g, a, b, c.seq, name="add")
    c.run()
    pieces = [5, 5, 5, 5, 5, 5]           # 30 elements, 6 workers, cut at 2-float vectors
    (stats,) = c.engine.profile().vertex_stats.values()
    # per element: 2 loads + 1 store + 1 add, 2 floats per vector, 10 to enter
    assert stats == {"count": 6, "cycles": sum(10 + -(-n * 4 // 2) for n in pieces)}
