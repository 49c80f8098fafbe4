"""The scheduler of many users on one Pod: the worked cases of notebook 11 by hand, the numbers
an administrator reads (utilisation, waits, fragmentation), the trace formats, and properties
over random traces: no IPU is double-booked, every job runs once for its duration, backfill
never delays the head of the queue."""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipulab.errors import PartitionSizeError, VipuError
from ipulab.vipu.scheduler import POLICIES, Job, Scheduler, generate_jobs, load_trace

H = 3600.0
# The classic day on a Pod16 (notebook 11): 8 + 4 + 2 + 2 fill the Pod exactly; a later 8 waits
# for the first 8; a whole-Pod job (G) is blocked while C and D leave a hole of 4 IPUs, where
# a short job (H) can run without delaying G, and a long one (I) cannot.
CLASSIC = [dict(name="A", user="ada", ipus=8, duration=1 * H),
           dict(name="B", user="bob", ipus=4, duration=3 * H),
           dict(name="C", user="cy", ipus=2, duration=2 * H),
           dict(name="D", user="dee", ipus=2, duration=2 * H),
           dict(name="E", user="bob", ipus=8, duration=2 * H, arrival=0.25 * H),
           dict(name="G", user="ada", ipus=16, duration=1 * H, arrival=1.5 * H),
           dict(name="H", user="cy", ipus=2, duration=0.5 * H, arrival=2.1 * H),
           dict(name="I", user="dee", ipus=4, duration=3 * H, arrival=2.2 * H)]


def starts(schedule) -> dict:
    return {r.job.name: (r.start / H, r.first_ipu) for r in schedule.runs}


def test_8_4_2_2_fill_a_pod16_and_a_later_8_waits_for_the_first_8():
    s = Scheduler(16, "fifo").run(CLASSIC[:5])
    assert starts(s) == {"A": (0, 0), "B": (0, 8), "C": (0, 12), "D": (0, 14), "E": (1, 0)}
    assert s.run_of("E").wait == 0.75 * H
    assert s.utilisation(until=1 * H) == 1.0             # the first hour: every IPU busy


def test_fifo_holds_everyone_behind_a_blocked_head():
    s = Scheduler(16, "fifo").run(CLASSIC)
    got = starts(s)
    assert got["G"] == (3, 0)          # G waits for E and B: the whole Pod is free at 3 h
    assert got["H"][0] == 4 and got["I"][0] == 4    # behind G, although 4 IPUs were free at 2 h


def test_backfill_starts_a_small_job_in_the_hole_without_delaying_the_head():
    fifo, easy = Scheduler(16, "fifo").run(CLASSIC), Scheduler(16, "backfill").run(CLASSIC)
    got = starts(easy)
    assert got["H"] == (2.1, 12)                      # in the hole left by C and D, now
    assert got["G"] == starts(fifo)["G"] == (3, 0)     # the head starts when it would have
    assert easy.reservations["G"] == (3 * H, 0)        # ... which is what it was promised
    assert got["I"][0] == 4          # 3 h long: would run past G's reservation, inside G's block
    assert easy.mean_wait() < fifo.mean_wait()
    assert easy.waits_by_user()["cy"] == 0.0 and fifo.waits_by_user()["cy"] > 0


def test_fair_share_serves_the_lightest_user_first():
    trace = [dict(name="a1", user="ada", ipus=2, duration=10),
             dict(name="b1", user="bob", ipus=2, duration=10),
             dict(name="a2", user="ada", ipus=4, duration=5, arrival=1),
             dict(name="b2", user="bob", ipus=4, duration=5, arrival=2),
             dict(name="a3", user="ada", ipus=4, duration=5, arrival=3)]
    order = lambda s: [r.job.name for r in s.runs]   # noqa: E731
    assert order(Scheduler(4, "fifo").run(trace)) == ["a1", "b1", "a2", "b2", "a3"]
    # equal usage at 10 s: arrival breaks the tie (a2); then ada has used more, so b2 first
    assert order(Scheduler(4, "fair").run(trace)) == ["a1", "b1", "a2", "b2", "a3"]
    # bob's share is 4 times ada's: his 20 IPU-s count as 5, so b2 goes before a2
    assert order(Scheduler(4, "fair", shares={"bob": 4}).run(trace)) == \
        ["a1", "b1", "b2", "a2", "a3"]
    heavy = [dict(name="a0", user="ada", ipus=4, duration=10),
             dict(name="a1", user="ada", ipus=4, duration=5, arrival=1),
             dict(name="b1", user="bob", ipus=4, duration=5, arrival=2)]
    assert order(Scheduler(4, "fifo").run(heavy)) == ["a0", "a1", "b1"]
    assert order(Scheduler(4, "fair").run(heavy)) == ["a0", "b1", "a1"]


