"""2-D convolution and its two backward passes, lowered to planned matrix products.

x is NCHW, w is PyTorch's (out_channels, in_channels, kh, kw); stride and padding are an int
or a (height, width) pair. The lowering is im2col *as a view*: the patches matrix
X_col[(c, dy, dx), (n, y, x)] = x_padded[n, c, y*sh + dy, x*sw + dx] is a tensor whose elements
are x's (zero padding comes from small zero constants joined on with concat), so building it
moves nothing; when a tile's MatMulBlock vertex reads its block of X_col, the exchange gathers
those patches onto the tile. Then

  forward          out  = W (o, c*kh*kw) @ X_col                       -> (o, n*ho*wo)
  backward input   dx   = conv(pad(dilate(dy)), w flipped, in/out swapped), stride 1
                          (the flipped weights copied first, once, to where the product
                          wants them, as PopLibs' weightsTransposeChansFlipXY does)
  backward weights dw   = dy (o, n*ho*wo) @ X_col^T                    -> (o, c*kh*kw)

each planned by plan_mat_mul like any product (plan_conv2d shows the forward plan).
"""
from __future__ import annotations

from ..errors import GraphError
from ..poplar import program as prog
from ..poplar.tensor import Tensor, concat
from .. import poputil
from .matmul import create_mat_mul_input_lhs, mat_mul
from .plan import plan_mat_mul


def _pair(v, what: str) -> tuple[int, int]:
    return poputil.pair(v, what, "conv2d")


def conv2d_output_shape(x_shape, w_shape, stride=1, padding=0) -> tuple[int, int, int, int]:
    """(n, out_channels, ho, wo) of conv2d, checking the shapes."""
    (sh, sw), (ph, pw) = _pair(stride, "stride"), _pair(padding, "padding")
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise GraphError(f"conv2d takes x as NCHW and w as (out, in, kh, kw), not shapes "
                         f"{list(x_shape)} and {list(w_shape)}")
    n, c, h, w_ = x_shape
    o, ci, kh, kw = w_shape
    if c != ci:
        raise GraphError(f"conv2d: x has {c} channels but w expects {ci} (w is (out, in, kh, "
                         f"kw) = {list(w_shape)})")
    if sh < 1 or sw < 1 or ph < 0 or pw < 0:
        raise GraphError(f"conv2d: stride must be >= 1 and padding >= 0, got stride "
                         f"{stride!r}, padding {padding!r}")
    ho, wo = poputil.window_output(h, kh, sh, ph), poputil.window_output(w_, kw, sw, pw)
    if min(kh, kw) < 1 or ho < 1 or wo < 1:
        raise GraphError(f"conv2d: a {kh}x{kw} kernel does not fit the {h}x{w_} input with "
                         f"padding {padding!r}")
    return n, o, ho, wo


def _zeros(g, dtype, shape, name: str) -> Tensor:
    """Padding zeros, shared by every convolution on g that pads with this shape."""
    return poputil.shared_constant(g, dtype, shape, 0.0, name)


def _pad(g, t: Tensor, dim: int, lo: int, hi: int, name: str) -> Tensor:
    """t with lo zeros before and hi after along dim; a negative count crops instead."""
    size = t.shape[dim]
    t = t.slice(max(0, -lo), size - max(0, -hi), dim)
    parts = []
    for count in (lo, hi):
        shape = list(t.shape)
        shape[dim] = count
        parts.append(_zeros(g, t.dtype, shape, name) if count > 0 else None)
    joined = [p for p in (parts[0], t, parts[1]) if p is not None]
    return concat(joined, dim) if len(joined) > 1 else t


def _dilate(g, t: Tensor, dim: int, s: int, name: str) -> Tensor:
    """s - 1 zeros between neighbours along dim (the transpose of a stride)."""
    if s == 1 or t.shape[dim] <= 1:
        return t
    shape = list(t.shape)
    shape.insert(dim + 1, s - 1)
    joined = concat([t.expand([dim + 1]), _zeros(g, t.dtype, shape, name)], dim + 1)
    size = t.shape[dim]
    flat = list(t.shape)
    flat[dim] = size * s
    return joined.reshape(flat).slice(0, (size - 1) * s + 1, dim)


def conv_patches(g, x: Tensor, kh: int, kw: int, stride, padding, name: str) -> Tensor:
    """X_col (c*kh*kw, n*ho*wo): the patches of x that a kh x kw kernel sees (im2col), as a
    view of x and zero padding: nothing copied. stride and padding are (height, width) pairs.
    conv2d multiplies the weights by it; nn.Conv2d also joins a row of ones to fold in its
    bias."""
    (sh, sw), (ph, pw) = stride, padding
    n, c, h, w = x.shape
    ho, wo = poputil.window_output(h, kh, sh, ph), poputil.window_output(w, kw, sw, pw)
    xp = _pad(g, _pad(g, x, 2, ph, ph, f"{name}.pad_h"), 3, pw, pw, f"{name}.pad_w")
    taps = [xp[:, :, dy:dy + (ho - 1) * sh + 1:sh, dx:dx + (wo - 1) * sw + 1:sw].expand([0])
            for dy in range(kh) for dx in range(kw)]
    cols = concat(taps, 0) if len(taps) > 1 else taps[0]       # (kh*kw, n, c, ho, wo)
    return cols.dim_shuffle([2, 0, 1, 3, 4]).reshape([c * kh * kw, n * ho * wo])


