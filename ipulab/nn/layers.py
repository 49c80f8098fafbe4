"""Layers with PyTorch's names, arguments, weight layouts and default initialisation.

A layer is a description: shapes and host-side initial weights. The Trainer turns it into
graph operations through two methods,

    forward(b, x)          -> y             (b: a build.LayerBuild: graph, seq, weights, ...)
    backward(b, dy)        -> dx or None    (gradients of its weights go to b.grads)

which only call PopLibs-like operations (poplin, popops, popnn, poprand): every number is
computed by codelets on tiles. Weights are numpy arrays in PyTorch layout: Conv2d.weight is
(out_channels, in_channels, kh, kw), Linear.weight is (out_features, in_features).

Conv2d and Linear fold their bias into their matrix product (the "bias trick"): the weights
get the bias as one more column and the patches (or inputs) one more row (column) of ones, so
one product computes y = w x + b, and in the backward pass the weight-gradient product gives
the bias gradient too (its last column is the sum of dL/dy over the batch and positions). A
ReLU right after them is one popops map on the product's output.

PyTorch's default initialisation, seeded: Conv2d and Linear draw weight and bias from
U(-1/sqrt(fan_in), 1/sqrt(fan_in)) -- what kaiming_uniform_(a=sqrt(5)) gives for the weight
and what torch uses for the bias -- with fan_in = in_channels * kh * kw or in_features.
"""
from __future__ import annotations

import math

import numpy as np

from .. import poplin, popnn, poprand, poputil
from ..errors import GraphError
from ..poplar import concat


def _window_output(layer, shape) -> tuple[int, int]:
    """(ho, wo) of a Conv2d or pooling layer on one (c, h, w) sample; GraphError if the kernel
    does not fit."""
    (kh, kw), (sh, sw), (ph, pw) = layer.kernel_size, layer.stride, layer.padding
    ho = poputil.window_output(shape[1], kh, sh, ph)
    wo = poputil.window_output(shape[2], kw, sw, pw)
    if ho < 1 or wo < 1:
        raise GraphError(f"{layer!r}: the kernel does not fit a {shape[1]}x{shape[2]} input")
    return ho, wo


