"""One element-wise codelet per expression: tree -> compute source -> a Vertex class.

The generated compute loops over its output once; inside the loop every node of the tree is
one line `t<k> = ...` (common subexpressions once), every value converted explicitly to its
type so numba and the python mode compute exactly the same thing. HALF values are computed in
float32 and rounded to half after every operation, as NumPy does with float16.

Cycle estimate (worker-issue cycles, [MODEL]): 10 to enter the vertex, then per element one
cycle per input load and one for the store, plus each operation's cost (OP_CYCLES: 1 for
arithmetic, comparisons and selects, more for division and the float functions); FLOAT output
runs 2 elements per vector, HALF 4 (64-bit SIMD), other types 1:
    cycles = 10 + ceil(n * per_element / width)
"""
from __future__ import annotations

from ..errors import GraphError
from ..poplar import types as T
from . import exprtypes as X
from .codegen import build_codelet, convert, literal, typed

OP_CYCLES = {"div": 4, "idiv": 16, "pow": 20, "exp": 8, "log": 8, "sqrt": 6, "tanh": 10,
             "sigmoid": 10, "erf": 12}   # every other operation: 1
VECTOR_WIDTH = {T.FLOAT: 2, T.HALF: 4}
ENTRY_CYCLES = 10


class _Val:
    """An emitted value: source code (a name or literal) and its type; weak constants keep
    their value until an operation decides their type."""

    __slots__ = ("code", "ty", "value")

    def __init__(self, code, ty, value=None):
        self.code, self.ty, self.value = code, ty, value

    def as_(self, dtype) -> str:
        if self.code is None:
            return literal(self.value, dtype)
        return convert(self.code, self.ty.dtype, dtype)


_ARITH = {"add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}", "neg": "-{a}",
          "abs": "abs({a})", "square": "{a} * {a}"}
_COMPARE = {"lt": "<", "gt": ">", "le": "<=", "ge": ">=", "eq": "==", "ne": "!="}
_FLOAT_FN = {"exp": "f_exp", "log": "f_log", "sqrt": "f_sqrt", "tanh": "f_tanh",
             "sigmoid": "f_sigmoid", "erf": "f_erf"}


class _Emitter:
    """Writes the loop body for an expression whose placeholders are read by `reads`, and
    notes the first float32 exp computed from the inputs by arithmetic alone (`exp`: its line
    and its argument), which map_codelet can compute in a loop of its own."""

    def __init__(self, reads: dict, where: str):
        self.reads, self.where = reads, where   # placeholder n -> (code, dtype)
        self.lines: list[str] = []
        self.memo: dict[str, _Val] = {}
        self.cycles = 0
        self.cones: dict[str, list[int]] = {}   # temp -> the lines it needs, itself included
        self.called: set[str] = set()          # temps that need a float function's call
        self.exp: tuple[int, str] | None = None

    def _temp(self, code: str, dtype, cost_key: str, args=()) -> _Val:
        name = f"t{len(self.lines)}"
        needs = {len(self.lines)}.union(*(self.cones.get(a.code, ()) for a in args))
        self.cones[name] = sorted(needs)
        after_call = any(a.code in self.called for a in args)
        if cost_key == "exp" and dtype is T.FLOAT and self.exp is None and not after_call:
            self.exp = (len(self.lines), args[0].as_(T.FLOAT))
        if after_call or cost_key in _FLOAT_FN or cost_key == "pow":
            self.called.add(name)
        self.lines.append(f"{name} = {code}")
        self.cycles += OP_CYCLES.get(cost_key, 1)
        return _Val(name, X.Ty.of(dtype))

    def visit(self, node) -> _Val:
        key = str(node)
        if key not in self.memo:
            self.memo[key] = self._visit(node)
        return self.memo[key]

    def _visit(self, node) -> _Val:
        op, args = node.op, node.args
        if op == "ph":
            code, dtype = self.reads[node.value]
            return _Val(code, X.Ty.of(dtype))
        if op == "const":
            value, dtype = node.value
            if dtype is None:
                return _Val(None, X.Ty.weak(value), value)
            return _Val(literal(value, dtype), X.Ty.of(dtype))
        vals = [self.visit(a) for a in args]
        if op == "cast":
            return self._temp(vals[0].as_(node.value), node.value, "cast", vals)
        if op == "select":
            o = X.promote(vals[0].ty, vals[1].ty).resolve()
            a, b, c = vals[0].as_(o), vals[1].as_(o), vals[2].as_(T.BOOL)
            return self._temp(f"({a} if {c} else {b})", o, op, vals)
        common = vals[0].ty if len(vals) == 1 else X.promote(vals[0].ty, vals[1].ty)
        o = X.operand_type(op, common, self.where)
        a = vals[0].as_(o)
        b = vals[1].as_(o) if len(vals) > 1 else None
        return self._temp(*self._code(op, o, a, b), vals)

    @staticmethod
    def _code(op, o, a, b):
        """(code, result type, cost key) of op on operands a, b already of type o."""
        if op in _ARITH:
            return typed(_ARITH[op].format(a=a, b=b), o), o, op
        if op == "div":
            if o in (T.FLOAT, T.HALF):
                return typed(f"{a} / {b}", o), o, op
            return typed(f"np.int64(i_div({a}, {b}))", o), o, "idiv"
        if op in _COMPARE:
            return f"({a} {_COMPARE[op]} {b})", T.BOOL, op
        if op in ("max", "min"):   # nan wins, as numpy.maximum / minimum
            cmp = ">" if op == "max" else "<"
            return f"({a} if {a} {cmp} {b} or {a} != {a} else {b})", o, op
        if op in ("and", "or"):
            sym = "&" if op == "and" else "|"
            return typed(f"{a} {sym} {b}", o), o, op
        if op == "not":
            return (f"np.bool_(not {a})" if o is T.BOOL else typed(f"~{a}", o)), o, op
        if op == "pow":
            return typed(f"f_pow(np.float64({a}), np.float64({b}))", o), o, op
        if op in _FLOAT_FN:
            return typed(f"{_FLOAT_FN[op]}(np.float64({a}))", o), o, op
        raise GraphError(f"unknown expression operation {op!r}")


