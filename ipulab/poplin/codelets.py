"""poplin's codelets: the block matrix product that runs on every tile, and the reduction of
partial sums over the split contraction dimension.

Both are MultiVertex codelets: compute(worker_id, ...) runs on each of the tile's worker
contexts, and each worker takes its own share of the rows (block product) or elements
(reduction). Their cycle estimates are in worker-issue cycles, as the cycle model wants
(tile time = 6 x the busiest worker).

The block product hands a worker's row slab of at least BLAS_MACS multiply-adds to numba's
np.dot on 2-D views, which calls BLAS (scipy's, which numba uses for linear algebra): measured
about 4x faster than the best numba loop nest for tile-sized blocks (75 vs 15-27 GFLOP/s for
blocks like 128x45x128 on an AVX-512 laptop core). Its summation order is BLAS's own, so there
python mode (numpy's BLAS) may differ from compiled mode in the last bits, as with a
`fastmath` codelet. Smaller blocks -- most of them when a small network is spread over
thousands of tiles -- go whole to rows_product, where a BLAS call would cost more than the
work: four rows by sixteen columns at a time in SIMD lanes, each output summed over k in
order, the same bits in every mode and on every host.

[MODEL] The cycle figures: the AMP (accumulating matrix product) unit of a Mk2/Bow tile does
fp32_flops_per_cycle_per_tile / 2 = 16 fp32 MACs per cycle (64 for fp16). With all six workers
busy, each issuing every sixth cycle, a worker therefore completes 16 MACs per issue cycle of
its own. On top come a fixed cost to enter the vertex and set up the AMP (BLOCK_OVERHEAD) and a
per-row cost to load the row's pointers and drain the accumulators (ROW_OVERHEAD). Reductions
add two floats per cycle per worker (f32v2add) after loading each partial.
"""
from __future__ import annotations

from math import isqrt

import numpy as np
from numba import njit

from ..machine.simd import LANES, f32x8_axpy, f32x8_load, f32x8_store, f32x8_zero, u
from ..poplar import FLOAT, HALF, INT, Input, InOut, MultiVertex, Output, Vector
from ..poplar.types import as_type
from ..poplar.vertex import set_recipe

# Every preset has 6 worker contexts (arch.Chip.num_worker_contexts); the codelets split work
# six ways, and the library refuses a target with another count rather than mis-split.
WORKERS = 6
BLOCK_OVERHEAD = 30        # worker cycles: vertex entry, AMP setup, pointer loads
ROW_OVERHEAD = 6           # worker cycles per output row: row pointers, accumulator drain
REDUCE_OVERHEAD = 12       # worker cycles: vertex entry and loop setup
BLAS_MACS = 4096           # a worker's slab at least this big goes to BLAS (host speed only)
FLOATS_PER_VECTOR = 2      # f32v2: two floats per add or 64-bit load


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def block_dims(a: int, b: int, c: int) -> tuple[int, int, int]:
    """(m, k, n) of a block product from the sizes of a (m*k), b (k*n) and c (m*n)."""
    if a == 0 or b == 0:           # k == 0 (or an empty block): c is all there is
        return 0, 0, 0
    macs = isqrt(a * b * c)        # (m k n)^2 = a b c, exactly
    return macs // b, macs // c, macs // a


