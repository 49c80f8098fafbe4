"""What crosses between a submission's process and the judge, and how each side reads it.

Frames of pickled data go both ways over pipes; one from a submission is refused unread over
FRAME_LIMIT bytes (TOTAL_LIMIT in all: session.py counts). The judge reads the submission's
frames with JudgeUnpickler, which makes only allow-listed classes (numbers, arrays, ipulab's
graph, program, target and layer classes, library codelets) and builds containers and bytes
only from values in the frame, and fills in only the objects the frame made (never a class, a
function or an object the judge shares: unpickling.py), so nothing a submission sends can run
code in the judge, change the judge's classes, or make gigabytes of a few bytes. A submission's own functions travel as handles: in the judge a
RemoteFunction, whose call asks the submission's process to run the function and send back the
result. Its codelets travel as their source: codelet_from_spec re-makes the class in the judge
from source that source_check.py validated, so the judge compiles the compute itself (numba,
bounds checked); popops' codelets are made again by the judge's popops (generated.py).

Graphs cross by value. A call sends the graph states its arguments use; the reply sends them
back as they are after the call, and the judge takes them in place (session.adopt checks that a
graph only grew). Their vertex groups arrive as SubmittedVertexGroup, without the cycle
estimates the submission fixed: cycles are the judge's.
"""
from __future__ import annotations

import builtins
import hashlib
import importlib
import inspect
import io
import pickle
import struct
import textwrap

import numpy as np

from ...errors import IpuLabError
from ...poplar.executables import RecipePickler
from ...poplar.types import as_type
from ...poplar.vertex import InOut, Input, MultiVertex, Output, Vector, VectorList, Vertex
from ...poplar.vertices import VertexGroup
from .generated import regenerate
from .source_check import UnsafeCode, check_function_source, safe_globals
from .unpickling import FillingUnpickler, fresh_dtype

FIELD_DIRECTIONS = {"Input": Input, "Output": Output, "InOut": InOut}

FRAME_LIMIT = 256 * 2**20          # bytes of one frame from a submission (set 09's largest: 17 MB)
TOTAL_LIMIT = 1 * 2**30            # bytes a submission may send in all
_HEADER = struct.Struct("<Q")


class WireError(IpuLabError):
    """A frame that cannot be read: too big, cut short, or holding what the judge refuses."""


