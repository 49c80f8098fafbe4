"""Every float32 input: f32_exp (ipulab/popops/float32_exp.py) against the codelets' exp,
float32(exp(float64(x))) with libm's exp. Run it after changing exp_near: it prints how many
inputs f32_exp pins down and how many it leaves to libm (NaN), how many it gets wrong (must
be 0), and exp_near's largest error relative to libm's exp. About 3 minutes on one core
(172 s measured on 2026-11-28).
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np
from numba import njit

from ipulab.popops.float32_exp import NEAR, exp_near, f32_exp


@njit(cache=True)
def check(first: int, count: int):
    """(pinned down, left to libm, wrong, largest relative error of exp_near) over the bit
    patterns first ... first + count - 1; NaN inputs (which f32_exp must leave) not counted."""
    pinned = left = wrong = 0
    worst = 0.0
    bits = np.arange(first, first + count, dtype=np.int64).astype(np.uint32).view(np.float32)
    for x in bits:
        d = np.float64(x)
        got = f32_exp(x)
        if d != d:
            wrong += got == got
            continue
        exact = math.exp(d)
        if 1e-300 < exact < 1e300:
            worst = max(worst, abs(exp_near(d) - exact) / exact)
        if got != got:
            left += 1
        elif got == np.float32(exact):
            pinned += 1
        else:
            wrong += 1
    return pinned, left, wrong, worst


def main() -> int:
    start = time.perf_counter()
    totals, worst, step = np.zeros(3, np.int64), 0.0, 1 << 24
    for first in range(0, 1 << 32, step):
        *counts, w = check(first, step)
        totals += counts
        worst = max(worst, w)
    pinned, left, wrong = (int(t) for t in totals)
    numbers = pinned + left
    print("| float32 inputs (NaNs aside) | pinned down by f32_exp | left to libm's exp | wrong |")
    print("|---|---|---|---|")
    print(f"| {numbers:,} | {pinned:,} | {left:,} ({left / numbers:.1e}) | {wrong} |")
    print(f"\nexp_near's largest error relative to libm's exp: {worst:.2e} "
          f"(f32_exp takes {NEAR:.2e}); {time.perf_counter() - start:.0f} s")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
