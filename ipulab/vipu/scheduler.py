"""A job scheduler for many users of one Pod: FIFO, FIFO with EASY backfill, and fair-share.

Jobs (user, IPUs, duration, priority, arrival) come from a trace (a list of dicts, a CSV or a
JSON file or text) or from a seeded generator. Each job gets a partition placed as V-IPU places
one: a power-of-two block of IPUs, aligned to its size, so that its IPUs are joined by
IPU-Links (blocks.find_block). The simulation is event-driven: it jumps from one arrival or
completion to the next, so a day of jobs costs a few thousand steps, not 86,400.

    sched = Scheduler(16, policy="backfill")
    day = sched.run(generate_jobs(60, seed=1))
    day.utilisation(), day.waits_by_user(), day.fragmentation(), day.gantt()

Policies (the order of the queue, and whether later jobs may jump ahead):
  fifo      first come, first served (higher priority first); nothing passes a blocked head.
  backfill  FIFO with EASY backfill: the blocked head gets a reservation (the earliest time and
            block where it can start if nothing else starts); a later job starts now only if it
            fits now and either ends before that time or stays out of that block, so the head
            is never delayed.
  fair      fair-share: the queue is ordered by each user's usage so far (IPU-seconds granted,
            divided by the user's share), lightest first, with EASY backfill as above.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import PartitionSizeError, VipuError
from .blocks import find_block, largest_free_block

POLICIES = ("fifo", "backfill", "fair")
DAY = 24 * 3600.0


@dataclass(frozen=True)
class Job:
    """A request for `ipus` IPUs during `duration` seconds, submitted at `arrival` seconds."""

    name: str
    user: str
    ipus: int
    duration: float
    arrival: float = 0.0
    priority: int = 0


@dataclass(frozen=True)
class Run:
    """Where and when a job ran: IPUs first_ipu .. first_ipu + job.ipus - 1, from start to end."""

    job: Job
    start: float
    first_ipu: int

    @property
    def end(self) -> float:
        return self.start + self.job.duration

    @property
    def wait(self) -> float:
        return self.start - self.job.arrival

    @property
    def ipus(self) -> range:
        return range(self.first_ipu, self.first_ipu + self.job.ipus)


def _job(row: dict, index: int) -> Job:
    """A Job from a dict of a trace (strings from a CSV are converted); fields name the error."""
    try:
        return Job(name=str(row.get("name") or f"job{index}"), user=str(row["user"]),
                   ipus=int(row["ipus"]), duration=float(row["duration"]),
                   arrival=float(row.get("arrival") or 0), priority=int(row.get("priority") or 0))
    except KeyError as e:
        raise VipuError(f"job {index} of the trace has no {e.args[0]!r}; a job needs user, ipus "
                        f"and duration (arrival, priority and name are optional): {row}") from None
    except (TypeError, ValueError) as e:
        raise VipuError(f"job {index} of the trace is malformed ({e}): {row}") from None


def load_trace(source) -> list[Job]:
    """Jobs from a list of dicts or Jobs, a .csv or .json file, or CSV / JSON text."""
    if isinstance(source, (list, tuple)):
        return [r if isinstance(r, Job) else _job(dict(r), i) for i, r in enumerate(source)]
    text = str(source)
    path = Path(text) if len(text) < 4096 and "\n" not in text else None
    if path is not None and path.suffix in (".csv", ".json"):
        if not path.exists():
            raise VipuError(f"no trace file {path}")
        text = path.read_text()
    if text.lstrip().startswith("["):
        return load_trace(json.loads(text))
    return load_trace(list(csv.DictReader(io.StringIO(text.strip()))))


def generate_jobs(n: int, seed: int = 0, users=("ada", "bob", "cy", "dee"), num_ipus: int = 16,
                  horizon: float = DAY) -> list[Job]:
    """n jobs arriving over `horizon` seconds (Poisson arrivals, a random user each), of 1 to
    num_ipus IPUs (small ones more often, as on a shared cluster) and 10 min to 4 h: the
    same seed gives the same day."""
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0, horizon, n)).round()
    sizes = [2 ** k for k in range(int(math.log2(num_ipus)) + 1)]
    weights = np.array([1.0 / (k + 1) for k in range(len(sizes))])
    ipus = rng.choice(sizes, n, p=weights / weights.sum())
    durations = (rng.uniform(600, 4 * 3600, n) / 60).round() * 60
    who = rng.integers(0, len(users), n)
    return [Job(f"job{i}", users[who[i]], int(ipus[i]), float(durations[i]), float(arrivals[i]))
            for i in range(n)]


class Schedule:
    """The outcome of a run: every job's Run, and the numbers an administrator reads."""

    def __init__(self, runs: list[Run], num_ipus: int, policy: str, reservations: dict):
        self.runs, self.num_ipus, self.policy = runs, num_ipus, policy
        self.reservations = reservations     # job name -> (time, first IPU) when it was promised

    def __repr__(self) -> str:
        return (f"Schedule({self.policy}: {len(self.runs)} jobs on {self.num_ipus} IPUs, "
                f"mean wait {self.mean_wait() / 60:.1f} min, utilisation "
                f"{100 * self.utilisation():.1f} %)")

    def run_of(self, name: str) -> Run:
        return next(r for r in self.runs if r.job.name == name)

    @property
    def makespan(self) -> float:
        return max((r.end for r in self.runs), default=0.0)

    def mean_wait(self) -> float:
        return float(np.mean([r.wait for r in self.runs])) if self.runs else 0.0

    def waits_by_user(self) -> dict[str, float]:
        """Mean waiting time in seconds of each user's jobs."""
        out: dict[str, list] = {}
        for r in self.runs:
            out.setdefault(r.job.user, []).append(r.wait)
        return {u: float(np.mean(w)) for u, w in sorted(out.items())}

    def utilisation(self, until: float | None = None) -> float:
        """Busy IPU-seconds over all IPU-seconds from 0 to `until` (default: the makespan)."""
        until = self.makespan if until is None else float(until)
        if until <= 0:
            return 0.0
        busy = sum(r.job.ipus * max(0.0, min(r.end, until) - r.start) for r in self.runs)
        return busy / (self.num_ipus * until)

    def intervals(self):
        """(t0, t1, occupied bool array) for each stretch of time in which nothing changes: a
        sweep over the starts and ends."""
        changes: dict[float, list] = {}
        for r in self.runs:
            changes.setdefault(r.start, []).append((r, True))
            changes.setdefault(r.end, []).append((r, False))
        busy = np.zeros(self.num_ipus, bool)
        times = sorted(changes)
        if times and times[0] > 0:
            yield 0.0, times[0], busy.copy()
        for t0, t1 in zip(times, times[1:]):
            for r, taken in sorted(changes[t0], key=lambda c: c[1]):   # ends before starts
                busy[r.first_ipu:r.first_ipu + r.job.ipus] = taken
            yield t0, t1, busy.copy()

    def fragmentation(self) -> float:
        """Time-weighted mean of 1 - (largest free aligned block / free IPUs), over the time some
        IPUs are free: 0 when the free IPUs always form one block, near 1 when they are
        scattered in pieces too small for the requests."""
        num = den = 0.0
        for t0, t1, busy in self.intervals():
            free = int((~busy).sum())
            if free:
                num += (t1 - t0) * (1 - largest_free_block(busy) / free)
                den += t1 - t0
        return num / den if den else 0.0

    def gantt(self) -> dict[str, list]:
        """Plain columns for viz.ipu_gantt: one row per job."""
        cols = {k: [] for k in ("name", "user", "first_ipu", "ipus", "start", "end", "wait")}
        for r in self.runs:
            for k, v in (("name", r.job.name), ("user", r.job.user), ("first_ipu", r.first_ipu),
                         ("ipus", r.job.ipus), ("start", r.start), ("end", r.end),
                         ("wait", r.wait)):
                cols[k].append(v)
        return cols

    def promised(self) -> dict[str, tuple]:
        """{job: (seconds, first IPU, IPUs)}: the reservations backfill made, for the Gantt."""
        return {name: (t, first, self.run_of(name).job.ipus)
                for name, (t, first) in self.reservations.items()}