def result_dtype(expr, dtypes: dict, where: str):
    """The type an expression produces when placeholder n has type dtypes[n]."""
    em = _Emitter({n: (f"_{n}", d) for n, d in dtypes.items()}, where)
    return em.visit(expr).ty.resolve()


def _exp_first(em: _Emitter, fetch: list) -> tuple[list, list]:
    """(lines before the main loop, the main loop's lines) that compute the expression's
    float32 exp first, into out, in a loop of arithmetic that numba vectorises (f32_exp,
    float32_exp.py), then every exp again exactly (f_exp) if one was not pinned down; the main
    loop reads it from out. Its other float functions' calls stay in the main loop."""
    k, arg = em.exp
    name = f"t{k}"
    cone = [em.lines[j] for j in em.cones[name][:-1]]
    first = ["unsure = False", "for i in range(len(out)):"]
    first += [f"    {line}" for line in fetch + cone]
    first += [f"    {name} = f32_exp({arg})", f"    unsure |= {name} != {name}",
              f"    out[i] = {name}", "if unsure:   # about 2 in 100,000 near 1 are left to f_exp",
              "    for i in range(len(out)):"]
    first += [f"        {line}" for line in fetch + cone + [em.lines[k].replace(name, "out[i]", 1)]]
    lines = list(em.lines)
    lines[k] = f"{name} = out[i]"
    return first, lines


def map_codelet(expr, inputs: dict, out_dtype, in_place: bool, where: str = "map"):
    """The codelet computing expr element by element.

    expr uses placeholders numbered as its fields: inputs maps n -> (dtype, scalar) for each
    Input field `in<n>`, and with in_place, _1 is the InOut field `out` (read and written).
    A scalar input has one element, read once and broadcast over the output.
    """
    reads, pre, fields = {}, [], []
    if in_place:
        reads[1] = ("x1", out_dtype)
    out_field = "InOut" if in_place else "Output"
    fields.append(f"    out = {out_field}(Vector[{out_dtype.name}])")
    loads = 1 if in_place else 0
    for n in sorted(inputs):
        dtype, scalar = inputs[n]
        fields.append(f"    in{n} = Input(Vector[{dtype.name}])")
        if scalar:
            pre.append(f"s{n} = in{n}[0]")
            reads[n] = (f"s{n}", dtype)
        else:
            reads[n] = (f"x{n}", dtype)
            loads += 1
    em = _Emitter(reads, where)
    root = em.visit(expr)
    fetch = [f"x{n} = in{n}[i]" for n in sorted(inputs) if not inputs[n][1]]
    if in_place:
        fetch.insert(0, "x1 = out[i]")
    lines, first = em.lines, []
    if em.exp is not None and out_dtype is T.FLOAT and not in_place:
        first, lines = _exp_first(em, fetch)
    loop = fetch + lines + [f"out[i] = {root.as_(out_dtype)}"]
    per_element = loads + 1 + em.cycles
    width = VECTOR_WIDTH.get(out_dtype, 1)
    params = ", ".join(["out"] + [f"in{n}" for n in sorted(inputs)])
    types = ",".join(("*" if s else "") + d.name for d, s in inputs.values())
    kind = "MapInPlace" if in_place else "Map"
    text = str(expr)
    text = text if len(text) <= 60 else text[:57] + "..."
    body = "".join(f"        {line}\n" for line in pre + first)
    body += "        for i in range(len(out)):\n"
    body += "\n".join(f"            {line}" for line in loop)
    source = (
        "class Codelet(Vertex):\n"
        f'    """{kind}: out = {expr} ({types or "-"} -> {out_dtype.name}), generated by '
        'ipulab.popops."""\n'
        + "\n".join(fields) + "\n\n"
        "    @staticmethod\n"
        f"    def compute({params}):\n{body}\n\n"
        "    @staticmethod\n"
        "    def cycle_estimate(out, **inputs):\n"
        f"        # {ENTRY_CYCLES} to enter, {per_element} cycles an element, {width} elements a "
        "vector\n"
        f"        return {ENTRY_CYCLES} + -(-out * {per_element} // {width})\n")
    name = f"{kind}[{text}]<{types + '->' if types else ''}{out_dtype.name}>"
    return build_codelet(name, source)
