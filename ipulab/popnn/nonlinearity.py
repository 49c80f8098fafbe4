"""Non-linearities and their gradients (PopLibs' popnn::nonLinearity*), as popops expressions.

The element-wise ones are ONE popops.map each (one generated codelet, work where the data
lives). Softmax over the last dimension is built from popops too:

    softmax          e = exp(x);            s = reduce_add(e, last);  y = e / s
    softmax_stable   m = reduce_max(x, last); e = exp(x - m); s = reduce_add(e); y = e / s

GELU is exact, as PyTorch's default (nn.GELU()); "gelu_tanh" is the tanh approximation
(PyTorch's approximate="tanh", and what PopLibs' GELU computes); on HALF data the exact one
is computed in float32 and rounded once:
    gelu(x)      = 0.5 x (1 + erf(x / sqrt(2)))
    gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))

Gradients follow PopLibs: they are computed from the forward OUTPUT `out` for relu, sigmoid,
tanh and both softmaxes (relu' = out > 0, sigmoid' = out (1 - out), tanh' = 1 - out^2, softmax:
out * (grad - sum(grad * out, last))). GELU's derivative needs the input, so for both GELUs pass
the forward INPUT as `act`:
    gelu'(x) = 0.5 (1 + erf(x / sqrt(2))) + x exp(-x^2 / 2) / sqrt(2 pi)
"""
from __future__ import annotations

import enum
import math

from ..errors import GraphError
from ..poplar import FLOAT, HALF, Tensor
from ..poplar import program as prog
from .. import popops
from ..popops import expr as E
from ..popops.expr import _1, _2, _3
from ._common import check_float

GELU_A = 0.044715
GELU_C = math.sqrt(2.0 / math.pi)
INV_SQRT2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


class NonLinearityType(enum.Enum):
    """PopLibs' popnn::NonLinearityType (the ones ipulab has)."""

    RELU = "relu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"
    SOFTMAX = "softmax"
    SOFTMAX_STABLE = "softmax_stable"

    @property
    def is_softmax(self) -> bool:
        return self in (NonLinearityType.SOFTMAX, NonLinearityType.SOFTMAX_STABLE)

    @classmethod
    def parse(cls, nl) -> "NonLinearityType":
        """From itself or its name in any case ("relu", "SOFTMAX_STABLE", "softmax-stable")."""
        try:
            return cls(nl.strip().lower().replace("-", "_") if isinstance(nl, str) else nl)
        except (ValueError, TypeError):
            names = ", ".join(m.value for m in cls)
            raise GraphError(f"unknown non-linearity {nl!r}; use popnn.NonLinearityType or one "
                             f"of: {names}") from None


def _gelu_inner(x):
    """tanh(sqrt(2/pi) (x + 0.044715 x^3)), the expression gelu_tanh and its gradient share."""
    return E.tanh(GELU_C * (x + GELU_A * x * x * x))


FORWARD = {
    NonLinearityType.RELU: E.maximum(_1, 0),
    NonLinearityType.SIGMOID: E.sigmoid(_1),
    NonLinearityType.TANH: E.tanh(_1),
    NonLinearityType.GELU: 0.5 * _1 * (1 + E.erf(_1 * INV_SQRT2)),
    NonLinearityType.GELU_TANH: 0.5 * _1 * (1 + _gelu_inner(_1)),
}

# _1 is `act` (the forward output; the input for the GELUs), _2 the gradient of the output
_T = _gelu_inner(_1)
GRADIENT = {
    NonLinearityType.RELU: E.select(_2, 0, _1 > 0),
    NonLinearityType.SIGMOID: _2 * _1 * (1 - _1),
    NonLinearityType.TANH: _2 * (1 - _1 * _1),
    NonLinearityType.GELU: _2 * (0.5 * (1 + E.erf(_1 * INV_SQRT2))
                                 + _1 * E.exp(-0.5 * _1 * _1) * INV_SQRT_2PI),
    NonLinearityType.GELU_TANH: _2 * (0.5 * (1 + _T) + 0.5 * _1 * (1 - _T * _T) * GELU_C
                                      * (1 + 3 * GELU_A * _1 * _1)),
}


