"""Row-wise codelets of popnn: layer normalisation and the (scaled, causally masked) softmax,
each over the last dimension, with their gradients.

A vertex handles a few runs of consecutive rows, each run one region of its VectorList fields
(rows of d = the row width; per-row statistics one value per row). Arithmetic is float32 (HALF
data is read as float and rounded once when stored); exp and sqrt run in float64 through the
helpers popops' maps use and are rounded to float32, so every codelet mode agrees bit for bit.

    layer norm   mean = sum(x) / d,  var = sum((x - mean)^2) / d,  inv_std = 1 / sqrt(var + eps)
                 y = (x - mean) * inv_std * gamma + beta
    its gradient xh = (x - mean) * inv_std,  g = dy * gamma,  a = mean(g),  b = mean(g * xh)
                 dx = inv_std * (g - a - xh * b), and dy * xh (dgamma sums it over the rows)
    softmax      z = scale * x over the row's first k columns (k = i + 1 for row i of a causal
                 [.., S, S] tensor, else all): y = exp(z - max z) / sum exp(z - max z), 0 beyond k
    its gradient dx = scale * y * (dy - sum(dy * y))

Cycle estimates ([MODEL], worker-issue cycles): 10 to enter, 6 per region, 20 per row (its
divide, square root or exp set-up and the stores of its statistics), then per element the
float operations of the passes over the row, 2 floats (4 halves) per vector operation
(f32v2 / f16v4), plus 8 per exp as popops counts a float function. A causal softmax row works
on its first i + 1 columns only (and zeroes the rest at a store per vector); the softmax
vertices' estimates are set per vertex from their rows (row_cycles), as their fields do not
say the row width.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..poplar import FLOAT, INT, Input, Output, Vector, VectorList, Vertex
from ..popops.float32_exp import exps

ENTRY_CYCLES, REGION_CYCLES, ROW_CYCLES = 10, 6, 20
EXP_CYCLES = 8
# vector operations per element pair, pass by pass
LN_FORWARD_OPS = 5        # sum; subtract and square-add; subtract, scale, affine (3)
LN_GRAD_OPS = 9           # xh, g and two sums (4); dx (4); dy * xh (1)
SOFTMAX_OPS = 4           # scale and max; subtract (before exp); sum; normalise
SOFTMAX_GRAD_OPS = 3      # product-sum; subtract; scale by y and the scale


def row_cycles(used, ops: int, dtype, per_element: int = 0, zeroed=0):
    """Cycles of one row (or, with arrays, of each row) using `used` elements: `ops` vector
    operations per element pair (quad for HALF), per_element scalar cycles, and a store per
    vector for `zeroed` elements."""
    lanes = 2 if dtype == FLOAT else 4
    return ROW_CYCLES + -(-used * ops // lanes) + used * per_element + -(-zeroed // lanes)


def _estimate(d: int, regions, ops: int, dtype) -> int:
    """10 + per region 6 + its rows (regions: the element count of each region)."""
    return ENTRY_CYCLES + sum(REGION_CYCLES + n // max(d, 1) * row_cycles(d, ops, dtype)
                              for n in regions)


# --- layer norm ----------------------------------------------------------------------------------
def _layer_norm(eps, gamma, beta, x, y, mean, inv_std):
    d = len(gamma)
    e = np.float64(eps[0])
    for j in range(len(x)):
        xs = x[j]
        ys = y[j]
        ms = mean[j]
        rs = inv_std[j]
        for r in range(len(ms)):
            o = r * d
            s = np.float32(0.0)
            for c in range(d):
                s += xs[o + c]
            mu = s / np.float32(d)
            v = np.float32(0.0)
            for c in range(d):
                t = xs[o + c] - mu
                v += t * t
            inv = np.float32(1.0 / math.sqrt(np.float64(v / np.float32(d)) + e))
            ms[r] = mu
            rs[r] = inv
            for c in range(d):
                ys[o + c] = (xs[o + c] - mu) * inv * gamma[c] + beta[c]


class LayerNormRows(Vertex):
    """y, mean and inv_std of the rows of x (width d = len(gamma)), normalised over each row."""

    fields_dtype = FLOAT
    eps = Input(FLOAT)
    gamma = Input(Vector[FLOAT])
    beta = Input(Vector[FLOAT])
    x = Input(VectorList[FLOAT])
    y = Output(VectorList[FLOAT])
    mean = Output(VectorList[FLOAT])
    inv_std = Output(VectorList[FLOAT])
    compute = staticmethod(_layer_norm)

    @classmethod
    def cycle_estimate(cls, eps, gamma, beta, x=(), y=(), mean=(), inv_std=()):
        return _estimate(gamma, x, LN_FORWARD_OPS, cls.fields_dtype)


def _layer_norm_grad(gamma, x, dy, mean, inv_std, dx, dy_xhat):
    d = len(gamma)
    for j in range(len(x)):
        xs = x[j]
        dys = dy[j]
        dxs = dx[j]
        ps = dy_xhat[j]
        ms = mean[j]
        rs = inv_std[j]
        for r in range(len(ms)):
            o = r * d
            mu = ms[r]
            inv = rs[r]
            a = np.float32(0.0)
            b = np.float32(0.0)
            for c in range(d):
                g = dys[o + c] * gamma[c]
                a += g
                b += g * ((xs[o + c] - mu) * inv)
            a = a / np.float32(d)
            b = b / np.float32(d)
            for c in range(d):
                xh = (xs[o + c] - mu) * inv
                dxs[o + c] = inv * (dys[o + c] * gamma[c] - a - xh * b)
                ps[o + c] = dys[o + c] * xh


class LayerNormGradRows(Vertex):
    """dx of the rows of x, and dy * xh (whose column sums are dgamma)."""

    fields_dtype = FLOAT
    gamma = Input(Vector[FLOAT])
    x = Input(VectorList[FLOAT])
    dy = Input(VectorList[FLOAT])
    mean = Input(VectorList[FLOAT])
    inv_std = Input(VectorList[FLOAT])
    dx = Output(VectorList[FLOAT])
    dy_xhat = Output(VectorList[FLOAT])
    compute = staticmethod(_layer_norm_grad)

    @classmethod
    def cycle_estimate(cls, gamma, x=(), dy=(), mean=(), inv_std=(), dx=(), dy_xhat=()):
        return _estimate(gamma, x, LN_GRAD_OPS, cls.fields_dtype)


# --- softmax -------------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def _row_length(shape, first_row, r):
    """(width, columns used) of row first_row + r: causal rows of an [S, S] square use i + 1."""
    w = shape[0]
    return w, ((first_row + r) % shape[1] + 1 if shape[1] > 0 else w)


def _softmax(scale, shape, first, x, y):
    a = scale[0]
    for j in range(len(x)):
        xs = x[j]
        ys = y[j]
        for r in range(len(ys) // shape[0]):
            w, k = _row_length(shape, first[j], r)
            o = r * w
            m = a * xs[o]
            for c in range(1, k):
                z = a * xs[o + c]
                if z > m:
                    m = z
            # y holds float32 (a HALF y too, rounded after the vertex)
            exps(ys[o:o + k], xs[o:o + k], a, m)
            s = np.float32(0.0)
            for c in range(k):
                s += ys[o + c]
            inv = np.float32(1.0) / s
            for c in range(k):
                ys[o + c] *= inv
            for c in range(k, w):
                ys[o + c] = 0.0


class SoftmaxRows(Vertex):
    """y = softmax(scale * x) over each row of x (shape = [row width, S of a causal [S, S]
    square or 0]; first = the square's row index of each region's first row)."""

    fields_dtype = FLOAT
    scale = Input(FLOAT)
    shape = Input(Vector[INT])
    first = Input(Vector[INT])
    x = Input(VectorList[FLOAT])
    y = Output(VectorList[FLOAT])
    compute = staticmethod(_softmax)


def _softmax_grad(scale, shape, first, y, dy, dx):
    a = scale[0]
    for j in range(len(y)):
        ys = y[j]
        dys = dy[j]
        dxs = dx[j]
        for r in range(len(ys) // shape[0]):
            w, k = _row_length(shape, first[j], r)
            o = r * w
            s = np.float32(0.0)
            for c in range(k):
                s += np.float32(dys[o + c]) * ys[o + c]
            for c in range(k):
                dxs[o + c] = a * ys[o + c] * (dys[o + c] - s)
            for c in range(k, w):
                dxs[o + c] = 0.0


class SoftmaxGradRows(Vertex):
    """dx = scale * y * (dy - sum(dy * y)) over each row (the row's masked columns: 0)."""

    fields_dtype = FLOAT
    scale = Input(FLOAT)
    shape = Input(Vector[INT])
    first = Input(Vector[INT])
    y = Input(VectorList[FLOAT])
    dy = Input(VectorList[FLOAT])
    dx = Output(VectorList[FLOAT])
    compute = staticmethod(_softmax_grad)
