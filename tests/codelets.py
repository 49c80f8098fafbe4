"""Codelets shared by several test modules."""
import numpy as np

from ipulab import poplar
from ipulab.course.codelets import SumVertex  # noqa: F401  (tutorial 3's vertex, as the course ships it)


class Dot(poplar.Vertex):
    a = poplar.Input(poplar.Vector[poplar.FLOAT])
    b = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(a, b, out):
        s = 0.0
        for i in range(len(a)):
            s += a[i] * b[i]
        out[0] = s


class DotFast(Dot):
    """Dot with fast-math: LLVM may sum in SIMD lanes."""
    fastmath = True


class Scale(poplar.Vertex):
    """out = 3 * inp; raises on a negative first element (a learner's check in compiled
    mode, where bounds are not checked but a raise still is)."""

    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(inp, out):
        if inp[0] < 0:
            raise ValueError("negative input")
        for i in range(len(inp)):
            out[i] = inp[i] * np.float32(3)
