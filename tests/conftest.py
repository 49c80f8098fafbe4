"""Shared fixtures: small ipu2 devices, a graph on them, the three codelet modes, engine helpers.

Devices are immutable, so they are session-scoped (hypothesis tests may use them too).
"""
import ctypes
import gc

import pytest
from hypothesis import HealthCheck, settings

import ipulab
from ipulab import poplar

from helpers import MODES

settings.register_profile(
    "ipulab", max_examples=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("ipulab")


@pytest.fixture(autouse=True, scope="module")
def _release_memory_after_each_file():
    """A worker runs file after file (make test: xdist, a file at a time): give back what a file's
    trainers and executables held before the next, so no worker grows over the whole suite."""
    yield
    poplar.executables.forget_in_memory()
    gc.collect()
    gc.freeze()     # what outlived the file stays: the next files' collections skip it
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)         # glibc keeps freed arenas otherwise
    except (OSError, AttributeError):
        pass


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
