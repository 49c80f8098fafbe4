"""poprand's codelets and the counter-based generator they share.

Every random value is a pure function of (seed, seed_modifier, element index), where the index
is the element's position in the flattened output tensor:

    key  = mix64(seed64 ^ mix64(modifier + GAMMA))
    bits = mix64(key + (index + 1) * GAMMA)               (mod 2^64)

mix64 is SplitMix64's finaliser (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number
generators"; the constants are Stafford's "Mix13"), so `bits` is exactly the index-th output of
a SplitMix64 stream whose state starts at `key`. Nothing depends on which tile or vertex computes
an element, so results are identical for any mapping or tile count, and bit-identical for the
same seed in every codelet mode (the generator is a compiled numba function that the python
mode calls too).

From 64 bits: uniform floats use the top 32 bits (u in [0, 1) at 2^-32 steps); normals use
Box-Muller on both halves (u1 in (0, 1], so tails reach about 6.7 sigma); integers take bits
modulo the range (bias < range / 2^64); Bernoulli and dropout compare the top 32 bits' u with
the probability (rounded to float32, as it is stored on the tiles).

Cycle estimates ([MODEL], worker-issue cycles): a real tile has a hardware generator giving 64
random bits per instruction; we charge 10 to enter, 4 per region and per element: uniform 3
(draw, scale, store), normal 6 (a hardware f32v2grand gives two; plus scaling), integer
uniform 4, Bernoulli 3, dropout 4 (load, draw, select and scale, two stores).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..poplar import BOOL, FLOAT, INT, UNSIGNED_INT, Input, Output, Vector, VectorList, Vertex

GAMMA = 0x9E3779B97F4A7C15
TWO_POW_M32 = 2.0 ** -32


@njit(cache=True)
def mix64(z):
    """SplitMix64's finaliser of a uint64."""
    z = np.uint64(z)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def stream_key(seed_lo, seed_hi, modifier):
    """The stream of a 64-bit seed (two 32-bit words) and a 32-bit seed modifier.

    Returned as the int64 with the same bits: numba hands uint64 results to Python as ints,
    which it would read back as int64 (the python codelet mode passes keys around)."""
    seed = (np.uint64(seed_hi) << np.uint64(32)) | np.uint64(seed_lo)
    return np.int64(mix64(seed ^ mix64(np.uint64(modifier) + np.uint64(GAMMA))))


@njit(cache=True)
def draw(key, index):
    """64 random bits for element `index` of the stream `key` (an int64 holding its bits)."""
    return mix64(np.uint64(key) + (np.uint64(index) + np.uint64(1)) * np.uint64(GAMMA))


@njit(cache=True)
def unit(bits):
    """u in [0, 1) from the top 32 bits."""
    return np.float64(bits >> np.uint64(32)) * TWO_POW_M32


UNIFORM, UNIFORM_INT, NORMAL, BERNOULLI = 0, 1, 2, 3


@njit(cache=True)
def normal_value(bits, mean, stddev):
    """Box-Muller on the two halves of 64 random bits."""
    u1 = (np.float64(bits >> np.uint64(32)) + 1.0) * TWO_POW_M32          # (0, 1]
    u2 = np.float64(bits & np.uint64(0xFFFFFFFF)) * TWO_POW_M32           # [0, 1)
    return mean + stddev * math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@njit(cache=True)
def fill(out, key, start, kind, a, b):
    """out[k] = the value of element start + k of stream key, for a distribution kind:
    UNIFORM in [a, b), UNIFORM_INT in [a, b] (inclusive), NORMAL (mean a, stddev b),
    BERNOULLI (1 with probability a)."""
    for k in range(len(out)):
        bits = draw(key, start + k)
        if kind == UNIFORM:
            out[k] = a + (b - a) * unit(bits)
        elif kind == UNIFORM_INT:
            span = np.uint64(np.int64(b) - np.int64(a) + 1)
            out[k] = np.int64(a) + np.int64(bits % span)
        elif kind == NORMAL:
            out[k] = normal_value(bits, a, b)
        else:
            out[k] = 1 if unit(bits) < a else 0


def _random(seed, meta, params, out):
    key = stream_key(seed[0], seed[1], meta[0])
    for j in range(len(out)):
        fill(out[j], key, meta[2 + j], meta[1], np.float64(params[0]), np.float64(params[1]))


def _dropout(seed, meta, params, inp, out, mask):
    key = stream_key(seed[0], seed[1], meta[0])
    for j in range(len(out)):
        x = inp[j]
        fill(mask[j], key, meta[2 + j], BERNOULLI, 1.0 - np.float64(params[0]), 0.0)
        for k in range(len(x)):
            out[j][k] = x[k] * params[1] if mask[j][k] else np.float32(0.0)


def _estimate(per_element):
    def cycle_estimate(seed, meta, params, out=(), **other):
        return 10 + sum(4 + per_element * n for n in out)
    return staticmethod(cycle_estimate)


class Uniform(Vertex):
    """out[j][k] = element meta[2 + j] + k of the stream (seed, modifier meta[0]) drawn from
    distribution meta[1] (the class's `kind`) with parameters params: uniform in
    [params[0], params[1])."""

    kind = UNIFORM
    fields_dtype = FLOAT
    seed = Input(Vector[UNSIGNED_INT])
    meta = Input(Vector[UNSIGNED_INT])
    params = Input(Vector[FLOAT])
    out = Output(VectorList[FLOAT])
    compute = staticmethod(_random)
    cycle_estimate = _estimate(3)


class UniformInt(Uniform):
    """Integers uniform in [params[0], params[1]] (inclusive)."""

    kind = UNIFORM_INT
    fields_dtype = INT
    params = Input(Vector[INT])
    out = Output(VectorList[INT])
    cycle_estimate = _estimate(4)


class Normal(Uniform):
    """Normal with mean params[0] and standard deviation params[1] (Box-Muller)."""

    kind = NORMAL
    cycle_estimate = _estimate(6)


class Bernoulli(Uniform):
    """1 with probability params[0], else 0."""

    kind = BERNOULLI


class Dropout(Uniform):
    """out = in * params[1] where kept, 0 where dropped (probability params[0]); mask = kept
    (meta as Uniform's)."""

    kind = BERNOULLI
    inp = Input(VectorList[FLOAT], name="in")
    mask = Output(VectorList[BOOL])
    compute = staticmethod(_dropout)
    cycle_estimate = _estimate(4)


DATA_FIELDS = {Uniform: ("out",), UniformInt: ("out",), Normal: ("out",), Bernoulli: ("out",),
               Dropout: ("inp", "out")}
