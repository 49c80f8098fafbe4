"""Running codelets: one driver per codelet batch, in compiled, checked or python mode.

A batch is every vertex of one codelet in one compute set. Its driver loops over a plan (field
offsets and lengths per vertex) and calls the codelet's compute on views of the storage arena,
so a whole batch is ONE numba call. Inputs are passed as read-only views: a codelet that writes
an Input fails to compile (numba) or raises (python mode).
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import traceback

import numba
import numpy as np
from numba.typed import List

from ..errors import CodeletError
from ..machine.kernels import to_half

MODES = ("compiled", "checked", "python")
_computes: dict = {}
_drivers: dict = {}


# --- python mode: numba's typing rules for literals -------------------------------------------
def _i64_range(*args):
    return (np.int64(i) for i in range(*(int(a) for a in args)))


_PY_HELPERS = {"_ipl_f64": np.float64, "_ipl_i64": np.int64, "_ipl_range": _i64_range,
               "_ipl_len": lambda x: np.int64(len(x)), "_ipl_half": to_half}


class _NumbaLiterals(ast.NodeTransformer):
    """Make Python literals typed like numba types them (float64, int64), and range/len too.

    NumPy 2 treats a bare 0.0 as a 'weak' scalar, so `s = 0.0; s += np.float32(x)` accumulates
    in float32, while numba accumulates in float64. Wrapping literals keeps the modes identical.
    """

    def visit_Constant(self, node):
        if type(node.value) in (float, int):
            name = "_ipl_f64" if type(node.value) is float else "_ipl_i64"
            return ast.copy_location(ast.Call(ast.Name(name, ast.Load()), [node], []), node)
        return node

    def visit_Name(self, node):
        if node.id in ("range", "len") and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Name("_ipl_" + node.id, ast.Load()), node)
        return node


class _HalfStores(ast.NodeTransformer):
    """Round every store into a HALF field: `out[i] = v` -> `out[i] = _ipl_half(v)`, and
    `out[i] += v` -> `out[i] = _ipl_half(out[i] + v)`, so HALF data is rounded on every write."""

    def __init__(self, names: set):
        self.names = names

    def _is_half(self, target) -> bool:
        if not isinstance(target, ast.Subscript):
            return False
        while isinstance(target, ast.Subscript):
            target = target.value
        return isinstance(target, ast.Name) and target.id in self.names

    @staticmethod
    def _half(value):
        return ast.Call(ast.Name("_ipl_half", ast.Load()), [value], [])

    def visit_Assign(self, node):
        self.generic_visit(node)
        if any(self._is_half(t) for t in node.targets):
            node.value = self._half(node.value)
        return node

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        if not self._is_half(node.target):
            return node
        load = ast.parse(ast.unparse(node.target), mode="eval").body
        value = self._half(ast.BinOp(load, node.op, node.value))
        return ast.copy_location(ast.Assign([node.target], value), node)


def _rewrite(fn, literals: bool, half_fields: set):
    """fn re-compiled from its source with the given rewrites; same file and line numbers."""
    if not literals and not half_fields:
        return fn
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError):
        return fn
    if fn.__code__.co_freevars:
        return fn
    tree = ast.parse(textwrap.dedent("".join(lines)))
    tree.body[0].decorator_list = []
    if half_fields:
        tree = _HalfStores(half_fields).visit(tree)
    if literals:
        tree = _NumbaLiterals().visit(tree)
    tree = ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, first - 1)
    ns = dict(fn.__globals__, **_PY_HELPERS)
    exec(compile(tree, filename, "exec"), ns)
    return ns[fn.__name__]


# --- drivers ------------------------------------------------------------------------------------
def _driver_source(kinds: tuple, multi: bool, workers: int) -> str:
    """Source of a driver for fields of the given kinds (in compute-parameter order)."""
    args = ", ".join(f"a{j}" for j in range(len(kinds)))
    lines = [f"def driver(progress, {args}, off, ln, vl_first, vl_count, vl_off, vl_len):",
             "    for v in range(off.shape[0]):",
             "        progress[0] = v"]
    col = vcol = 0
    for j, kind in enumerate(kinds):
        if kind == "vector_list":
            lines += [f"        f{j} = List()",
                      f"        for q in range(vl_first[v, {vcol}], "
                      f"vl_first[v, {vcol}] + vl_count[v, {vcol}]):",
                      f"            f{j}.append(a{j}[vl_off[q]:vl_off[q] + vl_len[q]])"]
            vcol += 1
        else:
            lines.append(f"        f{j} = a{j}[off[v, {col}]:off[v, {col}] + ln[v, {col}]]")
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
        half = {f.attr for f in cls.fields if f.writes and f.dtype.rounds_to_half}
        fn = _rewrite(cls.compute, mode == "python", half)
        if mode != "python":
            fn = numba.njit(boundscheck=mode == "checked", error_model="numpy",
                            fastmath=cls.fastmath)(fn)
        _computes[key] = fn
    return _computes[key]


def _driver_for(cls, mode: str, kinds: tuple, workers: int):
    key = (cls, mode, kinds, workers)
    if key not in _drivers:
        ns = {"compute": _compute_for(cls, mode), "List": List}
        exec(_driver_source(kinds, cls.multi, workers), ns)
        fn = ns["driver"]
        _drivers[key] = fn if mode == "python" else numba.njit(
            boundscheck=mode == "checked", error_model="numpy")(fn)
    return _drivers[key]


class _PyList(list):
    """VectorList fields in python mode: a list of array views."""


def _python_driver(compute, multi, workers, kinds, progress, arrays, off, ln, vl_first,
                   vl_count, vl_off, vl_len):
    """Python-mode batch: the same plan walked in Python, so print and breakpoint() work."""
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
    """The vertices of one codelet in one compute set, ready to run as one driver call."""

    def __init__(self, cls, params: list[str], mode: str, workers: int, vertex_ids: np.ndarray,
                 vertex_tiles: np.ndarray, cs_name: str, arena_keys: list[str],
                 kinds: tuple, readonly: list[bool], off, ln, vl_first, vl_count, vl_off, vl_len):
        self.cls, self.params, self.mode, self.workers = cls, params, mode, workers
        self.vertex_ids, self.vertex_tiles, self.cs_name = vertex_ids, vertex_tiles, cs_name
        self.arena_keys, self.kinds, self.readonly = arena_keys, kinds, readonly
        self.plan = (off, ln, vl_first, vl_count, vl_off, vl_len)
        self.progress = np.zeros(1, np.int64)

    def _arrays(self, arenas, arenas_ro):
        return [(arenas_ro if ro else arenas)[k] for k, ro in zip(self.arena_keys, self.readonly)]

    def compile(self, arenas, arenas_ro) -> None:
        """Compile the driver for these argument types now, so errors surface at Engine build."""
        if self.mode == "python":
            self._fn = _compute_for(self.cls, "python")
            return
        driver = _driver_for(self.cls, self.mode, self.kinds, self.workers)
        args = (self.progress, *self._arrays(arenas, arenas_ro), *self.plan)
        try:
            driver.compile(tuple(numba.typeof(a) for a in args))
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
        arrays = self._arrays(arenas, arenas_ro)
        try:
            if self.mode == "python":
                _python_driver(self._fn, self.cls.multi, self.workers, self.kinds,
                               self.progress, arrays, *self.plan)
            else:
                self._fn(self.progress, *arrays, *self.plan)
        except Exception as e:
            raise self._run_error(e) from None

    def _run_error(self, e: Exception) -> CodeletError:
        k = int(self.progress[0])
        vid, tile = int(self.vertex_ids[k]), int(self.vertex_tiles[k])
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
