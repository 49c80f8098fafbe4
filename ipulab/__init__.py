"""ipulab: learn how a Graphcore IPU computes by simulating one.

Everything is loaded on first use (`ipulab.poplar`, `from ipulab import Graph, viz`), so
`import ipulab` and the `ipulab` command's parser stay quick: numba comes with poplar."""
import importlib

from .version import __version__

_MODULES = ("arch", "devices", "errors", "poplar", "poputil", "popops", "poplin", "popnn",
            "poprand", "gcl", "viz", "widgets", "data", "nn")
_NAMES = {"Device": "devices", "IPUModel": "devices", "Engine": "poplar", "Graph": "poplar",
          "Target": "target"}
__all__ = [*_MODULES, *_NAMES, "__version__"]


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _NAMES:
        return getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'ipulab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
