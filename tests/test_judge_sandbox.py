"""The sandbox's caps outlive nothing: a judge killed from outside leaves no process and no
cgroup behind (its reaper removes them), and a cgroup whose owner is gone is swept by the next
sandbox. Cgroups are made only when grading as root; elsewhere these tests are skipped."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ipulab.course.grading import cgroups

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not cgroups._cgroup_roots(cgroups.PIDS_ROOTS),
                                reason="cgroups are made only when grading as root")

OWNER = """
import subprocess, sys, time
from ipulab.course.grading.cgroups import SandboxCgroups
caps = SandboxCgroups(8, 2**30)
child = subprocess.Popen(["sleep", "1000"], preexec_fn=caps.enter)
print(child.pid, *caps.groups, flush=True)
time.sleep(1000)
"""


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"      # (not yet reaped)


def wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_killed_owner_leaves_no_process_and_no_cgroup():
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        pid, *groups = owner.stdout.readline().split()
        assert groups and all(Path(g, "cgroup.procs").read_text().split() == [pid]
                              for g in groups[:1])
        assert all(Path(g).name.startswith(f"ipulab-{os.getpid()}-{owner.pid}-") for g in groups)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert wait_for(lambda: not any(Path(g).exists() for g in groups)), groups
        assert wait_for(lambda: gone(int(pid)))
    finally:
        owner.kill()


def test_a_cgroup_whose_owner_is_gone_is_swept():
    dead = subprocess.Popen(["true"])
    dead.wait()                                   # a pid that no longer runs
    root = cgroups._cgroup_roots(cgroups.PIDS_ROOTS)[0]
    stale = root / f"ipulab-{os.getpid()}-{dead.pid}-0badc0de"
    alive = root / f"ipulab-{os.getpid()}-{os.getpid()}-0badc0de"
    foreign = root / "ipulab-0badc0de0bad"        # not named by this code: left alone
    for group in (stale, alive, foreign):
        group.mkdir()
    try:
        cgroups.sweep()
        assert not stale.exists() and alive.exists() and foreign.exists()
    finally:
        for group in (stale, alive, foreign):
            cgroups.remove(group)