def write_frame(stream, payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream, limit: int = FRAME_LIMIT) -> bytes:
    """One frame; WireError, before reading it, if it says it is over `limit` bytes; EOFError
    if the other side has gone."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the other process has gone")
    (n,) = _HEADER.unpack(head)
    if n > limit:
        raise WireError(f"a message of {n:,} bytes, over the limit of {limit:,}")
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("the other process has gone")
    return data


# --- the judge reads ---------------------------------------------------------------------------
def _made_of(types_: tuple, what: str):
    """A builtin constructor that takes only what pickle gives it (values already in the frame,
    never a size or an iterator that would make something big from a few bytes)."""
    def make(*args):
        if len(args) > 1 or not all(isinstance(a, types_) for a in args):
            raise pickle.UnpicklingError(f"{what} is sent as its values, not made from "
                                         f"{', '.join(type(a).__name__ for a in args)}")
        return getattr(builtins, what)(*args)
    return make


_SMALL = (int, float, bool, complex, str, type(None))
_BUILTINS = {"bytearray": _made_of((bytes, bytearray), "bytearray"),
             "bytes": _made_of((bytes, bytearray), "bytes"),
             "set": _made_of((list, tuple, set, frozenset), "set"),
             "frozenset": _made_of((list, tuple, set, frozenset), "frozenset"),
             "list": _made_of((list, tuple), "list"), "tuple": _made_of((list, tuple), "tuple"),
             "dict": _made_of((dict, list, tuple), "dict"),
             "slice": builtins.slice, "range": builtins.range, "complex": builtins.complex,
             "int": _made_of(_SMALL, "int"), "float": _made_of(_SMALL, "float"),
             "bool": _made_of(_SMALL, "bool"), "str": _made_of(_SMALL, "str")}
_NUMPY = {("numpy", "ndarray"), ("numpy", "dtype")} | {
    (f"numpy.{core}.{module}", name) for core in ("core", "_core")
    for module, name in (("multiarray", "_reconstruct"), ("multiarray", "scalar"),
                         ("numeric", "_frombuffer"))}
# ipulab modules whose classes are plain data (making one has no side effect)
_DATA_MODULES = {"ipulab.poplar.state", "ipulab.poplar.tensor", "ipulab.poplar.vertices",
                 "ipulab.poplar.vertex", "ipulab.poplar.program", "ipulab.poplar.types",
                 "ipulab.poplar.graph", "ipulab.target", "ipulab.arch", "ipulab.devices",
                 "ipulab.nn.layers", "ipulab.nn.model", "ipulab.popops.expr", "ipulab.errors"}
# functions that only look up or make data: the codelets the libraries make at run time, and
# the type table (a Type pickles as as_type(name))
_RECIPES = {("ipulab.poputil.variants", "typed_variant"),
            ("ipulab.poplin.codelets", "matmul_block_codelet"),
            ("ipulab.poplar.types", "as_type"), ("ipulab.poplar.tensor", "_index_suffix"),
            ("ipulab.poplar.tensor", "_slice_suffix"),     # (a view's lazy name: text only)
            ("ipulab.poplar.graph", "_VirtualTarget")}     # (a virtual graph's target)
_OWN = ("remote_function", "codelet_from_spec", "generated_codelet")
# of ipulab's own course, only the codelets the exercises give may be named
_COURSE_CODELETS = "ipulab.course.codelets"


def _library_codelet(obj) -> bool:
    return isinstance(obj, type) and issubclass(obj, Vertex) and \
        obj.__module__.startswith("ipulab.") and "<" not in obj.__qualname__


class SubmittedVertexGroup(VertexGroup):
    """A vertex group as a submission sends it, less its fixed cycle estimates: cycles are
    what the judge's cost model makes of the codelets it compiled itself, never what the
    submission says (set_perf_estimate, add_vertices(..., estimates=...)). session.adopt gives
    back the estimates of the vertices a check made itself."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.estimates = np.full(self.tiles.size, -1, np.int64)

    def __setstate__(self, state):
        if not isinstance(state, dict) or not isinstance(state.get("tiles"), np.ndarray):
            raise pickle.UnpicklingError("a vertex group is sent as its fields")
        vars(self).update(state)
        self.estimates = np.full(self.tiles.size, -1, np.int64)

    def __reduce__(self):          # back to the submission: a vertex group like any other
        return _vertex_group, (dict(vars(self)),)


def _vertex_group(state: dict) -> VertexGroup:
    group = VertexGroup.__new__(VertexGroup)
    vars(group).update(state)
    return group


class JudgeUnpickler(FillingUnpickler):
    """Unpickles a submission's frame, making nothing outside the allow-list, and filling in
    only the objects it made (unpickling.py)."""

    makers = (np.zeros(0).__reduce__()[0], fresh_dtype)    # (numpy's _reconstruct: an array)

    def find_class(self, module: str, name: str):
        if module == "builtins" and name in _BUILTINS:
            return _BUILTINS[name]
        if (module, name) == ("numpy", "dtype"):
            return fresh_dtype
        if (module, name) in _NUMPY or (module, name) in _RECIPES:
            return getattr(importlib.import_module(module), name)
        if module == "numpy" and isinstance(getattr(np, name, None), type) and \
                issubclass(getattr(np, name), np.generic):
            return getattr(np, name)                     # scalar types: np.float32 ...
        if module == __name__ and name in _OWN:
            return globals()[name]
        if (module, name) == (VertexGroup.__module__, "VertexGroup"):
            return SubmittedVertexGroup
        if module.startswith("ipulab.") and not name.startswith("_") and "." not in name and \
                (not module.startswith("ipulab.course") or module == _COURSE_CODELETS):
            obj = getattr(importlib.import_module(module), name, None)
            if _library_codelet(obj) or (module in _DATA_MODULES and isinstance(obj, type)):
                return obj
        raise pickle.UnpicklingError(f"a submission may not send {module}.{name}")


