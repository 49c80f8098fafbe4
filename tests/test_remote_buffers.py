"""Remote buffers: streaming memory, rows chosen by an offset tensor, persistent across runs."""
import numpy as np
import pytest

import ipulab
from ipulab import arch, poplar
from ipulab.errors import EngineError, GraphError, ProgramError
from ipulab.poplar import program as prog


@pytest.fixture(scope="module")
def bow4():
    return ipulab.devices.bow2000(tiles_per_ipu=4)


def build(dev, r=1, dtype=poplar.FLOAT, n=6, repeats=3):
    """x (n) -> buffer row `off`; buffer rows `rows` (2 of them) -> y (2 x n)."""
    g = poplar.Graph(dev, replication_factor=r)
    buf = g.add_remote_buffer("store", dtype, n, repeats)
    x = g.add_variable(dtype, [n], "x")
    y = g.add_variable(dtype, [2, n], "y")
    off = g.add_variable(poplar.INT, [1], "off")
    rows = g.add_variable(poplar.UNSIGNED_INT, [2], "rows")
    for t, tile in ((x, 1), (y, 2), (off, 0), (rows, 0)):
        g.set_tile_mapping(t, tile)
    for name, t in (("x", x), ("off", off), ("rows", rows)):
        g.create_host_write(name, t)
    g.create_host_read("y", y)
    progs = [prog.Copy(x, buf, off), prog.Copy(buf, y, rows)]
    e = poplar.Engine(g, progs)
    e.load(dev)
    return e


def test_round_trip_and_persistence(dev4):
    e = build(dev4)
    assert e.read_remote_buffer("store").shape == (3, 6)
    assert not e.read_remote_buffer("store").any()           # zeroed at load
    for row in (2, 0):
        e.write_tensor("x", np.arange(6, dtype=np.float32) + 10 * row)
        e.write_tensor("off", np.array([row], np.int32))
        e.run(0)                                                # each run writes one row
    want = np.zeros((3, 6), np.float32)
    want[0], want[2] = np.arange(6), np.arange(6) + 20
    np.testing.assert_array_equal(e.read_remote_buffer("store"), want)
    e.write_tensor("rows", np.array([2, 2], np.uint32))
    e.run(1)
    np.testing.assert_array_equal(e.read_tensor("y"), [want[2], want[2]])
    e.write_tensor("rows", np.array([1, 0], np.uint32))
    e.run(1)
    np.testing.assert_array_equal(e.read_tensor("y"), [want[1], want[0]])


def test_host_can_fill_the_buffer(dev4):
    e = build(dev4, dtype=poplar.HALF)
    vals = (np.arange(18, dtype=np.float16) / 7).reshape(3, 6)
    e.write_remote_buffer("store", vals)
    e.write_tensor("rows", np.array([0, 2], np.uint32))
    e.run(1)
    got = e.read_tensor("y")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, vals[[0, 2]])
    np.testing.assert_array_equal(e.read_remote_buffer("store"), vals)
    with pytest.raises(EngineError, match=r"remote buffer 'store'.*18 elements"):
        e.write_remote_buffer("store", vals[0])
    with pytest.raises(EngineError, match="float16"):
        e.write_remote_buffer("store", vals.astype(np.float32))
    with pytest.raises(EngineError, match="no remote buffer 'nope'"):
        e.read_remote_buffer("nope")


def test_each_replica_has_its_own_buffer(bow4):
    e = build(bow4, r=4, dtype=poplar.INT)
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    e.write_tensor("x", x)
    e.write_tensor("off", np.array([[0], [1], [2], [1]], np.int32))   # a row per replica
    e.run(0)
    store = e.read_remote_buffer("store")
    assert store.shape == (4, 3, 6)
    for i, row in enumerate([0, 1, 2, 1]):
        np.testing.assert_array_equal(store[i, row], x[i])
        assert store[i].sum() == x[i].sum()
    e.write_tensor("rows", np.tile(np.array([1, 2], np.uint32), (4, 1)))
    e.run(1)
    y = e.read_tensor("y")
    np.testing.assert_array_equal(y[1, 0], x[1])
    np.testing.assert_array_equal(y[2, 1], x[2])
    assert not y[0].any()


def test_copy_without_offset_moves_row_zero(dev4):
    g = poplar.Graph(dev4)
    buf = g.add_remote_buffer("b", poplar.FLOAT, 4, repeats=2)
    x = g.add_variable(poplar.FLOAT, [2, 2], "x")
    g.set_tile_mapping(x, 3)
    g.create_host_write("x", x)
    g.create_host_read("x-out", x)
    e = poplar.Engine(g, [prog.Copy(x, buf), prog.Copy(buf, x)])
    e.load(dev4)
    e.write_tensor("x", np.array([[1, 2], [3, 4]], np.float32))
    e.run(0)
    np.testing.assert_array_equal(e.read_remote_buffer("b"), [[1, 2, 3, 4], [0, 0, 0, 0]])
    e.write_tensor("x", np.zeros((2, 2), np.float32))
    e.run(1)
    np.testing.assert_array_equal(e.read_tensor("x-out"), [[1, 2], [3, 4]])


