"""The executable cache (as PopTorch's): a compiled graph is kept under a key of its content, so
the same graph is compiled once, however often it is built again.

The key hashes everything compilation reads: the target and cost model, the graph (arenas and
tile mapping, variables and constants, compute sets, vertex columns and their codelets' source,
handles, streams, remote buffers), the programs, the codelet mode and ipulab's own source.
Equal keys mean equal executables; a change anywhere is a new key, never a stale hit.

Entries live in memory (the last few, per process, at most $IPULAB_CACHE_MEMORY_MB, 1 GB, of
them) and on disk under $IPULAB_CACHE (default
~/.cache/ipulab)/executables, one file per key (graphs that took at least
$IPULAB_CACHE_MIN_SECONDS, 0.1 s, to compile; the folder kept under $IPULAB_CACHE_MB, 2 GB,
least recently used first out), signed with a secret of that folder: a file
that is corrupt, truncated, from another ipulab, not signed by this cache or not this
account's (a link, another uid's, writable by others) is ignored with a warning and compiled
again; a secret that is not this account's alone is replaced. Graphs whose codelets cannot be
found again by name (a codelet defined in a notebook) are cached in memory only.
IPULAB_CACHE=off (or Engine option {"cache": "false"}) switches the cache off; `ipulab cache
clear` empties it.
"""
from __future__ import annotations

import hashlib
import hmac
import inspect
import io
import os
import pickle
import time
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np

from ..version import __version__
from .codelet_cache import OFF, cache_root
from .graph import Graph
from .private_cache import read_own
from .summary import GraphSummary
from .tensor import Tensor

MAGIC = b"IPULAB-EXE-1\n"
MEMORY_ENTRIES = 8
# ... and at most this many bytes of them (the size of their disk entries; a Pod16 GPT's is
# ~270 MB): the newest entry always stays.
MEMORY_BYTES = int(float(os.environ.get("IPULAB_CACHE_MEMORY_MB", "1024")) * 2**20)
# Only what took this long to compile goes to disk (loading a small graph is no faster than
# compiling it), and the folder is kept under a size: oldest entries go first.
DISK_MIN_SECONDS = float(os.environ.get("IPULAB_CACHE_MIN_SECONDS", "0.1"))
DISK_LIMIT_BYTES = int(float(os.environ.get("IPULAB_CACHE_MB", "2048")) * 2**20)
SHORT_COLUMN_BYTES = 4096      # a key's columns up to this size are copied and hashed together
_memory: OrderedDict = OrderedDict()    # key -> (executable, bytes of its disk entry or 0)
_codelet_ids: dict = {}
_package_digest = None


def enabled() -> bool:
    return os.environ.get("IPULAB_CACHE", "").lower() not in OFF


def folder() -> Path:
    return cache_root() / "executables"


def forget_in_memory() -> None:
    """Drop the executables kept in this process's memory (the disk keeps its copies): for a
    long-lived process, a test worker or a grader, between pieces of work that share none."""
    _memory.clear()


def clear() -> int:
    """Forget every executable, in memory and on disk; returns the files removed."""
    forget_in_memory()
    removed = 0
    for path in folder().glob("*.exe"):
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def entries() -> list[Path]:
    return sorted(folder().glob("*.exe"))


# --- the key ---------------------------------------------------------------------------------
def _package() -> bytes:
    """ipulab's version and the digest of its source files: a new ipulab, a new key."""
    global _package_digest
    if _package_digest is None:
        h = hashlib.blake2b(__version__.encode(), digest_size=20)
        for path in sorted(Path(__file__).resolve().parent.parent.rglob("*.py")):
            h.update(path.read_bytes())
        _package_digest = h.digest()
    return _package_digest


def _source(fn) -> str:
    """fn's source and the plain values it reads from its module, or '' if unavailable."""
    if fn is None:
        return ""
    fn = getattr(fn, "__func__", fn)
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        return f"<no source: {id(fn)}>"      # unknowable: this process only
    names = getattr(getattr(fn, "__code__", None), "co_names", ())
    glob = getattr(fn, "__globals__", {})
    plain = [(n, repr(glob[n])) for n in names if isinstance(glob.get(n), (int, float, str,
                                                                           bool, tuple))]
    return text + repr(plain)


