"""The Poplar-like graph API: Graph, tensors, codelets, programs, Engine, Profile."""
from . import program
from .engine import Engine
from .graph import Graph
from .state import ComputeSet, DataStream, RemoteBuffer
from .vertices import Regions, VertexRange, VertexRef
from .parallel import parallel
from .profile import Profile
from .program import SyncType
from .tensor import Tensor, concat
from .types import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Type
from .vertex import InOut, Input, MultiVertex, Output, Vector, VectorList, Vertex

__all__ = ["program", "parallel", "Engine", "ComputeSet", "DataStream", "Graph", "RemoteBuffer",
           "VertexRef", "Regions", "VertexRange", "Profile", "SyncType", "Tensor", "concat", "BOOL", "FLOAT", "HALF", "INT", "UNSIGNED_INT",
           "Type", "InOut", "Input", "MultiVertex", "Output", "Vector", "VectorList", "Vertex"]
