"""Hostile tests of the on-disk caches (issue 38): a cache folder, generated codelet module,
numba index, executable or signing secret that another account could have written is never
imported or unpickled; it is ignored with a warning, and what is needed is built again in a
folder private to the running account. A damaged codelet module is rebuilt, not a traceback.

Run as root, the tests plant files as uid 10001 (os.chown, and one run under setpriv)."""
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ipulab.poplar import codelet_cache

OTHER = 10001
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plants files as another uid")

SCRIPT = r"""
import json, sys, warnings
import numpy as np
import ipulab
from ipulab import poplar, popops, poputil
from ipulab.poplar import codelet, program as prog
from ipulab.poplar.codelet_cache import PREFIX, cache_root
warnings.simplefilter("always")
dev = ipulab.devices.ipu("ipu2", tiles_per_ipu=4)
g = poplar.Graph(dev.target)
x = g.add_variable(poplar.FLOAT, [4, 64], "x")
poputil.map_tensor_linearly(g, x)
seq = prog.Sequence()
out = popops.reduce(g, x, [1], popops.Operation.ADD, seq)
g.create_host_write("x", x), g.create_host_read("out", out)
e = poplar.Engine(g, seq, {"cache": sys.argv[1]})
e.load(dev)
e.write_tensor("x", np.ones((4, 64), np.float32))
e.run()
mine = [d for d in codelet._drivers.values() if d.py_func.__module__.startswith(PREFIX)]
print(json.dumps({"right": bool((e.read_tensor("out") == 64).all()), "root": str(cache_root()),
                  "compiled": sum(sum(d.stats.cache_misses.values()) for d in mine),
                  "loaded": sum(sum(d.stats.cache_hits.values()) for d in mine)}))
"""


def build(cache: Path, executable_cache="false", user=None, home=None):
    """Build and run a library reduction in a new process using cache: (its report, stderr)."""
    env = dict(os.environ, IPULAB_CACHE=str(cache), IPULAB_CACHE_MIN_SECONDS="0")
    if home is not None:
        home.mkdir(exist_ok=True)
        os.chown(home, user or 0, user or 0)
        env["HOME"] = str(home)
    cmd = [sys.executable, "-c", SCRIPT, executable_cache]
    if user is not None:
        cmd = ["setpriv", "--reuid", str(user), "--regid", str(user), "--clear-groups"] + cmd
    p = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=300,
                       cwd=tempfile.gettempdir())
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def payload(mark: Path) -> str:
    return f"import pathlib; pathlib.Path({str(mark)!r}).write_text('ran as uid %d' % " \
           "__import__('os').geteuid())\n"


class Reduce:
    """A pickle that, unpickled, writes `mark` (what a planted cache entry would do)."""

    def __init__(self, mark):
        self.mark = str(mark)

    def __reduce__(self):
        return (Path.write_text, (Path(self.mark), "ran"))


def modules(cache: Path) -> list[Path]:
    return sorted((cache / "codelets").glob(f"{codelet_cache.PREFIX}*.py"))


@pytest.fixture
def shared():
    """A folder two accounts can reach (the temporary folder's, not pytest's 0700 one)."""
    base = Path(tempfile.mkdtemp(prefix="ipulab-shared-"))
    base.chmod(0o755)
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)


@needs_root
@pytest.mark.parametrize("how", ["owned by another uid", "writable by others",
                                 "writable by a group"])
def test_a_module_planted_in_a_shared_cache_is_not_imported(shared, how):
    cache, mark = shared / "cache", shared / "mark"
    first, _ = build(cache)
    assert first["root"] == str(cache) and first["right"]
    for m in modules(cache):                    # 10001 edits every generated module
        m.write_text(payload(mark) + m.read_text())
        os.chown(m, OTHER, OTHER)
    if how == "owned by another uid":
        for p in [cache, *cache.rglob("*")]:
            os.chown(p, OTHER, OTHER)
    elif how == "writable by others":
        cache.chmod(0o777)
    else:
        os.chown(cache, 0, OTHER)               # a group of its own, 10001 in it
        cache.chmod(0o775)
    second, err = build(cache, home=shared / "home")
    assert not mark.exists(), mark.read_text()
    assert second["right"] and second["root"] != str(cache)
    assert f"not using the cache folder {cache}" in err and how in err


