"""Chains: consecutive steps that stay on one lane for good run as one list of kernel calls
(bsp.Chain). They must give the bits, the trace and the error of the steps run one by one."""
import numpy as np
import pytest
from codelets import Scale

import ipulab
from ipulab import poplar
from ipulab.errors import CodeletError
from ipulab.machine import bsp, lanes
from ipulab.poplar import executables as X
from ipulab.poplar import program as prog


def _engine(rows: int = 8, cols: int = 16):
    """x -> 3x -> (a copy) -> 9x -> 27x: three compute sets and the copies between them."""
    dev = ipulab.devices.ipu("ipu2", tiles_per_ipu=8)
    g = poplar.Graph(dev.target)
    ts = [g.add_variable(poplar.FLOAT, [rows, cols], name) for name in "xyzwv"]
    for t in ts:
        g.set_tile_mapping(t, 0)
        for r in range(rows):
            g.set_tile_mapping(t[r], r % 8)
    sets = []
    for k, (src, dst) in enumerate([(0, 1), (2, 3), (3, 4)]):
        cs = g.add_compute_set(f"scale{k}")
        for r in range(rows):
            g.add_vertex(cs, Scale, {"in": ts[src][r], "out": ts[dst][r]}, tile=(r + 1) % 8)
        sets.append(cs)
    g.create_host_write("x", ts[0])
    g.create_host_read("v", ts[4])
    body = prog.Sequence([prog.Execute(sets[0]), prog.Copy(ts[1], ts[2]),
                          prog.Execute(sets[1]), prog.Execute(sets[2])])
    e = poplar.Engine(g, body)
    e.load(dev)
    return e


def _chains(e) -> list:
    return [n for plan in e._calls.values() if isinstance(plan, list)
            for n in plan if isinstance(n, bsp.Chain)]


def _runs(chained: bool, x, bad):
    """Three runs on x, then one on bad, on one lane: the engine, its outputs and traces, and
    the error; without chains (bsp.chained giving the steps as they are) if not chained."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IPULAB_THREADS", "1")
        if not chained:
            mp.setattr(bsp, "chained", lambda owner, nodes, state: nodes)
        e = _engine()
        outs, traces = [], []
        for _ in range(3):
            e.write_tensor("x", x)
            e.run()
            outs.append(e.read_tensor("v").tobytes())
            traces.append(list(e._trace))
        e.write_tensor("x", bad)
        with pytest.raises(CodeletError) as info:
            e.run()
        assert e.read_tensor("v").tobytes() == outs[-1]     # nothing reached the host
    return e, outs, traces, str(info.value)


def test_steps_alone_for_good_run_as_one_chain_with_the_bits_trace_and_error_of_each():
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32) ** 2
    bad = x.copy()
    bad[5, 0] = -1                  # row 5's vertex fails in the first compute set of the chain
    e, outs, traces, error = _runs(True, x, bad)
    plain, plain_outs, plain_traces, plain_error = _runs(False, x, bad)
    assert _chains(e) and not _chains(plain)
    assert outs == plain_outs and traces == plain_traces
    np.testing.assert_array_equal(np.frombuffer(outs[0], np.float32).reshape(8, 16),
                                  x * np.float32(3) * np.float32(3) * np.float32(3))
    assert error == plain_error and "negative input" in error and "scale0" in error
    assert e.profile().total_cycles == plain.profile().total_cycles


def test_a_step_joins_a_chain_only_once_it_stays_on_one_lane_for_good(monkeypatch):
    """One lane, or small work: at once. Otherwise after two runs alone, the shorter of them
    under MIN_SECONDS (the lanes' own gate), or once the lanes missed its first GIVE_UP runs
    on them; with MIN_SECONDS at 0 a big step the lanes sped up once never does."""
    big, timing, pace = lanes.MIN_WORK, lanes.Timing(), lanes.Pace()
    assert lanes.alone_for_good(1, big, timing, pace)
    assert lanes.alone_for_good(2, big - 1, timing, pace)
    assert not lanes.alone_for_good(2, big, timing, pace)
    timing.record(lanes.MIN_SECONDS / 2)
    assert not lanes.alone_for_good(2, big, timing, pace)      # one run is not a decision
    timing.record(lanes.MIN_SECONDS * 2)
    assert lanes.alone_for_good(2, big, timing, pace)
    monkeypatch.setattr(lanes, "MIN_SECONDS", 0)
    assert not lanes.alone_for_good(2, big, timing, pace)
    for _ in range(lanes.GIVE_UP):
        assert not lanes.alone_for_good(2, big, timing, pace)
        pace.after(False)
    assert lanes.alone_for_good(2, big, timing, pace)
    sped_up = lanes.Pace()
    sped_up.after(True)
    for _ in range(5):
        sped_up.after(False)
    assert not lanes.alone_for_good(2, big, timing, sped_up)


def test_with_lanes_the_chains_form_after_two_runs_and_follow_the_gate(monkeypatch):
    monkeypatch.setenv("IPULAB_THREADS", "2")
    monkeypatch.setattr(lanes, "MIN_WORK", 0)                   # every step could share
    monkeypatch.setattr(X, "_memory", type(X._memory)())   # steps no other test has timed
    e = _engine()
    x = np.ones((8, 16), np.float32)
    e.write_tensor("x", x)
    for _ in range(2):
        e.run()
        assert not _chains(e)                  # each step still has to be timed alone
    e.run()
    assert len(_chains(e)) == 1                 # these steps take microseconds
    monkeypatch.setattr(lanes, "MIN_SECONDS", 0)   # every step to the lanes now: no chain
    e._calls.clear()
    e.run()
    assert not _chains(e)
    assert e.read_tensor("v").tobytes() == (x * 27).tobytes()


@pytest.mark.parametrize("speedup", [0.0, 1e9])
def test_a_long_step_joins_a_chain_once_the_lanes_missed_its_first_runs_on_them(
        monkeypatch, speedup):
    """Every step long (MIN_SECONDS ~ 0): timed twice alone, then tried on the lanes. Where no
    run there counts as sped up (SPEEDUP 0) each gives up after GIVE_UP misses and the steps
    run as chains, on one lane, from then on; where every run does (SPEEDUP huge) they stay
    apart and keep going to the lanes. The bits are the same either way."""
    monkeypatch.setenv("IPULAB_THREADS", "2")
    monkeypatch.setattr(X, "_memory", type(X._memory)())
    for name, value in (("MIN_WORK", 0), ("MIN_SECONDS", 1e-9), ("FIRST_ALONE", 0.0),
                        ("SPEEDUP", speedup)):
        monkeypatch.setattr(lanes, name, value)
    handed = []
    run = lanes.run
    monkeypatch.setattr(lanes, "run", lambda parts, *a: handed.append(1) or run(parts, *a))
    e = _engine()
    x = np.full((8, 16), 2, np.float32)
    e.write_tensor("x", x)
    outs = set()
    for _ in range(2 + lanes.GIVE_UP):
        e.run()
        outs.add(e.read_tensor("v").tobytes())
    assert not _chains(e) and len(handed) >= 4 * lanes.GIVE_UP   # 4 steps, each tried
    handed.clear()
    for _ in range(3):
        e.run()
        outs.add(e.read_tensor("v").tobytes())
    assert outs == {(x * 27).tobytes()}
    if speedup == 0.0:
        assert len(_chains(e)) == 1 and len(_chains(e)[0].indices) == 4 and not handed
    else:
        assert not _chains(e) and len(handed) >= 4 * 3
