"""Codelets shared by several test modules."""
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
