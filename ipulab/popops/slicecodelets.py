"""Codelets of popops.multi_slice and popops.multi_update_add: rows of a column block of a
table, picked or added to at offsets read at run time.

A vertex sees one column block of the table, gathered into its `table` field as V rows of w
elements (w = len(table) // V is found from the other fields), so a row is table[v*w:(v+1)*w].

Cycle estimates ([MODEL], worker-issue cycles): 10 to enter; per offset 4 (load it, check it
against V, compute the row's address); per row copied or added, one 64-bit load and store per
vector (2 floats or 4 halves; an add costs one more cycle per vector); zeroing a partial, one
64-bit store per vector; summing partials, one add per partial per 2 floats (f32v2add).
"""
from __future__ import annotations

from ..poplar import FLOAT, INT, InOut, Input, MultiVertex, Output, Vector, Vertex

ENTRY_CYCLES = 10
OFFSET_CYCLES = 4


def _vectors(w: int, dtype) -> int:
    return -(-w // (8 // dtype.size))


def _multi_slice(worker_id, offsets, table, out):
    n = len(offsets)
    w = len(out) // n
    V = len(table) // w
    for i in range(worker_id * n // 6, (worker_id + 1) * n // 6):
        r = offsets[i]
        if r >= 0 and r < V:
            for c in range(w):
                out[i * w + c] = table[r * w + c]
        else:
            for c in range(w):
                out[i * w + c] = 0.0


class MultiSlice(MultiVertex):
    """out row i = table row offsets[i] (zeros when the offset is outside the table); the
    workers share the rows."""

    fields_dtype = FLOAT
    offsets = Input(Vector[INT])
    table = Input(Vector[FLOAT])
    out = Output(Vector[FLOAT])
    compute = staticmethod(_multi_slice)

    @classmethod
    def cycle_estimate(cls, offsets, table, out):
        w = out // max(offsets, 1)
        rows = -(-offsets // 6)
        return ENTRY_CYCLES + rows * (OFFSET_CYCLES + _vectors(w, cls.fields_dtype))


def _multi_update_add(scale, offsets, updates, table):
    n = len(offsets)
    w = len(updates) // n
    V = len(table) // w
    a = scale[0]
    for i in range(n):
        r = offsets[i]
        if r >= 0 and r < V:
            for c in range(w):
                table[r * w + c] = table[r * w + c] + a * updates[i * w + c]


class MultiUpdateAdd(Vertex):
    """table row offsets[i] += scale * updates row i, for i = 0, 1, ... in order (offsets
    outside the table are skipped), each add rounded to the table's type (HALF adds in half,
    as PopLibs' vertex does). One worker: two updates of one row must not race."""

    fields_dtype = FLOAT
    scale = Input(FLOAT)
    offsets = Input(Vector[INT])
    updates = Input(Vector[FLOAT])
    table = InOut(Vector[FLOAT])
    compute = staticmethod(_multi_update_add)

    @classmethod
    def cycle_estimate(cls, scale, offsets, updates, table):
        w = updates // max(offsets, 1)
        return ENTRY_CYCLES + offsets * (OFFSET_CYCLES + 2 * _vectors(w, cls.fields_dtype))


def _multi_update_partial(scale, offsets, updates, partial):
    n = len(offsets)
    w = len(updates) // n
    V = len(partial) // w
    a = scale[0]
    for k in range(len(partial)):
        partial[k] = 0.0
    for i in range(n):
        r = offsets[i]
        if r >= 0 and r < V:
            for c in range(w):
                partial[r * w + c] = partial[r * w + c] + a * updates[i * w + c]


class MultiUpdatePartial(Vertex):
    """A float partial of multi_update_add for one group of offsets: partial = zeros, then row
    offsets[i] += scale * updates row i, in order."""

    fields_dtype = FLOAT
    scale = Input(FLOAT)
    offsets = Input(Vector[INT])
    updates = Input(Vector[FLOAT])
    partial = Output(Vector[FLOAT])
    compute = staticmethod(_multi_update_partial)

    @classmethod
    def cycle_estimate(cls, scale, offsets, updates, partial):
        w = updates // max(offsets, 1)
        return (ENTRY_CYCLES + -(-partial // 2)
                + offsets * (OFFSET_CYCLES + 2 * _vectors(w, cls.fields_dtype)))


def _add_partials(worker_id, partials, table):
    n = len(table)
    for j in range(worker_id * n // 6, (worker_id + 1) * n // 6):
        s = partials[j]
        p = j + n
        while p < len(partials):
            s += partials[p]
            p += n
        table[j] = table[j] + s


class AddPartials(MultiVertex):
    """table += the sum of the partials (whole groups of len(table)), added in order in
    float32 and then to the table once; the workers share the elements."""

    fields_dtype = FLOAT
    partials = Input(Vector[FLOAT])
    table = InOut(Vector[FLOAT])
    compute = staticmethod(_add_partials)

    @staticmethod
    def cycle_estimate(partials, table):
        groups = partials // max(table, 1)
        return ENTRY_CYCLES + -(-table // 12) * (groups + 1)
