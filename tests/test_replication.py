"""Replicated graphs: Graph(target, replication_factor=r) runs one graph on r tile ranges.

Compiled once for replica 0, run on every replica in lock-step: per-replica data, per-replica
FIFO blocks, host handles with a leading replica axis, costs on every replica's tiles.
"""
import numpy as np
import pytest

import ipulab
from ipulab import poplar, popops, poputil
from ipulab.errors import CodeletError, EngineError, GraphError
from ipulab.poplar import program as prog

from helpers import MODES, bits


class AxPlusB(poplar.Vertex):
    """x = x * a + b, element by element (a, b scalars)."""
    x = poplar.InOut(poplar.Vector[poplar.FLOAT])
    a = poplar.Input(poplar.FLOAT)
    b = poplar.Input(poplar.FLOAT)

    @staticmethod
    def compute(x, a, b):
        for i in range(len(x)):
            x[i] = x[i] * a[0] + b[0]


class SumTo(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(inp, out):
        s = 0.0
        for v in inp:
            s += v
        out[0] = s


class Pick(poplar.Vertex):
    """out = x[i]: reads past the end when i is too big (checked and python modes catch it)."""
    x = poplar.Input(poplar.Vector[poplar.FLOAT])
    i = poplar.Input(poplar.INT)
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(x, i, out):
        out[0] = x[i[0]]


@pytest.fixture(scope="module")
def bow4():
    """A Bow-2000 with 4 tiles per IPU (16 tiles)."""
    return ipulab.devices.bow2000(tiles_per_ipu=4)


def _affine_graph(dev, r):
    """x (8 floats over replica tiles 0 and 1) = x * 2 + b, b a per-replica variable on tile
    3, so the vertex on tile 1 gets b by the exchange; then the sum of x onto tile 2."""
    g = poplar.Graph(dev, replication_factor=r)
    x = g.add_variable(poplar.FLOAT, [8], "x")
    a = g.add_constant(poplar.FLOAT, [], 2.0, "a")
    b = g.add_variable(poplar.FLOAT, [], "b")
    s = g.add_variable(poplar.FLOAT, [], "s")
    g.set_tile_mapping(x[:4], 0)
    g.set_tile_mapping(x[4:], 1)
    for t, tile in ((a, 0), (b, 3), (s, 2)):
        g.set_tile_mapping(t, tile)
    cs = g.add_compute_set("affine")
    g.add_vertex(cs, AxPlusB, {"x": x[:4], "a": a, "b": b}, 0)
    g.add_vertex(cs, AxPlusB, {"x": x[4:], "a": a, "b": b}, 1)
    total = g.add_compute_set("sum")
    g.add_vertex(total, SumTo, {"in": x, "out": s}, 2)
    for name, t in (("x", x), ("b", b)):
        g.create_host_write(name, t)
    g.create_host_read("x-out", x)
    g.create_host_read("s-out", s)
    return g, prog.Sequence([prog.Execute(cs), prog.Execute(total)])


# --- building a replicated graph ---------------------------------------------------------------
def test_replicated_graph_sees_one_replica(bow4):
    g = poplar.Graph(bow4, replication_factor=4)
    assert g.replication_factor == 4 == g.get_replication_factor()
    assert g.target.num_tiles == 4                  # one replica: one IPU of 4 tiles
    assert g.target.num_ipus == 1 and g.target.tiles_per_ipu == 4
    assert g.target.clock_hz == bow4.target.clock_hz
    with pytest.raises(GraphError, match="tile 4 does not exist"):
        g.set_tile_mapping(g.add_variable(poplar.FLOAT, [1], "v"), 4)
    two = poplar.Graph(bow4, replication_factor=2)
    assert two.target.num_tiles == 8 and two.target.num_ipus == 2
    vg = two.create_virtual_graph(4, 8)             # the replica's second IPU
    assert vg.target.num_tiles == 4 and vg.replication_factor == 2
    half = poplar.Graph(bow4, replication_factor=8)  # two replicas per IPU
    assert half.target.num_tiles == 2 and half.target.num_ipus == 1


@pytest.mark.parametrize("r", [3, 5, 0, -1, 2.0, True])
def test_replication_factor_must_cut_the_tiles_evenly(bow4, r):
    with pytest.raises(GraphError, match="replication_factor"):
        poplar.Graph(bow4, replication_factor=r)


def test_replicas_may_not_straddle_ipus():
    dev = ipulab.devices.m2000(tiles_per_ipu=6)    # 24 tiles: r=8 gives 3 tiles, fine
    assert poplar.Graph(dev, replication_factor=8).target.num_tiles == 3
    with pytest.raises(GraphError, match="does not fit"):
        poplar.Graph(dev, replication_factor=3)    # 8 tiles each: 1 1/3 IPUs


def test_one_replica_is_an_ordinary_graph(dev8):
    g = poplar.Graph(dev8, replication_factor=1)
    assert g.target is dev8.target and g.replication_factor == 1


# --- running -----------------------------------------------------------------------------------
@pytest.mark.parametrize("r", [1, 2, 4])
def test_codelets_run_on_every_replica(mode, bow4, r):
    g, p = _affine_graph(bow4, r)
    e = poplar.Engine(g, p, mode[1])
    e.load(bow4)
    x = np.arange(r * 8, dtype=np.float32).reshape(r, 8)
    b = np.arange(r, dtype=np.float32) * 100
    e.write_tensor("x", x if r > 1 else x[0])
    e.write_tensor("b", b if r > 1 else b[0])
    e.run()
    want = x * 2 + b[:, None]
    got = e.read_tensor("x-out")
    assert got.shape == ((r, 8) if r > 1 else (8,))
    np.testing.assert_array_equal(got.reshape(r, 8), want)
    np.testing.assert_array_equal(e.read_tensor("s-out").reshape(r), want.sum(axis=1))


def test_modes_agree_bit_for_bit_on_every_replica(bow4):
    out = []
    for options in MODES.values():
        g, p = _affine_graph(bow4, 4)
        e = poplar.Engine(g, p, options)
        e.load(bow4)
        rng = np.random.default_rng(1)
        e.write_tensor("x", rng.standard_normal((4, 8)).astype(np.float32))
        e.write_tensor("b", rng.standard_normal(4).astype(np.float32))
        e.run()
        out.append(bits(e.read_tensor("s-out")))
    assert all((o == out[0]).all() for o in out)


def test_costs_cover_every_replica(bow4):
    """Replicas run concurrently: the same per-tile cycles and memory on each replica's tiles,
    and the same total as one replica alone (plus external syncs across the IPUs)."""
    e = {}
    for r in (1, 4):
        g, p = _affine_graph(bow4, r)
        e[r] = poplar.Engine(g, p)
        e[r].load(bow4)
        e[r].run()
    one, four = e[1].profile(), e[4].profile()
    assert four.replication_factor == 4 and one.replication_factor == 1
    assert four.compute_cycles.shape == (16,)
    for attr in ("compute_cycles", "compute_cycles_excluding_idle", "exchange_cycles",
                 "memory_total"):
        per = getattr(four, attr).reshape(4, 4)
        assert (per == per[0]).all(), attr
        assert per[0].sum() > 0
    np.testing.assert_array_equal(four.compute_cycles.reshape(4, 4)[0], one.compute_cycles[:4])
    assert (four.memory["variables"].reshape(4, 4) > 0).any(axis=1).all()
    # one replica per IPU: the replicas' barriers are external, other phases as one replica
    t = bow4.target
    assert (four.sync_cycles == 2 * t.sync_cycles("external")).all()
    assert four.total_cycles - one.total_cycles == \
        2 * (t.sync_cycles("external") - t.sync_cycles("internal"))
    assert four.inter_ipu_exchange_cycles.sum() == 0
    # every replica's vertices ran
    assert four.codelet_cycles()["AxPlusB"]["vertices"] == 8
    assert four.vertex_stats["SumTo"]["count"] == 4


def test_replicas_on_one_ipu_sync_internally(dev8):
    g, p = _affine_graph(dev8, 2)
    e = poplar.Engine(g, p)
    e.load(dev8)
    e.run()
    assert (e.profile().sync_cycles == 2 * dev8.target.sync_cycles("internal")).all()


# --- host FIFOs and handles, per replica ---------------------------------------------------------
def _fifo_graph(dev, r):
    g = poplar.Graph(dev, replication_factor=r)
    x = g.add_variable(poplar.INT, [2, 3], "x")
    poputil.map_tensor_linearly(g, x, grain_size=1, min_elements_per_tile=1)
    y = popops.add(g, x, x, seq := prog.Sequence())
    s_in = g.add_host_to_device_fifo("in", poplar.INT, 6)
    s_out = g.add_device_to_host_fifo("out", poplar.INT, 6)
    return g, prog.Sequence([prog.Copy(s_in, x), seq, prog.Copy(y, s_out)])


@pytest.mark.parametrize("r", [1, 2, 4])
def test_fifos_move_one_block_per_replica(bow4, r):
    g, p = _fifo_graph(bow4, r)
    e = poplar.Engine(g, [prog.Repeat(2, p)])
    e.load(bow4)
    host_in = np.arange(2 * r * 6, dtype=np.int32)   # two copies' worth: r blocks each
    host_out = np.zeros(2 * r * 6, np.int32)
    e.connect_stream("in", host_in)
    e.connect_stream("out", host_out)
    e.run()
    # copy k, replica i reads block k*r + i and writes its result to the same block
    np.testing.assert_array_equal(host_out, 2 * host_in)
    prof = e.profile()
    assert prof.host_exchange_cycles.reshape(r, -1).max(axis=1).min() > 0   # every replica


def test_fifo_host_cost_counts_every_replica(bow4):
    """[MODEL] the replicas' blocks share the system's host link."""
    cost = {}
    for r in (1, 4):
        g, p = _fifo_graph(bow4, r)
        e = poplar.Engine(g, p)
        e.load(bow4)
        e.connect_stream("in", np.zeros(r * 6, np.int32))
        e.connect_stream("out", np.zeros(r * 6, np.int32))
        e.run()
        cost[r] = e.profile().host_exchange_cycles.max()
    t = bow4.target
    assert cost[1] == 2 * t.host_cycles(24) and cost[4] == 2 * t.host_cycles(4 * 24)


def test_wrong_fifo_array_names_the_stream_and_r_times_n(bow4):
    g, p = _fifo_graph(bow4, 4)
    e = poplar.Engine(g, p)
    e.load(bow4)
    with pytest.raises(EngineError, match=r"stream 'in'.*multiple of 24 elements.*got an array of 6"):
        e.connect_stream("in", np.zeros(6, np.int32))        # one replica's worth only
    with pytest.raises(EngineError, match=r"stream 'out'.*24"):
        e.connect_stream("out", np.zeros(36, np.int32))
    with pytest.raises(EngineError, match="int32"):
        e.connect_stream("in", np.zeros(24, np.float32))
    e.connect_stream("in", np.zeros(48, np.int32))           # two copies' worth is fine


def test_host_handles_have_a_replica_axis(bow4):
    g = poplar.Graph(bow4, replication_factor=4)
    x = g.add_variable(poplar.HALF, [2, 2], "x")
    g.set_tile_mapping(x, 1)
    g.create_host_write("w", x)
    g.create_host_read("r", x)
    e = poplar.Engine(g, prog.Sequence())
    e.load(bow4)
    vals = (np.arange(16, dtype=np.float16) / 3).reshape(4, 2, 2)
    e.write_tensor("w", vals)
    got = e.read_tensor("r")
    assert got.shape == (4, 2, 2) and got.dtype == np.float16
    np.testing.assert_array_equal(got, vals)
    e.write_tensor("w", vals.ravel())            # any shape with r * n elements
    with pytest.raises(EngineError, match=r"4 replicas x 4\).*16 elements"):
        e.write_tensor("w", vals[0])


def test_constants_are_on_every_replica(bow4):
    g = poplar.Graph(bow4, replication_factor=4)
    c = g.add_constant(poplar.FLOAT, [3], [1.5, 2.5, 3.5], "c")
    x = g.add_variable(poplar.FLOAT, [3], "x")
    g.set_tile_mapping(c, 0)
    g.set_tile_mapping(x, 3)
    g.create_host_read("x", x)
    e = poplar.Engine(g, prog.Copy(c, x))
    e.load(bow4)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x"), np.tile([1.5, 2.5, 3.5], (4, 1)))


def test_print_tensor_prints_each_replica(bow4, capsys):
    g = poplar.Graph(bow4, replication_factor=2)
    x = g.add_variable(poplar.INT, [2], "x")
    g.set_tile_mapping(x, 0)
    g.create_host_write("x", x)
    e = poplar.Engine(g, prog.PrintTensor("x", x))
    e.load(bow4)
    e.write_tensor("x", np.array([[1, 2], [3, 4]], np.int32))
    e.run()
    assert capsys.readouterr().out == "x [replica 0]: [1 2]\nx [replica 1]: [3 4]\n"


# --- library operations and control flow -----------------------------------------------------------
def test_popops_and_poplin_run_per_replica(bow4):
    g = poplar.Graph(bow4, replication_factor=2)
    a = g.add_variable(poplar.FLOAT, [4, 3], "a")
    b = g.add_variable(poplar.FLOAT, [3, 2], "b")
    for t in (a, b):
        poputil.map_tensor_linearly(g, t, grain_size=1, min_elements_per_tile=1)
    seq = prog.Sequence()
    c = ipulab.poplin.mat_mul(g, a, b, seq, "mm")
    s = popops.reduce(g, c, [0, 1], "add", seq)
    for name, t in (("a", a), ("b", b)):
        g.create_host_write(name, t)
    g.create_host_read("c", c)
    g.create_host_read("s", s)
    e = poplar.Engine(g, seq)
    e.load(bow4)
    rng = np.random.default_rng(2)
    av = rng.integers(-3, 4, (2, 4, 3)).astype(np.float32)
    bv = rng.integers(-3, 4, (2, 3, 2)).astype(np.float32)
    e.write_tensor("a", av)
    e.write_tensor("b", bv)
    e.run()
    want = av @ bv
    np.testing.assert_array_equal(e.read_tensor("c"), want)
    np.testing.assert_array_equal(e.read_tensor("s"), want.sum(axis=(1, 2)))


def test_control_flow_runs_in_lock_step(bow4):
    g = poplar.Graph(bow4, replication_factor=4)
    n = g.add_variable(poplar.INT, [], "n")
    one = g.add_constant(poplar.INT, [], 1, "one")
    g.set_tile_mapping(n, 0)
    g.set_tile_mapping(one, 0)
    g.create_host_write("n", n)
    g.create_host_read("n-out", n)
    body = prog.Sequence()
    popops.sub_in_place(g, n, one, body)
    e = poplar.Engine(g, prog.RepeatWhileTrue(prog.Sequence(), n, body))
    e.load(bow4)
    e.write_tensor("n", np.full(4, 3, np.int32))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("n-out"), np.zeros(4))
    e.write_tensor("n", np.array([3, 3, 2, 3], np.int32))
    with pytest.raises(EngineError, match=r"replicas disagree on predicate 'n'"):
        e.run()


