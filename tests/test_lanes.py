"""Lanes: a step's kernels cut into parts that run at once on the host's cores (compiled
mode). The parts must give the same bits, and a failing codelet the same error, as one lane."""
import pickle
import time

import numpy as np
import pytest
from codelets import Scale
from helpers import every_lane

import ipulab
from ipulab import poplar
from ipulab.errors import CodeletError
from ipulab.machine import lanes
from ipulab.poplar import program as prog


def _engine(replicas: int, rows: int = 512, cols: int = 96):
    """rows vertices per replica, each reading a row on the next tile (so every vertex's
    input crosses the exchange): enough work for lanes."""
    dev = ipulab.devices.bow2000(tiles_per_ipu=16)
    g = poplar.Graph(dev.target, replication_factor=replicas)
    tiles = dev.target.num_tiles // replicas
    x = g.add_variable(poplar.FLOAT, [rows, cols], "x")
    y = g.add_variable(poplar.FLOAT, [rows, cols], "y")
    cs = g.add_compute_set("scale")
    for r in range(rows):
        g.set_tile_mapping(x[r], r % tiles)
        g.set_tile_mapping(y[r], (r + 1) % tiles)
        g.add_vertex(cs, Scale, {"in": x[r], "out": y[r]}, tile=(r + 1) % tiles)
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    e = poplar.Engine(g, prog.Execute(cs))
    e.load(dev)
    return e, (replicas, rows, cols) if replicas > 1 else (rows, cols)


def test_run_runs_every_part_and_raises_the_first_error_in_order():
    done = []

    def part(i, fail=False):
        def fn():
            done.append(i)
            if fail:
                raise ValueError(f"part {i}")
        return fn

    lanes.run([part(0), part(1), part(2)])
    assert sorted(done) == [0, 1, 2]
    done.clear()
    with pytest.raises(ValueError, match="part 1"):
        lanes.run([part(0), part(1, True), part(2, True)])
    assert sorted(done) == [0, 1, 2]          # every part ran to its end
    assert lanes.share(5, 0, 2) == (0, 2) and lanes.share(5, 1, 2) == (2, 5)
    assert lanes.share(1, 1, 2) == (0, 1) and lanes.share(1, 0, 2) == (0, 0)


def test_parts_go_to_whichever_thread_is_free_and_errors_keep_part_order():
    """More parts than threads: each part runs once, on at most `threads` threads, and a
    part that waits for a later one still finishes (another thread takes the later part);
    the error raised is the first part's in order, not the first in time."""
    import threading
    later_failed = threading.Event()
    ran, threads_used = [], set()

    def part(i):
        def fn():
            threads_used.add(threading.current_thread().name)
            ran.append(i)
            if i == 1:                  # fails after part 3 has failed
                assert later_failed.wait(60), "part 3 never ran while part 1 waited"
                raise ValueError("part 1")
            if i == 3:
                later_failed.set()
                raise ValueError("part 3")
        return fn

    for _ in range(20):
        ran.clear()
        later_failed.clear()
        with pytest.raises(ValueError, match="part 1"):
            lanes.run([part(i) for i in range(6)], 2)
        assert sorted(ran) == list(range(6))
    assert len(threads_used) <= 2
    assert lanes.parts_for(3, 2) == 3 and lanes.parts_for(16, 2) == 2 * lanes.PARTS_PER_THREAD


def test_many_runs_of_disjoint_parts_give_the_bits_of_one_run():
    """Runs back to back (a worker that wakes late finds its job's parts taken and must not
    touch the next run's): every element written once per run, as in order."""
    out = np.zeros(64, np.int64)

    def part(i, k):
        def fn():
            lo, hi = lanes.share(out.size, i, 8)
            out[lo:hi] += k
        return fn
    for k in range(200):
        lanes.run([part(i, k) for i in range(8)], 2)
    np.testing.assert_array_equal(out, np.full(64, sum(range(200))))


def test_lanes_go_alone_for_a_while_after_runs_the_lanes_did_not_speed_up(monkeypatch):
    """After a run on the lanes no faster than one lane (a busy machine, a step too small to
    share, parts that slow each other down) that step uses one lane for 1, 2, 4 ... ms (at
    most MAX_ALONE), and a run the lanes sped up ends that at once. Each step's pace is its
    own."""
    now = [100.0]
    monkeypatch.setattr(lanes, "_clock", lambda: now[0])
    pace, other = lanes.Pace(), lanes.Pace()
    assert lanes.threads(2, pace) == 2 and lanes.threads(1, pace) == 1
    for alone in (0.001, 0.002, 0.004):
        pace.after(False)
        assert lanes.threads(3, pace) == 1 and lanes.threads(1, pace) == 1
        assert lanes.threads(3, other) == 3
        now[0] += alone * 0.99
        assert lanes.threads(3, pace) == 1
        now[0] += alone * 0.02
        assert lanes.threads(3, pace) == 3
    for _ in range(20):
        pace.after(False)
    assert pace.alone == lanes.MAX_ALONE
    stored = pickle.loads(pickle.dumps(pace))        # a stored executable starts afresh
    assert stored.alone == stored.until == 0.0
    pace.after(True)
    assert lanes.threads(2, pace) == 2 and pace.alone == 0.0