def _check_grad(what: str, grad_out, x_shape, w_shape, stride, padding):
    """conv2d's output shape for x_shape and w_shape, which grad_out must have."""
    expect = conv2d_output_shape(x_shape, w_shape, stride, padding)
    if tuple(grad_out.shape) != expect:
        raise GraphError(f"{what}: grad_out is {list(grad_out.shape)} but conv2d of "
                         f"{list(x_shape)} by {list(w_shape)} gives {list(expect)}")
    return expect


def _check_tensors(g, *tensors):
    for t in tensors:
        if not isinstance(t, Tensor):
            raise GraphError(f"conv2d: expected a Tensor, not {type(t).__name__}")
        g.check_tensor(t)
    if len({t.dtype for t in tensors}) > 1:
        raise GraphError("conv2d: " + " and ".join(f"'{t.name}' is {t.dtype}" for t in tensors))


def plan_conv2d(target, x_shape, w_shape, stride=1, padding=0, dtype="FLOAT", options=None):
    """The matmul plan conv2d uses for these shapes: (o x c*kh*kw) @ (c*kh*kw x n*ho*wo)."""
    n, o, ho, wo = conv2d_output_shape(x_shape, w_shape, stride, padding)
    _, c, kh, kw = w_shape
    return plan_mat_mul(target, o, c * kh * kw, n * ho * wo, dtype, options)


def conv2d(g, x, w, seq, stride=1, padding=0, name: str = "", options=None) -> Tensor:
    """Convolution (cross-correlation, as PyTorch's conv2d): x NCHW, w (out, in, kh, kw).

    Returns (n, out, ho, wo), a view of the product's result, mapped by its plan.
    """
    _check_tensors(g, x, w)
    n, o, ho, wo = conv2d_output_shape(x.shape, w.shape, stride, padding)
    _, c, kh, kw = w.shape
    name = name or "conv"
    cols = conv_patches(g, x, kh, kw, _pair(stride, "stride"), _pair(padding, "padding"), name)
    out = mat_mul(g, w.reshape([o, c * kh * kw]), cols, seq, name, options)
    return out.reshape([o, n, ho, wo]).dim_shuffle([1, 0, 2, 3])


def weights_transpose_chans_flip_xy(g, w, seq, batch_positions: int, name: str = "",
                                    options=None) -> Tensor:
    """w (out, in, kh, kw) with its channel axes swapped and its kernel flipped, (in, out, kh,
    kw): the weights of the backward-input convolution, as PopLibs' weightsTransposeChansFlipXY.

    Copied once into a new tensor mapped as that convolution's product wants its left operand
    (batch_positions = n * h * w of its output), so the product gathers whole blocks. Read
    through the flipped view instead, every tile that uses a block would gather it element by
    element, from reversed addresses."""
    o, c, kh, kw = w.shape
    out = create_mat_mul_input_lhs(g, w.dtype, (c, o * kh * kw), (o * kh * kw, batch_positions),
                                   name or "conv.weights_flipped", options)
    out = out.reshape([c, o, kh, kw])
    seq.add(prog.Copy(w.dim_shuffle([1, 0, 2, 3]).reverse(2).reverse(3), out,
                      name=out.name))
    return out


def conv2d_backward_input(g, grad_out, w, input_shape, seq, stride=1, padding=0,
                          name: str = "", options=None) -> Tensor:
    """dL/dx of conv2d, given dL/dout (n, out, ho, wo), w, and x's shape NCHW.

    The transposed convolution: dL/dout dilated by the stride, padded by k - 1 - padding (and
    to reach x's size), convolved at stride 1 with w flipped and its channel axes swapped.
    """
    _check_tensors(g, grad_out, w)
    input_shape = tuple(int(s) for s in input_shape)
    _check_grad("conv2d_backward_input", grad_out, input_shape, w.shape, stride, padding)
    name = name or "conv.grad_input"
    (sh, sw), (ph, pw) = _pair(stride, "stride"), _pair(padding, "padding")
    _, _, kh, kw = w.shape
    d = grad_out
    for dim, s, p, k in ((2, sh, ph, kh), (3, sw, pw, kw)):
        d = _dilate(g, d, dim, s, f"{name}.dilate")
        d = _pad(g, d, dim, k - 1 - p, input_shape[dim] + p - d.shape[dim], f"{name}.pad")
    n, _, h, w_ = input_shape
    flipped = weights_transpose_chans_flip_xy(g, w, seq, n * h * w_, f"{name}.weights", options)
    return conv2d(g, d, flipped, seq, 1, 0, name, options)


def conv2d_backward_weights(g, x, grad_out, w_shape, seq, stride=1, padding=0,
                            name: str = "", options=None) -> Tensor:
    """dL/dw of conv2d (out, in, kh, kw), given x and dL/dout: dL/dout @ X_col^T."""
    _check_tensors(g, x, grad_out)
    w_shape = tuple(int(s) for s in w_shape)
    n, o, ho, wo = _check_grad("conv2d_backward_weights", grad_out, x.shape, w_shape, stride,
                               padding)
    _, c, kh, kw = w_shape
    name = name or "conv.grad_weights"
    cols = conv_patches(g, x, kh, kw, _pair(stride, "stride"), _pair(padding, "padding"), name)
    dy = grad_out.dim_shuffle([1, 0, 2, 3]).reshape([o, n * ho * wo])
    return mat_mul(g, dy, cols.transpose(), seq, name, options).reshape(list(w_shape))
