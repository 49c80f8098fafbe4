"""Lanes: the host's cores running parts of one step's kernels at once.

A compute set's vertices write disjoint elements and read nothing another vertex writes, and
replicas touch only their own memory, so a batch (or a copy plan) cut into parts -- rows of its
plan, or whole replicas -- gives the same bits whichever part runs first or alongside another.
The kernels release the GIL (nogil), so a part on a worker thread overlaps the caller's.

run([f0, f1, ...], threads) runs the parts on the calling thread and worker threads, each
taking the next part not yet taken (a step is cut into a few parts per thread, parts_for, so
a thread whose core is busy with another program's work takes fewer and holds up the step
by one part at most), and returns when all are done; if parts raise, it raises the error of
the first part that did (the one a run in order would have met first). One caller at a time
uses the workers: another thread that calls meanwhile runs its parts itself, one after another.
IPULAB_THREADS sets how many lanes there are (default: the processors this process may use,
at most 4; 1 runs everything in the caller).

lanes_for(n, work, timing, pace) is how many lanes a step or segment should use now: 1 while
it is small (under MIN_WORK elements, or under MIN_SECONDS on one lane: a hand-over, and the
GIL going back and forth between threads, each wait for a sleeping thread to wake), else
threads(n, pace). Each step and segment keeps its own Timing (its shortest run alone) and its
own Pace. run_judged(timing, pace, fn, ...) runs fn on the lanes and judges the run against
that shortest run alone: threads(n, pace) is then n, or 1 for a while after a run that was no
faster (the workers woke when the caller had done all, their core was taken mid-part by other
programs, or the parts slowed each other down: a gather of short runs, or a sum that reads what
the other core's cache holds). Judged against the parts' own speed instead, the small GPT's
matrix products and reductions kept going to two lanes where they took 530 -> 650 us and
180 -> 300 us, and its step took 21 ms on two lanes against 19.5 ms on one.
On a busy machine waking them only costs, and a worker that loses its core mid-part, or
holding the GIL, stalls the caller for a time slice: on 2 cores at load 3, steps interleaved
in one process, the small GPT's took 22 ms (median) on one lane, 32 ms on two, 28 ms on two
that go alone so (Pod16: 15, 31, 14 ms). alone_for_good(n, work, timing, pace) says when a
step will use one lane on every later run (small, short, or the lanes missed its first GIVE_UP
runs on them); bsp.Chain then runs it with its neighbours as one list of kernel calls. Which
lanes run which parts never changes a bit, only the time.
"""
from __future__ import annotations

import itertools
import os
import queue
import threading
from time import perf_counter as _clock

MAX_DEFAULT = 4
PARTS_PER_THREAD = 2
# After runs in a row that the lanes did not speed up, a step waits 1, 2, 4 ... ms (at most
# MAX_ALONE s) before trying the workers again: a try on a busy machine can cost a time slice.
FIRST_ALONE, MAX_ALONE = 0.001, 1.0
# A step whose first GIVE_UP runs on the lanes were none of them sped up joins a chain of steps
# that run alone for good (bsp.Chain): on this 2-core VM 36 of the small GPT's 40 steps of
# 300 us or more gain nothing on two lanes, and each step apart costs its own Python.
GIVE_UP = 2
SPEEDUP = 0.9               # a run the lanes sped up took less than this of the shortest alone
# Elements a step touches (copied, or in its vertices' fields) below which handing parts to
# other threads costs more than it saves: a hand-over takes 13-50 us here, and in a Bow-2000
# training step (one lane) 100,000 elements take 20-90 us, the conv gathers of 1.3 million
# 420-610 us.
MIN_WORK = 100_000
# ... and the time one lane takes, below which it does not either: a hand-over and the GIL's
# handing back and forth between threads each wait for a sleeping thread to wake, 20-30 us
# here, a few times per run. The small GPT's steps of under 150 us each lost 100-250 us on two
# lanes; those of 350 us to 1.8 ms gained up to 740 us (its step: 20.0 ms on one lane, 18.5 ms
# with only steps of 300 us or more on two).
MIN_SECONDS = 300e-6
# Elements that a step's copies before or after its vertices move, below which they stay in the
# caller while the vertices go to the lanes: gathers of short runs gain little from a second
# lane, and each hand-over costs its wake-ups (the small GPT's copies of 2,000 to 260,000
# elements took 70-300 us on two lanes; its step 18.1-18.8 ms with them shared, 17.5-18.2 not).
MIN_COPY = 400_000


