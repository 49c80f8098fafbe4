"""Poplar element types and how each is stored in the simulator's arenas."""
from __future__ import annotations

import numpy as np

from ..errors import GraphError


class Type:
    """A Poplar element type: its name, device size, host dtype and storage arena."""

    def __init__(self, name: str, host: np.dtype, storage: np.dtype):
        self.name = name
        self.host = np.dtype(host)        # dtype of numpy arrays the host reads and writes
        self.storage = np.dtype(storage)  # dtype of the arena holding it (HALF lives in float32)
        self.size = self.host.itemsize    # bytes per element on the device

    @property
    def rounds_to_half(self) -> bool:
        return self.host == np.float16

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        """FLOAT == FLOAT, and also FLOAT == np.float32 or "FLOAT" (one type, three spellings)."""
        if isinstance(other, Type):
            return other.name == self.name
        try:
            return as_type(other).name == self.name
        except GraphError:
            return False

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self):
        return (as_type, (self.name,))


FLOAT = Type("FLOAT", np.float32, np.float32)
HALF = Type("HALF", np.float16, np.float32)
INT = Type("INT", np.int32, np.int32)
UNSIGNED_INT = Type("UNSIGNED_INT", np.uint32, np.uint32)
BOOL = Type("BOOL", np.bool_, np.bool_)

TYPES = (FLOAT, HALF, INT, UNSIGNED_INT, BOOL)
_BY_NAME = {t.name: t for t in TYPES}
_BY_NUMPY = {t.host: t for t in TYPES}


def as_type(dtype) -> Type:
    """A poplar Type from a Type, its name, or a numpy dtype (np.float32 -> FLOAT, ...)."""
    if isinstance(dtype, Type):
        return dtype
    if isinstance(dtype, str) and dtype.upper() in _BY_NAME:
        return _BY_NAME[dtype.upper()]
    try:
        return _BY_NUMPY[np.dtype(dtype)]
    except (TypeError, KeyError):
        names = ", ".join(_BY_NAME)
        raise GraphError(f"unsupported element type {dtype!r}; use one of {names} "
                         "or np.float32 / np.float16 / np.int32 / np.uint32 / np.bool_") from None


def round_half(values: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest half-precision value (stored back as float32)."""
    return values.astype(np.float16).astype(np.float32)
