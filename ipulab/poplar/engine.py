"""Engine: compile once (in the constructor), load onto a device, run many times.

Replicated graphs (Graph(target, replication_factor=r)): the host sees every replica at once.
  - write_tensor(handle, a) takes r blocks (a of shape (r, *tensor.shape), or any shape of
    r * n elements): block i goes to replica i; read_tensor returns shape (r, *tensor.shape).
  - a FIFO of n elements moves r * n elements per copy: replica i reads (or writes) the i-th
    block of n, so a connected array must hold a positive multiple of r * n elements.
  - remote buffers: read_remote_buffer(name) has shape (r, repeats, num_elements) and
    write_remote_buffer(name, a) takes as many elements.
With r = 1 (an ordinary graph) the leading replica axis is not there.
"""
from __future__ import annotations

import sys

import numpy as np

from ..errors import EngineError
from ..machine import lanes
from .codelet import MODES
from .compile import compile_graph
from .executables import compiled_for
from .graph import Graph
from .profile import Profile
from .program import Program
from .types import round_half

_OPTIONS = {"debug.checkedCodelets": ("true", "false"),
            "debug.codeletMode": MODES,
            "cache": ("true", "false")}     # the executable cache (executables.py)


def _mode(options: dict) -> str:
    for k, v in options.items():
        if k not in _OPTIONS:
            raise EngineError(f"unknown engine option {k!r}; known: {', '.join(_OPTIONS)}")
        if str(v) not in _OPTIONS[k]:
            raise EngineError(f"option {k!r} takes one of {_OPTIONS[k]}, not {v!r}")
    mode = options.get("debug.codeletMode", "compiled")
    if mode == "compiled" and options.get("debug.checkedCodelets") == "true":
        mode = "checked"
    return mode


def format_values(title: str, values: np.ndarray) -> str:
    """Poplar's PrintTensor format: floats with 7 decimals, rows of a matrix on their own lines."""
    def fmt(x) -> str:
        if values.dtype.kind == "f":
            return f"{float(x):.7f}"
        return str(int(x))

    def block(a, indent: str) -> str:
        if a.ndim <= 1:
            return "[" + " ".join(fmt(x) for x in np.atleast_1d(a)) + "]"
        inner = "\n".join(indent + " " + block(row, indent + " ") for row in a)
        return "[\n" + inner + "\n" + indent + "]"

    return f"{title}: {block(values, '')}"


class _RunState:
    """What one run() touches: the arenas, the trace, and staged host-stream traffic."""

    def __init__(self, engine: "Engine"):
        self.arenas, self.arenas_ro = engine._arenas, engine._arenas_ro
        self.remote = engine._remote
        self.trace: list[int] = []
        self.lanes = engine._lanes        # threads a step may split its kernels over
        self.calls = engine._calls        # a step's kernel calls on these arenas, made once
        self._engine = engine
        self._pos = dict(engine._stream_pos)
        self._pending: list = []

    def _buffer(self, name: str) -> np.ndarray:
        buf = self._engine._stream_buf.get(name)
        if buf is None:
            raise EngineError(f"stream '{name}' is not connected: call "
                              f"engine.connect_stream('{name}', array) before run()")
        return buf

    def _indices(self, name: str, n: int, size: int) -> np.ndarray:
        pos = self._pos[name]
        self._pos[name] = (pos + n) % size
        return (pos + np.arange(n)) % size

    def stream_read(self, name: str, n: int) -> np.ndarray:
        buf = self._buffer(name)
        return buf[self._indices(name, n, buf.size)]

    def stream_write(self, name: str, values: np.ndarray) -> None:
        buf = self._buffer(name)
        self._pending.append((buf, self._indices(name, values.size, buf.size), values))

    def print(self, title: str, values: np.ndarray) -> None:
        print(format_values(title, values), file=sys.stdout)

    def commit(self) -> None:
        for buf, idx, values in self._pending:
            buf[idx] = values
        self._engine._stream_pos = self._pos


def _constant_image(constants: list) -> dict:
    """Per arena: the addresses of every constant's elements (replica 0's) and their values,
    written at load in one assignment per replica (a GPT's graph has thousands of them)."""
    image = {}
    for v in constants:
        image.setdefault(v.dtype.storage.name, []).append(v)
    return {k: (np.concatenate([np.arange(v.offset, v.offset + v.size) for v in vs]),
                np.concatenate([v.values for v in vs])) for k, vs in image.items()}