def test_a_run_shares_its_work_only_after_two_runs_alone_took_min_seconds(monkeypatch):
    """Small work, or a run that took under MIN_SECONDS on one lane, stays on one lane: its
    hand-over would cost more than it saves. The first run alone pays set-up, so two are
    timed; a run that raises is not; a stored executable times afresh."""
    timing, pace = lanes.Timing(), lanes.Pace()          # (a pace of its own: not backing off)
    big = lanes.MIN_WORK
    assert lanes.lanes_for(2, big, timing, pace) == 1                 # not timed yet
    lanes.run_alone(timing, lambda: None)
    timing.shortest = lanes.MIN_SECONDS * 10                   # (as if it had taken that long)
    assert lanes.lanes_for(2, big, timing, pace) == 1                 # one run alone so far
    with pytest.raises(ValueError):
        lanes.run_alone(timing, int, "not a number")
    assert timing.runs == 1
    timing.record(lanes.MIN_SECONDS * 2)
    assert lanes.lanes_for(2, big, timing, pace) == 2
    assert lanes.lanes_for(1, big, timing, pace) == lanes.lanes_for(2, big - 1, timing, pace) == 1
    timing.record(lanes.MIN_SECONDS / 2)                       # the shortest decides
    assert lanes.lanes_for(2, big, timing, pace) == 1
    assert pickle.loads(pickle.dumps(timing)).runs == 0
    monkeypatch.setattr(lanes, "MIN_SECONDS", 0)
    assert lanes.lanes_for(2, big, lanes.Timing(), pace) == 2


def test_an_engine_hands_out_only_the_steps_that_took_long_enough(monkeypatch):
    """With MIN_SECONDS at 0 a big enough step goes to the lanes (its copies too when they
    move MIN_COPY elements or more); out of reach, it never does; the bits are the same."""
    monkeypatch.setenv("IPULAB_THREADS", "2")
    monkeypatch.setattr(lanes, "threads", lambda n, pace=None: n)
    monkeypatch.setattr(lanes, "GIVE_UP", float("inf"))
    handed = []
    run = lanes.run
    monkeypatch.setattr(lanes, "run", lambda parts, *a: handed.append(1) or run(parts, *a))
    outs = []
    for seconds in (0.0, 3600.0):
        monkeypatch.setattr(lanes, "MIN_SECONDS", seconds)
        e, shape = _engine(1, rows=1024)            # (2 x lanes.MIN_WORK elements)
        x = np.random.default_rng(2).standard_normal(shape)
        e.write_tensor("x", np.abs(x, dtype=np.float32))
        handed.clear()
        for _ in range(3):
            e.run()
        outs.append(e.read_tensor("y").tobytes())
        # one hand-over a run, the vertices': the copies into their buffers (fewer than
        # lanes.MIN_COPY elements) stay in the caller
        assert len(handed) == (3 if seconds == 0.0 else 0)
    monkeypatch.setattr(lanes, "MIN_SECONDS", 0)
    monkeypatch.setattr(lanes, "MIN_COPY", 0)
    handed.clear()
    e.run()
    assert len(handed) == 3 and e.read_tensor("y").tobytes() == outs[0]   # in, vertices, out
    assert outs[0] == outs[1]


def test_a_run_on_the_lanes_is_judged_against_the_shortest_run_alone(monkeypatch):
    """run_judged tells the caller's pace whether its run took under SPEEDUP of the shortest
    run alone: a run no faster (the workers woke too late, or the parts slowed each other
    down) was not sped up, however fast each part was. A run that raises is not judged."""
    now = [0.0]
    monkeypatch.setattr(lanes, "_clock", lambda: now[0])
    timing, pace, seen = lanes.Timing(), lanes.Pace(), []
    monkeypatch.setattr(pace, "after", seen.append)
    timing.record(1.0)

    def takes(seconds):
        now[0] += seconds
    lanes.run_judged(timing, pace, takes, 0.8)
    lanes.run_judged(timing, pace, takes, 0.95)
    assert seen == [True, False]
    with pytest.raises(ValueError):
        lanes.run_judged(timing, pace, int, "not a number")
    assert seen == [True, False]


