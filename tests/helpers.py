"""Helpers shared by the test modules (plain functions, imported explicitly)."""
import numpy as np

from ipulab import poplar

# The three ways an Engine runs codelets (DESIGN section 4): they must agree bit for bit.
MODES = {
    "compiled": {},
    "checked": {"debug.checkedCodelets": "true"},
    "python": {"debug.codeletMode": "python"},
}


def run_engine(graph, programs, device, options=None, program=0):
    """Compile, load and run one program; return the engine."""
    e = poplar.Engine(graph, programs, options or {})
    e.load(device)
    e.run(program)
    return e


def bits(a):
    """The raw bits of a float array, for bit-for-bit comparisons (NaN-safe, -0.0 != 0.0)."""
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])
