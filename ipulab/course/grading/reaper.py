"""Removes a sandbox's cgroups once the process that made them is gone, however it went.

    python -I -S reaper.py CGROUP...        (started by cgroups.SandboxCgroups)

It waits for the end of its standard input, whose other end only the owner holds: the owner
closes it after removing the cgroups itself, or the kernel closes it when the owner dies. Then
it kills whatever is left in each cgroup and removes it. It runs in a session of its own, so a
signal to the owner's process group does not reach it, and it imports nothing but os and time.
"""
import os
import signal
import sys
import time


def reap(groups: list, seconds: float = 10.0) -> None:
    """Kill the processes of each cgroup and remove it, for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while groups and time.monotonic() < deadline:
        for group in list(groups):
            try:
                with open(os.path.join(group, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                os.rmdir(group)
                groups.remove(group)
            except FileNotFoundError:
                groups.remove(group)
            except OSError:
                pass
        time.sleep(0.02)


def main(groups: list) -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    reap(groups)


if __name__ == "__main__":
    main(sys.argv[1:])
