"""Codelets: Vertex / MultiVertex classes whose fields are Input, Output or InOut."""
from __future__ import annotations

import inspect

from ..errors import CodeletError
from .types import as_type


class _Shape:
    """Vector[T] or VectorList[T]: the shape of a field, subscripted by its element type."""

    def __init__(self, kind: str, dtype=None):
        self.kind, self.dtype = kind, dtype

    def __getitem__(self, dtype) -> "_Shape":
        return _Shape(self.kind, as_type(dtype))

    def __repr__(self) -> str:
        return f"{self.kind.title().replace('_', '')}[{self.dtype}]"


Vector = _Shape("vector")
VectorList = _Shape("vector_list")


class Field:
    """A vertex field: direction, shape (scalar, vector, vector_list), element type, name."""

    direction = ""

    def __init__(self, type_, name: str | None = None):
        if isinstance(type_, _Shape):
            if type_.dtype is None:
                raise CodeletError(f"{type_.kind} field needs an element type, e.g. Vector[FLOAT]")
            self.kind, self.dtype = type_.kind, type_.dtype
        else:
            self.kind, self.dtype = "scalar", as_type(type_)
        self.name = name     # connection key; the attribute name if not given
        self.attr = None     # attribute name, which is also the compute() parameter name

    @property
    def writes(self) -> bool:
        return self.direction != "input"

    @property
    def reads(self) -> bool:
        return self.direction != "output"

    def __set_name__(self, owner, attr: str) -> None:
        self.attr = attr
        if self.name is None:
            self.name = attr

    def __repr__(self) -> str:
        shape = self.kind if self.kind == "scalar" else f"{self.kind}"
        return f"{type(self).__name__}({shape} {self.dtype}, name={self.name!r})"


class Input(Field):
    """Read-only field: the codelet may not write it."""
    direction = "input"


class Output(Field):
    """Write-only field."""
    direction = "output"


class InOut(Field):
    """Read-write field."""
    direction = "inout"


class Vertex:
    """Base of a codelet whose compute(...) runs on one worker thread.

    Subclasses declare fields as class attributes and a @staticmethod compute whose parameters
    are the field attribute names. Scalar fields arrive as 1-element arrays.
    """

    multi = False
    # Opt in to LLVM fast-math (SIMD reductions). Still deterministic run to run, but sums may
    # be reordered, so results can differ in the last bits from python mode.
    fastmath = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        fields = {}
        for klass in reversed(cls.__mro__):
            fields.update({k: v for k, v in vars(klass).items() if isinstance(v, Field)})
        cls.fields = list(fields.values())


class MultiVertex(Vertex):
    """Base of a codelet whose compute(worker_id, ...) runs on all worker threads of its tile."""

    multi = True


def set_recipe(cls, factory, *args) -> type:
    """Record that cls is what factory(*args) returns (a codelet made at run time), so that a
    stored executable can make it again in another process. Returns cls."""
    cls.__ipulab_recipe__ = (factory, args)
    return cls


def codelet_spec(cls) -> list[str]:
    """Validate a codelet class; return compute()'s field parameters in call order."""
    name = getattr(cls, "__name__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, Vertex)) or cls in (Vertex, MultiVertex):
        raise CodeletError(f"{name} is not a codelet: subclass poplar.Vertex or "
                           "poplar.MultiVertex")
    compute = inspect.getattr_static(cls, "compute", None)
    if not isinstance(compute, staticmethod):
        raise CodeletError(f"codelet {name}: compute must be a @staticmethod taking its fields")
    params = list(inspect.signature(cls.compute).parameters)
    if cls.multi:
        if not params:
            raise CodeletError(f"codelet {name}: a MultiVertex compute takes worker_id first")
        params = params[1:]
    attrs = [f.attr for f in cls.fields]
    if sorted(params) != sorted(attrs):
        raise CodeletError(f"codelet {name}: compute parameters {params} must be exactly its "
                           f"fields {attrs}" + (" after worker_id" if cls.multi else ""))
    keys = [f.name for f in cls.fields]
    if len(set(keys)) != len(keys):
        raise CodeletError(f"codelet {name}: two fields share a connection name in {keys}")
    return params
