"""Source rewrites of a codelet's compute: numba's literal typing, and HALF rounding on store.

Both work on the function's AST and keep its file and line numbers, so tracebacks and
breakpoint() still point at the learner's own code.
"""
from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np

from ..machine.kernels import to_half

def _i64_range(*args):
    return (np.int64(i) for i in range(*(int(a) for a in args)))


HELPERS = {"_ipl_f64": np.float64, "_ipl_i64": np.int64, "_ipl_range": _i64_range,
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


def rewritten_tree(fn, literals: bool, half_fields: set):
    """(module AST of fn's source with the rewrites, its file name), or None if the source is
    not available (or fn is a closure, whose free variables a re-compile would lose)."""
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError):
        return None
    if fn.__code__.co_freevars:
        return None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    tree.body[0].decorator_list = []
    if half_fields:
        tree = _HalfStores(half_fields).visit(tree)
    if literals:
        tree = _NumbaLiterals().visit(tree)
    tree = ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, first - 1)
    return tree, filename


def rewrite(fn, literals: bool, half_fields: set):
    """fn re-compiled from its source with the given rewrites; same file and line numbers."""
    if not literals and not half_fields:
        return fn
    found = rewritten_tree(fn, literals, half_fields)
    if found is None:
        return fn
    tree, filename = found
    ns = dict(fn.__globals__, **HELPERS)
    exec(compile(tree, filename, "exec"), ns)
    return ns[fn.__name__]


def half_fields(cls) -> set:
    """Attribute names of a codelet's HALF fields that it writes."""
    return {f.attr for f in cls.fields if f.writes and f.dtype.rounds_to_half}
