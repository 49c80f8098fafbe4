"""Codelets the exercises give you (the ones the guided notebooks wrote). They live in a module,
so they are compiled once per machine and cached on disk: checks stay quick."""
import numpy as np

from .. import poplar


class SumVertex(poplar.Vertex):
    """out = the sum of the elements of in (default estimate: 10 + elements touched)."""
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(inp, out):
        s = 0.0
        for x in inp:
            s += x
        out[0] = s


class AddTo(poplar.Vertex):
    """acc += the sum of part."""
    part = poplar.Input(poplar.Vector[poplar.FLOAT])
    acc = poplar.InOut(poplar.FLOAT)

    @staticmethod
    def compute(part, acc):
        s = 0.0
        for x in part:
            s += x
        acc[0] += s


class Divide(poplar.Vertex):
    """out = in / by, element by element (`by` is one number)."""
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    by = poplar.Input(poplar.FLOAT)
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(inp, by, out):
        for i in range(len(inp)):
            out[i] = inp[i] / by[0]


class Double(poplar.Vertex):
    """x = 2 x, in place."""
    x = poplar.InOut(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(x):
        for i in range(len(x)):
            x[i] = x[i] * 2.0


class Dot(poplar.Vertex):
    """out = a · x, for two vectors of the same length (estimate 10 + len(a))."""
    a = poplar.Input(poplar.Vector[poplar.FLOAT])
    x = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(a, x, out):
        s = np.float32(0.0)
        for j in range(len(a)):
            s += a[j] * x[j]
        out[0] = s

    @staticmethod
    def cycle_estimate(a, x, out):
        return 10 + a


class SumPartials(poplar.Vertex):
    """out = the sum of the elements of p (estimate 10 + len(p))."""
    p = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(p, out):
        s = np.float32(0.0)
        for j in range(len(p)):
            s += p[j]
        out[0] = s

    @staticmethod
    def cycle_estimate(p, out):
        return 10 + p


class RowDot(poplar.Vertex):
    """y = a · x[:len(a)]: one row of a triangular (masked) matrix (estimate 10 + 2 len(a))."""
    a = poplar.Input(poplar.Vector[poplar.FLOAT])
    x = poplar.Input(poplar.Vector[poplar.FLOAT])
    y = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(a, x, y):
        s = np.float32(0.0)
        for j in range(len(a)):
            s += a[j] * x[j]
        y[0] = s

    @staticmethod
    def cycle_estimate(a, x, y):
        return 10 + 2 * a
