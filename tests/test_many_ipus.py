"""Many IPUs: 2, 4 and 16-IPU targets, a virtual graph per IPU, copies over the IPU-Links with
the system's topology and external syncs, and replicas spread over a Bow-2000 and a Pod16."""
import numpy as np
import pytest

import ipulab
from ipulab import gcl, poplar, poputil, viz
from ipulab.poplar import program as prog


def _two_ipus():
    m = ipulab.IPUModel("ipu2")
    m.num_ipus, m.tiles_per_ipu = 2, 4
    return m.create_device()


DEVICES = {
    2: _two_ipus,
    4: lambda: ipulab.devices.bow2000(tiles_per_ipu=4),
    16: lambda: ipulab.devices.pod16(tiles_per_ipu=4),
}


@pytest.fixture(scope="module", params=sorted(DEVICES))
def many(request):
    return DEVICES[request.param]()


@pytest.fixture(scope="module")
def pod16():
    return DEVICES[16]()


def test_targets_with_2_4_and_16_ipus(many):
    t = many.target
    assert t.num_tiles == 4 * t.num_ipus and t.tiles_per_ipu == 4
    assert t.system.num_ipus == t.num_ipus
    if t.num_ipus == 16:
        assert t.system.name == "pod16" and t.system.num_machines == 4
    assert t.sync_cycles("external") > t.sync_cycles("internal")


def test_a_virtual_graph_per_ipu_and_a_ring_of_copies(many):
    """Each IPU gets a virtual graph; a variable on each, then every IPU's variable copied to
    the next IPU: data arrives, the copy crosses IPU-Links and syncs externally."""
    t = many.target
    n_ipus, tpi = t.num_ipus, t.tiles_per_ipu
    g = poplar.Graph(many)
    ipus = [g.create_virtual_graph(i * tpi, (i + 1) * tpi) for i in range(n_ipus)]
    xs, ys = [], []
    for i, vg in enumerate(ipus):
        assert vg.target.num_tiles == tpi
        x = vg.add_variable(poplar.FLOAT, [10], f"x{i}")
        y = vg.add_variable(poplar.FLOAT, [10], f"y{i}")
        poputil.map_tensor_linearly(vg, x, grain_size=2, min_elements_per_tile=2)
        vg.set_tile_mapping(y, tpi - 1)
        used = [k for k, iv in enumerate(g.get_tile_mapping(x)) if iv]
        assert used[0] == i * tpi and used[-1] < (i + 1) * tpi   # vg's tile 0 is IPU i's first
        xs.append(x), ys.append(y)
    x_all, y_all = poplar.concat(xs), poplar.concat(ys)
    g.create_host_write("x", x_all)
    g.create_host_read("y", y_all)
    ring = prog.Sequence([prog.Copy(xs[i], ys[(i + 1) % n_ipus]) for i in range(n_ipus)])
    e = poplar.Engine(g, ring)
    e.load(many)
    vals = np.arange(10 * n_ipus, dtype=np.float32)
    e.write_tensor("x", vals)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("y"), np.roll(vals, 10))
    prof = e.profile()
    per_ipu = prof.inter_ipu_exchange_cycles.reshape(n_ipus, tpi)
    assert (per_ipu.max(axis=1) > 0).all()                    # every IPU used its links
    assert prof.exchange_cycles.sum() == 0                     # nothing stayed on one IPU
    assert (prof.sync_cycles == n_ipus * t.sync_cycles("external")).all()
    for rec, i in zip(prof.steps, range(n_ipus)):              # each copy: its pair's links
        j = (i + 1) % n_ipus
        inter = dict((k, c) for k, c in rec.phases)["inter_ipu_exchange"]
        assert inter.max() == t.link_cycles(40, i, j)


