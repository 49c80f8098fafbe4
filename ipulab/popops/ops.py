"""Named element-wise operations with PopLibs' argument order: `popops.add(g, a, b, seq, name)`.

Each is a `map` of a one-operation expression, so it compiles to one codelet per operand types
and runs where its output lives. An operand may be a number instead of a tensor
(`popops.mul(g, x, 2.0, seq)`). The `*_in_place` forms write the first operand.
"""
from __future__ import annotations

from ..errors import GraphError
from ..poplar import Tensor
from . import expr as E
from .elementwise import map, map_in_place


def _operands(xs, what):
    tensors, args = [], []
    for x in xs:
        if isinstance(x, Tensor):
            tensors.append(x)
            args.append(E.placeholder(len(tensors)))
        else:
            args.append(E.const(x))
    if not tensors:
        raise GraphError(f"popops.{what}: at least one operand must be a tensor")
    return tensors, args


def _apply(graph, build, operands, seq, name, op_name, in_place):
    tensors, exprs = _operands(operands, op_name)
    if not in_place:
        return map(graph, build(*exprs), tensors, seq, name or op_name)
    if not isinstance(operands[0], Tensor):
        raise GraphError(f"popops.{op_name}_in_place writes its first operand, which must be "
                         f"a tensor, not {type(operands[0]).__name__}")
    map_in_place(graph, build(*exprs), tensors, seq, name or f"{op_name}_in_place")
    return None


def _named(op_name, operation, in_place, doc):
    operation.__name__ = operation.__qualname__ = op_name
    in_place.__name__ = in_place.__qualname__ = f"{op_name}_in_place"
    operation.__doc__ = f"A new tensor: {doc}."
    in_place.__doc__ = f"In place into the first operand: {doc}."
    return operation, in_place


def _unary(op_name: str, build, doc: str):
    def operation(graph, a, seq, name: str = ""):
        return _apply(graph, build, [a], seq, name, op_name, False)

    def in_place(graph, a, seq, name: str = ""):
        _apply(graph, build, [a], seq, name, op_name, True)
    return _named(op_name, operation, in_place, doc)


def _binary(op_name: str, build, doc: str):
    def operation(graph, a, b, seq, name: str = ""):
        return _apply(graph, build, [a, b], seq, name, op_name, False)

    def in_place(graph, a, b, seq, name: str = ""):
        _apply(graph, build, [a, b], seq, name, op_name, True)
    return _named(op_name, operation, in_place, doc)


def select(graph, a, b, cond, seq, name: str = ""):
    """A new tensor: cond ? a : b, element by element (PopLibs' operand order)."""
    return _apply(graph, E.select, [a, b, cond], seq, name, "select", False)


add, add_in_place = _binary("add", lambda a, b: a + b, "a + b")
sub, sub_in_place = _binary("sub", lambda a, b: a - b, "a - b")
mul, mul_in_place = _binary("mul", lambda a, b: a * b, "a * b")
div, div_in_place = _binary("div", lambda a, b: a / b, "a / b (integers: toward zero)")
pow, pow_in_place = _binary("pow", E.pow, "a ** b (floats)")  # noqa: A001
max, max_in_place = _binary("max", E.maximum, "the larger of a and b")  # noqa: A001
min, min_in_place = _binary("min", E.minimum, "the smaller of a and b")  # noqa: A001
equal, _ = _binary("equal", lambda a, b: a == b, "a == b (BOOL)")
not_equal, _ = _binary("not_equal", lambda a, b: a != b, "a != b (BOOL)")
gt, _ = _binary("gt", lambda a, b: a > b, "a > b (BOOL)")
gteq, _ = _binary("gteq", lambda a, b: a >= b, "a >= b (BOOL)")
lt, _ = _binary("lt", lambda a, b: a < b, "a < b (BOOL)")
lteq, _ = _binary("lteq", lambda a, b: a <= b, "a <= b (BOOL)")
logical_and, logical_and_in_place = _binary("logical_and", E.logical_and, "a & b")
logical_or, logical_or_in_place = _binary("logical_or", E.logical_or, "a | b")
logical_not, logical_not_in_place = _unary("logical_not", E.logical_not, "~a")
neg, neg_in_place = _unary("neg", E.neg, "-a")
abs, abs_in_place = _unary("abs", E.abs, "|a|")  # noqa: A001
exp, exp_in_place = _unary("exp", E.exp, "e ** a")
log, log_in_place = _unary("log", E.log, "the natural logarithm of a")
sqrt, sqrt_in_place = _unary("sqrt", E.sqrt, "the square root of a")
tanh, tanh_in_place = _unary("tanh", E.tanh, "tanh(a)")
sigmoid, sigmoid_in_place = _unary("sigmoid", E.sigmoid, "1 / (1 + e ** -a)")
square, square_in_place = _unary("square", E.square, "a * a")
eq, neq = equal, not_equal     # PopLibs' short names

NAMES = ["add", "sub", "mul", "div", "pow", "max", "min", "equal", "not_equal", "eq", "neq",
         "gt", "gteq", "lt", "lteq", "logical_and", "logical_or", "logical_not", "neg", "abs",
         "exp", "log", "sqrt", "tanh", "sigmoid", "square", "select"]
IN_PLACE = [f"{n}_in_place" for n in ("add", "sub", "mul", "div", "pow", "max", "min",
                                      "logical_and", "logical_or", "logical_not", "neg",
                                      "abs", "exp", "log", "sqrt", "tanh", "sigmoid",
                                      "square")]