def test_a_step_that_the_lanes_did_not_speed_up_goes_to_one_lane(monkeypatch):
    """Timed twice alone, then run on the lanes once and slower there: the step's later runs
    stay on one lane (for FIRST_ALONE, here an hour), with the same bits."""
    monkeypatch.setenv("IPULAB_THREADS", "2")
    monkeypatch.setattr(lanes, "MIN_SECONDS", 1e-9)
    monkeypatch.setattr(lanes, "FIRST_ALONE", 3600.0)
    handed = []
    run = lanes.run

    def slow(parts, *args):
        handed.append(1)
        time.sleep(0.2)
        run(parts, *args)
    monkeypatch.setattr(lanes, "run", slow)
    e, shape = _engine(1, rows=1024)
    x = np.abs(np.random.default_rng(3).standard_normal(shape), dtype=np.float32)
    e.write_tensor("x", x)
    outs = set()
    for _ in range(6):
        e.run()
        outs.add(e.read_tensor("y").tobytes())
    assert len(handed) == 1 and len(outs) == 1


@pytest.mark.parametrize("replicas", [1, 4])
def test_lanes_give_the_bits_and_the_error_of_one_lane(monkeypatch, replicas):
    every_lane(monkeypatch)
    rng = np.random.default_rng(0)
    outs, errors = {}, {}
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("IPULAB_THREADS", threads)
        e, shape = _engine(replicas, rows=1024)     # (over lanes.MIN_WORK elements)
        assert e._lanes == int(threads)
        x = rng.standard_normal(shape).astype(np.float32) if threads == "1" else x
        e.write_tensor("x", np.abs(x))
        e.run()
        outs[threads] = e.read_tensor("y")
        bad = np.abs(x)
        bad.reshape(-1, shape[-1])[[-3, len(bad.reshape(-1, shape[-1])) // 2 + 1], 0] = -1
        e.write_tensor("x", bad)
        with pytest.raises(CodeletError) as info:
            e.run()
        errors[threads] = str(info.value)
    assert outs["1"].tobytes() == outs["2"].tobytes() == outs["3"].tobytes()
    np.testing.assert_array_equal(outs["1"], np.abs(x) * np.float32(3))
    assert errors["1"] == errors["2"] == errors["3"]
    assert "negative input" in errors["1"]
    if replicas > 1:
        assert "(replica 2)" in errors["1"]     # the first failing vertex, in order


def test_checked_and_python_modes_run_in_one_lane(monkeypatch):
    monkeypatch.setenv("IPULAB_THREADS", "2")
    dev = ipulab.devices.ipu("ipu2", tiles_per_ipu=4)
    g = poplar.Graph(dev.target)
    x = g.add_variable(poplar.FLOAT, [4], "x")
    g.set_tile_mapping(x, 0)
    for options in ({"debug.checkedCodelets": "true"}, {"debug.codeletMode": "python"}):
        assert poplar.Engine(g, prog.Sequence(), options)._lanes == 1
    assert poplar.Engine(g, prog.Sequence())._lanes == 2


def test_without_threads_the_parts_run_in_turn(monkeypatch):
    """Where no thread can be started (a sandbox's limit on processes), run() still runs
    every part, in order, in the caller."""
    def refuse():
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(lanes, "_workers", [])
    monkeypatch.setattr(lanes, "_Worker", refuse)
    done = []
    lanes.run([lambda: done.append(0), lambda: done.append(1), lambda: done.append(2)])
    assert done == [0, 1, 2]
    lanes.run([lambda: done.append(3), lambda: done.append(4)])     # the lock was released
    assert done == [0, 1, 2, 3, 4]


def test_a_stored_executable_compiles_its_batches_before_lanes_share_them(
        monkeypatch, tmp_path):
    """An executable loaded from the disk cache has no compiled drivers yet: they are
    compiled in the caller's thread before lanes run parts of a batch (two threads compiling
    at once can break CPython's parser), and the results are the same bits."""
    import threading

    from ipulab.poplar import codelet
    from ipulab.poplar import executables as X
    monkeypatch.setenv("IPULAB_CACHE", str(tmp_path))
    monkeypatch.setattr(X, "DISK_MIN_SECONDS", 0.0)
    monkeypatch.setenv("IPULAB_THREADS", "2")
    every_lane(monkeypatch)
    monkeypatch.setattr(X, "_memory", type(X._memory)())   # not the other tests' entries
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 512, 96)).astype(np.float32) ** 2
    first, shape = _engine(4)
    first.write_tensor("x", x)
    first.run()
    assert len(X.entries()) == 1
    X._memory.clear()                                  # as a new process would start
    monkeypatch.setattr(codelet, "_drivers", {})      # its drivers not compiled yet either
    compiled_in = []
    compile_batch = codelet.Batch.compile

    def recording(self, *args):
        compiled_in.append(threading.current_thread().name)
        return compile_batch(self, *args)
    monkeypatch.setattr(codelet.Batch, "compile", recording)
    again, _ = _engine(4)
    again.write_tensor("x", x)
    again.run()
    assert compiled_in and set(compiled_in) == {threading.current_thread().name}
    assert again.read_tensor("y").tobytes() == first.read_tensor("y").tobytes()
