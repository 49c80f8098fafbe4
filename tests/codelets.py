"""Codelets shared by several test modules."""
from ipulab import poplar


class SumVertex(poplar.Vertex):
    """Poplar tutorial 3's vertex: out = sum(in), accumulated like `s = 0.0; s += x`."""
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(inp, out):
        s = 0.0
        for x in inp:
            s += x
        out[0] = s


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
