"""gcl.all_reduce: a ring all-reduce across replicas, exact and identical on every replica."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ipulab
from ipulab import gcl, poplar, popops, poputil
from ipulab.errors import GraphError
from ipulab.machine import bsp
from ipulab.poplar import program as prog

from helpers import MODES, bits

NUMPY_OP = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
            "logical_and": np.logical_and, "logical_or": np.logical_or}


def ring_reference(x: np.ndarray, op: str) -> np.ndarray:
    """What the ring computes, in numpy: chunk c (of m = ceil(n / r) elements) is reduced in
    ring order starting at replica c: ((x_c op x_{c+1}) op ...) op x_{c-1}."""
    r, n = x.shape
    m = -(-n // r)
    out = np.empty(n, x.dtype)
    for c in range(r):
        lo, hi = c * m, min((c + 1) * m, n)
        if lo >= hi:
            continue
        acc = x[c, lo:hi].copy()
        for k in range(1, r):
            acc = NUMPY_OP[op](acc, x[(c + k) % r, lo:hi]).astype(x.dtype)
        out[lo:hi] = acc
    return out


@pytest.fixture(scope="module")
def bow4():
    return ipulab.devices.bow2000(tiles_per_ipu=4)


@pytest.fixture(scope="module")
def pod16_small():
    return ipulab.devices.pod(16, tiles_per_ipu=4)


def build(dev, r, dtype, shape, op, in_place=False, mapping="linear"):
    g = poplar.Graph(dev, replication_factor=r)
    t = g.add_variable(dtype, shape, "t")
    if mapping == "linear":
        poputil.map_tensor_linearly(g, t, grain_size=1, min_elements_per_tile=1)
    else:
        g.set_tile_mapping(t, mapping)
    seq = prog.Sequence()
    if in_place:
        gcl.all_reduce_in_place(g, t, op, seq)
        out = t
    else:
        out = gcl.all_reduce(g, t, op, seq)
    g.create_host_write("t", t)
    g.create_host_read("out", out)
    return g, seq


def run(dev, r, x, dtype, op, options=None, **kw):
    """All-reduce x (shape (r, *shape)) across r replicas: (result per replica, engine)."""
    g, seq = build(dev, r, dtype, x.shape[1:], op, **kw)
    e = poplar.Engine(g, seq, options or {})
    e.load(dev)
    e.write_tensor("t", x if r > 1 else x[0])
    e.run()
    return e.read_tensor("out").reshape(r, -1), e


@pytest.mark.parametrize("r", [1, 2, 4])
@pytest.mark.parametrize("op", ["add", "mul", "max", "min"])
def test_integers_are_exact(bow4, r, op):
    rng = np.random.default_rng(r)
    x = rng.integers(-50, 50, (r, 5, 7)).astype(np.int32)
    got, _ = run(bow4, r, x, poplar.INT, op)
    want = NUMPY_OP[op].reduce(x.reshape(r, -1), axis=0)
    np.testing.assert_array_equal(got, np.broadcast_to(want, got.shape))


@pytest.mark.parametrize("r", [1, 2, 4])
def test_floats_identical_on_every_replica_and_in_ring_order(bow4, r):
    rng = np.random.default_rng(10 + r)
    x = (rng.standard_normal((r, 37)) * 10 ** rng.uniform(-3, 3, (r, 37))).astype(np.float32)
    got, _ = run(bow4, r, x, poplar.FLOAT, popops.Operation.ADD)
    assert (bits(got) == bits(got[0])).all()                 # bit for bit on every replica
    assert (bits(got[0]) == bits(ring_reference(x, "add"))).all()
    np.testing.assert_allclose(got[0], x.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("r", [2, 4])
def test_floats_exact_when_every_sum_is(bow4, r):
    rng = np.random.default_rng(3)
    x = (rng.integers(-1000, 1000, (r, 3, 4)) / 8).astype(np.float32)   # sums stay exact
    got, _ = run(bow4, r, x, poplar.FLOAT, "add")
    np.testing.assert_array_equal(got, np.broadcast_to(x.reshape(r, -1).sum(axis=0), got.shape))


def test_half_and_unsigned(bow4):
    x = (np.arange(4 * 6, dtype=np.float16).reshape(4, 6) / 4)
    got, _ = run(bow4, 4, x, poplar.HALF, "max")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.broadcast_to(x.max(axis=0), got.shape))
    u = np.array([[1, 2**31], [3, 2**31]], np.uint32)
    got, _ = run(bow4, 2, u, poplar.UNSIGNED_INT, "add")
    np.testing.assert_array_equal(got[0], np.array([4, 0], np.uint32))    # wraps, as uint32


def test_logical_operations(bow4):
    x = np.array([[1, 1, 0, 0], [1, 0, 1, 0]], bool)
    got, _ = run(bow4, 2, x, poplar.BOOL, "logical_and")
    np.testing.assert_array_equal(got[1], [True, False, False, False])
    got, _ = run(bow4, 2, x, poplar.BOOL, "logical_or")
    np.testing.assert_array_equal(got[0], [True, True, True, False])


@pytest.mark.parametrize("n", [1, 3, 5, 8, 9])
def test_any_size_even_smaller_than_the_ring(bow4, n):
    x = np.arange(4 * n, dtype=np.int32).reshape(4, n)
    got, _ = run(bow4, 4, x, poplar.INT, "add")
    np.testing.assert_array_equal(got, np.broadcast_to(x.sum(axis=0), got.shape))


def test_in_place(bow4):
    x = np.arange(4 * 10, dtype=np.float32).reshape(4, 10)
    got, e = run(bow4, 4, x, poplar.FLOAT, "add", in_place=True)
    np.testing.assert_array_equal(got, np.broadcast_to(x.sum(axis=0), got.shape))
    got, _ = run(bow4, 1, x[:1], poplar.FLOAT, "add", in_place=True)
    np.testing.assert_array_equal(got[0], x[0])


def test_all_modes_agree(bow4):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 20)).astype(np.float32)
    out = [bits(run(bow4, 4, x, poplar.FLOAT, "add", options)[0]) for options in MODES.values()]
    assert all((o == out[0]).all() for o in out)


def _ring_run(dev, r, shape, options, in_place, transposed, seed):
    """Twice an all-reduce (ADD) of random floats (a transposed view if asked): the engine,
    every replica's FLOAT variables afterwards (not the exchange buffers after them, which
    hold nothing between steps), and whether the ring ran in one kernel call."""
    g = poplar.Graph(dev, replication_factor=r)
    t = g.add_variable(poplar.FLOAT, shape, "t")
    poputil.map_tensor_linearly(g, t, grain_size=1, min_elements_per_tile=1)
    view = t.transpose() if transposed else t
    seq = prog.Sequence()
    if in_place:
        gcl.all_reduce_in_place(g, view, "add", seq)
    else:
        gcl.all_reduce(g, view, "add", seq)
    g.create_host_write("t", t)
    e = poplar.Engine(g, seq, options)
    e.load(dev)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((r, *shape)) * 10 ** rng.uniform(-3, 3, (r, *shape))
    e.write_tensor("t", x.astype(np.float32))
    e.run()
    e.run()
    at_once = any(isinstance(n, bsp.AtOnce) for n in bsp.inlined(e._compiled.roots))
    variables = r * e._compiled.replica_stride["float32"]
    return e, bits(e._arenas["float32"][:variables]), at_once


@settings(max_examples=30, deadline=None)
@given(r=st.sampled_from([2, 4, 8, 16]), rows=st.integers(1, 12), cols=st.integers(1, 40),
       in_place=st.booleans(), transposed=st.booleans(), seed=st.integers(0, 2**16))
def test_the_ring_in_one_call_is_the_ring_step_by_step(pod16_small, r, rows, cols, in_place,
                                                       transposed, seed):
    """Compiled mode sums floats in one kernel call; checked mode runs every copy and combine.
    Every bit of the arena (result, the ring's buffers, stale parts of short chunks
    included), the trace and the cycles agree."""
    runs = [_ring_run(pod16_small, r, [rows, cols], MODES[m], in_place, transposed, seed)
            for m in ("compiled", "checked")]
    (fast, fast_bits, fused), (slow, slow_bits, step_by_step) = runs
    assert fused and not step_by_step
    np.testing.assert_array_equal(fast_bits, slow_bits)
    assert fast._trace == slow._trace
    assert fast.profile().total_cycles == slow.profile().total_cycles


def test_only_a_float_sum_in_compiled_mode_runs_in_one_call(bow4):
    e, _, fused = _ring_run(bow4, 4, [3, 5], {}, False, False, 0)
    assert fused
    for dtype, op in ((poplar.FLOAT, "max"), (poplar.INT, "add"), (poplar.HALF, "add")):
        g, seq = build(bow4, 4, dtype, [3, 5], op)
        e = poplar.Engine(g, seq)
        assert not any(isinstance(n, bsp.AtOnce) for n in bsp.inlined(e._compiled.roots))
    assert not _ring_run(bow4, 4, [3, 5], MODES["python"], False, False, 0)[2]


def test_tensor_on_one_tile_and_replicas_sharing_an_ipu():
    dev = ipulab.devices.m2000(tiles_per_ipu=4)
    x = np.arange(8 * 11, dtype=np.int32).reshape(8, 11)
    got, e = run(dev, 8, x, poplar.INT, "add", mapping=1)       # 2 replicas per IPU
    np.testing.assert_array_equal(got, np.broadcast_to(x.sum(axis=0), got.shape))
    prof = e.profile()
    assert prof.inter_ipu_exchange_cycles.max() > 0 and prof.exchange_cycles.max() > 0


def test_ring_runs_over_the_ipu_links(bow4):
    x = np.ones((4, 64), np.float32)
    _, e = run(bow4, 4, x, poplar.FLOAT, "add")
    prof = e.profile()
    t = bow4.target
    assert prof.inter_ipu_exchange_cycles.reshape(4, 4).max(axis=1).min() > 0   # every IPU
    assert prof.phase_totals()["inter_ipu_exchange"] > 0
    steps = [s for s in prof.steps if s.kind == "cross_replica_copy"]
    assert len(steps) == 2 * 3                                 # 2 (r - 1) exchanges
    for s in steps:
        syncs = [c for k, c in s.phases if k == "sync"]
        assert (syncs[0] == t.sync_cycles("external")).all()
    src, dst, nbytes = prof.exchange_traffic()
    ipu_src, ipu_dst = t.ipu_of(src), t.ipu_of(dst)
    ring = {(int(a), int(b)) for a, b in zip(ipu_src, ipu_dst) if a != b}
    assert ring == {(0, 1), (1, 2), (2, 3), (3, 0)}            # each IPU to the next
    crossing = nbytes[ipu_src != ipu_dst].sum()
    # reduce-scatter and all-gather each send (r - 1) chunks of n / r per replica
    assert crossing == 2 * 3 * 4 * 16 * 4
    assert prof.codelet_cycles()                               # the combining vertices ran


def test_one_ipu_replicas_exchange_on_chip():
    dev = ipulab.devices.ipu("ipu2", tiles_per_ipu=8)
    x = np.arange(4 * 12, dtype=np.int32).reshape(4, 12)
    got, e = run(dev, 4, x, poplar.INT, "add")
    np.testing.assert_array_equal(got[2], x.sum(axis=0))
    prof = e.profile()
    assert prof.inter_ipu_exchange_cycles.sum() == 0 and prof.exchange_cycles.sum() > 0


def test_cost_grows_with_bytes():
    """On 64 tiles per IPU every chunk is spread over 16 tiles, so the links (not the tiles'
    exchange ports) set the pace."""
    dev = ipulab.devices.bow2000(tiles_per_ipu=64)
    cycles = []
    for n in (64, 4096, 16384):
        _, e = run(dev, 4, np.zeros((4, n), np.float32), poplar.FLOAT, "add")
        cycles.append(e.profile().phase_totals()["inter_ipu_exchange"])
    assert cycles[0] < cycles[1] < cycles[2]
    # bandwidth-bound once large: 4x the bytes, about 4x the link time beyond the latency
    t = dev.target
    latency = 6 * t.link_cycles(1, 0, 1)
    assert 3.5 < (cycles[2] - latency) / (cycles[1] - latency) < 4.5


def test_result_is_a_new_tensor_mapped_like_the_input(bow4):
    g = poplar.Graph(bow4, replication_factor=4)
    t = g.add_variable(poplar.FLOAT, [10], "grads")
    poputil.map_tensor_linearly(g, t, grain_size=2, min_elements_per_tile=2)
    out = gcl.all_reduce(g, t, "add", prog.Sequence(), "sum")
    assert out.shape == t.shape and out.dtype == t.dtype and out.name == "sum/out"
    assert g.get_tile_mapping(out) == g.get_tile_mapping(t)
    assert gcl.all_reduce_cross_replica is gcl.all_reduce


def test_errors(bow4):
    g = poplar.Graph(bow4, replication_factor=2)
    t = g.add_variable(poplar.FLOAT, [4], "t")
    seq = prog.Sequence()
    with pytest.raises(GraphError, match="on no tile"):
        gcl.all_reduce(g, t, "add", seq)
    g.set_tile_mapping(t, 0)
    with pytest.raises(GraphError, match="unknown reduction operation"):
        gcl.all_reduce(g, t, "mean", seq)
    with pytest.raises(GraphError, match="SQUARE_ADD"):
        gcl.all_reduce(g, t, "square_add", seq)
    with pytest.raises(GraphError, match="logical"):
        gcl.all_reduce(g, t, "logical_or", seq)
    with pytest.raises(GraphError, match="Sequence"):
        gcl.all_reduce(g, t, "add", [])
    other = poplar.Graph(bow4, replication_factor=2)
    with pytest.raises(GraphError, match="another graph"):
        gcl.all_reduce(other, t, "add", prog.Sequence())
    assert len(seq.programs) == 0


def test_all_reduce_from_a_virtual_graph(bow4):
    """A replica of two IPUs: the tensor on its second IPU, reduced through a virtual graph."""
    g = poplar.Graph(bow4, replication_factor=2)
    second = g.create_virtual_graph(4, 8)
    t = second.add_variable(poplar.INT, [6], "t")
    second.set_tile_mapping(t, 1)                   # replica tile 5
    seq = prog.Sequence()
    out = gcl.all_reduce(second, t, "max", seq)
    g.create_host_write("t", t)
    g.create_host_read("out", out)
    e = poplar.Engine(g, seq)
    e.load(bow4)
    x = np.array([[1, 9, 3, 4, 0, 6], [7, 2, 8, 4, 5, -1]], np.int32)
    e.write_tensor("t", x)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("out"), np.broadcast_to(x.max(0), (2, 6)))
    assert e.profile().inter_ipu_exchange_cycles[[5, 13]].min() > 0


# --- reduce-scatter and all-gather ------------------------------------------------------------
def run_collective(dev, r, x, dtype, collective):
    """collective(g, t, seq) over x (shape (r, *shape)) on r replicas: (out per replica, e)."""
    g = poplar.Graph(dev, replication_factor=r)
    t = g.add_variable(dtype, x.shape[1:], "t")
    poputil.map_tensor_linearly(g, t, grain_size=1, min_elements_per_tile=1)
    seq = prog.Sequence()
    out = collective(g, t, seq)
    g.create_host_write("t", t)
    g.create_host_read("out", out)
    e = poplar.Engine(g, seq)
    e.load(dev)
    e.write_tensor("t", x if r > 1 else x[0])
    e.run()
    return e.read_tensor("out").reshape(r, -1), e


def test_reduce_scatter_pads_as_popart(bow4):
    """30 elements over 4 replicas: 8 per shard, replica i holds chunk i of the sum, the last
    two elements of the last shard are the zero padding."""
    assert gcl.shard_size(30, 4) == 8 and gcl.shard_size(32, 4) == 8 and gcl.shard_size(1, 4) == 1
    x = np.arange(4 * 30, dtype=np.int32).reshape(4, 30) - 50
    got, e = run_collective(bow4, 4, x, poplar.INT,
                            lambda g, t, seq: gcl.reduce_scatter(g, t, "add", seq, "rs"))
    want = np.concatenate([x.sum(axis=0), [0, 0]]).reshape(4, 8)
    np.testing.assert_array_equal(got, want)
    steps = [s for s in e.profile().steps if s.kind == "cross_replica_copy"]
    assert len(steps) == 3 and e.profile().phase_totals()["inter_ipu_exchange"] > 0
    assert gcl.reduce_scatter_cross_replica is gcl.reduce_scatter


@pytest.mark.parametrize("r", [2, 4])
def test_reduce_scatter_floats_in_ring_order(bow4, r):
    """Chunk c is reduced from replica c+1 round to replica c, which keeps it."""
    rng = np.random.default_rng(20 + r)
    x = (rng.standard_normal((r, 4 * r)) * 10 ** rng.uniform(-3, 3, (r, 4 * r))).astype(np.float32)
    got, _ = run_collective(bow4, r, x, poplar.FLOAT,
                            lambda g, t, seq: gcl.reduce_scatter(g, t, "add", seq))
    for c in range(r):
        acc = x[(c + 1) % r, 4 * c:4 * c + 4].copy()
        for k in range(2, r + 1):
            acc = (acc + x[(c + k) % r, 4 * c:4 * c + 4]).astype(np.float32)
        assert bits(got[c]).tolist() == bits(acc).tolist()


@pytest.mark.parametrize("r", [1, 2, 4])
def test_all_gather_gives_every_replica_every_row(bow4, r):
    x = (np.arange(r * 6, dtype=np.float16).reshape(r, 2, 3) / 3)
    got, e = run_collective(bow4, r, x, poplar.HALF,
                            lambda g, t, seq: gcl.all_gather(g, t, seq, "ag"))
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.broadcast_to(x.reshape(1, -1), (r, r * 6)))
    steps = [s for s in e.profile().steps if s.kind == "cross_replica_copy"]
    assert len(steps) == r - 1


def test_reduce_scatter_then_all_gather_is_an_all_reduce(bow4):
    x = np.arange(4 * 13, dtype=np.int32).reshape(4, 13) % 7

    def both(g, t, seq):
        mine = gcl.reduce_scatter(g, t, "max", seq)
        every = gcl.all_gather(g, mine, seq)
        assert every.shape == (4, 4)
        return every.flatten().slice(0, 13)

    got, _ = run_collective(bow4, 4, x, poplar.INT, both)
    np.testing.assert_array_equal(got, np.broadcast_to(x.max(axis=0), got.shape))


def test_all_gather_to_destination_and_errors(bow4):
    g = poplar.Graph(bow4, replication_factor=2)
    t = g.add_variable(poplar.FLOAT, [3], "t")
    dest = g.add_variable(poplar.FLOAT, [6], "dest")
    g.set_tile_mapping(t, 0)
    g.set_tile_mapping(dest, 3)
    seq = prog.Sequence()
    gcl.all_gather_to_destination(g, t, dest, seq, "into")
    g.create_host_write("t", t)
    g.create_host_read("dest", dest)
    e = poplar.Engine(g, seq)
    e.load(bow4)
    e.write_tensor("t", np.array([[1, 2, 3], [4, 5, 6]], np.float32))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("dest"), [[1, 2, 3, 4, 5, 6]] * 2)
    with pytest.raises(GraphError, match=r"destination 'dest' must hold 2 x 2 FLOAT elements, not 6"):
        gcl.all_gather_to_destination(g, t[:2], dest, seq)
    with pytest.raises(GraphError, match="no elements"):
        gcl.reduce_scatter(g, t[:0], "add", seq)
    with pytest.raises(GraphError, match="not a cross-replica operation"):
        gcl.reduce_scatter(g, t, "square_add", seq)
    u = g.add_variable(poplar.FLOAT, [2], "unmapped")
    with pytest.raises(GraphError, match="elements on no tile"):
        gcl.all_gather(g, u, seq)
