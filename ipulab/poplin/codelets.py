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
`fastmath` codelet. Smaller slabs -- most of them when a small network is spread over
thousands of tiles -- go to rows_product, where a BLAS call would cost more than the work:
eight columns at a time in SIMD lanes, summed over k in order, the same bits in every mode
and on every host.

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
def _lanes(a, b, c, k, n, i, j):
    """c[i, j:j+8]: one row, eight columns."""
    acc = f32x8_zero()
    for kk in range(k):
        acc = f32x8_axpy(acc, a[u(i * k + kk)], f32x8_load(b, kk * n + j))
    f32x8_store(c, i * n + j, acc)


@njit(cache=True, inline="always")
def _lanes_two_rows(a, b, c, k, n, i, j):
    """c[i:i+2, j:j+8]: each load of b serves two rows."""
    acc0 = f32x8_zero()
    acc1 = f32x8_zero()
    for kk in range(k):
        v = f32x8_load(b, kk * n + j)
        acc0 = f32x8_axpy(acc0, a[u(i * k + kk)], v)
        acc1 = f32x8_axpy(acc1, a[u(i * k + k + kk)], v)
    f32x8_store(c, i * n + j, acc0)
    f32x8_store(c, i * n + n + j, acc1)


@njit(cache=True, inline="always")
def _wide_lanes(a, b, c, k, n, i, j):
    """c[i, j:j+16]: two accumulators in flight."""
    acc0 = f32x8_zero()
    acc1 = f32x8_zero()
    for kk in range(k):
        x = a[u(i * k + kk)]
        acc0 = f32x8_axpy(acc0, x, f32x8_load(b, kk * n + j))
        acc1 = f32x8_axpy(acc1, x, f32x8_load(b, kk * n + j + LANES))
    f32x8_store(c, i * n + j, acc0)
    f32x8_store(c, i * n + j + LANES, acc1)


@njit(cache=True, inline="always")
def _wide_lanes_two_rows(a, b, c, k, n, i, j):
    """c[i:i+2, j:j+16]: four accumulators in flight, each load serving two of them."""
    acc0 = f32x8_zero()
    acc1 = f32x8_zero()
    acc2 = f32x8_zero()
    acc3 = f32x8_zero()
    for kk in range(k):
        x0 = a[u(i * k + kk)]
        x1 = a[u(i * k + k + kk)]
        v0 = f32x8_load(b, kk * n + j)
        v1 = f32x8_load(b, kk * n + j + LANES)
        acc0 = f32x8_axpy(acc0, x0, v0)
        acc1 = f32x8_axpy(acc1, x0, v1)
        acc2 = f32x8_axpy(acc2, x1, v0)
        acc3 = f32x8_axpy(acc3, x1, v1)
    f32x8_store(c, i * n + j, acc0)
    f32x8_store(c, i * n + j + LANES, acc1)
    f32x8_store(c, i * n + n + j, acc2)
    f32x8_store(c, i * n + n + j + LANES, acc3)


@njit(cache=True, inline="always")
def rows_product(a, b, c, k, n, r0, r1, j0, j1):
    """c[i*n + j] = the sum over kk = 0, 1, ... (in that order, from +0.0) of
    a[i*k + kk] * b[kk*n + j], for rows r0 <= i < r1 and columns j0 <= j < j1.

    Eight columns at a time in SIMD lanes, with the same roundings as one column at a time;
    past the last full eight, one more eight ending at j1 (recomputing a few columns, to the
    same bits) rather than a column at a time. Two rows and sixteen columns at a time where
    they are there: each output's sum is still its own chain, in order, but several chains are
    in flight (one chain waits on its adds). Rows narrower than eight go column by column.
    Indices are unsigned (u): numba checks every signed index for a negative value, which
    here costs as much as the arithmetic."""
    i = r0
    while i < r1:
        two = i + 1 < r1
        if j1 - j0 >= LANES:
            j = j0
            while j < j1:
                j = min(j, j1 - LANES)
                wide = j + 2 * LANES <= j1
                if two and wide:
                    _wide_lanes_two_rows(a, b, c, k, n, i, j)
                elif two:
                    _lanes_two_rows(a, b, c, k, n, i, j)
                elif wide:
                    _wide_lanes(a, b, c, k, n, i, j)
                else:
                    _lanes(a, b, c, k, n, i, j)
                j += 2 * LANES if wide else LANES
        else:
            for r in range(i, i + 1 + two):
                for j in range(j0, j1):
                    s = np.float32(0.0)
                    for kk in range(k):
                        s += a[u(r * k + kk)] * b[u(kk * n + j)]
                    c[u(r * n + j)] = s
        i += 1 + two


def _matmul_block(worker_id, dims, a, b, c):
    m = np.int64(dims[0])
    k = np.int64(dims[1])
    n = np.int64(dims[2])
    if m >= 6:                           # a slab of rows per worker
        r0 = worker_id * m // 6
        r1 = (worker_id + 1) * m // 6
        if k > 0 and (r1 - r0) * k * n >= BLAS_MACS:
            np.dot(a[r0 * k:r1 * k].reshape((r1 - r0, k)), b.reshape((k, n)),
                   c[r0 * n:r1 * n].reshape((r1 - r0, n)))
        else:
            rows_product(a, b, c, k, n, r0, r1, 0, n)
        return
    # a short block: each row's columns split over parts = 6 // m workers, dealt row by row
    # (worker_id // parts and % parts by subtraction: a division costs more than the work)
    parts = 6 if m == 1 else 3 if m == 2 else 2 if m == 3 else 1
    i, part = 0, worker_id
    while part >= parts:
        part -= parts
        i += 1
    if i < m:
        rows_product(a, b, c, k, n, i, i + 1, part * n // parts, (part + 1) * n // parts)


class MatMulBlock(MultiVertex):
    """c = a @ b for one block: a (m x k), b (k x n), c (m x n), all row-major, dims = [m, k, n].

    Each worker takes a slab of rows (or, with fewer than six rows, part of a row's columns)
    and multiplies it with BLAS. c holds float partials, whatever the input type.
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
