"""ipulab: learn how a Graphcore IPU computes by simulating one."""
import importlib

from . import arch, devices, errors, poplar, poputil
from .devices import Device, IPUModel
from .poplar import Engine, Graph
from .target import Target

__version__ = "0.1.0"
# Loaded on first use, so `import ipulab` stays quick: `ipulab.popops`, `from ipulab import viz`.
_LAZY = ("popops", "poplin", "popnn", "poprand", "gcl", "viz", "widgets", "data", "nn")
__all__ = ["arch", "devices", "errors", "poplar", "poputil", "Device", "IPUModel", "Engine",
           "Graph", "Target", "__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'ipulab' has no attribute {name!r}")
