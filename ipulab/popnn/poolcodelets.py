"""Pooling codelets: max and average pooling over NCHW planes, and their input gradients.

The data is seen as ROWS: x as N*C*H rows of W elements, the pooled output as N*C*Ho rows of Wo
(global row r is row r % Ho of plane r // Ho). A vertex handles a few runs of consecutive rows,
each run one region of its VectorList fields; the plane boundaries inside a run are found from
the row number, so a run may span planes.

Fields:
- geometry (INT, one copy per tile): [H, W, Ho, Wo, stride_h, stride_w, pad_h, pad_w,
  pooling (MAX, AVG_INCLUDE_PAD or AVG_EXCLUDE_PAD), dy0, dx0, dy1, dx1, ...] -- the window
  as a list of (dy, dx) taps, so one codelet serves every kernel shape, and its cycle
  estimate knows the window from the field's size;
- runs (INT, per vertex): for each region, the global row of its first element and of the first
  row of each other region it reads (see each codelet);
- the data regions (VectorList).

Padding is never read: taps outside the input are skipped (max pooling treats them as -inf;
average pooling divides by the kernel area when count_include_pad, else by the taps inside).

Cycle estimates ([MODEL], worker-issue cycles): 10 to enter, 6 per region (pointers, loop
set-up), then per output element one cycle per tap (a load and a compare or add; bounds checks
are folded into precomputed tap ranges on a real tile) plus 2 to store it (3 for average: the
scale). Gradients first zero their output (64-bit stores, 2 floats per cycle), then visit every
pooled gradient element like the forward pass plus one cycle for the scatter-add.
"""
from __future__ import annotations

import numpy as np

from numba import njit

from ..machine.simd import u
from ..poplar import FLOAT, INT, Input, Output, Vector, VectorList, Vertex

HEADER = 9          # geometry values before the taps
MAX, AVG_INCLUDE_PAD, AVG_EXCLUDE_PAD = 0, 1, 2     # geometry[8]: which pooling
REGION_CYCLES = 6
ENTRY_CYCLES = 10


