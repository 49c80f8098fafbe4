"""Shared fixtures: small ipu2 devices, a graph on them, the three codelet modes, engine helpers.

Devices are immutable, so they are session-scoped (hypothesis tests may use them too).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import ipulab
from ipulab import poplar

settings.register_profile(
    "ipulab", max_examples=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("ipulab")

# The three ways an Engine runs codelets (DESIGN section 4): they must agree bit for bit.
MODES = {
    "compiled": {},
    "checked": {"debug.checkedCodelets": "true"},
    "python": {"debug.codeletMode": "python"},
}


@pytest.fixture(scope="session")
def dev4():
    """One ipu2 with 4 tiles."""
    m = ipulab.IPUModel("ipu2")
    m.tiles_per_ipu = 4
    return m.create_device()


@pytest.fixture(scope="session")
def dev8():
    return ipulab.devices.ipu("ipu2", tiles_per_ipu=8)


@pytest.fixture(scope="session")
def dev16():
    return ipulab.devices.ipu("ipu2", tiles_per_ipu=16)


@pytest.fixture(scope="session")
def dev_full():
    """A full ipu2: 1,472 tiles (only for numbers that need every tile)."""
    return ipulab.IPUModel("ipu2").create_device()


@pytest.fixture
def g4(dev4):
    return poplar.Graph(dev4.target)


@pytest.fixture
def g16(dev16):
    return poplar.Graph(dev16.target)


@pytest.fixture(params=list(MODES))
def mode(request):
    """(name, engine options) for each codelet mode."""
    return request.param, MODES[request.param]


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