def block_worker_cycles(m, k, n, macs_per_cycle, workers: int = WORKERS):
    """Busiest worker's cycles for an (m x k) @ (k x n) block split as MatMulBlock splits it.

    Works on numpy arrays as well as ints (the planner evaluates thousands of splits at once).
    """
    m, k, n = (np.asarray(x, np.int64) for x in (m, k, n))
    full = _ceil(m, workers) * (ROW_OVERHEAD + _ceil(k * n, macs_per_cycle))
    parts = np.maximum(workers // np.maximum(m, 1), 1)    # fewer rows than workers
    short = ROW_OVERHEAD + _ceil(k * _ceil(n, parts), macs_per_cycle)
    fill = _ceil(_ceil(m * n, workers), FLOATS_PER_VECTOR)  # k == 0: zero the output
    body = np.where(m * n == 0, 0, np.where(k == 0, fill, np.where(m >= workers, full, short)))
    return BLOCK_OVERHEAD + body


def reduce_worker_cycles(n_out, num_partials, accumulate=False, workers: int = WORKERS):
    """Busiest worker's cycles to sum num_partials partials into n_out outputs (arrays too)."""
    vectors = _ceil(_ceil(np.asarray(n_out, np.int64), workers), FLOATS_PER_VECTOR)
    return REDUCE_OVERHEAD + vectors * (np.asarray(num_partials) + 1
                                        + 2 * np.asarray(accumulate, np.int64))


@njit(cache=True, inline="always")
def _four_rows(a, b, c, k, n, i, j0, j1):
    """c[i:i+4, j0:j0+8] and c[i:i+4, j1:j1+8]: eight chains in flight, each load of b
    serving four rows and each element of a two column groups."""
    p0 = f32x8_zero()
    p1 = f32x8_zero()
    p2 = f32x8_zero()
    p3 = f32x8_zero()
    q0 = f32x8_zero()
    q1 = f32x8_zero()
    q2 = f32x8_zero()
    q3 = f32x8_zero()
    r = i * k
    for kk in range(k):
        v = f32x8_load(b, kk * n + j0)
        w = f32x8_load(b, kk * n + j1)
        x0 = a[u(r + kk)]
        x1 = a[u(r + k + kk)]
        x2 = a[u(r + 2 * k + kk)]
        x3 = a[u(r + 3 * k + kk)]
        p0 = f32x8_axpy(p0, x0, v)
        q0 = f32x8_axpy(q0, x0, w)
        p1 = f32x8_axpy(p1, x1, v)
        q1 = f32x8_axpy(q1, x1, w)
        p2 = f32x8_axpy(p2, x2, v)
        q2 = f32x8_axpy(q2, x2, w)
        p3 = f32x8_axpy(p3, x3, v)
        q3 = f32x8_axpy(q3, x3, w)
    f32x8_store(c, i * n + j0, p0)
    f32x8_store(c, i * n + j1, q0)
    f32x8_store(c, (i + 1) * n + j0, p1)
    f32x8_store(c, (i + 1) * n + j1, q1)
    f32x8_store(c, (i + 2) * n + j0, p2)
    f32x8_store(c, (i + 2) * n + j1, q2)
    f32x8_store(c, (i + 3) * n + j0, p3)
    f32x8_store(c, (i + 3) * n + j1, q3)


@njit(cache=True, inline="always")
def _one_row(a, b, c, k, n, i, j0, j1):
    """c[i, j0:j0+8] and c[i, j1:j1+8]."""
    p = f32x8_zero()
    q = f32x8_zero()
    for kk in range(k):
        x = a[u(i * k + kk)]
        p = f32x8_axpy(p, x, f32x8_load(b, kk * n + j0))
        q = f32x8_axpy(q, x, f32x8_load(b, kk * n + j1))
    f32x8_store(c, i * n + j0, p)
    f32x8_store(c, i * n + j1, q)


@njit(cache=True, inline="always")
def rows_product(a, b, c, k, n, r0, r1):
    """c[i*n + j] = the sum over kk = 0, 1, ... (in that order, from +0.0) of
    a[i*k + kk] * b[kk*n + j], for rows r0 <= i < r1 and every column j.

    Sixteen columns at a time in SIMD lanes (two groups of eight; past the last full eight,
    one more eight ending at n, recomputing a few columns to the same bits), with the same
    roundings as one column at a time; four rows at a time where they are there, so that
    eight chains are in flight (one chain waits on its adds), each output's sum still its own
    chain, in order. Rows narrower than eight go column by column. Indices are unsigned (u):
    numba checks every signed index for a negative value, which here costs as much as the
    arithmetic."""
    if n < LANES:
        for i in range(r0, r1):
            for j in range(n):
                s = np.float32(0.0)
                for kk in range(k):
                    s += a[u(i * k + kk)] * b[u(kk * n + j)]
                c[u(i * n + j)] = s
        return
    j = 0
    while j < n:
        j0 = min(j, n - LANES)
        j1 = min(j0 + LANES, n - LANES)
        i = r0
        while i + 4 <= r1:
            _four_rows(a, b, c, k, n, i, j0, j1)
            i += 4
        while i < r1:
            _one_row(a, b, c, k, n, i, j0, j1)
            i += 1
        j = j0 + 2 * LANES


def _matmul_block(worker_id, dims, a, b, c):
    m = np.int64(dims[0])
    k = np.int64(dims[1])
    n = np.int64(dims[2])
    if m >= 6 and k > 0 and (m + 5) // 6 * k * n >= BLAS_MACS:
        # a slab of rows per worker, each big enough for BLAS (or one row short of it)
        r0 = worker_id * m // 6
        r1 = (worker_id + 1) * m // 6
        if (r1 - r0) * k * n >= BLAS_MACS:
            np.dot(a[r0 * k:r1 * k].reshape((r1 - r0, k)), b.reshape((k, n)),
                   c[r0 * n:r1 * n].reshape((r1 - r0, n)))
        else:
            rows_product(a, b, c, k, n, r0, r1)
    elif worker_id == 0:        # a small block: on the host, in one go (same sums)
        rows_product(a, b, c, k, n, 0, m)


class MatMulBlock(MultiVertex):
    """c = a @ b for one block: a (m x k), b (k x n), c (m x n), all row-major, dims = [m, k, n].

    On the tile each worker takes a slab of rows (or, with fewer than six rows, part of a
    row's columns), as the cycle estimate says. On the host a block whose slabs reach
    BLAS_MACS is multiplied slab by slab with BLAS; a smaller one runs whole in worker 0's
    call (each output's sum is its own chain, so how the rows are shared does not change a
    bit). c holds float partials, whatever the input type.
    """

    macs_per_cycle = 16       # fp32 AMP of a Mk2/Bow tile; variants for other chips and types
    dims = Input(Vector[INT])
    a = Input(Vector[FLOAT])
    b = Input(Vector[FLOAT])
    c = Output(Vector[FLOAT])
    compute = staticmethod(_matmul_block)

    @classmethod
    def cycle_estimate(cls, dims, a, b, c):
        m, k, n = block_dims(a, b, c)
        if m == 0:                       # k == 0 (or nothing to do): only m*n = c is known
            m, n = c, 1
        return int(block_worker_cycles(m, k, n, cls.macs_per_cycle))


@njit(cache=True, inline="always")
def _partial_sum(partials, j, n):
    """partials[j] + partials[n + j] + partials[2n + j] + ..., in that order, in float32
    (partials holds whole groups of n)."""
    s = partials[u(j)]
    p = j + n
    while p < len(partials):        # stepping, not len // n: no division per output
        s += partials[u(p)]
        p += n
    return s


def _reduce_partials(worker_id, partials, out):
    """Into a FLOAT out, all in worker 0's call (each output's sum is its own chain, so how the
    outputs are shared does not change a bit): partial after partial over the whole run of
    outputs, which the host adds in SIMD, the same float32 sums in the same order as
    _partial_sum's; output by output when there are too few outputs to fill two registers."""
    n = len(out)
    if worker_id == 0 and n < 2 * LANES:
        for j in range(n):
            out[j] = _partial_sum(partials, j, n)
    elif worker_id == 0:
        for j in range(n):
            out[j] = partials[u(j)]
        p = n
        while p < len(partials):
            for j in range(n):
                out[j] += partials[u(p + j)]
            p += n


def _reduce_partials_rounded_once(worker_id, partials, out):
    n = len(out)
    for j in range(worker_id * n // 6, (worker_id + 1) * n // 6):
        out[j] = _partial_sum(partials, j, n)       # rounded once, to out's type


class ReducePartials(MultiVertex):
    """out = sum over q of partials[q*n:(q+1)*n] (n = len(out)), added in order q = 0, 1, ..."""

    partials = Input(Vector[FLOAT])
    out = Output(Vector[FLOAT])
    compute = staticmethod(_reduce_partials)

    @staticmethod
    def cycle_estimate(partials, out):
        return int(reduce_worker_cycles(out, partials // out if out else 0))


class ReducePartialsHalf(ReducePartials):
    """ReducePartials with a HALF output: summed in float32, rounded once."""

    out = Output(Vector[HALF])
    compute = staticmethod(_reduce_partials_rounded_once)


def _reduce_partials_acc(worker_id, alpha, partials, out):
    n = len(out)
    for j in range(worker_id * n // 6, (worker_id + 1) * n // 6):
        out[j] = out[j] + alpha[0] * _partial_sum(partials, j, n)


class ReducePartialsAcc(MultiVertex):
    """out += alpha * (sum of the partials), for mat_mul_acc."""

    alpha = Input(FLOAT)
    partials = Input(Vector[FLOAT])
    out = InOut(Vector[FLOAT])
    compute = staticmethod(_reduce_partials_acc)

    @staticmethod
    def cycle_estimate(alpha, partials, out):
        return int(reduce_worker_cycles(out, partials // out if out else 0, accumulate=True))


class ReducePartialsAccHalf(ReducePartialsAcc):
    """ReducePartialsAcc into a HALF tensor (alpha stays FLOAT)."""

    out = InOut(Vector[HALF])


_variants: dict = {}


def matmul_block_codelet(dtype, macs_per_cycle: int) -> type:
    """The MatMulBlock for an input type and an AMP rate (one class per pair, made once)."""
    dtype = as_type(dtype)
    key = (dtype.name, int(macs_per_cycle))
    if key == ("FLOAT", MatMulBlock.macs_per_cycle):
        return MatMulBlock
    if key not in _variants:
        name = f"MatMulBlock{key[0].title()}{key[1]}"
        ns = {"__module__": __name__, "__doc__": f"MatMulBlock on {key[0]} inputs at "
              f"{key[1]} MACs per cycle.", "macs_per_cycle": key[1]}
        if dtype != FLOAT:
            ns.update(a=Input(Vector[dtype]), b=Input(Vector[dtype]))
        _variants[key] = set_recipe(type(name, (MatMulBlock,), ns), matmul_block_codelet,
                                    key[0], key[1])
    return _variants[key]


def reduce_codelet(out_dtype, accumulate: bool) -> type:
    """The reduction codelet writing out_dtype (FLOAT or HALF), plain or accumulating."""
    half = out_dtype == HALF
    if accumulate:
        return ReducePartialsAccHalf if half else ReducePartialsAcc
    return ReducePartialsHalf if half else ReducePartials
