"""Source code a submission sends to the judge (a codelet's compute, a generated map codelet),
checked before the judge defines anything from it.

Accepted: plain numeric code, the shape of a codelet. Loops, arithmetic, comparisons,
indexing, calls to a few builtins and to numpy and math functions by name; attributes only
from short allow-lists (np.float32, a.shape, ...). Refused: imports, names and attributes with
underscores in front (the way out of any restricted namespace), lambdas, with, try, global,
string formatting, and any numpy function that touches files. What is accepted is then
defined in a namespace holding only those names (restricted_exec), so it cannot reach the
judge's modules, files or processes.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import linecache
import math

import numpy as np

from ...errors import IpuLabError


class UnsafeCode(IpuLabError):
    """Source the judge refuses to define, naming the line and the construct."""


_NODES = (ast.Module, ast.Expr, ast.FunctionDef, ast.arguments, ast.arg, ast.Return,
          ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.If, ast.Break,
          ast.Continue, ast.Pass, ast.Raise, ast.Assert, ast.BinOp, ast.UnaryOp, ast.BoolOp,
          ast.Compare, ast.IfExp, ast.Call, ast.keyword, ast.Name, ast.Attribute,
          ast.Subscript, ast.Slice, ast.Constant, ast.Tuple, ast.List, ast.ListComp,
          ast.comprehension, ast.GeneratorExp, ast.Load, ast.Store, ast.operator, ast.unaryop, ast.boolop,
          ast.cmpop, ast.expr_context)
NUMPY = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
         "uint32", "uint64", "bool_", "intp", "zeros", "ones", "empty", "full", "zeros_like",
         "ones_like", "empty_like", "arange", "sqrt", "exp", "log", "log2", "log10", "log1p",
         "expm1", "tanh", "sinh", "cosh", "sin", "cos", "tan", "arctan", "arctan2", "arcsin",
         "arccos", "abs", "absolute", "fabs", "floor", "ceil", "trunc", "rint", "round",
         "minimum", "maximum", "fmin", "fmax", "isnan", "isinf", "isfinite", "sum", "prod",
         "dot", "argmax", "argmin", "max", "min", "mean", "sign", "where", "clip", "square",
         "power", "copysign", "fmod", "mod", "remainder", "nan", "inf", "pi", "e", "float_",
         "int_", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"}
MATH = {"sqrt", "exp", "log", "log2", "log10", "tanh", "sin", "cos", "tan", "atan", "floor",
        "ceil", "fabs", "isnan", "isinf", "inf", "nan", "pi", "e", "pow", "copysign", "erf",
        "trunc"}
VALUE_ATTRS = {"shape", "size", "ndim", "dtype", "T", "sum", "max", "min", "argmax", "argmin",
               "astype", "copy", "real", "imag", "item", "fill"}
BUILTINS = {"range", "len", "min", "max", "abs", "float", "int", "bool", "enumerate", "zip",
            "round", "print", "sum", "ValueError", "IndexError", "RuntimeError", "ZeroDivisionError",
            "NotImplementedError", "AssertionError", "TypeError", "ArithmeticError",
            "OverflowError", "staticmethod", "True", "False", "None"}
SAFE_BUILTINS = {name: getattr(builtins, name) for name in BUILTINS}
_PYTHON_BUILTINS = set(dir(builtins))
MODULES = {"np": NUMPY, "numpy": NUMPY, "math": MATH}


def _refuse(node, what: str):
    line = getattr(node, "lineno", "?")
    raise UnsafeCode(f"line {line}: {what} is not allowed in code the judge compiles")


class _Checker(ast.NodeVisitor):
    """Walks a tree and refuses anything outside the rules above."""

    def __init__(self, class_names=()):
        self.class_names = set(class_names)

    def generic_visit(self, node):
        if not isinstance(node, _NODES) and not (isinstance(node, ast.ClassDef)
                                                 and node.name in self.class_names):
            _refuse(node, type(node).__name__)
        super().generic_visit(node)

    def visit_Name(self, node):
        if node.id.startswith("__") or (node.id in _PYTHON_BUILTINS and node.id not in BUILTINS):
            _refuse(node, f"the name {node.id}")

    def visit_Attribute(self, node):
        base = node.value
        if isinstance(base, ast.Name) and base.id in MODULES:
            if node.attr not in MODULES[base.id]:
                _refuse(node, f"{base.id}.{node.attr}")
        elif node.attr not in VALUE_ATTRS:
            _refuse(node, f"the attribute .{node.attr}")
        self.visit(base)

    def visit_Constant(self, node):
        if not isinstance(node.value, (int, float, complex, bool, str, type(None))):
            _refuse(node, f"the constant {type(node.value).__name__}")

    def visit_FunctionDef(self, node):
        for d in node.decorator_list:
            if not (isinstance(d, ast.Name) and d.id == "staticmethod"):
                _refuse(node, "a decorator other than @staticmethod")
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            if not (isinstance(default, ast.Constant) or isinstance(default, ast.Tuple) and
                    all(isinstance(e, ast.Constant) for e in default.elts)):
                _refuse(node, "a default value that is not a constant")
        if node.returns is not None:
            _refuse(node, "a return annotation")
        self.generic_visit(node)


def _parse(source: str) -> ast.Module:
    if len(source) > 200_000:
        raise UnsafeCode(f"{len(source):,} characters of source, over the limit of 200,000")
    try:
        return ast.parse(source)
    except SyntaxError as e:
        raise UnsafeCode(f"line {e.lineno}: {e.msg}") from None


def restricted_exec(source: str, namespace: dict, label: str) -> dict:
    """Define source (already checked) in namespace with only the safe builtins; the source
    is registered with linecache so inspect.getsource and tracebacks show it."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    filename = f"<submitted {label} {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace["__builtins__"] = dict(SAFE_BUILTINS)
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def check_function_source(source: str, label: str, globals_: dict | None = None):
    """The function defined by source: one def (optionally @staticmethod), checked."""
    tree = _parse(source)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        raise UnsafeCode(f"{label}: expected the source of exactly one function (def ...)")
    _Checker().visit(tree)
    ns = {"np": np, "numpy": np, "math": math, **(globals_ or {})}
    fn = restricted_exec(source, ns, label)[tree.body[0].name]
    return fn.__func__ if isinstance(fn, staticmethod) else fn


def check_codelet_class_source(source: str) -> None:
    """A generated map codelet: one class `Codelet` of field declarations and static methods."""
    tree = _parse(source)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.ClassDef) or \
            tree.body[0].name != "Codelet":
        raise UnsafeCode("a generated codelet is one class named Codelet")
    cls = tree.body[0]
    if cls.keywords or not all(isinstance(b, ast.Name) and b.id in ("Vertex", "MultiVertex")
                               for b in cls.bases):
        raise UnsafeCode("a generated codelet derives from Vertex or MultiVertex only")
    _Checker(class_names=("Codelet",)).visit(tree)


def safe_globals(values: dict) -> dict:
    """The globals a submitted compute may use: numbers and numeric arrays only."""
    out = {}
    for name, value in (values or {}).items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
            raise UnsafeCode(f"{name!r} is not a global name")
        ok = isinstance(value, (bool, int, float, complex, np.number, np.bool_)) or (
            isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and value.nbytes <= 2**24)
        if not ok:
            raise UnsafeCode(f"the global {name} is a {type(value).__name__}: a codelet's compute "
                             "may use numbers and numeric arrays defined outside it, nothing else")
        out[name] = value
    return out
