"""The cache is the running account's alone, or it is not used.

What the cache holds is code (generated codelet modules) or pickles (numba's indexes of them,
compiled executables) and the secret that signs them: another account that could write any of
it could run code as whoever loads it. So a cache folder is used only if it is this account's
and no one else can write it, nor rename it away: every folder above it is this account's or
root's, writable by no one else unless sticky (/tmp). Writable by a group counts only for a
group that is not the account's own private group (user-private groups: umask 002). A folder
that is not safe is ignored, with one warning naming it, for a private one (~/.cache/ipulab,
else one of this account's in the temporary folder), where what is needed is built again.
Files are opened without following links and used only if they are this account's, and no one
else can write them.
"""
from __future__ import annotations

import errno
import functools
import grp
import os
import pwd
import stat
import tempfile
import warnings
from pathlib import Path

_chosen: dict = {}        # (folder asked for, its identity, uid) -> the folder used


@functools.lru_cache(maxsize=None)
def _own_group(gid: int) -> bool:
    """Whether gid is this account's private group: named as it, with no other member."""
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return group.gr_name == user and set(group.gr_mem) <= {user}


def writable_by_others(st: os.stat_result, above: bool = False) -> str | None:
    """Why an account other than this one could change what st describes (a folder above the
    cache, when `above`: root's will do, and sticky ones), or None."""
    uid = os.geteuid()
    if st.st_uid != uid and not (above and st.st_uid == 0):
        return f"owned by another uid ({st.st_uid})"
    if above and st.st_mode & stat.S_ISVTX:
        return None
    if st.st_mode & stat.S_IWOTH:
        return "writable by others"
    if st.st_mode & stat.S_IWGRP and not _own_group(st.st_gid):
        return f"writable by a group ({st.st_gid}) that is not this account's alone"
    return None


def unsafe_folder(folder: Path, subfolders=()) -> str | None:
    """Why folder (made private if absent, with its subfolders; links in its path resolved)
    could be written by another account: it, a subfolder or a folder above it; None if it is
    this account's alone."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        real = Path(os.path.realpath(folder))
        for sub in (real, *(real / s for s in subfolders)):
            sub.mkdir(mode=0o700, exist_ok=True)
            st = os.lstat(sub)
            why = "not a folder" if not stat.S_ISDIR(st.st_mode) else writable_by_others(st)
            if why:
                return f"{sub} is {why}" if sub != real else why
        for above in real.parents:
            why = writable_by_others(os.stat(above), above=True)
            if why:
                return f"the folder above it, {above}, is {why}"
    except OSError as e:
        return f"it cannot be made ({e.strerror})"
    return None


def _identity(folder: Path):
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return folder, st.st_ino, st.st_dev, st.st_uid, st.st_mode, os.geteuid()


def private_folder(asked: Path, default: Path, subfolders=()) -> Path:
    """asked (its real path) if it is this account's alone, else, once warned, a folder that
    is: default, or one of this account's in the temporary folder, or a new one. Checked once
    per process while asked stays the same folder, with the same owner and mode."""
    key = _identity(asked)
    used = _chosen.get(key) if key else None
    if used is None:
        why = unsafe_folder(asked, subfolders)
        used = Path(os.path.realpath(asked)) if why is None else \
            _fallback(asked, default, subfolders)
        if why is not None:
            warnings.warn(f"ipulab: not using the cache folder {asked}: {why}; using {used} "
                          "(this account's alone) instead", RuntimeWarning, stacklevel=3)
        key = _identity(asked)
        if key:
            _chosen[key] = used
    return used


def _fallback(asked: Path, default: Path, subfolders) -> Path:
    mine = Path(tempfile.gettempdir()) / f"ipulab-cache-{os.geteuid()}"
    for other in (default, mine):
        if other != asked and unsafe_folder(other, subfolders) is None:
            return Path(os.path.realpath(other))
    return Path(tempfile.mkdtemp(prefix="ipulab-cache-"))


def read_own(path: Path, secret: bool = False) -> bytes:
    """path's bytes, read without following a link: OSError if absent or unreadable,
    PermissionError if it is not a regular file of this account that no one else can write
    (or, for a secret, read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PermissionError("a link, not a file") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        why = "not a regular file" if not stat.S_ISREG(st.st_mode) else writable_by_others(st)
        if why is None and secret and st.st_mode & 0o077:
            why = "readable by others"
        if why:
            raise PermissionError(why)
        return f.read()
