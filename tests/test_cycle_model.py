"""The cycle model (DESIGN section 3) with worked numbers, and the Profile that reports it."""
import json
import math

import numpy as np
import pytest
from helpers import run_engine
from hypothesis import given, settings
from hypothesis import strategies as st

import ipulab
from ipulab import poplar
from ipulab.course.codelets import SumPartials
from ipulab.poplar import program as prog


class Bump(poplar.Vertex):
    x = poplar.InOut(poplar.FLOAT)

    @staticmethod
    def compute(x):
        x[0] += 1.0


class MultiBump(poplar.MultiVertex):
    x = poplar.InOut(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(worker_id, x):
        x[worker_id] += 1.0


class Gather(poplar.Vertex):
    f = poplar.Input(poplar.Vector[poplar.FLOAT])
    i = poplar.Input(poplar.Vector[poplar.INT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(f, i, out):
        out[0] = f[0] + i[0]


def bump_graph(dev, estimates, tile=1):
    """One vertex per estimate on one tile, each bumping its own local element."""
    g = poplar.Graph(dev.target)
    v = g.add_variable(poplar.FLOAT, [len(estimates)], "v")
    g.set_tile_mapping(v, tile)
    cs = g.add_compute_set("bump")
    for k, est in enumerate(estimates):
        vx = g.add_vertex(cs, Bump, {"x": v[k]}, tile=tile)
        g.set_perf_estimate(vx, est)
    return g, cs


@pytest.mark.parametrize("n,cycles,excluding_idle", [(7, 240, 140), (6, 120, 120), (1, 120, 20),
                                                     (12, 240, 240), (13, 360, 260)])
def test_vertices_dealt_to_six_workers(dev4, n, cycles, excluding_idle):
    g, cs = bump_graph(dev4, [20] * n)
    prof = run_engine(g, prog.Execute(cs), dev4).profile()
    assert prof.compute_cycles.tolist() == [0, cycles, 0, 0]
    assert prof.compute_cycles_excluding_idle.tolist() == [0, excluding_idle, 0, 0]
    # the compute set is one superstep: a sync, then compute (no exchange: all data local)
    (step,) = prof.steps
    assert step.kind == "execute" and step.name == "bump"
    assert [k for k, _ in step.phases] == ["sync", "compute"]
    assert prof.total_cycles == 150 + cycles
    assert prof.exchange_cycles.sum() == 0


def test_largest_first_dealing(dev4):
    # 50, 40, 30, 20, 10, 10 fill the six workers; the last 10 joins a 10 -> busiest is 50
    g, cs = bump_graph(dev4, [10, 30, 10, 50, 20, 40, 10])
    prof = run_engine(g, prog.Execute(cs), dev4).profile()
    assert prof.compute_cycles[1] == 300
    assert prof.compute_cycles_excluding_idle[1] == 170


def test_multivertex_runs_on_every_worker(dev4):
    g = poplar.Graph(dev4.target)
    v = g.add_variable(poplar.FLOAT, [6], "v")
    g.set_tile_mapping(v, 2)
    cs = g.add_compute_set("multi")
    mv = g.add_vertex(cs, MultiBump, {"x": v}, tile=2)
    g.set_perf_estimate(mv, 10)
    g.create_host_read("v", v)
    e = run_engine(g, prog.Execute(cs), dev4)
    prof = e.profile()
    assert prof.compute_cycles[2] == 60
    assert prof.compute_cycles_excluding_idle[2] == 60
    assert e.read_tensor("v").tolist() == [1.0] * 6


def test_multivertex_and_vertices_share_workers(dev4):
    g = poplar.Graph(dev4.target)
    v = g.add_variable(poplar.FLOAT, [7], "v")
    g.set_tile_mapping(v, 0)
    cs = g.add_compute_set("mixed")
    g.set_perf_estimate(g.add_vertex(cs, MultiBump, {"x": v[:6]}, tile=0), 10)
    g.set_perf_estimate(g.add_vertex(cs, Bump, {"x": v[6]}, tile=0), 20)
    prof = run_engine(g, prog.Execute(cs), dev4).profile()
    assert prof.compute_cycles[0] == 6 * 30
    assert prof.compute_cycles_excluding_idle[0] == 60 + 20


def test_compute_phase_is_the_slowest_tile(dev4):
    g = poplar.Graph(dev4.target)
    v = g.add_variable(poplar.FLOAT, [4], "v")
    cs = g.add_compute_set("cs")
    for tile, est in enumerate([5, 50, 0, 17]):
        g.set_tile_mapping(v[tile], tile)
        g.set_perf_estimate(g.add_vertex(cs, Bump, {"x": v[tile]}, tile=tile), est)
    prof = run_engine(g, prog.Execute(cs), dev4).profile()
    assert prof.compute_cycles.tolist() == [30, 300, 0, 102]
    assert prof.total_cycles == 150 + 300


@pytest.mark.parametrize("n", [1, 2, 3, 37, 1000])
def test_exchange_of_n_floats_between_two_tiles(dev4, n):
    g = poplar.Graph(dev4.target)
    a = g.add_variable(poplar.FLOAT, [n], "a")
    b = g.add_variable(poplar.FLOAT, [n], "b")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 1)
    prof = run_engine(g, prog.Copy(a, b), dev4).profile()
    expected = math.ceil(4 * n / 4) + 16
    assert prof.exchange_cycles.tolist() == [expected, expected, 0, 0]
    assert prof.sync_cycles.tolist() == [150] * 4
    assert prof.total_cycles == 150 + expected


def test_exchange_counts_the_busier_direction(dev4):
    """Per tile: ceil(max(bytes in, bytes out) / 4) + 16."""
    g = poplar.Graph(dev4.target)
    a = g.add_variable(poplar.FLOAT, [30], "a")
    b = g.add_variable(poplar.FLOAT, [30], "b")
    g.set_tile_mapping(a, [[(0, 10)], [(10, 30)]])         # 10 on tile 0, 20 on tile 1
    g.set_tile_mapping(b, [[], [(0, 10)], [(10, 30)]])     # 10 on tile 1, 20 on tile 2
    prof = run_engine(g, prog.Copy(a, b), dev4).profile()
    # tile 0 sends 40 B; tile 1 receives 40 B and sends 80 B; tile 2 receives 80 B
    assert prof.exchange_cycles.tolist() == [10 + 16, 20 + 16, 20 + 16, 0]


def test_on_tile_copy_costs_compute_not_exchange(dev4):
    g = poplar.Graph(dev4.target)
    a = g.add_variable(poplar.FLOAT, [20], "a")
    g.set_tile_mapping(a, 3)
    prof = run_engine(g, prog.Copy(a[:10], a[10:]), dev4).profile()
    assert prof.exchange_cycles.sum() == 0
    assert prof.compute_cycles[3] == 40 // 8                # 8 bytes per cycle


def test_exchange_before_a_compute_set(dev4):
    """Remote field data is fetched in the compute set's exchange phase."""
    g = poplar.Graph(dev4.target)
    f = g.add_variable(poplar.FLOAT, [12], "f")
    out = g.add_variable(poplar.FLOAT, [1], "out")
    g.set_tile_mapping(f, 0)
    g.set_tile_mapping(out, 2)
    i = g.add_variable(poplar.INT, [1], "i")
    g.set_tile_mapping(i, 2)
    cs = g.add_compute_set("gather")
    v = g.add_vertex(cs, Gather, {"f": f, "i": i, "out": out[0]}, tile=2)
    g.set_perf_estimate(v, 4)
    prof = run_engine(g, prog.Execute(cs), dev4).profile()
    assert prof.exchange_cycles.tolist() == [12 + 16, 0, 12 + 16, 0]
    assert [k for k, _ in prof.steps[0].phases] == ["sync", "exchange", "compute"]
    assert prof.total_cycles == 150 + 28 + 24


def test_one_exchange_phase_for_fields_of_different_types(dev4):
    """DESIGN section 3: on-chip exchange is, per tile, ceil(max(bytes in, bytes out) / 4) plus
    one fixed setup. A vertex that pulls 48 B of FLOAT and 4 B of INT from tile 0 gets one
    exchange phase of ceil(52 / 4) + 16 cycles, not one setup per element type."""
    g = poplar.Graph(dev4.target)
    f = g.add_variable(poplar.FLOAT, [12], "f")
    i = g.add_variable(poplar.INT, [1], "i")
    out = g.add_variable(poplar.FLOAT, [1], "out")
    g.set_tile_mapping(f, 0)
    g.set_tile_mapping(i, 0)
    g.set_tile_mapping(out, 2)
    cs = g.add_compute_set("gather")
    g.add_vertex(cs, Gather, {"f": f, "i": i, "out": out[0]}, tile=2)
    prof = run_engine(g, prog.Execute(cs), dev4).profile()
    assert prof.exchange_cycles.tolist() == [13 + 16, 0, 13 + 16, 0]


def test_sync_cycles(dev4):
    p = prog.Sequence([prog.Sync(poplar.SyncType.INTERNAL)] * 3)
    g = poplar.Graph(dev4.target)
    prof = run_engine(g, p, dev4).profile()
    assert prof.total_cycles == 450
    assert prof.sync_cycles.tolist() == [450] * 4
    assert dev4.target.sync_cycles("internal") == 150


def test_repeat_multiplies_cycles(dev4):
    g, cs = bump_graph(dev4, [20] * 7)
    one = run_engine(g, prog.Execute(cs), dev4).profile()
    five = run_engine(g, prog.Repeat(5, prog.Execute(cs)), dev4).profile()
    assert five.total_cycles == 5 * one.total_cycles
    np.testing.assert_array_equal(five.compute_cycles, 5 * one.compute_cycles)
    assert len(five.steps) == 5


def _mixed_program(dev):
    g = poplar.Graph(dev.target)
    a = g.add_variable(poplar.FLOAT, [40], "a")
    b = g.add_variable(poplar.FLOAT, [40], "b")
    f = g.add_variable(poplar.FLOAT, [12], "f")
    i = g.add_variable(poplar.INT, [1], "i")
    out = g.add_variable(poplar.FLOAT, [1], "out")
    g.set_tile_mapping(a, [[(0, 25)], [(25, 40)]])
    g.set_tile_mapping(b, 3)
    g.set_tile_mapping(f, 1)
    g.set_tile_mapping(i, 2)
    g.set_tile_mapping(out, 0)
    cs = g.add_compute_set("gather")
    g.add_vertex(cs, Gather, {"f": f, "i": i, "out": out[0]}, tile=0)
    s = g.add_host_to_device_fifo("in", poplar.FLOAT, 40)
    p = prog.Sequence([prog.Copy(s, a), prog.Copy(a, b), prog.Repeat(2, prog.Execute(cs)),
                       prog.Sync(poplar.SyncType.EXTERNAL), prog.PrintTensor("out", out)])
    e = poplar.Engine(g, p)
    e.load(dev)
    e.connect_stream("in", np.zeros(40, np.float32))
    return e


def test_total_is_the_sum_over_steps_of_phase_maxima(dev4, capsys):
    e = _mixed_program(dev4)
    e.run()
    prof = e.profile()
    total = sum(int(c.max()) for r in prof.steps for _, c in r.phases)
    assert prof.total_cycles == total
    assert [r.kind for r in prof.steps] == ["stream_copy", "copy", "execute", "execute", "sync",
                                            "print"]
    assert sum(prof.phase_totals().values()) == total
    # per-tile sums of each phase over all steps
    for attr, kind in [("compute_cycles", "compute"), ("exchange_cycles", "exchange"),
                       ("sync_cycles", "sync"), ("host_exchange_cycles", "host_exchange")]:
        per_tile = sum((c for r in prof.steps for k, c in r.phases if k == kind),
                       np.zeros(4, np.int64))
        np.testing.assert_array_equal(getattr(prof, attr), per_tile, err_msg=attr)
    # steps start where the previous one ended
    starts = [r.start for r in prof.steps]
    assert starts == list(np.cumsum([0] + [r.cycles for r in prof.steps[:-1]]))
    # the stream fills a on tiles 0 and 1 (160 B); the print reads out (4 B) from tile 0
    h160, h4 = dev4.target.host_cycles(160), dev4.target.host_cycles(4)
    assert prof.host_exchange_cycles.tolist() == [h160 + h4, h160, 0, 0]
    capsys.readouterr()


def test_host_transfer_cycles(dev4):
    e = _mixed_program(dev4)
    e.run()
    stream = e.profile().steps[0]
    host = dict(stream.phases)["host_exchange"]
    # a stream copy costs the host link time of the whole transfer on every tile it touches
    assert host.tolist() == [dev4.target.host_cycles(160)] * 2 + [0, 0]
    assert dev4.target.host_cycles(160) > dev4.target.host_cycles(4) > 0


def test_total_seconds(dev4):
    g, cs = bump_graph(dev4, [20] * 7)
    prof = run_engine(g, prog.Execute(cs), dev4).profile()
    assert prof.clock_hz == dev4.target.clock_hz == pytest.approx(1.33e9)
    assert prof.total_seconds == pytest.approx(390 / 1.33e9)
    bow = ipulab.devices.ipu("bow", tiles_per_ipu=4)
    g, cs = bump_graph(bow, [20] * 7)
    prof = run_engine(g, prog.Execute(cs), bow).profile()
    assert prof.total_cycles == 390
    assert prof.total_seconds == pytest.approx(390 / 1.85e9)


def test_profile_memory(dev4):
    g = poplar.Graph(dev4.target)
    v = g.add_variable(poplar.FLOAT, [100], "v")
    g.set_tile_mapping(v, 3)
    c = g.add_constant(poplar.INT, [3], [1, 2, 3], "c")
    g.set_tile_mapping(c, 1)
    prof = run_engine(g, prog.Sequence(), dev4).profile()
    assert prof.memory["variables"].tolist() == [0, 0, 0, 400]
    assert prof.memory["constants"].tolist() == [0, 16, 0, 0]     # 12 B aligned to 8
    assert set(prof.memory) == {"code", "constants", "variables", "vertex_state",
                                "exchange_buffers"}
    np.testing.assert_array_equal(prof.memory_total, sum(prof.memory.values()))
    assert ("v", 400) in prof.memory_layout.largest_on(3)


def test_profile_memory_of_vertices_and_buffers(dev4):
    g = poplar.Graph(dev4.target)
    f = g.add_variable(poplar.FLOAT, [12], "f")
    i = g.add_variable(poplar.INT, [1], "i")
    out = g.add_variable(poplar.FLOAT, [1], "out")
    g.set_tile_mapping(f, 0)
    g.set_tile_mapping(i, 2)
    g.set_tile_mapping(out, 2)
    cs = g.add_compute_set("gather")
    g.add_vertex(cs, Gather, {"f": f, "i": i, "out": out[0]}, tile=2)
    prof = run_engine(g, prog.Execute(cs), dev4).profile()
    assert prof.memory["exchange_buffers"][2] == 48           # f is brought to tile 2
    assert prof.memory["exchange_buffers"][[0, 1, 3]].sum() == 0
    assert prof.memory["vertex_state"][2] > 0 and prof.memory["vertex_state"][0] == 0
    assert prof.memory["code"][2] > prof.memory["code"][1]


@pytest.mark.parametrize("scattered", [False, True])
def test_reads_shared_at_run_time_are_still_exchanged_to_every_tile(dev4, scattered):
    """Vertices on tiles 1-3 read the same elements of tile 0 (one range, or every other
    element): the host may read them once, but every tile pays the exchange and the buffer."""
    g = poplar.Graph(dev4.target)
    f = g.add_variable(poplar.FLOAT, [24], "f")
    out = g.add_variable(poplar.FLOAT, [3], "out")
    g.set_tile_mapping(f, 0)
    cs = g.add_compute_set("totals")
    part = f[::2] if scattered else f[:12]
    for t in (1, 2, 3):
        g.set_tile_mapping(out[t - 1], t)
        g.add_vertex(cs, SumPartials, {"p": part, "out": out[t - 1]}, tile=t)
    g.create_host_write("f", f)
    g.create_host_read("out", out)
    values = np.arange(24, dtype=np.float32)
    e = poplar.Engine(g, prog.Execute(cs))
    e.load(dev4)
    e.write_tensor("f", values)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("out"), [values[::2].sum() if scattered
                                                         else values[:12].sum()] * 3)
    prof = e.profile()
    assert prof.memory["exchange_buffers"].tolist() == [0, 48, 48, 48]
    assert (prof.exchange_cycles[1:] > 0).all()


def test_profile_round_trips_through_json(dev4):
    e = _mixed_program(dev4)
    e.run()
    prof = e.profile()
    d = prof.to_dict()
    assert json.loads(prof.to_json()) == d
    assert json.loads(json.dumps(d)) == d
    assert d["total_cycles"] == prof.total_cycles
    assert d["compute_cycles"] == prof.compute_cycles.tolist()
    assert d["memory"]["variables"] == prof.memory["variables"].tolist()
    assert d["total_seconds"] == pytest.approx(prof.total_seconds)
    assert len(d["steps"]) == len(prof.steps)
    assert d["vertex_stats"] == {"Gather": {"count": 1, "cycles": prof.vertex_stats["Gather"][
        "cycles"]}}


def test_summary_mentions_the_totals(dev4, capsys):
    e = _mixed_program(dev4)
    e.run()
    capsys.readouterr()
    e.print_profile_summary()
    out = capsys.readouterr().out
    assert f"{e.profile().total_cycles:,} cycles" in out
    assert "Gather" in out and "ipu2" in out


@settings(max_examples=40, deadline=None)
@given(ests=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 100), st.booleans()),
                     min_size=1, max_size=30))