def _codelet_id(cls) -> bytes:
    """A codelet's identity: its name, fields, flags, class constants and source."""
    if cls not in _codelet_ids:
        fields = [(f.attr, f.name, f.kind, f.dtype.name, f.direction) for f in cls.fields]
        consts = sorted((k, repr(v)) for klass in cls.__mro__ if klass is not object
                        for k, v in vars(klass).items() if not k.startswith("__")
                        and isinstance(v, (int, float, str, bool, tuple)))
        text = repr((cls.__module__, cls.__qualname__, fields, cls.multi, cls.fastmath,
                     consts, getattr(cls, "source", ""), _source(cls.compute),
                     _source(getattr(cls, "cycle_estimate", None))))
        _codelet_ids[cls] = hashlib.blake2b(text.encode(), digest_size=20).digest()
    return _codelet_ids[cls]


def _program(p, h) -> None:
    """Hash a program tree: class, simple attributes, what it names, its children."""
    h.update(type(p).__name__.encode())
    for k, v in sorted(vars(p).items()):
        h.update(k.encode())
        _value(v, h)


def _value(v, h) -> None:
    if isinstance(v, Tensor):
        h.update(b"T" + v.dtype.name.encode() + repr(v.shape).encode())
        h.update(np.ascontiguousarray(v.ids).tobytes())
    elif hasattr(v, "children") and hasattr(v, "parts"):
        _program(v, h)
    elif isinstance(v, (list, tuple)):
        h.update(f"[{len(v)}".encode())
        for x in v:
            _value(x, h)
    elif hasattr(v, "id") and hasattr(v, "graph"):          # a compute set
        h.update(f"cs{v.id}".encode())
    elif hasattr(v, "name") and hasattr(v, "graph"):        # a stream or remote buffer
        h.update(f"named {v.name}".encode())
    else:
        h.update(repr(v).encode())


