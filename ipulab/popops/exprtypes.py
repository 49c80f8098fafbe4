"""Element types in expressions: how operand types combine, as in NumPy with weak scalars.

A placeholder has its tensor's type; a constant without a type is *weak*: it takes the type of
what it meets (`_1 * 2` stays HALF on a HALF tensor), unless it is of a higher kind (a float
constant with an INT tensor gives FLOAT). Two typed operands promote to the wider type:
BOOL < UNSIGNED_INT < INT < HALF < FLOAT.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import GraphError
from ..poplar import types as T

RANK = {T.BOOL: 0, T.UNSIGNED_INT: 1, T.INT: 2, T.HALF: 3, T.FLOAT: 4}
KIND = {T.BOOL: 0, T.UNSIGNED_INT: 1, T.INT: 1, T.HALF: 2, T.FLOAT: 2}   # bool, int, float
DEFAULT = {0: T.BOOL, 1: T.INT, 2: T.FLOAT}


@dataclass(frozen=True)
class Ty:
    """A node's type: a poplar Type, or weak (dtype None) of a kind 0 bool, 1 int, 2 float."""

    dtype: object
    kind: int

    @staticmethod
    def of(dtype) -> "Ty":
        return Ty(dtype, KIND[dtype])

    @staticmethod
    def weak(value) -> "Ty":
        return Ty(None, 0 if isinstance(value, bool) else 1 if isinstance(value, int) else 2)

    def resolve(self):
        """The concrete type: a weak one takes its kind's default (FLOAT, INT, BOOL)."""
        return DEFAULT[self.kind] if self.dtype is None else self.dtype


def promote(a: Ty, b: Ty) -> Ty:
    """The common type of two operands."""
    if a.dtype is not None and b.dtype is not None:
        return a if RANK[a.dtype] >= RANK[b.dtype] else b
    if a.dtype is None and b.dtype is None:
        return a if a.kind >= b.kind else b
    strong, weak = (a, b) if a.dtype is not None else (b, a)
    return Ty.of(DEFAULT[weak.kind]) if weak.kind > strong.kind else strong


ARITHMETIC = ("add", "sub", "mul", "div", "neg", "square")
COMPARE = ("lt", "gt", "le", "ge", "eq", "ne")
LOGIC = ("and", "or", "not")
FLOAT_FUNCTIONS = ("exp", "log", "sqrt", "tanh", "sigmoid", "erf", "pow")


def operand_type(op: str, common: Ty, where) -> object:
    """The concrete type operands of op are converted to, given their common type."""
    t = common.resolve()
    if op in ARITHMETIC and t is T.BOOL:
        return T.INT
    if op == "pow" and KIND[t] != 2:
        if common.dtype is not None:
            raise GraphError(f"{where}: pow needs FLOAT or HALF operands, not {t}; "
                             "cast(x, FLOAT) first")
        return T.FLOAT
    if op in FLOAT_FUNCTIONS and KIND[t] != 2:
        return T.FLOAT
    if op in LOGIC and KIND[t] == 2:
        raise GraphError(f"{where}: & | ~ need BOOL (logical) or integer (bitwise) operands, "
                         f"not {t}; compare first, e.g. (_1 > 0) & (_2 > 0)")
    return t

