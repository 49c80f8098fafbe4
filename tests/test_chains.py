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


def _runs(monkeypatch, chained: bool, x, bad):
    """Three runs on x, then one on bad: the outputs, the traces and the error."""
    if not chained:
        monkeypatch.setattr(bsp, "chained", lambda owner, nodes, state: nodes)
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
    monkeypatch.undo()
    return e, outs, traces, str(info.value)


def test_steps_alone_for_good_run_as_one_chain_with_the_bits_trace_and_error_of_each(
        monkeypatch):
    monkeypatch.setenv("IPULAB_THREADS", "1")
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32) ** 2
    bad = x.copy()
    bad[5, 0] = -1                              # the second compute set's vertex fails too
    e, outs, traces, error = _runs(monkeypatch, True, x, bad)
    monkeypatch.setenv("IPULAB_THREADS", "1")
    plain, plain_outs, plain_traces, plain_error = _runs(monkeypatch, False, x, bad)
    assert _chains(e) and not _chains(plain)
    assert outs == plain_outs and traces == plain_traces
    np.testing.assert_array_equal(np.frombuffer(outs[0], np.float32).reshape(8, 16),
                                  x * np.float32(3) * np.float32(3) * np.float32(3))
    assert error == plain_error and "negative input" in error and "scale0" in error
    assert e.profile().total_cycles == plain.profile().total_cycles


def test_a_step_joins_a_chain_only_once_it_stays_on_one_lane_for_good(monkeypatch):
    """One lane, or small work: at once. Otherwise after two runs alone, the shorter of them
    under MIN_SECONDS (the lanes' own gate); with MIN_SECONDS at 0 a big step never does."""
    big, timing = lanes.MIN_WORK, lanes.Timing()
    assert lanes.alone_for_good(1, big, timing) and lanes.alone_for_good(2, big - 1, timing)
    assert not lanes.alone_for_good(2, big, timing)
    timing.record(lanes.MIN_SECONDS / 2)
    assert not lanes.alone_for_good(2, big, timing)            # one run is not a decision
    timing.record(lanes.MIN_SECONDS * 2)
    assert lanes.alone_for_good(2, big, timing)
    monkeypatch.setattr(lanes, "MIN_SECONDS", 0)
    assert not lanes.alone_for_good(2, big, timing)


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