def test_links_follow_the_pod_topology(pod16):
    """Inside a Bow-2000 the IPUs are fully connected; machines form a ladder, so IPU 0 to
    IPU 13 (machine 3, another position) takes more hops than IPU 0 to IPU 1."""
    t = pod16.target
    cost = {}
    for dst_ipu in (1, 4, 13):
        g = poplar.Graph(pod16)
        a = g.add_variable(poplar.FLOAT, [256], "a")
        b = g.add_variable(poplar.FLOAT, [256], "b")
        g.set_tile_mapping(a, 0)
        g.set_tile_mapping(b, dst_ipu * 4)
        e = poplar.Engine(g, prog.Copy(a, b))
        e.load(pod16)
        e.run()
        cost[dst_ipu] = e.profile().phase_totals()["inter_ipu_exchange"]
        assert cost[dst_ipu] == t.link_cycles(1024, 0, dst_ipu)
    assert t.system.route(0, 1) == (2, 1) and t.system.route(0, 13) == (2, 4)
    assert cost[1] == cost[4] < cost[13]


def test_a_compute_set_reading_across_ipus(many):
    """A vertex whose data is on another IPU: the exchange before the compute phase brings
    it over the links."""
    t = many.target
    g = poplar.Graph(many)
    x = g.add_variable(poplar.INT, [6], "x")
    y = g.add_variable(poplar.INT, [6], "y")
    g.set_tile_mapping(x, 0)                                   # IPU 0
    g.set_tile_mapping(y, t.num_tiles - 1)                     # the last IPU
    seq = prog.Sequence()
    z = ipulab.popops.add(g, x, y, seq)
    g.create_host_write("x", x)
    g.create_host_write("y", y)
    g.create_host_read("z", z)
    e = poplar.Engine(g, seq)
    e.load(many)
    e.write_tensor("x", np.arange(6, dtype=np.int32))
    e.write_tensor("y", np.full(6, 10, np.int32))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("z"), np.arange(6) + 10)
    prof = e.profile()
    assert prof.inter_ipu_exchange_cycles.max() > 0
    assert (prof.sync_cycles == t.sync_cycles("external")).all()


def test_bow2000_with_4_replicas_uses_every_ipu():
    """A full Bow-2000 (5,888 tiles), 4 replicas of one IPU each: a linearly mapped tensor,
    scaled and all-reduced, lands on tiles of all 4 IPUs, and the all-reduce uses the links."""
    dev = ipulab.devices.bow2000()
    t = dev.target
    g = poplar.Graph(dev, replication_factor=4)
    assert g.target.num_tiles == 1472
    x = g.add_variable(poplar.FLOAT, [4000], "x")
    poputil.map_tensor_linearly(g, x)
    seq = prog.Sequence()
    y = ipulab.popops.mul(g, x, x, seq)
    total = gcl.all_reduce(g, y, "add", seq, "grads")
    g.create_host_write("x", x)
    g.create_host_read("total", total)
    e = poplar.Engine(g, seq)
    e.load(dev)
    vals = np.arange(4 * 4000, dtype=np.float32).reshape(4, 4000) % 7
    e.write_tensor("x", vals)
    e.run()
    got = e.read_tensor("total")
    np.testing.assert_array_equal(got, np.broadcast_to((vals * vals).sum(axis=0), got.shape))
    prof = e.profile()
    by_ipu = lambda a: a.reshape(4, t.tiles_per_ipu)            # noqa: E731
    assert (by_ipu(prof.memory["variables"]).max(axis=1) > 0).all()
    assert (by_ipu(prof.compute_cycles).max(axis=1) > 0).all()
    assert (by_ipu(prof.inter_ipu_exchange_cycles).max(axis=1) > 0).all()
    used = by_ipu(prof.memory["variables"] > 0).sum(axis=1)
    assert (used == used[0]).all() and used[0] > 100              # the same tiles on each IPU


