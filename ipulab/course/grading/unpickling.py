"""The judge's reader of a submission's pickles: pickle's own, less what reaches past the objects
a frame makes.

pickle's BUILD sets attributes on whatever tops its stack, and SETITEMS and APPENDS call what it
has: a class (a frame could set SumVertex.cycle_estimate in the judge), a function, an object
the judge shares (the FLOAT type, a graph state). Here they fill in only what this frame made
itself, each object once: an instance that NEWOBJ or a class's REDUCE made with object.__new__
(or an array, a dtype copied), and lists, dicts and sets of the frame. INST and OBJ (protocols
0 and 1) make by calling, and are refused. The opcodes are replaced in pickle's Python reader
(the C one's cannot be); it reads a frame about 4x slower than the C one, a few hundredths of a
second for an ordinary answer.
"""
from __future__ import annotations

import pickle
import types

import numpy as np

# what the frame cannot fill in, whatever made it: its kind is named in the refusal
_SHARED_KINDS = {type: "the class", types.ModuleType: "the module",
                 types.FunctionType: "the function", types.BuiltinFunctionType: "the function",
                 types.MethodType: "the method"}
_CONTAINERS = {pickle.APPENDS[0]: list, pickle.APPEND[0]: list, pickle.SETITEMS[0]: dict,
               pickle.SETITEM[0]: dict, pickle.ADDITEMS[0]: set}


def fresh_dtype(obj, align=False, copy=True):
    """numpy.dtype as a frame may call it: always a copy, never numpy's own float32 (which
    BUILD would then change for the whole judge)."""
    return np.dtype(obj, bool(align), True)


def _named(obj) -> str:
    for kind, what in _SHARED_KINDS.items():
        if isinstance(obj, kind):
            return f"{what} {getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"
    return f"a {type(obj).__name__} it did not make (or built already)"


class FillingUnpickler(pickle._Unpickler):
    """pickle's Python Unpickler whose BUILD, SETITEM(S), APPEND(S) and ADDITEMS touch only
    objects the frame made (self._made: id -> object, which keeps the ids taken)."""

    dispatch = dict(pickle._Unpickler.dispatch)
    makers: tuple = ()                       # functions whose result is a new object to fill

    def __init__(self, file):
        super().__init__(file)
        self._made: dict[int, object] = {}
        self._plain: dict[type, bool] = {}

    def _refuse(self, what: str, obj):
        raise pickle.UnpicklingError(f"a frame may {what} only objects it made itself, once "
                                     f"each, not {_named(obj)}")

    def _new(self, cls) -> bool:
        """Whether calling cls makes a new object each time: its __new__ is object's, and its
        metaclass's __call__ type's."""
        plain = self._plain.get(cls)
        if plain is None:
            plain = self._plain[cls] = isinstance(cls, type) and \
                cls.__new__ is object.__new__ and type(cls).__call__ is type.__call__
        return plain

    def _keep(self, obj) -> None:
        self._made[id(obj)] = obj

    def load_reduce(self):
        args = self.stack.pop()
        func = self.stack[-1]
        self.stack[-1] = obj = func(*args)
        if func in self.makers or self._new(func):
            self._keep(obj)
    dispatch[pickle.REDUCE[0]] = load_reduce

    def _newobj(self, args: tuple, kwargs: dict):
        cls = self.stack.pop()
        if not isinstance(cls, type):
            raise pickle.UnpicklingError(f"NEWOBJ makes instances of classes, not of {_named(cls)}")
        obj = cls.__new__(cls, *args, **kwargs)
        if self._new(cls) or issubclass(cls, (list, dict, set)):
            self._keep(obj)
        self.append(obj)

    def load_newobj(self):
        args = self.stack.pop()
        self._newobj(args, {})
    dispatch[pickle.NEWOBJ[0]] = load_newobj

    def load_newobj_ex(self):
        kwargs, args = self.stack.pop(), self.stack.pop()
        self._newobj(args, kwargs)
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex

    def load_build(self):
        state = self.stack.pop()
        inst = self.stack[-1]
        if self._made.pop(id(inst), None) is not inst:       # (each object is built once)
            self._refuse("set the attributes of", inst)
        setstate = getattr(type(inst), "__setstate__", None)   # (never the instance's own)
        if setstate is not None:
            setstate(inst, state)
            return
        slots = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
        if state:
            vars(inst).update(state)
        for k, v in (slots or {}).items():
            if not isinstance(k, str) or k.startswith("__"):
                raise pickle.UnpicklingError(f"a frame may not set {k!r} of an object")
            setattr(inst, k, v)
    dispatch[pickle.BUILD[0]] = load_build

    def _filled(self, code: int):
        """The container on top of the stack that APPENDS, SETITEMS ... (code) add to."""
        target = self.stack[-1]
        if type(target) is not _CONTAINERS[code] and \
                not (isinstance(target, _CONTAINERS[code]) and id(target) in self._made):
            self._refuse(f"add to {_CONTAINERS[code].__name__}s", target)
        return target

    def load_appends(self):
        items = self.pop_mark()
        self._filled(pickle.APPENDS[0]).extend(items)
    dispatch[pickle.APPENDS[0]] = load_appends

    def load_append(self):
        value = self.stack.pop()
        self._filled(pickle.APPEND[0]).append(value)
    dispatch[pickle.APPEND[0]] = load_append

    def load_setitems(self):
        items = self.pop_mark()
        self._filled(pickle.SETITEMS[0]).update(zip(items[::2], items[1::2]))
    dispatch[pickle.SETITEMS[0]] = load_setitems

    def load_setitem(self):
        value, key = self.stack.pop(), self.stack.pop()
        self._filled(pickle.SETITEM[0])[key] = value
    dispatch[pickle.SETITEM[0]] = load_setitem

    def load_additems(self):
        items = self.pop_mark()
        self._filled(pickle.ADDITEMS[0]).update(items)
    dispatch[pickle.ADDITEMS[0]] = load_additems

    def load_by_calling(self):
        raise pickle.UnpicklingError("a frame makes objects as protocol 2 and later do (INST "
                                     "and OBJ are refused)")
    dispatch[pickle.INST[0]] = dispatch[pickle.OBJ[0]] = load_by_calling