class Scheduler:
    """Places a trace of jobs on a Pod of num_ipus IPUs under a policy (see the module doc)."""

    def __init__(self, num_ipus: int = 16, policy: str = "fifo", shares: dict | None = None):
        if policy not in POLICIES:
            raise VipuError(f"unknown scheduling policy {policy!r}; choose one of "
                            f"{', '.join(POLICIES)}")
        if num_ipus < 1 or num_ipus & (num_ipus - 1):
            raise VipuError(f"a Pod's IPUs are a power of two, not {num_ipus}")
        self.num_ipus, self.policy, self.shares = int(num_ipus), policy, dict(shares or {})
        bad = {u: v for u, v in self.shares.items() if not (isinstance(v, (int, float)) and v > 0)}
        if bad:
            raise VipuError(f"fair-share shares must be numbers > 0, not {bad}")

    def _check(self, jobs: list[Job]) -> None:
        names = set()
        for j in jobs:
            if j.ipus < 1 or j.ipus & (j.ipus - 1) or j.ipus > self.num_ipus:
                raise PartitionSizeError(f"job {j.name} asks for {j.ipus} IPUs: a partition's size "
                                         f"must be a power of 2, at most the Pod's "
                                         f"{self.num_ipus}")
            if not j.duration > 0 or j.arrival < 0:
                raise VipuError(f"job {j.name}: duration must be > 0 and arrival >= 0, not "
                                f"{j.duration} and {j.arrival}")
            if j.name in names:
                raise VipuError(f"two jobs are named {j.name!r}; job names must be unique")
            names.add(j.name)

    def _order(self, queue: list[int], jobs: list[Job], usage: dict) -> list[int]:
        """The queue in the policy's order (indices into jobs; ties: arrival, then trace order)."""
        if self.policy == "fair":
            return sorted(queue, key=lambda i: (usage.get(jobs[i].user, 0.0) /
                                                self.shares.get(jobs[i].user, 1.0),
                                                -jobs[i].priority, jobs[i].arrival, i))
        return sorted(queue, key=lambda i: (-jobs[i].priority, jobs[i].arrival, i))

    def run(self, jobs) -> Schedule:
        """Simulate the trace to the end: every job runs once, on a block of its size."""
        jobs = load_trace(jobs)
        self._check(jobs)
        busy = np.zeros(self.num_ipus, bool)
        running: list[Run] = []
        runs, reservations, usage, queue = [], {}, {}, []
        arrivals = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival, i))
        now, k = 0.0, 0
        while k < len(arrivals) or queue or running:
            times = [r.end for r in running] + ([jobs[arrivals[k]].arrival]
                                                if k < len(arrivals) else [])
            now = max(now, min(times)) if times else now
            for r in [r for r in running if r.end <= now]:
                running.remove(r)
                busy[r.first_ipu:r.first_ipu + r.job.ipus] = False
            while k < len(arrivals) and jobs[arrivals[k]].arrival <= now:
                queue.append(arrivals[k])
                k += 1
            for i, first in self._pick(self._order(queue, jobs, usage), jobs, busy, running,
                                       now, reservations):
                run = Run(jobs[i], now, first)
                busy[first:first + jobs[i].ipus] = True
                running.append(run)
                runs.append(run)
                queue.remove(i)
                usage[jobs[i].user] = usage.get(jobs[i].user, 0.0) + jobs[i].ipus * jobs[i].duration
        return Schedule(sorted(runs, key=lambda r: (r.start, r.first_ipu)), self.num_ipus,
                        self.policy, reservations)

    def _pick(self, order, jobs, busy, running, now, reservations):
        """The jobs to start now, with their first IPU: the queue from its head while each fits;
        then, with backfill, later jobs that do not delay the head's reservation."""
        busy = busy.copy()
        started = []
        for pos, i in enumerate(order):
            first = find_block(busy, jobs[i].ipus)
            if first is None:
                break
            busy[first:first + jobs[i].ipus] = True
            started.append((i, first))
        else:
            return started
        if self.policy == "fifo":
            return started
        head = order[pos]
        shadow, reserved = _reservation(busy, running, started, jobs, now, jobs[head].ipus)
        reservations.setdefault(jobs[head].name, (shadow, reserved))
        hole = np.zeros_like(busy)
        hole[reserved:reserved + jobs[head].ipus] = True
        for i in order[pos + 1:]:
            j = jobs[i]
            if j.ipus > busy.size - busy.sum():
                continue
            first = find_block(busy, j.ipus)
            if first is not None and now + j.duration > shadow:
                first = find_block(busy | hole, j.ipus)     # must stay out of the head's block
            if first is not None:
                busy[first:first + j.ipus] = True
                started.append((i, first))
        return started


def _reservation(busy, running, started, jobs, now, size):
    """(time, first IPU) at which a blocked job of `size` IPUs can start if nothing else starts:
    free the running (and just started) jobs' blocks in order of their end."""
    ends = sorted([(r.end, r.first_ipu, r.job.ipus) for r in running] +
                  [(now + jobs[i].duration, first, jobs[i].ipus) for i, first in started])
    busy = busy.copy()
    for end, first, n in ends:
        busy[first:first + n] = False
        block = find_block(busy, size)
        if block is not None:
            return end, block
    raise AssertionError("a job no larger than the Pod always fits once the Pod is empty")
