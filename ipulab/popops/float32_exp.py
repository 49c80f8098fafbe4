"""exp rounded to float32 as the codelets compute it, in loops that numba vectorises.

A codelet's exp is float32(exp(float64(x))): libm's exp (codegen.f_exp), one call an element,
which keeps a loop from being vectorised. f32_exp gives the same bits from exp_near, a
branch-free polynomial within 2^-46 of exp (relative), widened to NEAR = 2^-40: where that
neighbourhood holds a float32 rounding boundary it cannot tell which way float32(exp) rounds,
and answers NaN, and the codelet computes its exps again with f_exp (about 2 inputs in 100,000
near 1, 3 in a million of all float32s; a NaN input answers NaN too). benchmarks/exp_check.py
checks every float32 input: none differs from libm.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

NEAR = 2.0 ** -40           # exp_near's error bound as f32_exp takes it (the error is < 2^-46)
INV_LN2 = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01     # ln 2 in 32 bits: k * LN2_HI is exact for |k| < 2^20
LN2_LO = 1.90821492927058770002e-10     # ln 2 - LN2_HI
# exp(r) = sum r^n / n!, n <= 11: under 7e-15 relative for |r| <= ln(2) / 2
C2, C3, C4, C5, C6, C7, C8, C9, C10, C11 = (1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040,
                                            1 / 40320, 1 / 362880, 1 / 3628800, 1 / 39916800)


@intrinsic
def _pow2(typingctx, k):
    """2.0 ** k for an int64 k in [-1022, 1023], written into a float64's exponent bits."""
    def codegen(context, builder, signature, args):
        biased = builder.add(args[0], ir.Constant(ir.IntType(64), 1023))
        return builder.bitcast(builder.shl(biased, ir.Constant(ir.IntType(64), 52)),
                               ir.DoubleType())
    return types.float64(types.int64), codegen


@njit(cache=True, inline="always")
def exp_near(y):
    """exp(y) within 2^-46 relative, without a branch: y = k ln 2 + r with |r| <= ln(2) / 2,
    exp(r) by its Taylor polynomial, times 2^k. y is clamped to [-700, 700] first (a float32
    exp is 0 or inf well before); a NaN y gives a meaningless number (f32_exp checks)."""
    y = min(max(y, -700.0), 700.0)
    k = np.floor(y * INV_LN2 + 0.5)
    r = (y - k * LN2_HI) - k * LN2_LO
    p = ((((((((C11 * r + C10) * r + C9) * r + C8) * r + C7) * r + C6) * r + C5) * r + C4)
         * r + C3) * r + C2
    return (1.0 + r + r * r * p) * _pow2(np.int64(k))


@njit(cache=True, inline="always")
def f32_exp(x):
    """float32(exp(float64(x))), from exp_near where NEAR around it rounds to one float32;
    NaN where it does not or x is NaN (then compute it with codegen.f_exp)."""
    d = np.float64(x)
    e = exp_near(d)
    b = e * NEAR
    lo = np.float32(e - b)
    return lo if lo == np.float32(e + b) and d == d else np.float32(np.nan)


@njit(cache=True, inline="always")
def exps(y, x, a, m):
    """y[i] = float32(exp(float64(a * x[i] - m))) (float32 a, x, m): f32_exp for all of them,
    in a loop numba vectorises, then exactly again (libm's exp, as codegen.f_exp) if one was
    not pinned down."""
    unsure = False
    for i in range(len(y)):
        e = f32_exp(a * x[i] - m)
        unsure |= e != e
        y[i] = e
    if unsure:
        for i in range(len(y)):
            y[i] = np.float32(math.exp(np.float64(a * x[i] - m)))