def test_all_reduce_over_a_pod16(pod16):
    t = pod16.target
    g = poplar.Graph(pod16, replication_factor=16)
    x = g.add_variable(poplar.INT, [50], "x")
    poputil.map_tensor_linearly(g, x, grain_size=1, min_elements_per_tile=1)
    seq = prog.Sequence()
    gcl.all_reduce_in_place(g, x, "add", seq)
    g.create_host_write("x", x)
    g.create_host_read("x-out", x)
    e = poplar.Engine(g, seq)
    e.load(pod16)
    vals = np.arange(16 * 50, dtype=np.int32).reshape(16, 50)
    e.write_tensor("x", vals)
    e.run()
    got = e.read_tensor("x-out")
    np.testing.assert_array_equal(got, np.broadcast_to(vals.sum(axis=0), got.shape))
    prof = e.profile()
    assert len([s for s in prof.steps if s.kind == "cross_replica_copy"]) == 30
    assert (prof.inter_ipu_exchange_cycles.reshape(16, 4).max(axis=1) > 0).all()
    src, dst, _ = prof.exchange_traffic()
    pairs = {(int(a), int(b)) for a, b in zip(t.ipu_of(src), t.ipu_of(dst)) if a != b}
    assert pairs == {(i, (i + 1) % 16) for i in range(16)}    # the ring, machine to machine


def test_all_reduce_cost_grows_with_the_number_of_ipus():
    cycles = {}
    for n_ipus, make in sorted(DEVICES.items()):
        dev = make()
        g = poplar.Graph(dev, replication_factor=n_ipus)
        x = g.add_variable(poplar.FLOAT, [4096], "x")
        poputil.map_tensor_linearly(g, x)
        gcl.all_reduce_in_place(g, x, "add", seq := prog.Sequence())
        e = poplar.Engine(g, seq)
        e.load(dev)
        e.run()
        cycles[n_ipus] = e.profile().total_cycles
    assert cycles[2] < cycles[4] < cycles[16]


def test_viz_draws_a_replicated_multi_ipu_profile():
    dev = ipulab.devices.bow2000(tiles_per_ipu=4)
    g = poplar.Graph(dev, replication_factor=4)
    x = g.add_variable(poplar.FLOAT, [64], "x")
    poputil.map_tensor_linearly(g, x)
    gcl.all_reduce_in_place(g, x, "max", seq := prog.Sequence())
    e = poplar.Engine(g, seq)
    e.load(dev)
    e.run()
    prof = e.profile()
    for fig in (viz.bsp_trace, viz.exchange_matrix, viz.tile_memory_heatmap, viz.liveness,
                viz.codelet_summary):
        assert fig(prof) is not None
    assert "4 replicas" in prof.summary()
    assert prof.to_dict()["replication_factor"] == 4


@pytest.mark.parametrize("spread", [False, True])
def test_a_tile_sends_to_another_ipu_no_faster_than_its_exchange_port(spread):
    """64 KiB from IPU 0 to IPU 1 of a Bow-2000: spread over 16 tiles the links set the pace
    (target.link_cycles); all on one tile, that tile's 4-byte-per-cycle port does."""
    dev = ipulab.devices.bow2000(tiles_per_ipu=16)
    t = dev.target
    g = poplar.Graph(dev)
    n = 16384
    a, b = g.add_variable(poplar.FLOAT, [n], "a"), g.add_variable(poplar.FLOAT, [n], "b")
    if spread:
        poputil.map_tensor_linearly(g.create_virtual_graph(0, 16), a)
        poputil.map_tensor_linearly(g.create_virtual_graph(16, 32), b)
    else:
        g.set_tile_mapping(a, 0)
        g.set_tile_mapping(b, 16)
    g.create_host_write("a", a)
    g.create_host_read("b", b)
    e = poplar.Engine(g, prog.Copy(a, b))
    e.load(dev)
    e.write_tensor("a", np.arange(n, dtype=np.float32))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("b"), np.arange(n))
    cycles = e.profile().phase_totals()["inter_ipu_exchange"]
    link = t.link_cycles(4 * n, 0, 1)
    port = -(-4 * n // t.exchange_bytes_per_cycle) + t.cost.exchange_setup_cycles
    assert port > link
    assert cycles == (link if spread else port)