def as_other(*argv, **kw):
    return subprocess.run(["setpriv", "--reuid", str(OTHER), "--regid", str(OTHER),
                           "--clear-groups", *argv], check=True, **kw)


@needs_root
def test_modules_written_by_another_account_run_nothing_as_root(shared):
    """The issue's case: a cache that two accounts share (here mode 1777, as /tmp): 10001's
    own build does not use it, and the generated modules 10001 then writes there, with a
    payload, are not run by root's next build."""
    cache, mark, ref = shared / "cache", shared / "mark", shared / "ref"
    cache.mkdir(mode=0o777)
    cache.chmod(0o1777)
    theirs, err = build(cache, user=OTHER, home=shared / "home10001")
    assert theirs["right"] and theirs["root"] != str(cache) and "not using" in err
    build(ref)                                      # what root's build will look for
    as_other("mkdir", "-p", str(cache / "codelets"))
    for m in modules(ref):
        as_other("sh", "-c", f"cat > '{cache / 'codelets' / m.name}'",
                 input=payload(mark) + m.read_text(), text=True)
    assert len(modules(cache)) == len(modules(ref))
    second, err = build(cache, home=shared / "home")
    assert not mark.exists(), mark.read_text()
    assert second["right"] and f"not using the cache folder {cache}: writable by others" in err