def _expression(table, nl, dtype):
    """nl's expression from table; the exact GELU on HALF data is computed in float32 and
    rounded once (its erf and exp would otherwise be rounded to half at every step)."""
    e = table[nl]
    if nl is NonLinearityType.GELU and dtype == HALF:
        floats = {n: E.cast(E.placeholder(n), FLOAT) for n in e.placeholders()}
        return E.cast(E.substitute(e, floats), HALF)
    return e


def _check(graph, t, seq, what):
    if not isinstance(t, Tensor):
        raise GraphError(f"{what}: expected a tensor, got {type(t).__name__}")
    graph.check_tensor(t)
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    check_float(t, what)


def _last_dim(graph, t, op, seq, name):
    """reduce over t's last dimension, shaped to broadcast back against t."""
    r = popops.reduce(graph, t, [t.rank - 1], op, seq, name)
    return r.reshape(list(t.shape[:-1]) + [1])


def _softmax(graph, nl, t, seq, name, in_place):
    if t.rank == 0:
        raise GraphError(f"{name}: softmax is over the last dimension; '{t.name}' is a scalar")
    if nl is NonLinearityType.SOFTMAX_STABLE:
        m = _last_dim(graph, t, "max", seq, f"{name}/max")
        expression, operands = E.exp(_1 - _2), [t, m]
    else:
        expression, operands = E.exp(_1), [t]
    if in_place:
        popops.map_in_place(graph, expression, operands, seq, f"{name}/exp")
        e = t
    else:
        e = popops.map(graph, expression, operands, seq, f"{name}/exp")
    s = _last_dim(graph, e, "add", seq, f"{name}/sum")
    popops.map_in_place(graph, _1 / _2, [e, s], seq, f"{name}/normalise")
    return e


def non_linearity(graph, nl, t, seq, name: str = "") -> Tensor:
    """A new tensor: nl ("relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "softmax",
    "softmax_stable" or a NonLinearityType) applied to t, mapped like t. Softmaxes are over the
    last dimension."""
    nl = NonLinearityType.parse(nl)
    name = name or nl.value
    _check(graph, t, seq, f"non_linearity '{name}'")
    if nl.is_softmax:
        return _softmax(graph, nl, t, seq, name, in_place=False)
    return popops.map(graph, _expression(FORWARD, nl, t.dtype), [t], seq, name)


def non_linearity_in_place(graph, nl, t, seq, name: str = "") -> None:
    """t = nl(t), where t lives."""
    nl = NonLinearityType.parse(nl)
    name = name or f"{nl.value}_in_place"
    _check(graph, t, seq, f"non_linearity_in_place '{name}'")
    if nl.is_softmax:
        _softmax(graph, nl, t, seq, name, in_place=True)
    else:
        popops.map_in_place(graph, _expression(FORWARD, nl, t.dtype), [t], seq, name)


def non_linearity_input_gradient(graph, nl, act, out_grad, seq, name: str = "") -> Tensor:
    """The gradient with respect to the non-linearity's input, given the gradient of its
    output, mapped like act.

    act is the forward OUTPUT for relu, sigmoid, tanh, softmax and softmax_stable (as in
    PopLibs), and the forward INPUT for gelu and gelu_tanh (their derivative is not a function
    of their output).
    """
    nl = NonLinearityType.parse(nl)
    name = name or f"{nl.value}_grad"
    what = f"non_linearity_input_gradient '{name}'"
    for t in (act, out_grad):
        _check(graph, t, seq, what)
    if act.shape != out_grad.shape or act.dtype != out_grad.dtype:
        raise GraphError(f"{what}: act '{act.name}' {list(act.shape)} {act.dtype} and out_grad "
                         f"'{out_grad.name}' {list(out_grad.shape)} {out_grad.dtype} must match")
    if not nl.is_softmax:
        return popops.map(graph, _expression(GRADIENT, nl, act.dtype), [act, out_grad], seq,
                          name)
    if act.rank == 0:
        raise GraphError(f"{what}: softmax is over the last dimension; '{act.name}' is a scalar")
    # dL/dx = y * (g - sum(g * y, last))
    dot = popops.map(graph, _1 * _2, [out_grad, act], seq, f"{name}/product")
    s = _last_dim(graph, dot, "add", seq, f"{name}/sum")
    return popops.map(graph, _1 * (_2 - _3), [act, out_grad, s], seq, name)

