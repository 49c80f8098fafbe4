"""What popnn's operations share: their inputs must be floating point."""
from __future__ import annotations

from ..errors import GraphError


def check_float(t, what: str) -> None:
    """t must be FLOAT or HALF."""
    if t.dtype.name not in ("FLOAT", "HALF"):
        raise GraphError(f"{what}: '{t.name}' is {t.dtype}; this operation takes FLOAT or "
                         "HALF tensors (popops.cast first)")
