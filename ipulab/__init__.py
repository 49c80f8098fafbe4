"""ipulab: learn how a Graphcore IPU computes by simulating one."""
from . import arch, devices, errors, poplar, poputil
from .devices import Device, IPUModel
from .poplar import Engine, Graph
from .target import Target

__version__ = "0.1.0"
__all__ = ["arch", "devices", "errors", "poplar", "poputil", "Device", "IPUModel", "Engine",
           "Graph", "Target", "__version__"]
