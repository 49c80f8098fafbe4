"""Max and average pooling over NCHW tensors, and their input gradients (popnn::pooling).

    y = popnn.pooling.pool(g, "max", x, kernel=2, stride=2, padding=0, seq=seq)
    y = popnn.max_pool2d(g, x, 2, seq)                     # PyTorch-like: stride = kernel
    dx = popnn.pooling.pool_input_gradient(g, "max", x, y, dy, 2, 2, 0, seq)
    dx = popnn.max_pool2d_backward(g, x, y, dy, 2, seq)

kernel, stride and padding are an int or a (height, width) pair; padding is at most half the
kernel (as PyTorch), so every window holds at least one input element. Padding is never read:
max pooling treats it as -inf, average pooling divides by the kernel area (count_include_pad,
PyTorch's default) or by the elements inside (count_include_pad=False). No ceil mode.

Gradients: max pooling routes each pooled gradient to the FIRST position of its window (row by
row) holding the pooled value (ties go to the first; a nan max to the first nan); average
pooling spreads it equally over the window (divided as in the forward pass).

Placement (see _common): the pooled output is mapped row by row to the tile that holds the
middle of the input rows its windows start from, so the windows are mostly local; gradients are
mapped row by row like x. Each tile's rows are cut into at most one piece per worker, one
vertex each; input rows on other tiles come in through the exchange.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import GraphError
from ..poplar import INT, Regions, Tensor
from ..poplar import program as prog
from ..poputil import (map_rows, pair, row_owners, row_pieces, tile_constant, typed_variant,
                       vertex_constants, window_output)
from . import poolcodelets as pc
from ._common import check_float

POOL_TYPES = ("max", "avg")


def _pair(v, what: str) -> tuple[int, int]:
    return pair(v, what, "pooling")


@dataclass(frozen=True)
class Window:
    """The geometry of one pooling: input (n, c, h, w), kernel, stride, padding, output."""

    n: int
    c: int
    h: int
    w: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    include_pad: bool = True

    @staticmethod
    def of(x_shape, kernel, stride, padding, include_pad=True) -> "Window":
        x_shape = tuple(int(s) for s in x_shape)
        if len(x_shape) != 4:
            raise GraphError(f"pooling takes NCHW tensors (rank 4), not shape {list(x_shape)}")
        kh, kw = _pair(kernel, "kernel")
        sh, sw = _pair(kernel if stride is None else stride, "stride")
        ph, pw = _pair(padding, "padding")
        if min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0:
            raise GraphError(f"pooling: kernel and stride must be >= 1 and padding >= 0, got "
                             f"kernel {kernel!r}, stride {stride!r}, padding {padding!r}")
        if 2 * ph > kh or 2 * pw > kw:
            raise GraphError(f"pooling: padding {padding!r} is more than half the kernel "
                             f"{kernel!r}; a window could hold only padding")
        win = Window(*x_shape, kh, kw, sh, sw, ph, pw, bool(include_pad))
        if win.ho < 1 or win.wo < 1:
            raise GraphError(f"pooling: a {kh}x{kw} kernel does not fit the "
                             f"{x_shape[2]}x{x_shape[3]} input with padding {padding!r}")
        return win

    @property
    def ho(self) -> int:
        return window_output(self.h, self.kh, self.sh, self.ph)

    @property
    def wo(self) -> int:
        return window_output(self.w, self.kw, self.sw, self.pw)

    @property
    def out_shape(self) -> tuple:
        return (self.n, self.c, self.ho, self.wo)

    def geometry(self, kind: str) -> list[int]:
        """The codelets' geometry field (see poolcodelets) for "max" or "avg" pooling."""
        op = pc.MAX if kind == "max" else \
            pc.AVG_INCLUDE_PAD if self.include_pad else pc.AVG_EXCLUDE_PAD
        taps = [d for dy in range(self.kh) for dx in range(self.kw) for d in (dy, dx)]
        return [self.h, self.w, self.ho, self.wo, self.sh, self.sw, self.ph, self.pw, op] + taps

    def in_rows(self, r0, r1):
        """The global input rows [lo, hi) that pooled rows [r0, r1) read (arrays of runs)."""
        p0, oy0 = np.divmod(r0, self.ho)
        p1, oy1 = np.divmod(r1 - 1, self.ho)
        lo = p0 * self.h + np.maximum(0, oy0 * self.sh - self.ph)
        hi = p1 * self.h + np.minimum(self.h, oy1 * self.sh - self.ph + self.kh)
        return lo, hi

    def out_rows(self, a, b):
        """The global pooled rows [lo, hi) whose windows may touch input rows [a, b)."""
        pa, iya = np.divmod(a, self.h)
        pb, iyb = np.divmod(b - 1, self.h)
        lo = pa * self.ho + np.maximum(0, (iya + self.ph - self.kh) // self.sh + 1)
        hi = pb * self.ho + np.minimum(self.ho - 1, (iyb + self.ph) // self.sh) + 1
        lo = np.minimum(lo, self.n * self.c * self.ho)
        return lo, np.maximum(lo, hi)


def _check(graph, seq, what, *tensors):
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise GraphError(f"{what}: expected a tensor, got {type(t).__name__}")
        graph.check_tensor(t)
        check_float(t, what)
    if len({t.dtype for t in tensors}) > 1:
        raise GraphError(f"{what}: " + " and ".join(f"'{t.name}' is {t.dtype}" for t in tensors))


def _pool_type(pool_type) -> str:
    key = str(getattr(pool_type, "value", pool_type)).strip().lower()
    key = {"average": "avg", "mean": "avg"}.get(key, key)
    if key not in POOL_TYPES:
        raise GraphError(f"unknown pooling type {pool_type!r}; use 'max' or 'avg'")
    return key


def _emit(graph, kind, codelet, dtype, win: Window, owners, regions, seq, name):
    """One compute set: a vertex per piece of each tile's rows. regions(a, b) takes the row
    runs [a, b) of every piece (arrays) and gives the values of the `runs` field for each run
    (an array, one row per run) and {field: (tensor, begins, ends)} of its data regions."""
    cls = typed_variant(codelet, dtype, pc.DATA_FIELDS[codelet], "Half")
    work = row_pieces(graph, owners)
    if work.tile.size == 0:
        return
    geometry = tile_constant(graph, INT, win.geometry(kind), work.tile, f"{name}/geometry")
    values, fields = regions(work.begins, work.ends)
    runs = vertex_constants(graph, INT, values.ravel(), work.counts * values.shape[1],
                            work.tile, f"{name}/runs")
    conns = {"geometry": geometry.regions(work.tile), "runs": runs}
    conns.update({key: Regions(t, b, e, work.counts) for key, (t, b, e) in fields.items()})
    cs = graph.add_compute_set(name)
    graph.add_vertices(cs, cls, work.tile, conns)
    seq.add(prog.Execute(cs))


def pool(graph, pool_type, x, kernel, stride, padding, seq, name: str = "",
         count_include_pad: bool = True) -> Tensor:
    """A new (n, c, ho, wo) tensor: x (NCHW) max- or average-pooled ("max" | "avg").
    stride None means stride = kernel."""
    kind = _pool_type(pool_type)
    name = name or f"{kind}_pool"
    _check(graph, seq, f"pool '{name}'", x)
    win = Window.of(x.shape, kernel, stride, padding, count_include_pad)
    out = graph.add_variable(x.dtype, list(win.out_shape), f"{name}/out")
    if out.num_elements() == 0:
        return out
    xf, of = x.flatten(), out.flatten()
    x_owner = row_owners(graph, xf, win.w, f"pool '{name}'")
    r = np.arange(win.n * win.c * win.ho, dtype=np.int64)
    plane, oy = np.divmod(r, win.ho)
    centre = np.clip(oy * win.sh - win.ph + win.kh // 2, 0, win.h - 1)
    owners = x_owner[plane * win.h + centre]
    map_rows(graph, out, owners, win.wo)

    def regions(a, b):
        lo, hi = win.in_rows(a, b)
        return np.stack([a, lo], 1), {"in": (xf, lo * win.w, hi * win.w),
                                      "out": (of, a * win.wo, b * win.wo)}
    codelet = pc.MaxPool if kind == "max" else pc.AvgPool
    _emit(graph, kind, codelet, x.dtype, win, owners, regions, seq, name)
    return out


def pool_input_gradient(graph, pool_type, x, pooled, pooled_grad, kernel, stride, padding, seq,
                        name: str = "", count_include_pad: bool = True) -> Tensor:
    """The gradient with respect to pool's input x, given pooled_grad (the gradient of its
    output), as a new tensor shaped like x and mapped row by row like x.

    Max pooling needs the forward input x and output `pooled`. Average pooling needs neither:
    x may be its shape and pooled None (the result is then mapped like pooled_grad)."""
    kind = _pool_type(pool_type)
    name = name or f"{kind}_pool_grad"
    what = f"pool_input_gradient '{name}'"
    x_is_tensor = isinstance(x, Tensor)
    if kind == "max" and not (x_is_tensor and isinstance(pooled, Tensor)):
        raise GraphError(f"{what}: max pooling's gradient needs the forward input x and "
                         "output pooled as tensors")
    tensors = [pooled_grad] + ([x, pooled] if kind == "max" else [])
    _check(graph, seq, what, *tensors)
    x_shape = x.shape if x_is_tensor else tuple(int(s) for s in x)
    win = Window.of(x_shape, kernel, stride, padding, count_include_pad)
    for t in [pooled_grad] + ([pooled] if kind == "max" else []):
        if tuple(t.shape) != win.out_shape:
            raise GraphError(f"{what}: '{t.name}' is {list(t.shape)} but pooling "
                             f"{list(x_shape)} gives {list(win.out_shape)}")
    out = graph.add_variable(pooled_grad.dtype, list(x_shape), f"{name}/out")
    if out.num_elements() == 0:
        return out
    gf, of = pooled_grad.flatten(), out.flatten()
    if x_is_tensor:
        owners = row_owners(graph, x.flatten(), win.w, what)
    else:
        g_owner = row_owners(graph, gf, win.wo, what)
        plane, iy = np.divmod(np.arange(win.n * win.c * win.h, dtype=np.int64), win.h)
        owners = g_owner[plane * win.ho + np.clip((iy + win.ph) // win.sh, 0, win.ho - 1)]
    map_rows(graph, out, owners, win.w)

    def regions(a, b):
        g0, g1 = win.out_rows(a, b)
        fields = {"grad": (gf, g0 * win.wo, g1 * win.wo), "out": (of, a * win.w, b * win.w)}
        if kind == "avg":
            return np.stack([a, g0], 1), fields
        x0, x1 = win.in_rows(g0, g1)
        x0, x1 = np.where(g1 > g0, x0, a), np.where(g1 > g0, x1, a)
        fields["x"] = (x.flatten(), x0 * win.w, x1 * win.w)
        fields["pooled"] = (pooled.flatten(), g0 * win.wo, g1 * win.wo)
        return np.stack([a, g0, x0], 1), fields
    codelet = pc.MaxPoolGrad if kind == "max" else pc.AvgPoolGrad
    _emit(graph, kind, codelet, pooled_grad.dtype, win, owners, regions, seq, name)
    return out


def output_shape(x_shape, kernel, stride=None, padding=0) -> tuple:
    """(n, c, ho, wo) of pooling x_shape (NCHW), checking the parameters."""
    return Window.of(x_shape, kernel, stride, padding).out_shape


# --- PyTorch-like names ---------------------------------------------------------------------------
def max_pool2d(graph, x, kernel, seq, stride=None, padding=0, name: str = "") -> Tensor:
    """Max pooling of x (NCHW), stride defaulting to the kernel (torch.nn.MaxPool2d)."""
    return pool(graph, "max", x, kernel, stride, padding, seq, name or "max_pool2d")


def avg_pool2d(graph, x, kernel, seq, stride=None, padding=0, name: str = "",
               count_include_pad: bool = True) -> Tensor:
    """Average pooling of x (NCHW), stride defaulting to the kernel (torch.nn.AvgPool2d)."""
    return pool(graph, "avg", x, kernel, stride, padding, seq, name or "avg_pool2d",
                count_include_pad)


def max_pool2d_backward(graph, x, pooled, pooled_grad, kernel, seq, stride=None, padding=0,
                        name: str = "") -> Tensor:
    """dL/dx of max_pool2d, given its input x, output pooled and dL/dpooled."""
    return pool_input_gradient(graph, "max", x, pooled, pooled_grad, kernel, stride, padding,
                               seq, name or "max_pool2d_grad")


def avg_pool2d_backward(graph, pooled_grad, input_shape, kernel, seq, stride=None, padding=0,
                        name: str = "", count_include_pad: bool = True) -> Tensor:
    """dL/dx of avg_pool2d (x of input_shape), given dL/dpooled."""
    return pool_input_gradient(graph, "avg", input_shape, None, pooled_grad, kernel, stride,
                               padding, seq, name or "avg_pool2d_grad", count_include_pad)
