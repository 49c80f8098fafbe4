"""Running codelets: one driver per codelet batch, in compiled, checked or python mode.

A batch is every vertex of one codelet in one compute set. Its driver loops over a plan (field
offsets and lengths per vertex) and calls the codelet's compute on views of the storage arena,
so a whole batch is ONE numba call. Inputs are passed as read-only views: a codelet that writes
an Input fails to compile (numba) or raises (python mode).
"""
from __future__ import annotations

import traceback
from functools import partial
from typing import NamedTuple

import numba
import numpy as np

from ..errors import CodeletError
from .codelet_cache import cached_driver, compiling
from .regions import regions, view
from .rewrite import half_fields, rewrite

MODES = ("compiled", "checked", "python")
_computes: dict = {}
_drivers: dict = {}


# --- drivers ------------------------------------------------------------------------------------
def _driver_source(kinds: tuple, multi: bool, workers: int) -> str:
    """Source of a driver for fields of the given kinds (in compute-parameter order): each
    vertex's fields are views of the arenas (regions.view and regions.regions), which borrow
    the arenas' memory for the length of the call."""
    args = ", ".join(f"a{j}" for j in range(len(kinds)))
    lines = [f"def driver(progress, {args}, off, ln, vl_first, vl_count, vl_off, vl_len):",
             "    for v in range(off.shape[0]):",
             "        progress[0] = v"]
    col = vcol = 0
    for j, kind in enumerate(kinds):
        if kind == "vector_list":
            lines.append(f"        f{j} = _ipl_regions(a{j}, vl_off, vl_len, vl_first[v, {vcol}], "
                         f"vl_count[v, {vcol}])")
            vcol += 1
        else:
            lines.append(f"        f{j} = _ipl_view(a{j}, off[v, {col}], ln[v, {col}])")
            col += 1
    call = ", ".join(f"f{j}" for j in range(len(kinds)))
    if multi:
        lines += [f"        for w in range({workers}):", f"            compute(w, {call})"]
    else:
        lines.append(f"        compute({call})")
    return "\n".join(lines) + "\n"


def _compute_for(cls, mode: str):
    key = (cls, mode)
    if key not in _computes:
        fn = rewrite(cls.compute, mode == "python", half_fields(cls))
        if mode != "python":
            fn = numba.njit(boundscheck=mode == "checked", error_model="numpy",
                            fastmath=cls.fastmath)(fn)
        _computes[key] = fn
    return _computes[key]


_array_types: dict = {}


def _typeof(a: np.ndarray):
    """numba's type of an arena or plan array, remembered by what decides it (numba.typeof
    takes 20 us, and a GPT's compile asks it thousands of times)."""
    f = a.flags
    key = (a.dtype, a.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned)
    t = _array_types.get(key)
    if t is None:
        t = _array_types[key] = numba.typeof(a)
    return t


def _driver_for(cls, mode: str, kinds: tuple, workers: int):
    """The njit'ed batch driver (compiled or checked mode): cached on disk for library
    codelets, compiled in this process for codelets defined in a notebook."""
    key = (cls, mode, kinds, workers)
    if key not in _drivers:
        source = _driver_source(kinds, cls.multi, workers)
        driver = cached_driver(cls, mode, source)
        if driver is None:
            ns = {"compute": _compute_for(cls, mode), "_ipl_regions": regions,
                  "_ipl_view": view}
            exec(source, ns)
            driver = numba.njit(boundscheck=mode == "checked", error_model="numpy",
                                nogil=True)(ns["driver"])
        _drivers[key] = driver
    return _drivers[key]


class _PyList(list):
    """VectorList fields in python mode: a list of array views."""


class BatchPlan(NamedTuple):
    """Where each vertex of a batch finds its fields, in compute-parameter order: offsets and
    lengths of its scalar and Vector fields (vertices x fields), and for VectorList fields the
    first region and the region count (vertices x lists) in the region table vl_off, vl_len."""

    off: np.ndarray
    ln: np.ndarray
    vl_first: np.ndarray
    vl_count: np.ndarray
    vl_off: np.ndarray
    vl_len: np.ndarray


def _python_driver(compute, multi, workers, kinds, progress, arrays, plan: BatchPlan):
    """Python-mode batch: the same plan walked in Python, so print and breakpoint() work."""
    off, ln, vl_first, vl_count, vl_off, vl_len = plan
    for v in range(off.shape[0]):
        progress[0] = v
        fields, col, vcol = [], 0, 0
        for a, kind in zip(arrays, kinds):
            if kind == "vector_list":
                lo, n = vl_first[v, vcol], vl_count[v, vcol]
                fields.append(_PyList(a[vl_off[q]:vl_off[q] + vl_len[q]] for q in range(lo, lo + n)))
                vcol += 1
            else:
                fields.append(a[off[v, col]:off[v, col] + ln[v, col]])
                col += 1
        if multi:
            for w in range(workers):
                compute(np.int64(w), *fields)
        else:
            compute(*fields)


