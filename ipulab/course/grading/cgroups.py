"""What caps a sandbox's process tree when grading as root, who ignores RLIMIT_NPROC: a pids
cgroup (its processes and threads) and, where the memory controller is mounted, a memory
cgroup (all it holds, its tmpfs files and shared memory included).

Each cgroup is named ipulab-<grader pid>-<owner pid>-<random>, the owner being the process
that made it (the judge) and the grader its parent. Nothing outlives its owner: the owner
removes its cgroups when the sandbox ends; a reaper (reaper.py, a process of its own session)
removes them as soon as the owner is gone, however it went; and every sandbox that starts
first removes the cgroups whose owner no longer runs (sweep()).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from ...errors import SandboxError

PIDS_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
MEMORY_ROOTS = (Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup"))
PREFIX = "ipulab-"
_HOW = ("running as root, ipulab cannot cap a submission's processes: root ignores RLIMIT_NPROC "
        "and no pids cgroup is writable here. Grade as a regular user, or mount the cgroup "
        "pids controller (cgroup v1 /sys/fs/cgroup/pids or v2 with +pids in "
        "cgroup.subtree_control)")


def own_cgroups(grader_pid: int) -> list[Path]:
    """The cgroups made for the sandboxes of judges that `grader_pid` started."""
    return [g for root in _cgroup_roots({*PIDS_ROOTS, *MEMORY_ROOTS})
            for g in root.glob(f"{PREFIX}{grader_pid}-*")]


def _owner(group: Path) -> int | None:
    """The pid of the process that made the cgroup, from its name (None: not one of ours)."""
    parts = group.name[len(PREFIX):].split("-")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def remove(group: Path, attempts: int = 50) -> bool:
    """Kill every process left in the cgroup and remove it; True once it is gone."""
    for _ in range(attempts):
        try:
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except (OSError, ValueError):
            time.sleep(0.02)
    return False


def sweep() -> int:
    """Remove the cgroups whose owner no longer runs (a judge killed before it could, and
    its reaper killed too); returns how many. Cgroups of other names are left alone."""
    removed = 0
    for root in _cgroup_roots({*PIDS_ROOTS, *MEMORY_ROOTS}):
        try:
            groups = [g for g in root.glob(f"{PREFIX}*") if _owner(g) is not None]
        except OSError:
            continue
        for group in groups:
            if not _alive(_owner(group)) and remove(group, attempts=5):
                removed += 1
    return removed


def _cgroup_roots(roots) -> list[Path]:
    """Those of `roots` that are cgroup folders (a tmpfs at /sys/fs/cgroup is not)."""
    return [root for root in roots if (root / "cgroup.procs").is_file()]


def _make(roots, limit_files, limit: int, name: str) -> Path | None:
    """A new cgroup with its limit set, under the first root whose controller takes it; None
    where no root does."""
    for root in _cgroup_roots(roots):
        group = root / name
        try:
            group.mkdir()
        except OSError:
            continue
        for limit_file in limit_files:
            try:
                (group / limit_file).write_text(str(limit))
                return group
            except OSError:
                pass
        remove(group, attempts=1)
    return None


class SandboxCgroups:
    """The cgroups of one sandbox, made before it starts (enter() runs in its first process
    before exec) and removed by close(); a reaper removes them if this process dies first."""

    def __init__(self, processes: int, memory_bytes: int):
        sweep()
        name = f"{PREFIX}{os.getppid()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        pids = _make(PIDS_ROOTS, ("pids.max",), processes, name)
        if pids is None:
            raise SandboxError(_HOW)
        memory = _make(MEMORY_ROOTS, ("memory.limit_in_bytes", "memory.max"), memory_bytes,
                       name)
        self.groups = [pids] + ([memory] if memory is not None else [])
        self.memory = memory
        self.reaper = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(__file__).with_name("reaper.py")),
             *map(str, self.groups)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)

    def enter(self) -> None:
        """Put the calling process (the sandbox's first) into every cgroup."""
        for group in self.groups:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    def out_of_memory(self) -> bool:
        """Whether the memory cgroup's limit was reached (its processes were refused memory
        or killed for it)."""
        if self.memory is None:
            return False
        for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill"),
                          ("memory.failcnt", None)):
            try:
                text = (self.memory / name).read_text()
            except OSError:
                continue
            values = dict(line.split() for line in text.splitlines() if " " in line)
            count = values.get(key, "0") if key else text.strip()
            if count.isdigit() and int(count) > 0:
                return True
        return False

    def close(self) -> None:
        """Kill what is left in the cgroups, remove them, and let the reaper go."""
        for group in self.groups:
            remove(group)
        try:
            self.reaper.stdin.close()
            self.reaper.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.reaper.kill()