def taps_of(geometry: int) -> int:
    """The window size from the geometry field's length."""
    return max(0, (geometry - HEADER) // 2)


def _pool_cycles(geometry, out, per_output):
    return ENTRY_CYCLES + sum(REGION_CYCLES + n * (taps_of(geometry) + per_output) for n in out)


def _grad_cycles(geometry, grad, out):
    zero = sum(-(-n // 2) for n in out)
    return ENTRY_CYCLES + zero + sum(REGION_CYCLES + n * (taps_of(geometry) + 2) for n in grad)


@njit(cache=True, inline="always")
def tap(geometry, oy, ox, t):
    """(iy, ix, inside): the input position of tap t of window (oy, ox), and whether it is
    inside the input (padding is never read)."""
    iy = oy * geometry[4] - geometry[6] + geometry[u(HEADER + 2 * t)]
    ix = ox * geometry[5] - geometry[7] + geometry[u(HEADER + 2 * t + 1)]
    return iy, ix, iy >= 0 and iy < geometry[0] and ix >= 0 and ix < geometry[1]


@njit(cache=True, inline="always")
def divisor(geometry, oy, ox):
    """Average pooling's divisor for window (oy, ox): the kernel area, or the taps inside."""
    taps = (len(geometry) - HEADER) // 2
    if geometry[8] != AVG_EXCLUDE_PAD:
        return np.float32(taps)
    inside = 0
    for t in range(taps):
        inside += tap(geometry, oy, ox, t)[2]
    return np.float32(inside)


@njit(cache=True, inline="always")
def max_tap(x, W, H, row, iy, ix, acc, found):
    """(acc, found) after tap (iy, ix) of a max pooling window over region x (row: the
    region's row of iy = 0): the first value inside the input, then any larger one; nan wins."""
    if iy >= 0 and iy < H and ix >= 0 and ix < W:
        v = x[u((row + iy) * W + ix)]
        if not found or (acc == acc and (v > acc or v != v)):
            acc = v
        found = True
    return acc, found


@njit(cache=True, inline="always")
def is_window_2x2(geometry):
    """Whether the window's taps are (0, 0), (0, 1), (1, 0), (1, 1), in that order."""
    return len(geometry) == HEADER + 8 and geometry[9] == 0 and geometry[10] == 0 and \
        geometry[11] == 0 and geometry[12] == 1 and geometry[13] == 1 and \
        geometry[14] == 0 and geometry[15] == 1 and geometry[16] == 1


def _pool(geometry, runs, inp, out):
    H, W, Ho, Wo = geometry[0], geometry[1], geometry[2], geometry[3]
    sy, sx, py, px = geometry[4], geometry[5], geometry[6], geometry[7]
    taps = (len(geometry) - 9) // 2
    is_max = geometry[8] == 0
    two_by_two = is_max and is_window_2x2(geometry)     # the usual window: its taps unrolled
    for j in range(len(out)):
        x = inp[j]
        o = out[j]
        r = runs[2 * j]                                 # global pooled row of o's first row
        oy = r % Ho
        base = (r // Ho) * H - runs[2 * j + 1]          # row of x (in this region) of iy = 0
        q = 0
        while q + Wo <= len(o):                         # row by row (no division per row)
            y0 = oy * sy - py                           # tap() with the geometry in locals
            for ox in range(Wo):
                x0 = ox * sx - px
                acc = np.float32(0.0)
                found = False
                if two_by_two:
                    acc, found = max_tap(x, W, H, base, y0, x0, acc, found)
                    acc, found = max_tap(x, W, H, base, y0, x0 + 1, acc, found)
                    acc, found = max_tap(x, W, H, base, y0 + 1, x0, acc, found)
                    acc, found = max_tap(x, W, H, base, y0 + 1, x0 + 1, acc, found)
                    o[u(q + ox)] = acc
                    continue
                for t in range(taps):
                    iy = y0 + geometry[u(HEADER + 2 * t)]
                    ix = x0 + geometry[u(HEADER + 2 * t + 1)]
                    if is_max:
                        acc, found = max_tap(x, W, H, base, iy, ix, acc, found)
                    elif iy >= 0 and iy < H and ix >= 0 and ix < W:
                        acc += x[u((base + iy) * W + ix)]
                o[u(q + ox)] = acc if is_max else acc / divisor(geometry, oy, ox)
            q += Wo
            oy += 1
            if oy == Ho:                                # the next plane
                oy = 0
                base += H


@njit(cache=True, inline="always")
def grad_tap(xj, o, W, H, seen, own, iy, ix, p, g):
    """Whether tap (iy, ix) is inside and holds its window's max p (nan matches nan): then
    its input position in o (if o holds that row) gets g added."""
    if iy >= 0 and iy < H and ix >= 0 and ix < W:
        v = xj[u((seen + iy) * W + ix)]
        if v == p or (p != p and v != v):
            if own + iy >= 0 and (own + iy) * W < len(o):
                o[u((own + iy) * W + ix)] += g
            return True
    return False


def _max_pool_grad(geometry, runs, x, pooled, grad, out):
    H, W, Ho, Wo = geometry[0], geometry[1], geometry[2], geometry[3]
    sy, sx, py, px = geometry[4], geometry[5], geometry[6], geometry[7]
    taps = (len(geometry) - 9) // 2
    two_by_two = is_window_2x2(geometry)           # the usual window: its taps unrolled
    for j in range(len(out)):
        o, xj, pj, gj = out[j], x[j], pooled[j], grad[j]     # each region's view, once
        for k in range(len(o)):
            o[u(k)] = 0.0
        r = runs[3 * j + 1]                        # global pooled row of grad[j], pooled[j]
        oy = r % Ho
        own = (r // Ho) * H - runs[3 * j]          # row of o of iy = 0
        seen = (r // Ho) * H - runs[3 * j + 2]     # row of x[j] of iy = 0
        q = 0
        while q + Wo <= len(gj):                   # row by row (no division per row)
            y0 = oy * sy - py                      # tap() with the geometry in locals
            for ox in range(Wo):
                x0 = ox * sx - px
                p = pj[u(q + ox)]
                g = gj[u(q + ox)]
                if two_by_two:                     # the first tap with the max takes g
                    if not grad_tap(xj, o, W, H, seen, own, y0, x0, p, g):
                        if not grad_tap(xj, o, W, H, seen, own, y0, x0 + 1, p, g):
                            if not grad_tap(xj, o, W, H, seen, own, y0 + 1, x0, p, g):
                                grad_tap(xj, o, W, H, seen, own, y0 + 1, x0 + 1, p, g)
                    continue
                for t in range(taps):
                    if grad_tap(xj, o, W, H, seen, own, y0 + geometry[u(HEADER + 2 * t)],
                                x0 + geometry[u(HEADER + 2 * t + 1)], p, g):
                        break
            q += Wo
            oy += 1
            if oy == Ho:
                oy = 0
                own += H
                seen += H


def _avg_pool_grad(geometry, runs, grad, out):
    H, W, Ho, Wo = geometry[0], geometry[1], geometry[2], geometry[3]
    taps = (len(geometry) - 9) // 2
    for j in range(len(out)):
        o, gj = out[j], grad[j]
        for k in range(len(o)):
            o[k] = 0.0
        r = runs[2 * j + 1]
        oy = r % Ho
        own = (r // Ho) * H - runs[2 * j]
        q = 0
        while q + Wo <= len(gj):
            for ox in range(Wo):
                share = gj[q + ox] / divisor(geometry, oy, ox)
                for t in range(taps):
                    iy, ix, inside = tap(geometry, oy, ox, t)
                    if inside and own + iy >= 0 and (own + iy) * W < len(o):
                        o[(own + iy) * W + ix] += share
            q += Wo
            oy += 1
            if oy == Ho:
                oy = 0
                own += H


class MaxPool(Vertex):
    """out = the max over each window of inp (first max; nan wins); runs: per region j,
    [global pooled row of out[j][0], global input row of inp[j][0]]. (geometry[8] says which
    pooling: 0 max, 1 average over the kernel area, 2 average over the taps inside.)"""

    fields_dtype = FLOAT
    geometry = Input(Vector[INT])
    runs = Input(Vector[INT])
    inp = Input(VectorList[FLOAT], name="in")
    out = Output(VectorList[FLOAT])
    compute = staticmethod(_pool)

    @staticmethod
    def cycle_estimate(geometry, runs, inp=(), out=()):
        return _pool_cycles(geometry, out, 2)


class AvgPool(MaxPool):
    """out = the mean over each window of inp (runs as MaxPool)."""

    @staticmethod
    def cycle_estimate(geometry, runs, inp=(), out=()):
        return _pool_cycles(geometry, out, 3)


class AvgPoolGrad(Vertex):
    """out (input rows) = the sum of each covering window's pooled gradient / its divisor.
    runs: per region j, [global input row of out[j][0], global pooled row of grad[j][0]]."""

    fields_dtype = FLOAT
    geometry = Input(Vector[INT])
    runs = Input(Vector[INT])
    grad = Input(VectorList[FLOAT])
    out = Output(VectorList[FLOAT])
    compute = staticmethod(_avg_pool_grad)

    @staticmethod
    def cycle_estimate(geometry, runs, grad=(), out=(), **inputs):
        return _grad_cycles(geometry, grad, out)


class MaxPoolGrad(AvgPoolGrad):
    """out (input rows) = the sum of the pooled gradients whose window's first max is there.
    runs: per region j, [global input row of out[j][0], global pooled row of grad[j][0] (and
    pooled[j][0]), global input row of x[j][0]]."""

    x = Input(VectorList[FLOAT])
    pooled = Input(VectorList[FLOAT])
    compute = staticmethod(_max_pool_grad)


DATA_FIELDS = {MaxPool: ("inp", "out"), AvgPool: ("inp", "out"),
               MaxPoolGrad: ("x", "pooled", "grad", "out"), AvgPoolGrad: ("grad", "out")}
