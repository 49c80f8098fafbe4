"""f32_exp: the codelets' exp, float32(exp(float64(x))) with libm's exp, from a polynomial that
numba vectorises; NaN where the polynomial cannot pin the float32 down, and the codelet then
computes its exps with libm. Maps and softmaxes must give libm's bits in every codelet mode."""
import functools
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import MODES, bits
from hypothesis import given, settings
from hypothesis import strategies as st

from ipulab import poplar, popops, poputil
from ipulab.poplar import program as prog
from ipulab.popops import expr as E
from ipulab.popops.expr import _1, _2
from ipulab.popops.codegen import f_exp
from ipulab.popops.float32_exp import exps, f32_exp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import exp_check  # noqa: E402


def _libm(x) -> np.float32:
    """The codelets' exp of a float32, as every codelet computed it before f32_exp."""
    with np.errstate(over="ignore"):
        return np.float32(f_exp(float(np.float32(x))))


def _as_float32(pattern: int) -> np.float32:
    return np.array([pattern], np.uint32).view(np.float32)[0]


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_f32_exp_is_libms_exp_rounded_to_float32_or_nan(pattern):
    x = _as_float32(pattern)
    got = np.float32(f32_exp(x))          # (numba hands a float32 back as a Python float)
    assert np.isnan(got) or bits(np.array([got]))[0] == bits(np.array([_libm(x)]))[0], x


@pytest.mark.parametrize("first", [0x00000000, 0x3F000000, 0x42B00000, 0xBF800000, 0xC2B00000,
                                   0x7F7F0000, 0xFF800000 - 4])
def test_f32_exp_over_ranges_of_inputs_never_differs_from_libm(first):
    """Subnormal and tiny inputs, around 1, near float32's overflow (88.7) and underflow (-87 to
    -104), the largest floats, -inf and the NaNs after it (benchmarks/exp_check.py: all 2^32)."""
    pinned, left, wrong, worst = exp_check.check(first, 1 << 18)
    assert wrong == 0 and left < 100
    assert worst < exp_check.NEAR / 16


@functools.cache
def _unsure(count: int) -> np.ndarray:
    """Inputs whose exp f32_exp leaves to libm (NaN), from a sweep up from 0.5."""
    found = []
    for pattern in range(0x3F000000, 0x3F000000 + (1 << 21)):
        x = _as_float32(pattern)
        if np.isnan(f32_exp(x)):
            found.append(x)
            if len(found) == count:
                return np.array(found, np.float32)
    raise AssertionError("no input left to libm in the sweep")


def test_exps_redoes_a_row_with_libm_where_one_exp_is_not_pinned_down():
    x = np.concatenate([np.linspace(-3, 2, 50, dtype=np.float32), _unsure(7)])
    y = np.empty_like(x)
    exps(y, x, np.float32(1.0), np.float32(0.0))
    assert bits(y).tolist() == bits(np.array([_libm(v) for v in x])).tolist()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_map_with_exp_gives_libms_bits_where_f32_exp_cannot(dev8, mode):
    """exp(_1) + _2 over inputs some of which f32_exp leaves to libm, and the GELU gradient's
    shape of map (an erf beside the exp): every codelet mode gives the float32 sums of libm's
    exps."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(64).astype(np.float32)
    x[::10] = _unsure(7)
    y = rng.standard_normal(64).astype(np.float32)
    y[::10] = 1                             # exp(x * y) is left to libm there too
    g = poplar.Graph(dev8.target)
    tx, ty = (g.add_variable(poplar.FLOAT, [64], n) for n in "xy")
    for t in (tx, ty):
        poputil.map_tensor_linearly(g, t, 1, 1)
        g.create_host_write(t.name, t)
    seq = prog.Sequence()
    plain = popops.map(g, E.exp(_1) + _2, [tx, ty], seq)
    beside_erf = popops.map(g, E.erf(_1) * E.exp(_1 * _2), [tx, ty], seq)
    g.create_host_read("plain", plain)
    g.create_host_read("beside_erf", beside_erf)
    e = poplar.Engine(g, seq, MODES[mode])
    e.load(dev8)
    e.write_tensor("x", x)
    e.write_tensor("y", y)
    e.run()
    want = np.array([_libm(a) + b for a, b in zip(x, y)], np.float32)
    erf = np.array([np.float32(math.erf(float(a))) for a in x], np.float32)
    want_erf = erf * np.array([_libm(a * b) for a, b in zip(x, y)], np.float32)
    assert bits(e.read_tensor("plain")).tolist() == bits(want).tolist()
    assert bits(e.read_tensor("beside_erf")).tolist() == bits(want_erf).tolist()


def test_the_exp_of_a_map_runs_in_a_loop_of_its_own_before_the_rest():
    """Out of place, on FLOAT: the first loop computes the exp with f32_exp, the main loop
    reads it from out and calls erf; in place (out is also _1) the map is one loop."""
    from ipulab.popops.mapcodelet import map_codelet
    from ipulab.poplar import types as T
    f = {1: (T.FLOAT, False), 2: (T.FLOAT, False)}
    src = map_codelet(E.erf(_1) * E.exp(_1 * _2), f, T.FLOAT, False).source
    exp_loop, rest = src.split("if unsure:")
    assert "f32_exp" in exp_loop and "f_erf" not in exp_loop
    assert "f_erf" in rest and "= out[i]" in rest
    in_place = map_codelet(E.exp(_1 * _2), {2: (T.FLOAT, False)}, T.FLOAT, True).source
    assert "f32_exp" not in in_place and in_place.count("for i in") == 1