def test_bad_offset_at_run_time(dev4):
    e = build(dev4)
    e.write_tensor("off", np.array([3], np.int32))
    with pytest.raises(EngineError, match=r"offset 3.*outside remote buffer 'store'.*rows 0 to 2"):
        e.run(0)
    e.write_tensor("off", np.array([-1], np.int32))
    with pytest.raises(EngineError, match="offset -1"):
        e.run(0)
    assert not e.read_remote_buffer("store").any()


def test_cost_is_streaming_memory_bandwidth(bow4, dev4):
    """Single IPU: remote buffers in host memory over PCIe. Bow-2000: its streaming memory."""
    for dev in (dev4, bow4):
        t = dev.target
        costs = []
        for n in (64, 64 * 1024):
            g = poplar.Graph(dev)
            buf = g.add_remote_buffer("b", poplar.FLOAT, n)
            x = g.add_variable(poplar.FLOAT, [n], "x")
            g.set_tile_mapping(x, 1)
            e = poplar.Engine(g, [prog.Copy(x, buf), prog.Copy(buf, x)])
            e.load(dev)
            e.run(0)
            prof = e.profile()
            assert [s.kind for s in prof.steps] == ["remote_copy"]
            host = prof.host_exchange_cycles
            assert host[1] == t.streaming_cycles(4 * n) and host.sum() == host[1]
            assert (prof.sync_cycles == t.sync_cycles("external")).all()
            costs.append(prof.total_cycles)
        assert costs[1] > costs[0]
    assert arch.SYSTEMS["bow2000"].streaming_bytes_per_second == 25e9
    assert arch.SYSTEMS["ipu2"].streaming_bytes_per_second == 32e9      # PCIe: host memory
    # 256 KiB at 25 GB/s plus 1 us: (1e-6 + 262144 / 25e9) s at 1.85 GHz
    assert bow4.target.streaming_cycles(262144) == int(np.ceil((1e-6 + 262144 / 25e9) * 1.85e9))


def test_machines_stream_in_parallel():
    """A Pod16: each Bow-2000 has its own streaming memory; replicas on different machines do
    not share bandwidth, replicas on one machine do."""
    dev = ipulab.devices.pod16(tiles_per_ipu=4)
    t = dev.target
    g = poplar.Graph(dev, replication_factor=16)
    buf = g.add_remote_buffer("b", poplar.FLOAT, 1000)
    x = g.add_variable(poplar.FLOAT, [1000], "x")
    g.set_tile_mapping(x, 0)
    e = poplar.Engine(g, prog.Copy(x, buf))
    e.load(dev)
    e.run()
    host = e.profile().host_exchange_cycles.reshape(16, 4)
    assert (host[:, 0] == t.streaming_cycles(4 * 4000)).all()    # 4 IPUs share a machine's
    assert not host[:, 1:].any()


def test_building_errors(dev4):
    g = poplar.Graph(dev4)
    buf = g.add_remote_buffer("b", poplar.FLOAT, 4, repeats=2)
    assert (buf.name, buf.num_elements, buf.repeats, buf.num_bytes) == ("b", 4, 2, 32)
    assert isinstance(buf, poplar.RemoteBuffer)
    with pytest.raises(GraphError, match="already used"):
        g.add_remote_buffer("b", poplar.FLOAT, 4)
    with pytest.raises(GraphError, match="already used"):
        g.add_host_to_device_fifo("b", poplar.FLOAT, 4)
    with pytest.raises(GraphError, match="at least one element"):
        g.add_remote_buffer("c", poplar.FLOAT, 0)
    x = g.add_variable(poplar.FLOAT, [4], "x")
    i = g.add_variable(poplar.INT, [2], "i")
    f = g.add_variable(poplar.FLOAT, [1], "f")
    with pytest.raises(ProgramError, match=r"needs 2 x 4 = 8 elements"):
        prog.Copy(x, buf, i)
    with pytest.raises(ProgramError, match="types differ"):
        prog.Copy(i, g.add_remote_buffer("ib", poplar.FLOAT, 2))
    with pytest.raises(ProgramError, match="offset must be an INT or UNSIGNED_INT"):
        prog.Copy(x, buf, f)
    with pytest.raises(ProgramError, match="offset only between a tensor and a remote"):
        prog.Copy(x, x, i)
    with pytest.raises(ProgramError, match="needs a tensor"):
        prog.Copy(buf, buf)
    c = g.add_constant(poplar.FLOAT, [4], 1.0, "c")
    for t in (x, i, f, c):
        g.set_tile_mapping(t, 0)
    other = poplar.Graph(dev4)
    ob = other.add_remote_buffer("o", poplar.FLOAT, 4)
    with pytest.raises(ProgramError, match="another graph"):
        poplar.Engine(g, prog.Copy(x, ob))
    with pytest.raises(ProgramError, match="constant"):
        poplar.Engine(g, prog.Copy(buf, c))
    assert prog.Copy(x, buf, name="keep").name == "keep"


def test_streaming_memory_capacity():
    dev = ipulab.devices.bow2000(tiles_per_ipu=4)
    g = poplar.Graph(dev, replication_factor=4)
    g.add_remote_buffer("big", poplar.FLOAT, 10**9, repeats=10)      # 40 GB x 4 replicas
    with pytest.raises(GraphError, match="exceed the 256,000,000,000 bytes of streaming memory"):
        g.add_remote_buffer("more", poplar.FLOAT, 10**9, repeats=10)
