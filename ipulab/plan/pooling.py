"""Pooling as a cost class (popnn.pooling): rows pooled where their input rows are, a vertex
per worker's rows and tile, both ways, with each codelet's fields and estimate."""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod
from typing import ClassVar

from .layers import Layer


@dataclass(frozen=True)
class Pool(Layer):
    """Pooling (popnn.pooling): rows pooled where their input rows are, a vertex per worker's
    rows and tile, both ways."""

    geometry: tuple = ()        # (c, h, w, ho, wo, kh, kw, sh, sw, ph, pw)
    op: ClassVar[str] = ""

    def codelet(self, backward: bool):
        """popnn's codelet of its forward or backward vertices."""
        raise NotImplementedError

    def window(self) -> list:
        """Its geometry as the codelets read it (a constant on every tile it runs on)."""
        from ..popnn.pooling import Window
        c, h, w, ho, wo, kh, kw, sh, sw, ph, pw = self.geometry
        return Window(1, c, h, w, kh, kw, sh, sw, ph, pw).geometry(self.op)

    def run_ints(self, backward: bool) -> int:
        """INTs of a vertex's runs constant: the first rows of its regions."""
        return 2

    def vertex_cycles(self, backward: bool, rows: int) -> int:
        """The codelet's estimate (of its fields' sizes) for a vertex of `rows` rows (pooled
        rows forward, input rows backward)."""
        c, h, w, ho, wo = self.geometry[:5]
        geo, runs = len(self.window()), self.run_ints(backward)
        if backward:
            pooled = ceil(rows * ho / h)
            return self.codelet(True).cycle_estimate(geo, runs, grad=(pooled * wo,),
                                                     out=(rows * w,))
        return self.codelet(False).cycle_estimate(geo, runs, out=(rows * wo,))

    def forward(self, ipu, run, x):
        c, h, w, ho, wo = self.geometry[:5]
        out = x.holding(x.elements * ho * wo // (h * w))
        ipu.pool(self.key(f"{self.op}_pool"), out, out.elements // wo, False, self)
        ipu.hold(("act", run.micro_batch, self.index), out.elements * ipu.mc.E)
        return out

    def backward(self, ipu, run, dy):
        w = self.geometry[2]
        dx = run.inputs[self.index]       # rows laid out like the forward's input
        ipu.pool(self.key(f"{self.op}_pool_grad"), dx, dx.elements // w, True, self,
                 self.summed(ipu, dy))
        return self.replaced(ipu, run, dx)


class MaxPool2d(Pool):
    """nn.MaxPool2d: its gradient to each window's first maximum (the input and the pooled
    output read again; a third INT a run)."""

    op = "max"

    def codelet(self, backward: bool):
        from ..popnn import poolcodelets as pc
        return pc.MaxPoolGrad if backward else pc.MaxPool

    def run_ints(self, backward: bool) -> int:
        return 3 if backward else 2


class AvgPool2d(Pool):
    """nn.AvgPool2d: its gradient spread over each window."""

    op = "avg"

    def codelet(self, backward: bool):
        from ..popnn import poolcodelets as pc
        return pc.AvgPoolGrad if backward else pc.AvgPool


def pool_of(cls, layer, i: int, shape: tuple, out: tuple, work: int, **kw) -> Pool:
    (kh, kw_), (sh, sw), (ph, pw) = layer.kernel_size, layer.stride, layer.padding
    n_in, n_out = prod(shape), prod(out)
    return cls(f"{i}.{cls.__name__}", 0, 0, float(n_out * kh * kw_), n_in, n_in + n_out, 0, i,
               (), work, geometry=(shape[0], shape[1], shape[2], out[1], out[2], kh, kw_, sh, sw,
                                   ph, pw))