def test_compute_cycles_bounds(ests):
    """For any vertices: excluding idle = the sum of estimates (x6 for MultiVertex), and the
    tile time = 6 x busiest worker lies between the perfect split and greedy's bound."""
    dev = ipulab.devices.ipu("ipu2", tiles_per_ipu=4)
    g = poplar.Graph(dev.target)
    v = g.add_variable(poplar.FLOAT, [len(ests), 6], "v")
    cs = g.add_compute_set("cs")
    for k, (tile, est, multi) in enumerate(ests):
        g.set_tile_mapping(v[k], tile)
        vx = (g.add_vertex(cs, MultiBump, {"x": v[k]}, tile=tile) if multi else
              g.add_vertex(cs, Bump, {"x": v[k, 0]}, tile=tile))
        g.set_perf_estimate(vx, est)
    prof = run_engine(g, prog.Execute(cs), dev).profile()
    for tile in range(4):
        mine = [(e, m) for t, e, m in ests if t == tile]
        work = sum(e * (6 if m else 1) for e, m in mine)
        assert prof.compute_cycles_excluding_idle[tile] == work
        busiest = prof.compute_cycles[tile] // 6
        assert prof.compute_cycles[tile] % 6 == 0
        single = [e for e, m in mine if not m]
        assert busiest * 6 >= work
        assert busiest >= max(single, default=0)
        assert busiest <= sum(e for e, m in mine if m) + math.ceil(sum(single) / 6) + \
            max(single, default=0)


