"""poprand: counter-based random numbers on simulated tiles. The same seed gives bit-identical
values whatever the mapping, the tile count or the codelet mode; distributions have the right
moments; dropout keeps about 1 - p and scales what it keeps."""
import numpy as np
import pytest
from helpers import MODES, bits
from hypothesis import given, settings
from hypothesis import strategies as st
from nn_helpers import LAYOUTS, Lab

import ipulab
from ipulab import poplar, poprand
from ipulab.errors import GraphError
from ipulab.poprand import codelets as rc

FEW = settings(max_examples=15, deadline=None)


def _draw_all(dev, shape, how, seed, layout_seed=0, modifier=0, options=None):
    """uniform, normal, INT uniform, Bernoulli and dropout of ones, for a seed."""
    lab = Lab(dev)
    ref = lab.feed(np.ones(shape, np.float32), how, layout_seed)
    out = {"u": poprand.uniform(lab.g, ref, poplar.FLOAT, -2.0, 3.0, seed, lab.seq, "u",
                                seed_modifier=modifier),
           "n": poprand.normal(lab.g, ref, poplar.FLOAT, 1.0, 0.5, seed, lab.seq,
                               seed_modifier=modifier + 1),
           "i": poprand.uniform(lab.g, ref, poplar.INT, -3, 4, seed, lab.seq,
                                seed_modifier=modifier + 2),
           "b": poprand.bernoulli(lab.g, ref, poplar.FLOAT, 0.3, seed, lab.seq,
                                  seed_modifier=modifier + 3)}
    out["d"], out["m"] = poprand.dropout(lab.g, ref, 0.4, seed, lab.seq,
                                         seed_modifier=modifier + 4)
    lab.fetch(**out)
    return lab.run(options), lab


@FEW
@given(shape=st.lists(st.integers(1, 13), min_size=1, max_size=3),
       layouts=st.tuples(st.sampled_from(LAYOUTS), st.sampled_from(LAYOUTS)),
       seed=st.integers(0, 2 ** 64 - 1), layout_seed=st.integers(0, 99))
def test_same_seed_same_bits_whatever_the_mapping_and_tile_count(dev8, dev16, shape, layouts,
                                                                  seed, layout_seed):
    a, _ = _draw_all(dev8, shape, layouts[0], seed, layout_seed)
    b, _ = _draw_all(dev16, shape, layouts[1], seed, layout_seed + 1)
    for k in a:
        np.testing.assert_array_equal(bits(a[k]) if a[k].dtype.kind == "f" else a[k],
                                      bits(b[k]) if b[k].dtype.kind == "f" else b[k])
    assert ((a["u"] >= -2) & (a["u"] <= 3)).all() and ((a["i"] >= -3) & (a["i"] <= 4)).all()
    assert set(np.unique(a["b"])) <= {0.0, 1.0}


def test_shape_or_reference_python_mode_and_other_seeds(dev8):
    base, _ = _draw_all(dev8, (6, 7), "spread", 11)
    lab = Lab(dev8)
    u = poprand.uniform(lab.g, [6, 7], poplar.FLOAT, -2.0, 3.0, 11, lab.seq)   # from a shape
    lab.fetch(u=u)
    np.testing.assert_array_equal(bits(lab.run()["u"]), bits(base["u"]))
    python, _ = _draw_all(dev8, (6, 7), "chunks", 11, options=MODES["python"])
    for k in base:
        np.testing.assert_array_equal(base[k], python[k])
    other_seed, _ = _draw_all(dev8, (6, 7), "spread", 12)
    other_modifier, _ = _draw_all(dev8, (6, 7), "spread", 11, modifier=100)
    for other in (other_seed, other_modifier):
        assert not np.array_equal(other["u"], base["u"])
        assert not np.array_equal(other["n"], base["n"])


def test_distributions(dev16):
    shape = (300, 101)                     # 30,300 values: tolerances are ~5 standard errors
    out, lab = _draw_all(dev16, shape, "poplar", 2024)
    n = np.prod(shape)
    u, z, i, b = (out[k].astype(np.float64) for k in "unib")
    assert abs(u.mean() - 0.5) < 5 * 5 / np.sqrt(12 * n) and abs(u.var() - 25 / 12) < 0.1
    assert abs(z.mean() - 1.0) < 5 * 0.5 / np.sqrt(n) and abs(z.std() - 0.5) < 0.01
    assert abs(np.mean(np.abs(z - 1) < 0.5) - 0.6827) < 0.015          # one sigma
    counts = np.bincount(out["i"].ravel() + 3, minlength=8)
    assert counts.size == 8 and abs(counts / n - 1 / 8).max() < 0.01
    assert abs(b.mean() - 0.3) < 0.01
    keep = out["m"]
    assert keep.dtype == np.bool_ and abs(keep.mean() - 0.6) < 0.01
    np.testing.assert_array_equal(out["d"], np.where(keep, np.float32(1 / 0.6), 0))
    # neighbours are uncorrelated, and so are two streams of one seed
    assert abs(np.corrcoef(u.ravel()[1:], u.ravel()[:-1])[0, 1]) < 0.03
    assert abs(np.corrcoef(u.ravel(), z.ravel())[0, 1]) < 0.03
    # the work follows the data: one vertex per worker at most, on the tiles of the reference
    summary = lab.engine.profile().graph
    per_tile = np.bincount(summary.vertex_tile[summary.vertices_in("u")], minlength=16)
    assert per_tile.max() <= 6 and (per_tile > 0).sum() == 16


