"""The doctor's numba probe: a loop, compiled once and then loaded from numba's cache (a
compile in every kernel that runs the doctor cost half a second of its start)."""
import numba
import numpy as np


@numba.njit(cache=True)
def float_sum(a):
    s = np.float32(0.0)
    for x in a:
        s += x
    return s