def _positive(v, what: str, layer: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise GraphError(f"{layer}: {what} must be a positive int, not {v!r}")
    return int(v)


def _fmt(pair) -> str:
    return str(pair[0]) if pair[0] == pair[1] else str(tuple(pair))


class Layer:
    """Base of every layer. Subclasses with weights list them in `param_names`; a first layer
    that takes integer token ids (nn.Embedding) sets takes_tokens."""

    param_names: tuple = ()
    buffer_names: tuple = ()
    takes_tokens = False

    def param_shapes(self) -> dict:
        """{name: shape} of the layer's weights, in state_dict order."""
        return {}

    def buffer_shapes(self) -> dict:
        """{name: shape} of its buffers: state without gradients (BatchNorm2d's running ones)."""
        return {}

    def init_buffers(self) -> dict:
        return {}

    def state_shapes(self) -> dict:
        """{name: shape} of weights and buffers in torch's state_dict order."""
        return {**self.param_shapes(), **self.buffer_shapes()}

    def init_params(self, rng: np.random.Generator) -> dict:
        """Fresh weights (float32, PyTorch layout) drawn from rng."""
        return {}

    def output_shape(self, shape: tuple) -> tuple:
        """The shape of one sample after this layer, given one sample's shape before it."""
        return tuple(shape)

    def forward(self, b, x):
        raise NotImplementedError

    def backward(self, b, dy):
        raise NotImplementedError

    @property
    def fuses_relu(self) -> bool:
        """Whether a ReLU right after this layer is folded into its forward map."""
        return False

    @property
    def uses_dropout(self) -> bool:
        """Whether training draws Dropout masks (the step then needs a seed)."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _uniform(rng, shape, fan_in: int) -> np.ndarray:
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def _ones(b, shape, dtype, name: str):
    """The constant of ones (the row or column a folded bias multiplies), shared by every
    layer, micro-batch and recomputation on the graph that needs this shape."""
    return poputil.shared_constant(b.graph, dtype, shape, 1.0, name)


def _relu(b, y, name: str):
    """ReLU of y when one is folded into this layer (popnn.non_linearity), else y."""
    return popnn.non_linearity(b.graph, "relu", y, b.seq, name) if b.relu else y


def _relu_grad(b, y, dy, name: str):
    """dL/d(pre-activation) of a folded ReLU, from its output y (as PopLibs): dy where y > 0."""
    if not b.relu:
        return dy
    return popnn.non_linearity_input_gradient(b.graph, "relu", y, dy, b.seq, name)


class Conv2d(Layer):
    """torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True)."""

    param_names = ("weight", "bias")

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 bias: bool = True):
        what = "Conv2d"
        self.in_channels = _positive(in_channels, "in_channels", what)
        self.out_channels = _positive(out_channels, "out_channels", what)
        self.kernel_size = poputil.pair(kernel_size, "kernel_size", what)
        self.stride = poputil.pair(stride, "stride", what)
        self.padding = poputil.pair(padding, "padding", what)
        if min(self.kernel_size + self.stride) < 1 or min(self.padding) < 0:
            raise GraphError(f"Conv2d: kernel_size and stride must be >= 1 and padding >= 0, "
                             f"not {kernel_size!r}, {stride!r}, {padding!r}")
        self.bias = bool(bias)
        if not self.bias:
            self.param_names = ("weight",)

    def param_shapes(self) -> dict:
        shapes = {"weight": (self.out_channels, self.in_channels) + self.kernel_size}
        if self.bias:
            shapes["bias"] = (self.out_channels,)
        return shapes

    def init_params(self, rng) -> dict:
        fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
        out = {"weight": _uniform(rng, self.param_shapes()["weight"], fan_in)}
        if self.bias:
            out["bias"] = _uniform(rng, (self.out_channels,), fan_in)
        return out

    def output_shape(self, shape):
        if len(shape) != 3 or shape[0] != self.in_channels:
            raise GraphError(f"{self!r} takes samples of shape (channels={self.in_channels}, "
                             f"height, width), not {tuple(shape)}")
        return (self.out_channels, *_window_output(self, shape))

    @property
    def fuses_relu(self) -> bool:
        return True

    def forward(self, b, x):
        g = b.graph
        n = x.shape[0]
        o, c, kh, kw = b.param("weight").shape
        _, ho, wo = self.output_shape(x.shape[1:])
        # im2col as a view of x (poplin's lowering of conv2d), the bias folded in
        cols = poplin.conv_patches(g, x, kh, kw, self.stride, self.padding, b.name("patches"))
        w = b.param("weight").reshape([o, c * kh * kw])
        if self.bias:
            cols = concat([cols, _ones(b, [1, n * ho * wo], x.dtype, b.name("ones"))], 0)
            w = concat([w, b.param("bias").reshape([o, 1])], 1)
        out = poplin.mat_mul(g, w, cols, b.seq, name=b.name("conv"))      # (o, n*ho*wo)
        y = _relu(b, out.reshape([o, n, ho, wo]).dim_shuffle([1, 0, 2, 3]), b.name("relu"))
        b.save(x=x, cols=cols, y=y)
        return y

    def backward(self, b, dy):
        g, seq = b.graph, b.seq
        x, cols, w = b.saved("x"), b.saved("cols"), b.param("weight")
        dy = _relu_grad(b, b.saved("y"), dy, b.name("relu_grad"))
        n, o, ho, wo = dy.shape
        ckk = w.num_elements() // o
        # one product gives the weight gradient and, against the row of ones, the bias's
        dw = poplin.mat_mul(g, dy.dim_shuffle([1, 0, 2, 3]).reshape([o, n * ho * wo]),
                            cols.transpose(), seq, name=b.name("weight_grad"))
        b.grad("weight", dw.slice(0, ckk, 1).reshape(list(w.shape)))
        if self.bias:
            b.grad("bias", dw[:, ckk])
        if not b.need_dx:
            return None
        return poplin.conv2d_backward_input(g, dy, w, x.shape, seq, self.stride, self.padding,
                                            name=b.name("input_grad"))

    def __repr__(self) -> str:
        extra = "" if self.stride == (1, 1) else f", stride={_fmt(self.stride)}"
        extra += "" if self.padding == (0, 0) else f", padding={_fmt(self.padding)}"
        extra += "" if self.bias else ", bias=False"
        return (f"Conv2d({self.in_channels}, {self.out_channels}, "
                f"kernel_size={_fmt(self.kernel_size)}{extra})")


class Linear(Layer):
    """torch.nn.Linear(in_features, out_features, bias=True): y = x @ weight.T + bias, on the
    last dimension of x (samples of shape (in_features,) or (..., in_features))."""

    param_names = ("weight", "bias")

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        self.in_features = _positive(in_features, "in_features", "Linear")
        self.out_features = _positive(out_features, "out_features", "Linear")
        self.bias = bool(bias)
        if not self.bias:
            self.param_names = ("weight",)

    def param_shapes(self) -> dict:
        shapes = {"weight": (self.out_features, self.in_features)}
        if self.bias:
            shapes["bias"] = (self.out_features,)
        return shapes

    def init_params(self, rng) -> dict:
        out = {"weight": _uniform(rng, (self.out_features, self.in_features), self.in_features)}
        if self.bias:
            out["bias"] = _uniform(rng, (self.out_features,), self.in_features)
        return out

    def output_shape(self, shape):
        if len(shape) < 1 or shape[-1] != self.in_features:
            hint = " (add nn.Flatten() before it)" if len(shape) > 1 else ""
            raise GraphError(f"{self!r} takes samples of {self.in_features} features, not of "
                             f"shape {tuple(shape)}{hint}")
        return (*shape[:-1], self.out_features)

    @property
    def fuses_relu(self) -> bool:
        return True

    def forward(self, b, x):
        """On the last dimension, as torch: [N, in] -> [N, out], or [N, ..., in] through a
        [rows, in] view."""
        lead = x.shape[:-1]
        if x.rank != 2:
            x = x.reshape([int(np.prod(lead)), self.in_features])
        w = b.param("weight")
        if self.bias:     # [x, 1] @ [w, b].T: the bias folded into the product
            x = concat([x, _ones(b, [x.shape[0], 1], x.dtype, b.name("ones"))], 1)
            bias = b.param("bias")
            w = concat([w, bias.reshape([bias.num_elements(), 1])], 1)
        y = poplin.mat_mul(b.graph, x, w.transpose(), b.seq, name=b.name("matmul"))
        y = _relu(b, y, b.name("relu"))
        b.save(x=x, y=y, lead=lead)
        return y if len(lead) == 1 else y.reshape([*lead, self.out_features])

    def backward(self, b, dy):
        g, seq = b.graph, b.seq
        x, w, lead = b.saved("x"), b.param("weight"), b.saved("lead")
        if dy.rank != 2:
            dy = dy.reshape([x.shape[0], self.out_features])
        dy = _relu_grad(b, b.saved("y"), dy, b.name("relu_grad"))
        dw = poplin.mat_mul(g, dy.transpose(), x, seq, name=b.name("weight_grad"))
        b.grad("weight", dw.slice(0, self.in_features, 1))
        if self.bias:
            b.grad("bias", dw[:, self.in_features])
        if not b.need_dx:
            return None
        dx = poplin.mat_mul(g, dy, w, seq, name=b.name("input_grad"))
        return dx if len(lead) == 1 else dx.reshape([*lead, self.in_features])

    def __repr__(self) -> str:
        return (f"Linear(in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias})")


class ReLU(Layer):
    """torch.nn.ReLU(). After a Conv2d or Linear it is folded into their bias map."""

    def forward(self, b, x):
        y = popnn.non_linearity(b.graph, "relu", x, b.seq, b.name("relu"))
        b.save(y=y)
        return y

    def backward(self, b, dy):
        return popnn.non_linearity_input_gradient(b.graph, "relu", b.saved("y"), dy, b.seq,
                                                  b.name("relu_grad"))


class _Pool2d(Layer):
    kind = ""

    def __init__(self, kernel_size, stride=None, padding=0):
        what = type(self).__name__
        self.kernel_size = poputil.pair(kernel_size, "kernel_size", what)
        self.stride = self.kernel_size if stride is None else poputil.pair(stride, "stride", what)
        self.padding = poputil.pair(padding, "padding", what)
        if min(self.kernel_size + self.stride) < 1 or min(self.padding) < 0 or \
                2 * self.padding[0] > self.kernel_size[0] or \
                2 * self.padding[1] > self.kernel_size[1]:
            raise GraphError(f"{what}: kernel_size and stride must be >= 1 and padding at most "
                             f"half the kernel, not {kernel_size!r}, {stride!r}, {padding!r}")

    def output_shape(self, shape):
        if len(shape) != 3:
            raise GraphError(f"{self!r} takes samples of shape (channels, height, width), not "
                             f"{tuple(shape)}")
        return (shape[0], *_window_output(self, shape))

    def forward(self, b, x):
        y = popnn.pooling.pool(b.graph, self.kind, x, self.kernel_size, self.stride,
                               self.padding, b.seq, b.name(f"{self.kind}_pool"))
        b.save(x=x, y=y)
        return y

    def backward(self, b, dy):
        x, y = b.saved("x"), b.saved("y")
        if self.kind == "max":
            return popnn.pooling.pool_input_gradient(
                b.graph, "max", x, y, dy, self.kernel_size, self.stride, self.padding, b.seq,
                b.name("max_pool_grad"))
        return popnn.pooling.pool_input_gradient(
            b.graph, "avg", x.shape, None, dy, self.kernel_size, self.stride, self.padding,
            b.seq, b.name("avg_pool_grad"))

    def __repr__(self) -> str:
        extra = "" if self.stride == self.kernel_size else f", stride={_fmt(self.stride)}"
        extra += "" if self.padding == (0, 0) else f", padding={_fmt(self.padding)}"
        return f"{type(self).__name__}(kernel_size={_fmt(self.kernel_size)}{extra})"


class MaxPool2d(_Pool2d):
    """torch.nn.MaxPool2d(kernel_size, stride=None, padding=0); stride defaults to the kernel.
    The gradient goes to the first maximum of each window."""

    kind = "max"


class AvgPool2d(_Pool2d):
    """torch.nn.AvgPool2d(kernel_size, stride=None, padding=0) (padding counts in the mean,
    as PyTorch's count_include_pad=True)."""

    kind = "avg"


class Flatten(Layer):
    """torch.nn.Flatten(): (n, c, h, w) -> (n, c*h*w), a view (nothing moves)."""

    def output_shape(self, shape):
        return (int(np.prod(shape)),)

    def forward(self, b, x):
        b.save(shape=x.shape)
        return x.reshape([x.shape[0], int(np.prod(x.shape[1:]))])

    def backward(self, b, dy):
        return dy.reshape(list(b.saved("shape")))


class Dropout(Layer):
    """torch.nn.Dropout(p=0.5): in training, each element is zeroed with probability p and the
    rest scaled by 1 / (1 - p); in evaluation it passes x through. The masks come from
    poprand on the tiles, from the Trainer's seed and the step number, so a run is repeatable."""

    def __init__(self, p: float = 0.5):
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise GraphError(f"Dropout: p must be a probability in [0, 1], not {p!r}")
        self.p = float(p)

    @property
    def uses_dropout(self) -> bool:
        return self.p > 0

    def forward(self, b, x):
        if not b.train or self.p == 0.0:
            return x
        y, mask = poprand.dropout(b.graph, x, self.p, b.seed, b.seq, b.name("dropout"),
                                  seed_modifier=b.seed_modifier)
        b.save(mask=mask)
        return y

    def backward(self, b, dy):
        if self.p == 0.0:
            return dy
        return poprand.dropout_input_gradient(b.graph, dy, b.saved("mask"), self.p, b.seq,
                                              b.name("dropout_grad"))

    def __repr__(self) -> str:
        return f"Dropout(p={self.p})"