def _raw(a: np.ndarray) -> np.ndarray:
    """The array's bytes as a.tobytes() gives them (any shape, empty ones too), without
    copying them (a big graph's columns are hundreds of megabytes)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _hash_group(g, h) -> None:
    """Hash a vertex group: its compute set, first vertex and codelet, then its columns. Short
    columns are copied and hashed together (add_vertex makes groups of one vertex: a GPT's
    graph has 80,000), long ones hashed in place; the bytes hashed are the same either way."""
    parts = [repr((g.cs, g.first, g.single)).encode() + _codelet_id(g.codelet)]

    def column(a: np.ndarray) -> None:
        if a.nbytes <= SHORT_COLUMN_BYTES:
            parts.append(a.tobytes())
        else:
            h.update(b"".join(parts))
            parts.clear()
            h.update(_raw(a))
    column(g.tiles)
    column(g.estimates)
    for name in sorted(g.conns):
        c = g.conns[name]
        parts.append(name.encode())
        for a in (c.ids, c.lengths, c.counts):
            column(a)
    h.update(b"".join(parts))


def executable_key(state, programs, mode: str) -> str:
    """The key of what compiling these programs over this graph state gives (SHA-1: the
    fastest of hashlib's on the megabytes of a big graph's columns, where the CPU has SHA
    instructions, and a content address, not a signature: entries are signed apart)."""
    h = hashlib.sha1(_package())
    t = state.target
    h.update(repr((t.chip, t.num_ipus, t.tiles_per_ipu, t.system, t.cost,
                   state.replication_factor, mode)).encode())
    for key in sorted(state.arenas):
        a = state.arenas[key]
        h.update(f"arena {key} {a.size}".encode())
        h.update(_raw(a.tile_of[:a.size]))
    for v in state.variables:
        h.update(repr((v.name, v.dtype.name, v.shape, v.offset)).encode())
        if v.values is not None:
            h.update(_raw(v.values))
    h.update(repr([cs.name for cs in state.compute_sets]).encode())
    for g in state.vertices.groups:
        _hash_group(g, h)
    for name, (mode_, t) in sorted(state.handles.items()):
        h.update(f"handle {name} {mode_}".encode())
        h.update(_raw(t.ids))
    h.update(repr(sorted((s.name, s.dtype.name, s.num_elements, s.direction)
                         for s in state.streams.values())).encode())
    h.update(repr(sorted((b.name, b.dtype.name, b.num_elements, b.repeats)
                         for b in state.remote_buffers.values())).encode())
    for p in programs:
        _program(p, h)
    return h.hexdigest()


# --- storing and loading ---------------------------------------------------------------------
class RecipePickler(pickle.Pickler):
    """Codelets made at run time are stored as the recipe that makes them again."""

    def reducer_override(self, obj):
        if isinstance(obj, type) and "__ipulab_recipe__" in vars(obj):
            factory, args = obj.__ipulab_recipe__
            return factory, args
        return NotImplemented


def _secret() -> bytes:
    """This cache's signing key (made once, readable by its owner only; one that is not this
    account's alone, or not a key, is replaced)."""
    path = folder() / ".secret"
    try:
        data = read_own(path, secret=True)
        if len(data) == 32:
            return data
        why = "not a key"
    except PermissionError as e:
        why = str(e)
    except OSError:
        why = None
    if why:
        warnings.warn(f"ipulab: replacing the cache's secret {path}: {why}", RuntimeWarning,
                      stacklevel=3)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = os.urandom(32)
    tmp = path.with_name(f".secret.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return data


def _store(key: str, compiled) -> int:
    """Write the executable to disk, atomically; quietly skipped if it cannot be stored
    (a codelet defined in a notebook) or written. Returns the bytes of its entry (0: none)."""
    buf = io.BytesIO()
    try:
        RecipePickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(compiled)
    except (pickle.PicklingError, AttributeError, TypeError):
        return 0
    payload = buf.getvalue()
    try:
        sig = hmac.new(_secret(), key.encode() + payload, hashlib.sha256).digest()
        path = folder() / f"{key}.exe"
        tmp = path.with_name(f"{key}.{os.getpid()}.tmp")
        tmp.write_bytes(MAGIC + sig + payload)
        os.replace(tmp, path)
        _trim()
    except OSError:
        pass
    return len(payload)


def _trim() -> None:
    """Remove the least recently used entries while the folder is over its limit."""
    files = [(f.stat().st_mtime, f.stat().st_size, f) for f in entries()]
    total = sum(size for _, size, _ in files)
    for _, size, f in sorted(files):
        if total <= DISK_LIMIT_BYTES:
            break
        f.unlink(missing_ok=True)
        total -= size


def _load(key: str):
    """The executable stored under key, or None (absent; or ignored with a warning)."""
    path = folder() / f"{key}.exe"
    try:
        data, why = read_own(path), None
    except PermissionError as e:
        data, why = b"", str(e)
    except OSError:
        return None
    sig, payload = data[len(MAGIC):len(MAGIC) + 32], data[len(MAGIC) + 32:]
    if why is None:
        os.utime(path)                  # recently used: the last to be trimmed
        if not data.startswith(MAGIC):
            why = "not an ipulab executable"
        elif not hmac.compare_digest(sig, hmac.new(_secret(), key.encode() + payload,
                                                   hashlib.sha256).digest()):
            why = "not signed by this cache (foreign, or damaged)"
    if why is None:
        try:
            return pickle.loads(payload)
        except Exception as e:      # a corrupt entry must never stop a compile
            why = f"unreadable ({type(e).__name__})"
    warnings.warn(f"ipulab: ignoring cache entry {path.name}: {why}; compiling again",
                  RuntimeWarning, stacklevel=3)
    return None


def compiled_for(graph: Graph, programs: list, mode: str, compile_graph, use_cache: bool):
    """The compiled executable of programs over graph: from the cache when it holds this
    key, else compile_graph(state, programs, mode), then kept in memory and on disk."""
    state = graph._state
    if not (use_cache and enabled()):
        return compile_graph(state, programs, mode)
    key = executable_key(state, programs, mode)
    compiled, size = _memory.get(key, (None, 0))
    if compiled is None:
        compiled = _load(key)
        path = folder() / f"{key}.exe"
        if compiled is None:
            start = time.perf_counter()
            compiled = compile_graph(state, programs, mode)
            compiled.graph = None
            if time.perf_counter() - start >= DISK_MIN_SECONDS:
                size = _store(key, compiled)
        elif path.exists():
            size = path.stat().st_size
    _keep(key, compiled, size)
    out = _copy(compiled)
    out.graph = GraphSummary(state, {k: a.tile_of[:a.size].copy()
                                     for k, a in state.arenas.items()})
    out.cache_key = key
    return out


def _keep(key: str, compiled, size: int) -> None:
    """Keep the executable in memory as the newest, dropping the oldest while more than
    MEMORY_ENTRIES, or MEMORY_BYTES, are kept."""
    _memory[key] = (compiled, size)
    _memory.move_to_end(key)
    while len(_memory) > 1 and (len(_memory) > MEMORY_ENTRIES or
                                sum(b for _, b in _memory.values()) > MEMORY_BYTES):
        _memory.popitem(last=False)


def _copy(compiled):
    """A shallow copy (the engine's own; the steps and plans are shared, read only)."""
    out = object.__new__(type(compiled))
    out.__dict__.update(compiled.__dict__)
    return out