class Engine:
    """Poplar's Engine: Engine(graph, program or [programs], options); load(device); run(i)."""

    def __init__(self, graph: Graph, programs, options: dict | None = None):
        if not isinstance(graph, Graph):
            raise EngineError(f"Engine needs a Graph, not {type(graph).__name__}")
        programs = list(programs) if isinstance(programs, (list, tuple)) else [programs]
        for i, p in enumerate(programs):
            if not isinstance(p, Program):
                raise EngineError(f"program {i} is a {type(p).__name__}, not a program")
        self.options = dict(options or {})
        self.mode = _mode(self.options)
        # parts of a step run at once only in compiled mode: checked and python modes stop at
        # a learner's first failing vertex, in order, as they always did
        self._lanes = lanes.available() if self.mode == "compiled" else 1
        self.target = graph._state.target
        self._compiled = compiled_for(graph, programs, self.mode, compile_graph,
                                      str(self.options.get("cache", "true")) == "true")
        st = graph._state
        self.replication_factor = st.replication_factor
        self._stride = self._compiled.replica_stride
        self._handles = dict(st.handles)
        self._streams = dict(st.streams)
        self._remote_buffers = dict(st.remote_buffers)
        self._remote: dict[str, np.ndarray] = {}
        self._constants = _constant_image([v for v in st.variables if v.is_constant])
        self._device = None
        self._trace = self._profile = None
        self._stream_buf: dict[str, np.ndarray] = {}
        self._stream_pos = {name: 0 for name in self._streams}

    # --- device ----------------------------------------------------------------------------
    def load(self, device) -> None:
        """Attach to a device: allocate the arenas (the device's memory: a partition's is
        cleared when it is removed) and write the constants."""
        self.target.check_partition(getattr(device, "target", None), "load onto")
        if getattr(device, "target", None) != self.target:
            raise EngineError(f"cannot load onto {device!r}: the graph was built for "
                              f"{self.target!r}")
        self._arenas = device.allocate(self._compiled.arena_sizes)
        self._arenas_ro, self._calls = {}, {}
        for k, a in self._arenas.items():
            ro = a.view()
            ro.flags.writeable = False
            self._arenas_ro[k] = ro
        for key, (addrs, values) in self._constants.items():
            for i in range(self.replication_factor):
                self._arenas[key][addrs + i * self._stride[key]] = values
        # streaming memory: every replica's rows of every remote buffer, zeroed at load
        self._remote = {name: np.zeros(self.replication_factor * b.repeats * b.num_elements,
                                       b.dtype.storage)
                        for name, b in self._remote_buffers.items()}
        self._device = device

    def _require_loaded(self, what: str) -> None:
        """EngineError before load(); the device's own error if it can no longer be used
        (a removed V-IPU partition)."""
        if self._device is None:
            raise EngineError(f"{what} before load(): call engine.load(device) first")
        self._device.check()

    # --- running ---------------------------------------------------------------------------
    def run(self, program: int = 0) -> None:
        """Run program i; on failure, host arrays and stream positions are left as they were."""
        self._require_loaded("run()")
        roots = self._compiled.roots
        if not isinstance(program, (int, np.integer)) or not 0 <= program < len(roots):
            raise EngineError(f"no program {program!r}: this engine has programs "
                              f"0 to {len(roots) - 1}")
        state = _RunState(self)
        roots[program].run(state)   # raises before commit: host arrays stay untouched
        self._device.check()        # a partition removed meanwhile: nothing reaches the host
        state.commit()
        self._trace, self._profile = state.trace, None

    # --- host data ---------------------------------------------------------------------------
    def _handle(self, name: str, mode: str):
        if name not in self._handles or self._handles[name][0] != mode:
            known = [h for h, (m, _) in self._handles.items() if m == mode]
            raise EngineError(f"no host {mode} handle {name!r}; known: {known or 'none'} "
                              f"(create one with g.create_host_{mode}(name, tensor))")
        return self._handles[name][1]

    def _replica_ids(self, t) -> np.ndarray:
        """The tensor's element addresses on every replica: shape (r, *t.shape), or t.shape
        for an ordinary graph."""
        r = self.replication_factor
        if r == 1:
            return t.ids
        stride = self._stride[t.dtype.storage.name]
        return t.ids[None] + (np.arange(r, dtype=np.int64) * stride).reshape(
            (r,) + (1,) * t.rank)

    def write_tensor(self, handle: str, array) -> None:
        """Copy a host array into the tensor behind a host-write handle.

        On a replicated graph the array holds one block per replica (shape (r, *shape))."""
        t = self._handle(handle, "write")
        self._require_loaded("write_tensor()")
        a = np.asarray(array)
        r = self.replication_factor
        what = f"handle '{handle}'" + (f" (r={r} replicas x {t.num_elements()})" if r > 1
                                       else "")
        self._check_host_array(what, t, a, r * t.num_elements())
        vals = a.ravel().astype(t.dtype.storage)
        self._arenas[t.dtype.storage.name][self._replica_ids(t).ravel()] = (
            round_half(vals) if t.dtype.rounds_to_half else vals)

    def read_tensor(self, handle: str) -> np.ndarray:
        """A new host array with the values of the tensor behind a host-read handle
        (shape (r, *shape) on a replicated graph: replica i's values at [i])."""
        t = self._handle(handle, "read")
        self._require_loaded("read_tensor()")
        return self._arenas[t.dtype.storage.name][self._replica_ids(t)].astype(t.dtype.host)

    @staticmethod
    def _check_host_array(what: str, t, a: np.ndarray, n: int, multiple: bool = False) -> None:
        if a.dtype != t.dtype.host:
            raise EngineError(f"{what} is {t.dtype} and needs a numpy {t.dtype.host} array, "
                              f"got {a.dtype} (use .astype(np.{t.dtype.host}))")
        ok = a.size > 0 and a.size % n == 0 if multiple else a.size == n
        if not ok:
            need = f"a positive multiple of {n}" if multiple else f"{n}"
            raise EngineError(f"{what} needs {need} elements, got an array of {a.size} "
                              f"(shape {list(a.shape)})")

    def connect_stream(self, name: str, array) -> None:
        """Connect a host array to a FIFO; it is read (or written) circularly, as in Poplar."""
        if name not in self._streams:
            raise EngineError(f"no stream {name!r}; known: {list(self._streams) or 'none'}")
        s = self._streams[name]
        if not isinstance(array, np.ndarray):
            raise EngineError(f"stream '{name}' needs a numpy array, not {type(array).__name__}")
        r = self.replication_factor
        what = f"stream '{name}'" + (f" ({r} replicas x {s.num_elements} elements a copy)"
                                     if r > 1 else "")
        self._check_host_array(what, s, array, r * s.num_elements, multiple=True)
        if s.direction == "device_to_host":
            if not (array.flags.c_contiguous and array.flags.writeable):
                raise EngineError(f"stream '{name}' writes into the array in place: pass a "
                                  "writeable, C-contiguous array")
        self._stream_buf[name] = array.reshape(-1)
        self._stream_pos[name] = 0

    # --- remote buffers (streaming memory) ----------------------------------------------------
    def _remote_buffer(self, name: str):
        if name not in self._remote_buffers:
            raise EngineError(f"no remote buffer {name!r}; known: "
                              f"{list(self._remote_buffers) or 'none'}")
        return self._remote_buffers[name]

    def _remote_shape(self, b) -> tuple:
        r = self.replication_factor
        return ((r,) if r > 1 else ()) + (b.repeats, b.num_elements)

    def read_remote_buffer(self, name: str) -> np.ndarray:
        """A copy of a remote buffer's contents from the host: shape (repeats, num_elements),
        or (r, repeats, num_elements) on a replicated graph."""
        b = self._remote_buffer(name)
        self._require_loaded("read_remote_buffer()")
        return self._remote[name].reshape(self._remote_shape(b)).astype(b.dtype.host)

    def write_remote_buffer(self, name: str, array) -> None:
        """Fill a remote buffer from the host (for tests and set-up): as many elements as
        read_remote_buffer returns, of the buffer's exact dtype, in the same order."""
        b = self._remote_buffer(name)
        self._require_loaded("write_remote_buffer()")
        a = np.asarray(array)
        shape = self._remote_shape(b)
        self._check_host_array(f"remote buffer '{name}' (shape {list(shape)})", b, a,
                               int(np.prod(shape)))
        vals = a.ravel().astype(b.dtype.storage)
        self._remote[name][:] = round_half(vals) if b.dtype.rounds_to_half else vals

    # --- profile -------------------------------------------------------------------------------
    def profile(self) -> Profile:
        """Profile of the most recent run()."""
        if self._trace is None:
            raise EngineError("no profile yet: run() a program first")
        if self._profile is None:
            self._profile = Profile(self.target, self._compiled, self._trace)
        return self._profile

    def print_profile_summary(self) -> None:
        print(self.profile().summary())
