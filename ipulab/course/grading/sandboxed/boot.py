"""The sandbox's first process (its pid 1): it lays out what the submission may write, runs the
command, and reports how the command ended.

    python -I -S boot.py --status-fd N [--copy SRC DST [--skip PATH]...]... -- COMMAND...

Each --copy copies the read-only folder SRC into DST (a tmpfs of a stated size that the sandbox
mounted there), leaving out the --skip paths: ipulab's package without the question bank, the
compiled-codelet cache. Copies keep their files' times, so numba and Python find their caches
valid; whatever the submission writes there is gone with the sandbox. Then it runs COMMAND as
its child and writes one JSON line to fd N: {"exit": code} or {"signal": n} (or {"boot": why}
if it could not start). As the namespace's init it reaps orphans, and no process of the sandbox
can kill it; the child never holds fd N, and this process cannot be traced or read by it (not
dumpable): a status on fd N is the sandbox's word, and an exit code is read as a signal only
when this line says so. When the command ends, so does the sandbox. Run by path, without site:
it imports no ipulab module (the package is not in place before the copy).
"""
import ctypes
import json
import os
import shutil
import signal
import sys

PR_SET_DUMPABLE = 4


def parse(argv: list) -> tuple:
    """(status fd, [(src, dst, [skips])], command) from the command line above."""
    status, copies, i = None, [], 0
    while argv[i] != "--":
        if argv[i] == "--status-fd":
            status, i = int(argv[i + 1]), i + 2
        elif argv[i] == "--copy":
            copies.append((argv[i + 1], argv[i + 2], []))
            i += 3
        elif argv[i] == "--skip":
            copies[-1][2].append(argv[i + 1])
            i += 2
        else:
            raise SystemExit(f"boot.py: unknown argument {argv[i]!r}")
    return status, copies, argv[i + 1:]


def copy(src: str, dst: str, skips: list) -> None:
    """SRC's files into DST (which exists), with their times, SRC/skip left out."""
    left_out = {os.path.join(src, s) for s in skips}
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True, copy_function=copy_file,
                    ignore=lambda folder, names: [n for n in names
                                                  if os.path.join(folder, n) in left_out])


def copy_file(src: str, dst: str) -> None:
    """One file, with its times; none if it went away once listed: the codelet cache is
    written while sandboxes copy it, and a writer renames its temporary file into place."""
    try:
        shutil.copy2(src, dst)
    except FileNotFoundError:
        if os.path.lexists(src):
            raise


def report(fd: int, **status) -> None:
    os.write(fd, (json.dumps(status) + "\n").encode())


def run(status: int, command: list) -> int:
    """Run command as a child; report how it ended; its exit code, as a shell gives it."""
    os.set_inheritable(status, False)
    pid = os.fork()
    if pid == 0:
        try:
            os.execv(command[0], command)
        finally:
            os._exit(127)
    os.closerange(3, status)                 # the child's pipes: their ends are the child's
    os.closerange(status + 1, 1 << 16)
    signal.signal(signal.SIGINT, signal.SIG_DFL)   # an init ignores what it does not handle
    try:
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    while True:                              # orphans come here to be reaped
        ended, how = os.wait()
        if ended == pid:
            break
    if os.WIFSIGNALED(how):
        report(status, signal=os.WTERMSIG(how))
        return 128 + os.WTERMSIG(how)
    report(status, exit=os.WEXITSTATUS(how))
    return os.WEXITSTATUS(how)


def main(argv: list) -> int:
    status, copies, command = parse(argv)
    try:
        for src, dst, skips in copies:
            copy(src, dst, skips)
    except OSError as e:
        report(status, boot=f"cannot copy {getattr(e, 'filename', '')}: {e.strerror or e}")
        return 1
    return run(status, command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
