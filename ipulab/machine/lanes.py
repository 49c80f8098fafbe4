"""Lanes: the host's cores running parts of one step's kernels at once.

A compute set's vertices write disjoint elements and read nothing another vertex writes, and
replicas touch only their own memory, so a batch (or a copy plan) cut into parts -- rows of its
plan, or whole replicas -- gives the same bits whichever part runs first or alongside another.
The kernels release the GIL (nogil), so a part on a worker thread overlaps the caller's.

run([f0, f1, ...]) runs f0 in the calling thread and the others on worker threads, and returns
when all are done; if parts raise, it raises the error of the first part that did (the one a
run in order would have met first). One caller at a time uses the workers: another thread
that calls meanwhile runs its parts itself, one after another. IPULAB_THREADS sets how many
lanes there are (default: the processors this process may use, at most 4; 1 runs everything
in the caller).
"""
from __future__ import annotations

import os
import threading

MAX_DEFAULT = 4
# Elements a step touches (copied, or in its vertices' fields) below which handing parts to
# other threads costs more than it saves: a hand-over takes 13-50 us here, and in a Bow-2000
# training step (one lane) 100,000 elements take 20-90 us, the conv gathers of 1.3 million
# 420-610 us.
MIN_WORK = 100_000


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


class _Worker:
    """A daemon thread that runs one function each time it is handed one."""

    def __init__(self):
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._fn = None
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, daemon=True, name="ipulab-lane").start()

    def _loop(self) -> None:
        while True:
            self._go.acquire()
            fn, self._fn = self._fn, None
            try:
                fn()
            except BaseException as e:      # handed back to the caller in wait()
                self.error = e
            self._done.release()

    def start(self, fn) -> None:
        self.error = None
        self._fn = fn
        self._go.release()

    def wait(self) -> BaseException | None:
        self._done.acquire()
        return self.error


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


def run(parts: list) -> None:
    """Run the callables in parts at once (parts[0] in this thread); raise the first part's
    error, in part order."""
    if len(parts) == 1 or not _busy.acquire(blocking=False):
        for fn in parts:
            fn()
        return
    errors = [None]
    try:
        if not _workers_for(len(parts) - 1):
            for fn in parts:
                fn()
            return
        for w, fn in zip(_workers, parts[1:]):
            w.start(fn)
        try:
            parts[0]()
        except BaseException as e:
            errors[0] = e
        errors += [w.wait() for w in _workers[:len(parts) - 1]]
    finally:
        _busy.release()
    for e in errors:
        if e is not None:
            raise e


def share(n: int, i: int, parts: int) -> tuple[int, int]:
    """[lo, hi) of part i when range(n) is cut into `parts` nearly equal consecutive ranges
    (empty ones when n < parts)."""
    return i * n // parts, (i + 1) * n // parts