def test_utilisation_and_fragmentation_by_hand():
    # Pod of 4 IPUs: x on IPU 0 (10 s), y on IPU 1 (5 s), z on IPU 2 (10 s), v (2 IPUs) at 6 s.
    trace = [dict(name="x", user="u", ipus=1, duration=10),
             dict(name="y", user="u", ipus=1, duration=5),
             dict(name="z", user="u", ipus=1, duration=10),
             dict(name="v", user="w", ipus=2, duration=4, arrival=6)]
    s = Scheduler(4, "fifo").run(trace)
    assert starts(s)["v"] == (10 / H, 0)      # 2 IPUs free from 5 s (1 and 3), but not a block
    # busy IPU-seconds 10 + 5 + 10 + 8 = 33 over 4 IPUs x 14 s
    assert s.utilisation() == pytest.approx(33 / 56)
    assert s.utilisation(until=10) == pytest.approx(25 / 40)
    # free IPUs: [0, 5) IPU 3 (one block of 1: 0); [5, 10) IPUs 1 and 3 (largest block 1 of
    # 2 free: 0.5); [10, 14) IPUs 2, 3 (a block: 0). Weighted by time: 0.5 * 5 / 14
    assert s.fragmentation() == pytest.approx(0.5 * 5 / 14)
    assert s.waits_by_user() == {"u": 0.0, "w": 4.0}


def test_traces_from_dicts_csv_and_json(tmp_path):
    jobs = load_trace(CLASSIC)
    csv_text = "name,user,ipus,duration,arrival\n" + "\n".join(
        f"{j.name},{j.user},{j.ipus},{j.duration},{j.arrival}" for j in jobs)
    (tmp_path / "day.csv").write_text(csv_text)
    (tmp_path / "day.json").write_text(json.dumps(CLASSIC))
    for source in (csv_text, tmp_path / "day.csv", tmp_path / "day.json", json.dumps(CLASSIC)):
        assert load_trace(source) == jobs
    assert load_trace([{"user": "u", "ipus": "2", "duration": "60"}]) == \
        [Job("job0", "u", 2, 60.0, 0.0, 0)]


def test_the_generator_is_seeded():
    a, b = generate_jobs(40, seed=3), generate_jobs(40, seed=3)
    assert a == b and a != generate_jobs(40, seed=4)
    assert all(j.ipus in (1, 2, 4, 8, 16) and 600 <= j.duration <= 4 * H for j in a)
    assert all(x.arrival <= y.arrival for x, y in zip(a, a[1:]))
    day = Scheduler(16, "backfill").run(a)
    assert repr(day) == repr(Scheduler(16, "backfill").run(generate_jobs(40, seed=3)))


@pytest.mark.parametrize("trace, error, words", [
    ([dict(user="u", ipus=12, duration=1)], PartitionSizeError, "power of 2"),
    ([dict(user="u", ipus=32, duration=1)], PartitionSizeError, "at most the Pod's 16"),
    ([dict(user="u", ipus=0, duration=1)], PartitionSizeError, "0 IPUs"),
    ([dict(user="u", ipus=2, duration=0)], VipuError, "duration must be > 0"),
    ([dict(user="u", duration=5)], VipuError, "no 'ipus'"),
    ([dict(user="u", ipus="two", duration=5)], VipuError, "malformed"),
    ([dict(name="j", user="u", ipus=1, duration=1)] * 2, VipuError, "unique"),
])
def test_bad_jobs_are_refused_by_name(trace, error, words):
    with pytest.raises(error, match=words):
        Scheduler(16).run(trace)


def test_bad_scheduler_settings():
    with pytest.raises(VipuError, match="choose one of fifo, backfill, fair"):
        Scheduler(16, "lifo")
    with pytest.raises(VipuError, match="power of two"):
        Scheduler(12)
    with pytest.raises(VipuError, match="shares must be numbers > 0"):
        Scheduler(16, "fair", shares={"ada": 0})
    with pytest.raises(VipuError, match="no trace file"):
        load_trace("missing.csv")


jobs_strategy = st.lists(st.tuples(st.sampled_from([1, 2, 4, 8, 16]), st.integers(1, 50),
                                   st.integers(0, 100), st.sampled_from("abc")),
                         min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(jobs_strategy, st.sampled_from(POLICIES))
def test_no_ipu_is_double_booked_and_every_job_runs_once(raw, policy):
    trace = [dict(name=f"j{i}", user=u, ipus=n, duration=d, arrival=a)
             for i, (n, d, a, u) in enumerate(raw)]
    s = Scheduler(16, policy).run(trace)
    assert sorted(r.job.name for r in s.runs) == sorted(t["name"] for t in trace)
    for r in s.runs:
        assert r.end - r.start == r.job.duration and r.start >= r.job.arrival
        assert r.first_ipu % r.job.ipus == 0 and r.first_ipu + r.job.ipus <= 16
    for x in s.runs:
        for y in s.runs:
            if x is not y and x.start < y.end and y.start < x.end:
                assert not set(x.ipus) & set(y.ipus), (x, y)
    assert 0 <= s.fragmentation() <= 1 and 0 < s.utilisation() <= 1
    if policy == "backfill":          # the head's start never moves past its reservation
        for name, (when, _) in s.reservations.items():
            assert s.run_of(name).start <= when
    if policy == "fifo":              # nobody passes anybody
        by_arrival = sorted(s.runs, key=lambda r: (r.job.arrival, int(r.job.name[1:])))
        assert all(x.start <= y.start for x, y in zip(by_arrival, by_arrival[1:]))
