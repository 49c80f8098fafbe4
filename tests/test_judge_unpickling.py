"""Hostile frames against the judge's unpickler: whatever a frame says, the judge's classes,
functions, modules and shared objects are the same afterwards, and the frame is refused saying
what it reached for. Frames are written opcode by opcode, as a submission can write them."""
from __future__ import annotations

import importlib
import io
import pickle
import sys
import types

import numpy as np
import pytest
from hostile_notebooks import NEARLY_ONE_VERTEX
from test_judge_wire import Loopback

from ipulab import poplar
from ipulab.course import codelets
from ipulab.course.codelets import SumVertex
from ipulab.course.grading import wire
from ipulab.course.grading.session import call_through, verdict
from ipulab.course.grading.wire import (SESSION, Handles, JudgeUnpickler, WireError, judge_loads,
                                        submission_dumps)
from ipulab.course.questions import registry
from ipulab.poplar import program as prog

# where the judge finds the classes a frame may name: every public name of these is tried
MODULES = ("ipulab.poplar.state", "ipulab.poplar.tensor", "ipulab.poplar.vertices",
           "ipulab.poplar.vertex", "ipulab.poplar.program", "ipulab.poplar.types",
           "ipulab.poplar.graph", "ipulab.target", "ipulab.arch", "ipulab.devices",
           "ipulab.nn.layers", "ipulab.nn.model", "ipulab.popops.expr", "ipulab.errors",
           "ipulab.course.codelets", "ipulab.popops.codelets", "ipulab.poplin.codelets",
           "ipulab.poputil.variants", "ipulab.course.grading.wire", "builtins", "numpy",
           "numpy.core.multiarray")


def allowed_globals() -> list[tuple[str, str]]:
    """(module, name) of every class and function the judge's unpickler hands a frame."""
    finder = JudgeUnpickler(io.BytesIO(b""))
    found = []
    for module in MODULES:
        try:
            names = dir(importlib.import_module(module))
        except ImportError:
            continue
        for name in names:
            try:
                finder.find_class(module, name)
            except pickle.UnpicklingError:
                continue
            found.append((module, name))
    return found


ALLOWED = allowed_globals()


def text(s: str) -> bytes:
    data = s.encode()
    return pickle.SHORT_BINUNICODE + bytes([len(data)]) + data


def glob(module: str, name: str) -> bytes:
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


def one_entry(key: str, value: bytes) -> bytes:
    return pickle.EMPTY_DICT + text(key) + value + pickle.SETITEM


def evil_estimate(handle: int) -> bytes:
    """A RemoteFunction: the judge would call back into the submission for it."""
    return glob(wire.__name__, "remote_function") + pickle.BININT1 + bytes([handle]) + \
        text("cheap") + pickle.TUPLE2 + pickle.REDUCE


def build_on(target: bytes, state: bytes) -> bytes:
    return pickle.PROTO + b"\x05" + target + state + pickle.BUILD + pickle.STOP


SLOT_STATE = pickle.NONE + one_entry("cycle_estimate", evil_estimate(0)) + pickle.TUPLE2
DICT_STATE = one_entry("cycle_estimate", evil_estimate(0))
# what a frame may do to an object on top of its stack besides BUILD
SETITEMS = pickle.MARK + text("cycle_estimate") + pickle.BININT1 + b"\x01" + pickle.SETITEMS
APPENDS = pickle.MARK + pickle.BININT1 + b"\x01" + pickle.APPENDS


def snapshot(obj) -> dict:
    """What a frame must leave alone of an object: its attributes, by identity."""
    seen = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
    for attr in ("__defaults__", "__kwdefaults__", "__code__", "__bases__", "__class__"):
        if hasattr(obj, attr):
            seen[attr] = getattr(obj, attr)
    return {k: id(v) for k, v in seen.items()}


def judges_world() -> dict:
    """The judge's codelet classes and modules, as a frame must leave them."""
    world = {("module", m.__name__): snapshot(m) for m in (wire, codelets, poplar.types)}
    world.update({(module, name): snapshot(getattr(importlib.import_module(module), name))
                  for module, name in ALLOWED if module != "builtins"})
    world["FLOAT"] = snapshot(poplar.FLOAT)
    world["float32"] = (np.dtype(np.float32).byteorder, np.dtype(np.float32).str)
    return world


def test_the_judge_hands_out_classes_and_functions_a_frame_could_reach():
    assert ("ipulab.course.codelets", "SumVertex") in ALLOWED and len(ALLOWED) > 50


@pytest.mark.parametrize("state", [SLOT_STATE, DICT_STATE, SETITEMS, APPENDS],
                         ids=["BUILD slots", "BUILD dict", "SETITEMS", "APPENDS"])
def test_no_frame_changes_an_allowed_class_or_function(state):
    before = judges_world()
    for module, name in ALLOWED:
        frame = (build_on(glob(module, name), state) if state in (SLOT_STATE, DICT_STATE) else
                 pickle.PROTO + b"\x05" + glob(module, name) + state + pickle.STOP)
        with pytest.raises(WireError, match="cannot accept") as refused:
            judge_loads(frame)
        if state in (SLOT_STATE, DICT_STATE):
            assert "only objects it made itself, once each, not the" in str(refused.value), (module, name)
    assert judges_world() == before
    assert "cycle_estimate" not in vars(SumVertex)