def judge_loads(data: bytes, states=()):
    """A submission's frame, in the judge; ("state", i) refers to states[i]."""
    up = JudgeUnpickler(io.BytesIO(data))
    up.persistent_load = lambda pid: _state_ref(pid, states)
    try:
        return up.load()
    except RecursionError:
        raise WireError("the submission sent something nested too deeply") from None
    except MemoryError:
        raise WireError("the submission sent something too big to be made here") from None
    except (pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError,
            EOFError, IndexError, KeyError, IpuLabError, struct.error, OverflowError) as e:
        raise WireError(f"the submission sent something the judge cannot accept: {e}") from None


def _state_ref(pid, states):
    if isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "state" and \
            isinstance(pid[1], int) and 0 <= pid[1] < len(states):
        return states[pid[1]]
    raise pickle.UnpicklingError(f"unknown reference {pid!r}")


class JudgePickler(RecipePickler):
    """Pickles a call's arguments for the submission: its own functions and codelets go back
    as references to them."""

    def persistent_id(self, obj):
        if isinstance(obj, RemoteFunction):
            return ("fn", obj.handle)
        if isinstance(obj, type) and "__ipulab_spec__" in vars(obj):
            return ("codelet", obj.__ipulab_spec__)
        return None


def judge_dumps(obj) -> bytes:
    buf = io.BytesIO()
    JudgePickler(buf, protocol=5).dump(obj)
    return buf.getvalue()


# --- the submission sends ----------------------------------------------------------------------
class Handles:
    """The submission's functions and codelets that the judge has been sent, by number."""

    def __init__(self):
        self.objects: list = []
        self.codelets: dict[str, type] = {}      # spec digest -> the codelet class

    def add(self, obj) -> int:
        for k, known in enumerate(self.objects):
            if known is obj:
                return k
        self.objects.append(obj)
        return len(self.objects) - 1

    def loads(self, data: bytes):
        """A frame from the judge (trusted), its references resolved to our own objects."""
        up = pickle.Unpickler(io.BytesIO(data))
        up.persistent_load = lambda pid: (self.objects[pid[1]] if pid[0] == "fn"
                                          else self.codelets[pid[1]])
        return up.load()


def _own(obj) -> bool:
    """Defined by the submission (not by ipulab, numpy or Python)."""
    module = getattr(obj, "__module__", None) or ""
    return not (module == "ipulab" or module.startswith(("ipulab.", "numpy", "builtins", "math")))


class SubmissionPickler(RecipePickler):
    """Pickles answers and call results in the submission's process: its functions as
    handles, its codelets as source; objects of its own classes are refused."""

    def __init__(self, file, handles: Handles, states=()):
        super().__init__(file, protocol=5)
        self.handles, self.states = handles, list(states)

    def persistent_id(self, obj):
        for i, st in enumerate(self.states):
            if obj is st:
                return ("state", i)
        return None

    def reducer_override(self, obj):
        if isinstance(obj, type):
            recipe = vars(obj).get("__ipulab_recipe__")
            if recipe is not None and recipe[0].__name__ == "build_codelet":
                return generated_codelet, tuple(recipe[1])
            if issubclass(obj, Vertex) and _own(obj):
                return codelet_from_spec, (codelet_spec_of(obj, self.handles),)
            if _own(obj):
                raise pickle.PicklingError(f"class {obj.__name__} is your own: answers use "
                                           "ipulab's classes, and codelets (poplar.Vertex)")
            return super().reducer_override(obj)
        if callable(obj) and _own(obj):
            return remote_function, (self.handles.add(obj), getattr(obj, "__qualname__", "?"))
        if _own(type(obj)):
            raise pickle.PicklingError(f"an object of your own class {type(obj).__name__} "
                                       "cannot be graded: use numbers, arrays, lists, dicts, "
                                       "functions, codelets and ipulab objects")
        return NotImplemented


def submission_dumps(obj, handles: Handles, states=()) -> bytes:
    buf = io.BytesIO()
    SubmissionPickler(buf, handles, states).dump(obj)
    return buf.getvalue()


