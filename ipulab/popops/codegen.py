"""Generated codelets: source text -> a poplar.Vertex class, built once per process.

popops writes each codelet's source (from an expression tree for map, from an operation for
reduce), registers it in `linecache` under a stable fake file name so that `inspect` can read
it back (the python codelet mode re-parses compute's source), and caches the class by its
source: the same expression on the same types is one class, so numba compiles it once.

The pieces of source every generator needs live here too: typed literals, conversions between
element types, and the float helpers. Float functions run in float64 through small numba
functions and are rounded once to the result type; the python mode calls the very same
compiled helpers, so all three codelet modes agree bit for bit.
"""
from __future__ import annotations

import hashlib
import linecache
import math

import numpy as np
from numba import njit

from ..machine.kernels import to_half
from ..poplar import types as T
from ..poplar.vertex import InOut, Input, Output, Vector, VectorList, Vertex, set_recipe
from .float32_exp import f32_exp

FLOATS = (T.FLOAT, T.HALF)
CTOR = {T.FLOAT: "np.float32", T.HALF: "np.float32", T.INT: "np.int32",
        T.UNSIGNED_INT: "np.uint32", T.BOOL: "np.bool_"}


# --- float and integer helpers (numba; the python mode calls the compiled ones too) ----------
@njit(cache=True)
def f_exp(x):
    return math.exp(x)


@njit(cache=True)
def f_log(x):
    if x > 0.0:
        return math.log(x)
    return -math.inf if x == 0.0 else math.nan


@njit(cache=True)
def f_sqrt(x):
    return math.sqrt(x) if x >= 0.0 else math.nan


@njit(cache=True)
def f_tanh(x):
    return math.tanh(x)


@njit(cache=True)
def f_sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


@njit(cache=True)
def f_erf(x):
    return math.erf(x)


@njit(cache=True)
def f_pow(x, y):
    return x ** y


@njit(cache=True)
def i_div(a, b):
    """Integer division rounding toward zero (C, Poplar); 0 when dividing by 0."""
    a, b = np.int64(a), np.int64(b)
    if b == 0:
        return np.int64(0)
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


# __ipulab_globals__: these names are all this module's, so the codelet disk cache can rebuild
# a generated compute in a file of its own (poplar/codelet_cache.py)
NAMESPACE = {"__ipulab_globals__": __name__, "np": np, "math": math, "to_half": to_half,
             "f_exp": f_exp, "f_log": f_log, "f_sqrt": f_sqrt, "f_tanh": f_tanh,
             "f_sigmoid": f_sigmoid, "f_erf": f_erf, "f_pow": f_pow, "f32_exp": f32_exp,
             "i_div": i_div, "Vertex": Vertex, "Input": Input, "Output": Output,
             "InOut": InOut, "Vector": Vector, "VectorList": VectorList,
             **{t.name: t for t in T.TYPES}}


# --- pieces of source ----------------------------------------------------------------------
def literal(value, dtype) -> str:
    """A constant of a poplar type, as source that numba and python type the same way."""
    if dtype is T.BOOL:
        return f"np.bool_({bool(value)})"
    if dtype in FLOATS:
        v = float(np.float16(value)) if dtype is T.HALF else float(np.float32(value))
        if math.isnan(v):
            return "np.float32(math.nan)"
        if math.isinf(v):
            return f"np.float32({'-' if v < 0 else ''}math.inf)"
        return f"np.float32({v!r})"
    v = int(value) % 2 ** 32
    if dtype is T.INT and v >= 2 ** 31:
        v -= 2 ** 32
    return f"{CTOR[dtype]}({v})"


def typed(code: str, dtype) -> str:
    """The value of code as dtype's storage type (HALF rounded to half precision)."""
    if dtype is T.HALF:
        return f"np.float32(to_half({code}))"
    return f"{CTOR[dtype]}({code})"


def convert(code: str, src, dst) -> str:
    """Code converting a value of type src to type dst: float -> integer truncates toward
    zero (through int64, then wrapped to 32 bits), anything -> BOOL is `!= 0`."""
    if src is dst or (src is T.HALF and dst is T.FLOAT):
        return code
    if dst is T.BOOL:
        return f"np.bool_({code} != 0)"
    if dst is T.HALF:
        return typed(f"np.float32({code})", dst)
    if src in FLOATS and dst is not T.FLOAT:   # through int64, then wrapped: defined everywhere
        return typed(f"np.int64({code})", dst)
    return typed(code, dst)


# --- building classes ------------------------------------------------------------------------
_classes: dict[str, type] = {}
_names: dict[str, str] = {}   # class name -> the source that owns it


def build_codelet(name: str, source: str) -> type:
    """The codelet class defined by source (a class named `Codelet`), built once per source.

    The class is renamed `name` (made unique with #2, #3 if another source took it); its
    source is kept on the class as `.source` so a learner can print what popops generated.
    """
    cls = _classes.get(source)
    if cls is not None:
        return cls
    unique, k = name, 1
    while _names.get(unique, source) != source:
        k += 1
        unique = f"{name}#{k}"
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    filename = f"<ipulab.popops generated {digest}>"
    # mtime None: linecache.checkcache keeps the entry, as for sources without a file
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = dict(NAMESPACE, __name__=__name__)
    exec(compile(source, filename, "exec"), ns)
    cls = ns["Codelet"]
    cls.__name__ = cls.__qualname__ = unique
    cls.source = source
    set_recipe(cls, build_codelet, name, source)
    _names[unique] = source
    _classes[source] = cls
    return cls


def generated_codelets() -> dict[str, type]:
    """Every codelet popops has generated in this process, by name (see `.source`)."""
    return {cls.__name__: cls for cls in _classes.values()}