def test_seed_tensor_changes_between_runs(dev8):
    seed = 5 + (7 << 32)
    lab = Lab(dev8)
    words = lab.feed(np.array([5, 7], np.uint32), "tile", dtype=poplar.UNSIGNED_INT)
    x = lab.feed(np.linspace(1, 2, 40, dtype=np.float32), "spread")
    d, m = poprand.dropout(lab.g, x, 0.5, words, lab.seq)
    n = poprand.normal(lab.g, [40], poplar.HALF, 0.0, 1.0, words, lab.seq, seed_modifier=9)
    lab.fetch(d=d, m=m, n=n)
    first = lab.run()
    ref = Lab(dev8)
    xr = ref.feed(np.linspace(1, 2, 40, dtype=np.float32), "poplar")
    dr, mr = poprand.dropout(ref.g, xr, 0.5, seed, ref.seq)
    nr = poprand.normal(ref.g, [40], poplar.HALF, 0.0, 1.0, seed, ref.seq, seed_modifier=9)
    ref.fetch(d=dr, m=mr, n=nr)
    want = ref.run()
    for k in first:
        np.testing.assert_array_equal(first[k], want[k])
    assert first["n"].dtype == np.float16
    lab.engine.write_tensor("feed0", np.array([6, 7], np.uint32))   # a new seed on the device
    lab.engine.run()
    assert not np.array_equal(lab.engine.read_tensor("m"), first["m"])


def test_dropout_edges_and_gradient(dev8):
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    lab = Lab(dev8)
    t = lab.feed(x, "chunks", 4)
    keep_all, m0 = poprand.dropout(lab.g, t, 0.0, 1, lab.seq)
    drop_all, m1 = poprand.dropout(lab.g, t, 1.0, 1, lab.seq)
    half, mask = poprand.dropout(lab.g, t, 0.5, 1, lab.seq, scale=3.0)
    g = poprand.dropout_input_gradient(lab.g, t, mask, 0.5, lab.seq, scale=3.0)
    assert lab.g.get_tile_mapping(half) == lab.g.get_tile_mapping(t)
    lab.fetch(keep_all=keep_all, m0=m0, drop_all=drop_all, m1=m1, half=half, mask=mask, g=g)
    out = lab.run()
    np.testing.assert_array_equal(out["keep_all"], x)
    assert out["m0"].all() and not out["m1"].any() and not out["drop_all"].any()
    np.testing.assert_array_equal(out["half"], np.where(out["mask"], x * 3, 0))
    np.testing.assert_array_equal(out["g"], out["half"])


def test_generator_is_splitmix64():
    """bits(index) is the index-th output of a SplitMix64 stream started at the key."""
    mask = 2 ** 64 - 1
    key = int(rc.stream_key(np.uint32(1), np.uint32(2), np.uint32(3))) & mask

    def splitmix(state):
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)
    state = key
    for index in range(5):
        state = (state + rc.GAMMA) & mask
        assert int(rc.draw(np.int64(key - 2 ** 64 if key >> 63 else key),
                           np.int64(index))) == splitmix(state)


def test_cycle_estimates():
    assert rc.Uniform.cycle_estimate(2, 3, 2, (10, 6)) == 10 + (4 + 30) + (4 + 18)
    assert rc.Normal.cycle_estimate(2, 2, 2, (10,)) == 10 + 4 + 60
    assert rc.Dropout.cycle_estimate(2, 2, 2, inp=(10,), out=(10,), mask=(10,)) == 10 + 4 + 40


def test_errors(dev8):
    lab = Lab(dev8)
    x = lab.feed(np.zeros(4, np.float32))
    with pytest.raises(GraphError, match="seed must be"):
        poprand.uniform(lab.g, x, poplar.FLOAT, 0, 1, -1, lab.seq)
    with pytest.raises(GraphError, match="UNSIGNED_INT with 2 elements"):
        poprand.uniform(lab.g, x, poplar.FLOAT, 0, 1, x, lab.seq)
    with pytest.raises(GraphError, match="seed_modifier"):
        poprand.normal(lab.g, x, poplar.FLOAT, 0, 1, 1, lab.seq, seed_modifier=2 ** 32)
    with pytest.raises(GraphError, match="drop probability"):
        poprand.dropout(lab.g, x, 1.5, 1, lab.seq)
    with pytest.raises(GraphError, match="FLOAT, HALF or INT"):
        poprand.bernoulli(lab.g, x, poplar.BOOL, 0.5, 1, lab.seq)
    with pytest.raises(GraphError, match="low"):
        poprand.uniform(lab.g, x, poplar.FLOAT, 2, 1, 1, lab.seq)
    with pytest.raises(GraphError, match="stddev"):
        poprand.normal(lab.g, x, poplar.FLOAT, 0, -1, 1, lab.seq)
    with pytest.raises(GraphError, match="FLOAT or HALF"):
        poprand.normal(lab.g, x, poplar.INT, 0, 1, 1, lab.seq)
    assert ipulab.poprand is poprand