def test_codelet_error_names_the_replica(bow4):
    g = poplar.Graph(bow4, replication_factor=4)
    x = g.add_variable(poplar.FLOAT, [3], "x")
    i = g.add_variable(poplar.INT, [], "i")
    out = g.add_variable(poplar.FLOAT, [], "out")
    for t in (x, i, out):
        g.set_tile_mapping(t, 2)
    cs = g.add_compute_set("pick")
    g.add_vertex(cs, Pick, {"x": x, "i": i, "out": out}, 2)
    g.create_host_write("i", i)
    for options in (MODES["checked"], MODES["python"]):
        e = poplar.Engine(g, prog.Execute(cs), options)
        e.load(bow4)
        e.write_tensor("i", np.array([0, 2, 7, 1], np.int32))    # replica 2 reads past the end
        with pytest.raises(CodeletError, match=r"vertex 0 on tile 10 \(replica 2\)"):
            e.run()


def test_exchange_buffers_are_per_replica(bow4):
    """A vertex reading data from another tile gets a buffer on each replica: data from one
    replica never leaks into another."""
    g = poplar.Graph(bow4, replication_factor=4)
    x = g.add_variable(poplar.FLOAT, [5], "x")
    s = g.add_variable(poplar.FLOAT, [], "s")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(s, 3)
    cs = g.add_compute_set("sum")
    g.add_vertex(cs, SumTo, {"in": x[::2], "out": s}, 3)       # strided and remote
    g.create_host_write("x", x)
    g.create_host_read("s", s)
    e = poplar.Engine(g, prog.Execute(cs))
    e.load(bow4)
    xv = np.arange(20, dtype=np.float32).reshape(4, 5)
    e.write_tensor("x", xv)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("s"), xv[:, ::2].sum(axis=1))
    prof = e.profile()
    assert (prof.memory["exchange_buffers"].reshape(4, 4)[:, 3] == 16).all()   # 3 floats, aligned
    src, dst, nbytes = prof.exchange_traffic()
    assert sorted(zip(src.tolist(), dst.tolist())) == [(0, 3), (4, 7), (8, 11), (12, 15)]