def test_copy_between_ipus_uses_the_links():
    dev = ipulab.devices.m2000(tiles_per_ipu=4)
    t = dev.target
    assert t.num_tiles == 16 and t.num_ipus == 4
    g = poplar.Graph(dev)
    a = g.add_variable(poplar.FLOAT, [100], "a")
    b = g.add_variable(poplar.FLOAT, [100], "b")
    g.set_tile_mapping(a, 0)                        # IPU 0
    g.set_tile_mapping(b, 5)                        # IPU 1
    g.create_host_write("a", a)
    g.create_host_read("b", b)
    e = poplar.Engine(g, prog.Copy(a, b))
    e.load(dev)
    e.write_tensor("a", np.arange(100, dtype=np.float32))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("b"), np.arange(100))
    prof = e.profile()
    link = t.link_cycles(400, 0, 1)
    assert link > 0
    expected = np.zeros(16, np.int64)
    expected[[0, 5]] = link
    np.testing.assert_array_equal(prof.inter_ipu_exchange_cycles, expected)
    assert prof.exchange_cycles.sum() == 0
    # crossing IPUs needs the external sync, which is slower than the internal one
    assert (prof.sync_cycles == t.sync_cycles("external")).all()
    assert t.sync_cycles("external") > t.sync_cycles("internal") == 150
    assert prof.total_cycles == t.sync_cycles("external") + link


def test_target_peak_counts_its_own_tiles():
    full = ipulab.devices.bow2000().target
    assert abs(full.peak_fp16_flops - 4 * full.chip.peak_fp16_flops) < 1e6   # ~1.4 PFLOPS
    small = ipulab.devices.ipu("ipu2", tiles_per_ipu=48).target
    assert small.peak_fp32_flops == 32 * 48 * 1.33e9
