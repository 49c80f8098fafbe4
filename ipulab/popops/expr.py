"""Expression trees for popops.map (PopLibs' popops::expr).

Placeholders `_1 … _N` stand for the tensors passed to `popops.map`; Python operators and the
functions below build a tree, which popops compiles into ONE element-wise codelet:

    from ipulab.popops.expr import _1, _2, exp, select, const
    e = select(exp(_1), _2 * 2.0, _1 > 0)      # (_1 > 0) ? exp(_1) : _2 * 2

Numbers mixed with expressions become constants that take the type of the other operand
(`_1 * 2` on a FLOAT tensor multiplies by 2.0f), like NumPy's scalars. An expression is not a
truth value: `and`, `or`, `not` and chained comparisons (`a < b < c`) raise; use `&`, `|`, `~`.
"""
from __future__ import annotations

import builtins
import numbers

import numpy as np

from ..errors import GraphError
from ..poplar.types import Type, as_type

# operator -> infix symbol, for display and for the arithmetic / comparison groups
BINARY_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "lt": "<",
                  "gt": ">", "le": "<=", "ge": ">=", "eq": "==", "ne": "!=", "and": "&",
                  "or": "|"}
BINARY_FUNCTIONS = ("max", "min")
UNARY = ("neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "erf", "square", "not")


class Expr:
    """A node of an expression tree: op, its operand nodes, and (for leaves) a value."""

    __slots__ = ("op", "args", "value")
    __array_ufunc__ = None     # numpy scalars defer to our reflected operators

    def __init__(self, op: str, args: tuple = (), value=None):
        self.op, self.args, self.value = op, tuple(args), value

    # --- building -----------------------------------------------------------------------
    def _bin(self, op, other, reflected=False):
        other = as_expr(other)
        return Expr(op, (other, self) if reflected else (self, other))

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __pow__(self, o): return self._bin("pow", o)
    def __rpow__(self, o): return self._bin("pow", o, True)
    def __lt__(self, o): return self._bin("lt", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __le__(self, o): return self._bin("le", o)
    def __ge__(self, o): return self._bin("ge", o)
    def __eq__(self, o): return self._bin("eq", o)
    def __ne__(self, o): return self._bin("ne", o)
    def __and__(self, o): return self._bin("and", o)
    def __rand__(self, o): return self._bin("and", o, True)
    def __or__(self, o): return self._bin("or", o)
    def __ror__(self, o): return self._bin("or", o, True)
    def __neg__(self): return Expr("neg", (self,))
    def __pos__(self): return self
    def __abs__(self): return Expr("abs", (self,))
    def __invert__(self): return Expr("not", (self,))

    __hash__ = None            # == builds a node, so expressions are not dict keys

    def __bool__(self):
        raise GraphError(f"the expression {self} has no truth value: use & | ~ instead of "
                         "and / or / not, select(a, b, cond) instead of if, and split chained "
                         "comparisons (a < b < c) into (a < b) & (b < c)")

    # --- reading ------------------------------------------------------------------------
    def placeholders(self) -> set[int]:
        """The placeholder numbers (1-based) this expression uses."""
        if self.op == "ph":
            return {self.value}
        return set().union(*(a.placeholders() for a in self.args))

    def __str__(self) -> str:
        op, a = self.op, self.args
        if op == "ph":
            return f"_{self.value}"
        if op == "const":
            value, dtype = self.value
            return repr(value) if dtype is None else f"const({value!r}, {dtype})"
        if op in BINARY_SYMBOLS:
            return f"({a[0]} {BINARY_SYMBOLS[op]} {a[1]})"
        if op == "neg":
            return f"(-{a[0]})"
        if op == "not":
            return f"(~{a[0]})"
        if op == "cast":
            return f"cast({a[0]}, {self.value})"
        return f"{op}({', '.join(str(x) for x in a)})"

    def __repr__(self) -> str:
        return f"Expr({self})"


def substitute(e: Expr, mapping: dict) -> Expr:
    """e with placeholder _n replaced by mapping[n] (an expression)."""
    if e.op == "ph":
        return mapping[e.value]
    if not e.args:
        return e
    return Expr(e.op, tuple(substitute(a, mapping) for a in e.args), e.value)


def placeholder(n: int) -> Expr:
    """The placeholder _n (1-based): the n-th tensor given to popops.map."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise GraphError(f"placeholders are numbered from 1 (_1, _2, ...), not {n!r}")
    return Expr("ph", value=int(n))


def const(x, dtype=None) -> Expr:
    """A constant. Without dtype it takes the type of what it meets (2 * _1 -> _1's type)."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, np.bool_)):
        value = bool(x)
    elif isinstance(x, numbers.Integral):
        value = int(x)
    elif isinstance(x, numbers.Real):
        value = float(x)
    else:
        raise GraphError(f"const() takes a number or a bool, not {type(x).__name__} {x!r}")
    return Expr("const", value=(value, None if dtype is None else as_type(dtype)))


def as_expr(x) -> Expr:
    """x as an expression: expressions pass through, numbers become constants."""
    return x if isinstance(x, Expr) else const(x)


def _unary(op: str):
    def fn(x):
        return Expr(op, (as_expr(x),))
    fn.__name__ = op
    return fn


exp, log, sqrt, tanh, sigmoid, erf, square = (
    _unary(op) for op in ("exp", "log", "sqrt", "tanh", "sigmoid", "erf", "square"))
neg, logical_not = _unary("neg"), _unary("not")
exp.__doc__ = "e ** x, in float."
log.__doc__ = "Natural logarithm (-inf at 0, nan below), in float."
sqrt.__doc__ = "Square root (nan below 0), in float."
tanh.__doc__ = "Hyperbolic tangent, in float."
sigmoid.__doc__ = "1 / (1 + exp(-x)), in float."
erf.__doc__ = "The error function (2 / sqrt(pi)) * integral of exp(-t^2) from 0 to x, in float."
square.__doc__ = "x * x."


def abs(x) -> Expr:  # noqa: A001 - PopLibs' name
    """|x| (an expression), or the builtin abs of a plain number."""
    return Expr("abs", (as_expr(x),)) if isinstance(x, Expr) else builtins.abs(x)


def maximum(a, b) -> Expr:
    """The larger of a and b, element by element (nan if either is nan)."""
    return Expr("max", (as_expr(a), as_expr(b)))


def minimum(a, b) -> Expr:
    """The smaller of a and b, element by element (nan if either is nan)."""
    return Expr("min", (as_expr(a), as_expr(b)))


max, min = maximum, minimum   # noqa: A001 - PopLibs calls them Max / Min


def pow(a, b) -> Expr:  # noqa: A001
    """a ** b, in float."""
    return Expr("pow", (as_expr(a), as_expr(b)))


def logical_and(a, b) -> Expr:
    return Expr("and", (as_expr(a), as_expr(b)))


def logical_or(a, b) -> Expr:
    return Expr("or", (as_expr(a), as_expr(b)))


def select(a, b, cond) -> Expr:
    """Poplar's Select: cond ? a : b, element by element."""
    return Expr("select", (as_expr(a), as_expr(b), as_expr(cond)))


def cast(x, dtype) -> Expr:
    """x converted to dtype (FLOAT, HALF, INT, UNSIGNED_INT, BOOL or a numpy dtype)."""
    dtype = dtype if isinstance(dtype, Type) else as_type(dtype)
    return Expr("cast", (as_expr(x),), dtype)


_1, _2, _3, _4, _5, _6, _7, _8, _9 = (placeholder(n) for n in range(1, 10))


def __getattr__(name: str) -> Expr:
    """_10, _11, ...: any placeholder by name (PEP 562)."""
    if name.startswith("_") and name[1:].isdigit() and name[1] != "0":
        return placeholder(int(name[1:]))
    raise AttributeError(f"module 'ipulab.popops.expr' has no attribute {name!r}")


__all__ = ["Expr", "placeholder", "substitute", "const", "as_expr", "exp", "log", "sqrt",
           "tanh", "sigmoid", "erf", "square", "neg", "abs", "maximum", "minimum", "max", "min",
           "pow", "logical_and", "logical_or", "logical_not", "select", "cast",
           "_1", "_2", "_3", "_4", "_5", "_6", "_7", "_8", "_9"]
