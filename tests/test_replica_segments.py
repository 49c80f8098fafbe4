"""Replica segments: consecutive steps of a replicated graph that lanes run replica by replica,
one hand-over for the lot (bsp.ReplicaSegment). The same bits and the same error as one lane,
the error being the one a run in order meets first; and the exchange buffers of the steps in
one segment never share host memory (replicas.Replicas)."""
import numpy as np
import pytest
from codelets import Scale
from helpers import every_lane

import ipulab
from ipulab import poplar
from ipulab.errors import CodeletError
from ipulab.machine import bsp, lanes
from ipulab.poplar import program as prog
from ipulab.poplar import replicas as R


class Bounded(poplar.Vertex):
    """out = inp + 1; raises on a first element over 1e6."""

    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(inp, out):
        if inp[0] > 1e6:
            raise ValueError("too large")
        for i in range(len(inp)):
            out[i] = inp[i] + np.float32(1)


def _engine(replicas=4, rows=256, cols=96):
    """x -> Scale (reads across tiles) -> y; copy y -> z; z -> Bounded (across tiles) -> w."""
    dev = ipulab.devices.bow2000(tiles_per_ipu=16)
    g = poplar.Graph(dev.target, replication_factor=replicas)
    tiles = dev.target.num_tiles // replicas
    x, y, z, w = (g.add_variable(poplar.FLOAT, [rows, cols], n) for n in "xyzw")
    first, second = g.add_compute_set("scale"), g.add_compute_set("bounded")
    for r in range(rows):
        for i, t in enumerate((x, y, z, w)):
            g.set_tile_mapping(t[r], (r + i) % tiles)
        g.add_vertex(first, Scale, {"in": x[r], "out": y[r]}, tile=(r + 3) % tiles)
        g.add_vertex(second, Bounded, {"in": z[r], "out": w[r]}, tile=(r + 2) % tiles)
    g.create_host_write("x", x)
    g.create_host_read("w", w)
    e = poplar.Engine(g, prog.Sequence([prog.Execute(first), prog.Copy(y, z),
                                        prog.Execute(second)]))
    e.load(dev)
    return e


def test_lanes_run_the_steps_as_one_segment_with_the_bits_of_one_lane(monkeypatch):
    every_lane(monkeypatch)
    x = np.abs(np.random.default_rng(0).standard_normal((4, 256, 96))).astype(np.float32)
    outs = {}
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("IPULAB_THREADS", threads)
        e = _engine()
        e.write_tensor("x", x)
        e.run()
        outs[threads] = e.read_tensor("w")
        runs = e._compiled.roots[0]._runs
        assert [type(n) for n in runs] == [bsp.ReplicaSegment]
        assert [s.kind for s in runs[0].steps] == ["execute", "copy", "execute"]
        assert e.profile().steps[-1].name == "bounded"         # the trace as in order
    assert outs["1"].tobytes() == outs["2"].tobytes() == outs["3"].tobytes()
    np.testing.assert_array_equal(outs["1"], x * np.float32(3) + np.float32(1))


def test_a_failure_is_the_one_a_run_in_order_meets_first(monkeypatch):
    """Replica 0 fails in the last step and replica 3 in the first: with two lanes the part of
    replicas 0-1 fails later in the program than the part of 2-3, and the error is still
    replica 3's in the first step, as one lane says."""
    every_lane(monkeypatch)
    x = np.ones((4, 256, 96), np.float32)
    x[0, 10, 0] = 1e7                  # passes Scale, fails Bounded (the third step)
    x[3, 20, 0] = -1                   # fails Scale (the first step)
    errors = {}
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("IPULAB_THREADS", threads)
        e = _engine()
        e.write_tensor("x", x)
        with pytest.raises(CodeletError) as info:
            e.run()
        errors[threads] = str(info.value)
    assert errors["1"] == errors["2"] == errors["3"]
    assert "negative input" in errors["1"] and "(replica 3)" in errors["1"]
    assert "'scale'" in errors["1"]


def test_the_buffers_of_consecutive_compute_sets_lie_apart_on_a_replicated_graph():
    """Replica 0 may run one compute set while replica 3 runs the one before: their exchange
    buffers take different host memory, until SCRATCH_SPAN is filled; an unreplicated
    graph's all start right after the variables."""
    e = _engine()
    segment, = bsp.replica_segments(e._compiled.roots[0].nodes)
    first, second = (s.action.scratch for s in segment.steps[::2])
    assert first and second and not bsp._shares_scratch(first, second)
    (key, start, end), = first
    assert start == 4 * e._compiled.replica_stride[key]      # right after every replica's
    assert second[0][1] >= end

    one = _engine(replicas=1)
    a, b = (s.action.scratch for s in one._compiled.steps if s.kind == "execute")
    assert a[0][1] == b[0][1]                                # both right after the variables


def test_segments_split_where_buffers_would_be_shared_and_at_steps_between_replicas():
    class Action:
        def __init__(self, replicas, scratch=()):
            self.replicas, self.scratch, self.work = replicas, scratch, 0

        def replica_calls(self, state, lo, hi):
            return []

    def step(i, replicas=4, scratch=()):
        s = bsp.Step("execute", f"s{i}", 1, Action(replicas, scratch))
        s.index = i
        return s
    a = step(0, scratch=(("float32", 100, 200),))
    b = step(1, scratch=(("float32", 200, 300),))
    c = step(2, scratch=(("float32", 150, 250),))          # shares a's and b's space
    d = step(3, replicas=1)                                # e.g. a copy between replicas
    e, f = step(4), step(5)
    runs = bsp.replica_segments([bsp.Block([a, b]), c, d, e, bsp.Block([f])])
    assert [type(n).__name__ for n in runs] == ["ReplicaSegment", "Step", "Step",
                                                 "ReplicaSegment"]
    assert runs[0].steps == [a, b] and runs[1] is c and runs[2] is d and runs[3].steps == [e, f]


def test_the_scratch_space_is_used_again_once_its_span_is_filled(monkeypatch):
    monkeypatch.setattr(R, "SCRATCH_SPAN", 1000)

    class State:
        target = ipulab.devices.bow2000(tiles_per_ipu=16).target
        replication_factor = 4
        arenas = {"float32": type("A", (), {"size": 50})()}
    rep = R.Replicas(State)
    starts = []
    for _ in range(6):
        rep.new_scratch()
        starts.append(rep.buffer("float32", 100))
    assert starts == [200, 600, 1000, 200, 600, 1000]       # 4 replicas x 100 a compute set
