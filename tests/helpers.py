"""Helpers shared by the test modules (plain functions, imported explicitly)."""
import importlib.util

import numpy as np

from ipulab import poplar
from ipulab.machine import lanes

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


def every_lane(monkeypatch):
    """Lanes on every run that has parts to share, however small or long it is and however the
    workers did (lanes.py's gates off): the tests that lanes give the bits of one lane."""
    monkeypatch.setattr(lanes, "threads", lambda n, pace=None: n)
    monkeypatch.setattr(lanes, "MIN_SECONDS", 0)
    monkeypatch.setattr(lanes, "GIVE_UP", float("inf"))


def load_file(path, name: str):
    """The module in a file that is not importable by name (a sandbox's boot script, a test
    module below tests/), loaded afresh as `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
