"""popops.Operation: the reductions PopLibs names (popops::Operation)."""
from __future__ import annotations

import enum

from ..errors import GraphError


def parse_member(cls, value, what: str, hint: str):
    """The member of enum cls given itself or its value in any case, '-' for '_', and '_'
    optional ("add", "SQUARE_ADD", "square-add", "squareAdd"); GraphError otherwise."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "_")
        for member in cls:
            if key in (member.value, member.value.replace("_", "")):
                return member
    names = ", ".join(m.value for m in cls)
    raise GraphError(f"unknown {what} {value!r}; use {hint} or one of: {names}")


class Operation(enum.Enum):
    ADD = "add"
    MUL = "mul"
    MIN = "min"
    MAX = "max"
    SQUARE_ADD = "square_add"
    LOGICAL_AND = "logical_and"
    LOGICAL_OR = "logical_or"

    @property
    def is_logical(self) -> bool:
        return self in (Operation.LOGICAL_AND, Operation.LOGICAL_OR)

    @classmethod
    def parse(cls, op) -> "Operation":
        """An Operation from itself or its name in any case ("add", "MAX", "square_add")."""
        return parse_member(cls, op, "reduction operation", "popops.Operation.ADD, ...")