@needs_root
def test_a_module_of_another_account_in_a_private_cache_is_rebuilt(tmp_path):
    cache, mark = tmp_path / "cache", tmp_path / "mark"
    build(cache)
    originals = {m: m.read_text() for m in modules(cache)}
    for m, text in originals.items():
        m.write_text(payload(mark) + text)
        os.chown(m, OTHER, OTHER)
    second, err = build(cache)
    assert not mark.exists() and second["right"] and second["root"] == str(cache)
    for m, text in originals.items():
        assert m.read_text() == text and m.stat().st_uid == os.geteuid()


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "edited"])
def test_a_damaged_codelet_module_is_rebuilt(tmp_path, damage):
    cache, mark = tmp_path / "cache", tmp_path / "mark"
    build(cache)
    originals = {m: m.read_text() for m in modules(cache)}
    for m, text in originals.items():
        m.write_text({"empty": "", "truncated": text[:len(text) // 2], "garbage": "\0\xff(",
                      "edited": payload(mark) + text}[damage])
    second, err = build(cache)
    assert second["right"] and "Traceback" not in err and not mark.exists()
    assert {m: m.read_text() for m in modules(cache)} == originals
    assert "rebuilding" in err
    third, err = build(cache)               # and once rebuilt, it is a cache again
    assert third["loaded"] == third["compiled"] + third["loaded"] and "rebuilding" not in err


@needs_root
def test_a_numba_index_of_another_account_is_not_unpickled(tmp_path):
    cache, mark = tmp_path / "cache", tmp_path / "mark"
    build(cache)
    indexes = list((cache / "codelets" / "__pycache__").glob(f"{codelet_cache.PREFIX}*.nbi"))
    assert indexes
    for i in indexes:
        i.write_bytes(pickle.dumps(Reduce(mark)))
        os.chown(i, OTHER, OTHER)
    second, _ = build(cache)
    assert not mark.exists() and second["right"]


def test_a_private_cache_is_used_quietly_and_a_second_build_hits_it(tmp_path):
    cache = tmp_path / "cache"
    first, _ = build(cache)
    second, err = build(cache)
    assert first["compiled"] >= 1 and second["compiled"] == 0
    assert second["loaded"] == first["compiled"] and "Warning" not in err
    assert (cache / "codelets").stat().st_mode & 0o077 == 0       # made private


@needs_root
def test_a_cache_below_a_folder_others_can_write_is_not_used(shared):
    (shared / "open").mkdir()
    (shared / "open").chmod(0o777)                                 # not sticky: renames
    cache = shared / "open" / "cache"
    report, err = build(cache, home=shared / "home")
    assert report["right"] and report["root"] != str(cache)
    assert f"not using the cache folder {cache}" in err and "writable by others" in err


# --- the executable cache's secret and entries ---------------------------------------------
@pytest.fixture
def exe_cache(tmp_path, monkeypatch):
    from ipulab.poplar import executables as X
    monkeypatch.setenv("IPULAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(X, "DISK_MIN_SECONDS", 0.0)     # these graphs compile in no time
    X.forget_in_memory()
    yield X
    X.forget_in_memory()


def entry(X) -> tuple[str, bytes]:
    """The key and payload of the one executable on disk, after building one."""
    import test_executable_cache as T
    T.run(*T.build())
    (path,) = X.entries()
    return path.stem, path.read_bytes()


def sign(X, secret: bytes, key: str, payload_: bytes) -> bytes:
    import hashlib
    import hmac
    return X.MAGIC + hmac.new(secret, key.encode() + payload_, hashlib.sha256).digest() + \
        payload_


@needs_root
@pytest.mark.parametrize("how", ["planted by another uid", "readable by others"])
def test_a_signed_reduce_pickle_of_another_account_does_not_load(exe_cache, tmp_path, how):
    X, mark = exe_cache, tmp_path / "mark"
    key, _ = entry(X)
    secret = X.folder() / ".secret"
    if how == "planted by another uid":
        secret.write_bytes(b"s" * 32)
        os.chown(secret, OTHER, OTHER)
    else:                                   # 10001 read it, and signs with it
        secret.chmod(0o644)
    exe = X.folder() / f"{key}.exe"
    exe.write_bytes(sign(X, secret.read_bytes(), key, pickle.dumps(Reduce(mark))))
    X.forget_in_memory()
    with pytest.warns(RuntimeWarning, match="replacing the cache's secret"), \
            pytest.warns(RuntimeWarning, match="not signed by this cache"):
        assert X._load(key) is None
    assert not mark.exists()
    assert secret.stat().st_uid == os.geteuid() and secret.stat().st_mode & 0o077 == 0


@needs_root
def test_an_entry_of_another_account_is_not_unpickled_even_if_signed(exe_cache, tmp_path):
    X, mark = exe_cache, tmp_path / "mark"
    key, _ = entry(X)
    exe = X.folder() / f"{key}.exe"
    exe.write_bytes(sign(X, (X.folder() / ".secret").read_bytes(), key,
                         pickle.dumps(Reduce(mark))))
    os.chown(exe, OTHER, OTHER)
    with pytest.warns(RuntimeWarning, match=f"ignoring cache entry {exe.name}: owned by another uid"):
        assert X._load(key) is None
    assert not mark.exists()


def test_a_link_in_place_of_an_entry_or_secret_is_not_followed(exe_cache, tmp_path):
    X = exe_cache
    key, data = entry(X)
    elsewhere = tmp_path / "elsewhere.exe"
    elsewhere.write_bytes(data)
    exe = X.folder() / f"{key}.exe"
    exe.unlink()
    exe.symlink_to(elsewhere)
    with pytest.warns(RuntimeWarning, match="ignoring cache entry"):
        assert X._load(key) is None


# --- the judge -------------------------------------------------------------------------------
@needs_root
def test_the_judge_and_its_sandbox_never_use_a_cache_a_student_could_write(shared,
                                                                            monkeypatch):
    from ipulab.course.grading import session
    cache = shared / "cache"
    cache.mkdir()
    os.chown(cache, OTHER, OTHER)               # the class's shared folder
    monkeypatch.setenv("IPULAB_CACHE", str(cache))
    monkeypatch.setenv("HOME", str(shared / "home"))
    with pytest.warns(RuntimeWarning, match=f"not using the cache folder {cache}"):
        box = session.sandbox_for(5.0)
    used = Path(box.env["IPULAB_CACHE_DIR"])
    assert cache not in [used, *used.parents] and used.stat().st_uid == os.geteuid()
    assert all(cache not in [c, *c.parents] for c in box.copies)