@pytest.mark.parametrize("target, named", [
    (glob("ipulab.poplar.types", "as_type") + text("float") + pickle.TUPLE1 + pickle.REDUCE,
     "a Type it did not make"),                               # the judge's own FLOAT
    (glob("ipulab.poplin.codelets", "matmul_block_codelet") + text("float") + pickle.BININT1 +
     b"\x10" + pickle.TUPLE2 + pickle.REDUCE, "the class"),   # a cached class of the judge's
    (glob("numpy", "ndarray"), "the class ndarray"),
    (glob("builtins", "list"), "the function"),
    (text("state") + pickle.BININT1 + b"\x00" + pickle.TUPLE2 + pickle.BINPERSID,
     "a SimpleNamespace it did not make"),                    # a graph state of the judge's
])
def test_no_frame_fills_in_what_the_judge_already_had(target, named):
    before, state = judges_world(), types.SimpleNamespace()
    with pytest.raises(WireError, match=f"made itself, once each, not {named}"):
        judge_loads(build_on(target, SLOT_STATE), states=[state])
    assert judges_world() == before and vars(state) == {}


def _fresh_type() -> bytes:
    return glob("ipulab.poplar.types", "Type") + pickle.EMPTY_TUPLE + pickle.NEWOBJ


def test_an_object_the_frame_made_is_built_once_and_never_relabelled():
    first = one_entry("__setstate__", evil_estimate(0))      # (a second BUILD would call it)
    twice = pickle.PROTO + b"\x05" + _fresh_type() + first + pickle.BUILD + \
        DICT_STATE + pickle.BUILD + pickle.STOP
    with pytest.raises(WireError, match="made itself, once each, not a Type it did not make"):
        judge_loads(twice)
    relabel = pickle.NONE + one_entry("__class__", glob("ipulab.course.codelets", "SumVertex")) + \
        pickle.TUPLE2
    with pytest.raises(WireError, match="may not set '__class__'"):
        judge_loads(build_on(_fresh_type(), relabel))
    made = judge_loads(build_on(_fresh_type(), one_entry("name", text("mine"))))
    assert type(made) is poplar.types.Type and made.name == "mine" and made is not poplar.FLOAT


def test_a_dtype_is_a_copy_and_old_protocols_are_refused():
    before = judges_world()
    shared = pickle.PROTO + b"\x05" + glob("numpy", "dtype") + text("f4") + pickle.NEWFALSE + \
        pickle.NEWFALSE + pickle.TUPLE3 + pickle.REDUCE + pickle.MARK + pickle.BININT1 + b"\x03" + \
        text(">") + pickle.NONE * 3 + pickle.BININT + b"\xff" * 4 + pickle.BININT + b"\xff" * 4 + \
        pickle.BININT1 + b"\x00" + pickle.TUPLE + pickle.BUILD + pickle.STOP
    assert judge_loads(shared) is not np.dtype(np.float32)
    assert judges_world() == before
    for old in (b"(i" + b"ipulab.poplar.types\nType\n" + b".", b"(" + glob("builtins", "list") +
                b"o."):
        with pytest.raises(WireError, match="INST and OBJ are refused"):
            judge_loads(old)


# --- the exploit of issue 38, over the wire ----------------------------------------------------
def nearly_one_vertex():
    """All of x but five elements on one worker: every partial written, 5.8x par."""
    defined = {"SumVertex": SumVertex, "prog": prog}
    exec(NEARLY_ONE_VERTEX, defined)
    return defined["six_workers"]


def graded(data: bytes, handles: Handles) -> dict:
    loop = Loopback()
    loop.handles = handles
    SESSION.call = lambda h, args, kwargs: call_through(loop, h, args, kwargs)
    try:
        return verdict(registry.get("ex01.six_workers"), {"ex01.six_workers": data}, [], [], None)
    finally:
        SESSION.call = None


def test_a_frame_prefixed_to_price_sumvertex_is_refused_and_changes_nothing():
    handles = Handles()
    answer = submission_dumps(nearly_one_vertex(), handles)      # handle 0: the answer
    cheap = handles.add(lambda **sizes: 1)                       # handle 1: the forged price
    prefix = glob("ipulab.course.codelets", "SumVertex") + pickle.NONE + \
        one_entry("cycle_estimate", evil_estimate(cheap)) + pickle.TUPLE2 + pickle.BUILD + pickle.POP
    before = judges_world()
    forged = graded(prefix + answer, handles)
    assert forged["status"] != "passed", forged
    assert "not the class SumVertex" in forged["message"], forged
    assert judges_world() == before and "cycle_estimate" not in vars(SumVertex)
    plain = graded(answer, handles)
    assert plain["status"] == "failed" and "5.8" in plain["message"], plain
    assert sys.modules[SumVertex.__module__] is codelets and isinstance(codelets, types.ModuleType)
