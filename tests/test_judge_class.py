"""A hostile class, graded as an instructor grades one: `ipulab course grade SUBMISSIONS
--gradebook DB --csv CSV --timeout 20 --workers 2`, one student per attack on solution 01,
while the grader's process tree and the host's shared memory are watched. The run ends within
its stated bound, every question of every notebook gets its intended status, shared memory
stays put (the attacks try to fill gigabytes of it), and nothing of the run is left behind:
not a process, not a cgroup. Then a grader killed from outside leaves nothing either."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hostile_notebooks import BIG_FRAME, END, FUNCTION_CHECK_CELL, NEVER_ENDS, QIDS, notebook

IPULAB = [sys.executable, "-m", "ipulab"]
TIMEOUT, WORKERS = 16, 2        # an honest notebook of set 01: ~2 s, a fork bomb more
PASSED = dict.fromkeys(QIDS, "passed")
FILL = ("import os\nfor place in ('/tmp', '/dev/shm', '/tmp/home'):\n    for i in range(20):\n"
        "        try:\n            with open(f'{place}/fill{i}', 'wb') as f:\n"
        "                for _ in range(64):\n                    f.write(bytes(4 * 2**20))\n"
        "        except OSError:\n            break")
BOMB = "import os\ntry:\n    while True:\n        os.fork()\nexcept OSError:\n    pass"
CLASS = {   # student: (cells put in, the statuses expected)
    "endless": ([(3, "while True:\n    pass")], dict.fromkeys(QIDS, "timed out")),
    "codelet": ([NEVER_ENDS[1][1:3]], {**PASSED, "ex01.sum_squares": "timed out"}),
    "program": ([NEVER_ENDS[0][1:3]], {**PASSED, "ex01.six_workers": "timed out"}),
    "exit152": ([(FUNCTION_CHECK_CELL - 2, "import os\nos._exit(152)")],
                {**PASSED, "ex01.six_workers": "crashed"}),
    "frame": ([(3, BIG_FRAME)], dict.fromkeys(QIDS, "tampered")),
    "fills": ([(END, FILL)], PASSED),
    "bomb": ([(3, BOMB)], PASSED),
    "ä" * 125: ([], PASSED),                          # 250 bytes of a folder name
}


def descendants(pid: int) -> set[int]:
    """Every process below pid, now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def shared_memory() -> int:
    """The host's shared memory (tmpfs files, /dev/shm, SysV): /proc/meminfo's Shmem."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) * 1024
    return 0


class Watch:
    """Samples a process's tree and the host's shared memory while it runs."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.seen, self.shm0, self.peak = proc, set(), shared_memory(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while self.proc.poll() is None:
            # a new set, not one grown in place: a reader iterating the old one meanwhile
            # (the test's thread) would fail with "Set changed size during iteration"
            self.seen = self.seen | descendants(self.proc.pid)
            self.peak = max(self.peak, shared_memory() - self.shm0)
            time.sleep(0.1)

    def left_behind(self, seconds: float = 10.0) -> tuple[list, list]:
        """(processes of the tree still running, cgroups of its judges still there), once
        they had `seconds` to go."""
        from ipulab.course.grading.cgroups import own_cgroups
        deadline = time.monotonic() + seconds
        while True:
            alive = [p for p in self.seen if Path(f"/proc/{p}").exists() and
                     Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
            groups = [g for p in self.seen | {self.proc.pid} for g in own_cgroups(p)]
            if (not alive and not groups) or time.monotonic() > deadline:
                return alive, groups
            time.sleep(0.2)


def grade(subs: Path, tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*IPULAB, "course", "grade", str(subs), "--gradebook", str(tmp_path / "gb.sqlite"),
         "--csv", str(tmp_path / "grades.csv"), "--timeout", str(TIMEOUT), "--workers",
         str(WORKERS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_hostile_class_ends_in_time_with_every_status_and_leaves_nothing(tmp_path):
    subs = tmp_path / "subs"
    for student, (cells, _) in CLASS.items():
        notebook(subs / student, "solutions", *cells)
    (subs / "nested").mkdir()
    (subs / "nested" / "01_one_tile.ipynb").write_bytes(b"[" * 50_000 + b"]" * 50_000)
    start = time.monotonic()
    proc = grade(subs, tmp_path)
    watch = Watch(proc)
    out, err = proc.communicate(timeout=900)
    seconds = time.monotonic() - start
    watch.thread.join()
    assert proc.returncode == 0, err
    notebooks = len(CLASS) + 1
    assert seconds < notebooks * TIMEOUT / WORKERS + 60, seconds      # the README's bound
    with open(tmp_path / "grades.csv", newline="") as f:
        got = {}
        for row in csv.DictReader(f):
            got.setdefault(row["student"], {})[row["question"]] = row["status"]
    assert got == {**{s: want for s, (_, want) in CLASS.items()},
                   "nested": dict.fromkeys(QIDS, "failed")}, out
    assert watch.peak < 512 * 2**20, f"shared memory grew by {watch.peak / 2**20:.0f} MB"
    assert watch.seen and watch.left_behind() == ([], [])


@pytest.mark.parametrize("target", ["the grader", "a judge"])
def test_a_grader_or_judge_killed_from_outside_leaves_nothing(tmp_path, target):
    """SIGKILL, while judges run sandboxes whose cells never end: the judges die with their
    workers, the sandboxes with their judges, and reapers remove their cgroups."""
    subs = tmp_path / "subs"
    for student in ("ada", "bob"):
        notebook(subs / student, "solutions", (3, "while True:\n    pass"))
    proc = grade(subs, tmp_path)
    watch = Watch(proc)
    deadline = time.monotonic() + 120
    while not any("sandboxed.runner" in _command(p) for p in watch.seen):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    judge = next(p for p in watch.seen if "grading.judge" in _command(p))
    os.kill(proc.pid if target == "the grader" else judge, signal.SIGKILL)
    if target == "a judge":
        proc.communicate(timeout=300)
    else:
        proc.wait()
    watch.thread.join()
    alive, groups = watch.left_behind()
    assert alive == [] and groups == [], [(p, _command(p)) for p in alive]


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""