def available() -> int:
    """The lanes to use: $IPULAB_THREADS, else the usable processors (at most MAX_DEFAULT)."""
    env = os.environ.get("IPULAB_THREADS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:              # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_DEFAULT))


class _Job:
    """One run()'s parts, taken one at a time by whichever thread is free: the caller and the
    workers it woke. A worker that wakes late (its core busy with other work) finds the parts
    taken and does nothing: a busy core holds up a step by one part at most."""

    def __init__(self, parts: list):
        self.parts = parts
        self.errors: list = [None] * len(parts)
        self._next = itertools.count()          # next() is atomic under the GIL
        self._left = len(parts)
        self._lock = threading.Lock()
        self.finished = threading.Event()

    def work(self) -> None:
        """Run parts until none is left to take."""
        n = len(self.parts)
        while (i := next(self._next)) < n:
            try:
                self.parts[i]()
            except BaseException as e:          # handed to the caller by run()
                self.errors[i] = e
            with self._lock:
                self._left -= 1
                if self._left == 0:
                    self.finished.set()


class _Worker:
    """A daemon thread that works on each job handed to it."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, daemon=True, name="ipulab-lane").start()

    def _loop(self) -> None:
        while True:
            self.jobs.get().work()


class _ThisProcess:
    """A record of this process's clock: pickled with a stored executable, it starts afresh."""

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()


class Pace(_ThisProcess):
    """Whether the lanes have been speeding up one caller's runs (a step's, a segment's): after
    a run they did not, that caller's runs go to one lane for twice as long as its last miss
    did (FIRST_ALONE to MAX_ALONE); a run they did speed up ends that. Not kept when
    pickled with a stored executable (the times are this process's clock)."""

    def __init__(self):
        self.alone = 0.0        # how long the last miss sent runs to one lane (s)
        self.until = 0.0        # _clock() until which threads() answers 1
        self.hits = self.misses = 0     # runs on the lanes that were / were not sped up

    def after(self, helped: bool) -> None:
        self.alone = 0.0 if helped else min(max(2 * self.alone, FIRST_ALONE), MAX_ALONE)
        self.until = _clock() + self.alone
        self.hits, self.misses = self.hits + helped, self.misses + (not helped)

    def gave_up(self) -> bool:
        """Whether the lanes missed the caller's first GIVE_UP runs on them, every one."""
        return self.hits == 0 and self.misses >= GIVE_UP


class Timing(_ThisProcess):
    """How long one caller's runs (a step's, a segment's) take on one lane: the shortest of
    them. Not kept when pickled with a stored executable (the times are this process's)."""

    def __init__(self):
        self.runs = 0
        self.shortest = float("inf")

    def record(self, seconds: float) -> None:
        self.runs += 1
        self.shortest = min(self.shortest, seconds)

    def long_enough(self) -> bool:
        """Whether its runs are worth sharing: two of them on one lane (the first pays
        set-up) each took MIN_SECONDS or more."""
        return MIN_SECONDS <= 0 or (self.runs >= 2 and self.shortest >= MIN_SECONDS)


_workers: list[_Worker] = []
_busy = threading.Lock()


def _forget_workers() -> None:
    """In a forked child the threads are gone: start new ones when needed."""
    global _busy
    _workers.clear()
    _busy = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def _workers_for(n: int) -> bool:
    """At least n worker threads; False if no more threads can be started (a sandbox's
    limit on processes)."""
    try:
        while len(_workers) < n:
            _workers.append(_Worker())
    except RuntimeError:
        return False
    return True


def run(parts: list, threads: int | None = None) -> None:
    """Run the callables in parts at once, on this thread and up to threads - 1 workers
    (default: one thread a part), each thread taking the next part not yet taken; return
    when all are done, and raise the first part's error, in part order."""
    helpers = min(len(parts), threads or len(parts)) - 1
    if helpers < 1 or not _busy.acquire(blocking=False):
        for fn in parts:
            fn()
        return
    try:
        if not _workers_for(helpers):
            for fn in parts:
                fn()
            return
        job = _Job(parts)
        for w in _workers[:helpers]:
            w.jobs.put(job)
        job.work()
        job.finished.wait()
    finally:
        _busy.release()
    for e in job.errors:
        if e is not None:
            raise e


def run_judged(timing: Timing, pace: Pace, fn, *args) -> None:
    """fn(*args), which runs parts on the lanes, judged: a run no faster than SPEEDUP of the
    caller's shortest run alone (timing) sends its runs to one lane for a while (pace)."""
    start = _clock()
    fn(*args)
    pace.after(_clock() - start < SPEEDUP * timing.shortest)


def threads(n: int, pace: Pace) -> int:
    """The lanes a caller should use now: n, or 1 for a while after a run on the lanes that
    was no faster than one lane (see Pace, run_judged)."""
    return 1 if n > 1 and _clock() < pace.until else n


def lanes_for(n: int, work: int, timing: Timing, pace: Pace) -> int:
    """The lanes a caller with `work` elements should use now, of n: 1 while it is small
    (under MIN_WORK elements, or shorter than MIN_SECONDS on one lane), else threads(n, pace).
    A caller that gets 1 times its run for timing (run_alone())."""
    if n < 2 or work < MIN_WORK or not timing.long_enough():
        return 1
    return threads(n, pace)


def alone_for_good(n: int, work: int, timing: Timing, pace: Pace) -> bool:
    """Whether the caller is to run on one lane from now on: one lane, small work, two runs
    alone of which the shorter took under MIN_SECONDS (lanes_for answers 1 on every later run:
    the shortest only falls), or lanes that missed its first runs on them (pace.gave_up()).
    bsp.Chain runs such steps as one list of kernel calls."""
    return n < 2 or work < MIN_WORK or pace.gave_up() or (
        MIN_SECONDS > 0 and timing.runs >= 2 and timing.shortest < MIN_SECONDS)


def run_alone(timing: Timing, fn, *args) -> None:
    """fn(*args) on this thread alone, its time recorded in timing (not if it raises)."""
    start = _clock()
    fn(*args)
    timing.record(_clock() - start)


def parts_for(units: int, threads: int) -> int:
    """How many parts to cut `units` (replicas, rows, runs) into for `threads` threads: a few
    per thread, so that a thread whose core is busy elsewhere takes fewer."""
    return max(1, min(units, PARTS_PER_THREAD * threads))


def share(n: int, i: int, parts: int) -> tuple[int, int]:
    """[lo, hi) of part i when range(n) is cut into `parts` nearly equal consecutive ranges
    (empty ones when n < parts)."""
    return i * n // parts, (i + 1) * n // parts