class Batch:
    """The vertices of one codelet in one compute set, ready to run as one driver call.

    params: the codelet's compute parameters in call order; vertex_ids, vertex_tiles: one
    entry per row of the plan (for error messages); with replicas > 1 the plan holds every
    replica's vertices, replica by replica."""

    def __init__(self, cls, params: list[str], mode: str, workers: int, vertex_ids: np.ndarray,
                 vertex_tiles: np.ndarray, cs_name: str, plan: BatchPlan, replicas: int = 1):
        self.cls, self.params, self.mode, self.workers = cls, params, mode, workers
        self.replicas = replicas
        self.vertex_ids, self.vertex_tiles, self.cs_name = vertex_ids, vertex_tiles, cs_name
        by_attr = {f.attr: f for f in cls.fields}
        order = [by_attr[p] for p in params]
        self.arena_keys = [f.dtype.storage.name for f in order]
        self.kinds = tuple(f.kind for f in order)
        self.readonly = [f.direction == "input" for f in order]
        self.plan = plan
        self.progress = np.zeros(1, np.int64)
        self._fn = None
        self._parts: dict = {}

    def __getstate__(self) -> dict:
        """Everything but the compiled driver (compiled again where the batch is loaded) and
        the plan's parts (cut again when needed)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_fn", "_parts")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _fn=None, _parts={})

    @property
    def rows(self) -> int:
        """Vertices in the plan (every replica's)."""
        return int(self.plan.off.shape[0])

    def _part(self, lo: int, hi: int):
        """(progress, plan) of rows lo <= v < hi: the plan's per-vertex rows cut (views), the
        region tables whole; its own progress counter, so parts can run at once."""
        key = (lo, hi)
        if key not in self._parts:
            p = self.plan
            self._parts[key] = (np.zeros(1, np.int64), BatchPlan(
                p.off[lo:hi], p.ln[lo:hi], p.vl_first[lo:hi], p.vl_count[lo:hi], p.vl_off,
                p.vl_len))
        return self._parts[key]

    def _arrays(self, arenas, arenas_ro):
        return [(arenas_ro if ro else arenas)[k] for k, ro in zip(self.arena_keys, self.readonly)]

    def compile(self, arenas, arenas_ro) -> None:
        """Compile the driver for these argument types now, so errors surface at Engine build."""
        if self.mode == "python":
            self._fn = _compute_for(self.cls, "python")
            return
        driver = _driver_for(self.cls, self.mode, self.kinds, self.workers)
        args = (self.progress, *self._arrays(arenas, arenas_ro), *self.plan)
        sig = tuple(_typeof(a) for a in args)
        if sig in driver.overloads:     # compiled for these types already (another batch)
            self._fn = driver
            return
        try:
            with compiling(driver):
                driver.compile(sig)
        except Exception as e:  # numba typing / lowering errors
            text = str(e)
            why = ("it writes to an Input field, which is read-only: declare the field InOut "
                   "(or Output) to write it" if "setitem(readonly" in text else
                   "numba could not compile its compute()")
            detail = "\n".join(text.strip().splitlines()[:15])
            raise CodeletError(f"codelet {self.cls.__name__} failed to compile in compute set "
                               f"'{self.cs_name}' ({self.mode} mode): {why}.\n"
                               f"numba said:\n{detail}") from None
        self._fn = driver

    def run(self, arenas, arenas_ro) -> None:
        self.run_part(arenas, arenas_ro, 0, self.rows)

    def prepare(self, arenas, arenas_ro) -> None:
        """Compile the driver now if it is not yet (a batch of a stored executable), in the
        calling thread: lanes then run parts of it at once (two threads compiling at once can
        break CPython's own parser)."""
        if self._fn is None:
            self.compile(arenas, arenas_ro)

    def call_part(self, arenas, arenas_ro, lo: int, hi: int) -> tuple:
        """(fn, args, failure): the one call that runs the vertices of rows lo <= v < hi, for a
        caller that makes it many times (an engine keeps it), and failure(e), the error that
        an exception e of that call means (the vertex its progress counter says was running).
        Parts made for different rows can run at once: vertices of a compute set write
        disjoint elements, and each part counts its own progress."""
        self.prepare(arenas, arenas_ro)
        arrays = self._arrays(arenas, arenas_ro)
        progress, plan = (self.progress, self.plan) if hi - lo == self.rows else \
            self._part(lo, hi)
        failure = partial(self._failure, lo, progress)
        if self.mode == "python":
            return (partial(_python_driver, self._fn, self.cls.multi, self.workers, self.kinds),
                    (progress, arrays, plan), failure)
        return self._fn, (progress, *arrays, *plan), failure

    def run_part(self, arenas, arenas_ro, lo: int, hi: int) -> None:
        """Run the vertices of rows lo <= v < hi (see call_part)."""
        if lo >= hi:
            self.prepare(arenas, arenas_ro)
            return
        fn, args, failure = self.call_part(arenas, arenas_ro, lo, hi)
        try:
            fn(*args)
        except Exception as e:
            raise failure(e) from None

    def _failure(self, lo: int, progress: np.ndarray, e: Exception) -> CodeletError:
        return self._run_error(e, lo + int(progress[0]))

    def _run_error(self, e: Exception, k: int) -> CodeletError:
        vid, tile = int(self.vertex_ids[k]), int(self.vertex_tiles[k])
        if self.replicas > 1:
            replica = k // (len(self.vertex_ids) // self.replicas)
            tile = f"{tile} (replica {replica})"
        where = ""
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if f.name == self.cls.compute.__name__]
        if frames:
            where = f" at {frames[-1].filename}:{frames[-1].lineno} ({frames[-1].line})"
        hint = ""
        if isinstance(e, IndexError):
            hint = " — an index past the end of a field (check the loop bounds)"
        elif "read-only" in str(e):
            hint = " — it wrote to an Input field; declare the field InOut to write it"
        return CodeletError(f"codelet {self.cls.__name__}: vertex {vid} on tile {tile} in "
                            f"compute set '{self.cs_name}' failed{where}: "
                            f"{type(e).__name__}: {e}{hint}")