def codelet_spec_of(cls, handles: Handles) -> dict:
    """A submission's codelet class as data: its fields, its compute's source and the numbers
    that source uses from outside it."""
    compute = inspect.getattr_static(cls, "compute", None)
    fn = getattr(compute, "__func__", compute)
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        used = inspect.getclosurevars(fn).globals
    except (OSError, TypeError):
        source, used = "", {}
    numbers = {k: v for k, v in used.items() if not inspect.ismodule(v)}
    spec = {"name": cls.__name__, "multi": issubclass(cls, MultiVertex), "compute": source,
            "fields": [(f.attr, type(f).__name__, f.kind, f.dtype.name, f.name)
                       for f in cls.fields],
            "globals": numbers, "fastmath": bool(getattr(cls, "fastmath", False)),
            "estimate": (handles.add(cls.cycle_estimate) if hasattr(cls, "cycle_estimate")
                         else None)}
    handles.codelets[spec_digest(spec)] = cls
    return spec


def spec_digest(spec: dict) -> str:
    data = {k: v for k, v in spec.items() if k != "globals"}
    return hashlib.sha256(repr(sorted(data.items())).encode()).hexdigest()[:20]


# --- the judge's side of a submission's objects --------------------------------------------------
class Session:
    """The judge's link to the submission's process while answers are checked (judge.py sets
    call); trust_estimates: whether a submitted codelet's cycle_estimate is part of the answer
    (a question about estimates) or ignored (every other: code does not price itself)."""

    def __init__(self):
        self.call = None
        self.trust_estimates = False
        self.codelets: dict[str, type] = {}


SESSION = Session()


class RemoteFunction:
    """A submission's function, in the judge: calling it runs it in the submission's process."""

    def __init__(self, handle: int, name: str):
        self.handle, self.__name__, self.__qualname__ = int(handle), str(name), str(name)

    def __call__(self, *args, **kwargs):
        if SESSION.call is None:
            raise RuntimeError(f"{self.__name__} belongs to a submission that is not running")
        return SESSION.call(self.handle, args, kwargs)

    def __repr__(self) -> str:
        return f"<your function {self.__name__}>"


def remote_function(handle, name) -> RemoteFunction:
    if not isinstance(handle, int):
        raise UnsafeCode("a function handle is a number")
    return RemoteFunction(handle, name)


def codelet_from_spec(spec) -> type:
    """The judge's copy of a submission's codelet, made from its validated source. Its
    cycle_estimate is the submission's only where the question asks for one (q.prices);
    elsewhere the judge's cost model prices its vertices by the elements they touch."""
    if not isinstance(spec, dict):
        raise UnsafeCode("a codelet travels as a dict")
    key = spec_digest(spec)
    name = str(spec.get("name", "Codelet"))
    trusted = SESSION.trust_estimates and spec.get("estimate") is not None
    if (key, trusted) in SESSION.codelets:
        return SESSION.codelets[(key, trusted)]
    if not name.isidentifier():
        raise UnsafeCode(f"{name!r} is not a codelet name")
    compute = check_function_source(str(spec.get("compute") or ""), f"{name}.compute",
                                    safe_globals(spec.get("globals")))
    ns = {"fastmath": bool(spec.get("fastmath")), "compute": staticmethod(compute),
          "__module__": "submission", "__ipulab_spec__": key}
    for attr, direction, kind, dtype, conn in spec.get("fields", ()):
        if direction not in ("Input", "Output", "InOut") or not str(attr).isidentifier() or \
                str(attr).startswith("_") or kind not in ("scalar", "vector", "vector_list"):
            raise UnsafeCode(f"field {attr!r} of {name} is not a codelet field")
        shape = as_type(dtype) if kind == "scalar" else \
            (Vector if kind == "vector" else VectorList)[as_type(dtype)]
        ns[attr] = FIELD_DIRECTIONS[direction](shape, name=str(conn))
    if trusted:
        ns["cycle_estimate"] = staticmethod(_remote_estimate(int(spec["estimate"]), name))
    cls = type(name, (MultiVertex if spec.get("multi") else Vertex,), ns)
    SESSION.codelets[(key, trusted)] = cls
    return cls


def _remote_estimate(handle: int, name: str):
    def cycle_estimate(**sizes):
        return int(SESSION.call(handle, (), sizes))
    cycle_estimate.__qualname__ = f"{name}.cycle_estimate"
    return cycle_estimate


def generated_codelet(name, source) -> type:
    """A popops map or reduction codelet, made again by the judge's own popops from what its
    source says popops was asked for (generated.py): never compiled as it was sent."""
    return regenerate(str(source))
