"""What a check says when an answer is wrong: Fail carries the message; explain() turns any
exception raised while building, compiling or running a learner's graph into an actionable
message that names the rule of the machine that was broken."""
from __future__ import annotations

import re
import traceback
from pathlib import Path

import numpy as np

from ...errors import (CodeletError, EngineError, GraphError, IpuLabError, ProgramError,
                      TileMemoryError)

_PACKAGE = str(Path(__file__).resolve().parents[2])


class Fail(Exception):
    """The answer is wrong; str() is the message shown after ✗."""


class NotAnswered(Exception):
    """The answer still raises NotImplementedError (or is missing)."""


def where(exc: BaseException) -> str:
    """' (in your code, line N: `source`)' for the innermost frame outside ipulab, or ''
    (for an exception raised in a graded submission's process, what that process said)."""
    if hasattr(exc, "__ipulab_where__"):
        return exc.__ipulab_where__
    return where_in([(f.filename, f.lineno, f.line) for f in
                     traceback.extract_tb(exc.__traceback__)])


def where_in(frames) -> str:
    """where() of a traceback given as (file name, line number, source line) frames."""
    mine = [f for f in frames if not str(Path(f[0]).resolve()).startswith(_PACKAGE)]
    if not mine:
        return ""
    _, lineno, line = mine[-1]
    line = f" `{line.strip()}`" if line else ""
    return f" (in your code, line {lineno}:{line})"


RULES = {      # (first match wins: "read/write hazard" contains "write hazard")
    "read/write hazard": (
        "BSP rule broken: a vertex reads, as an Input, an element that another vertex of the "
        "same compute set writes — which value would it see?",
        "Split them into two compute sets (the reader in the later one), or make the field "
        "InOut in a single vertex."),
    "write hazard": (
        "BSP rule broken: two vertices of one compute set write the same element — on another "
        "machine that would be a race, so the compiler rejects it.",
        "Give each vertex its own output elements (e.g. one partial sum per vertex), or put the "
        "writers in different compute sets: one superstep after the other."),
    "writes constant": (
        "A vertex writes a constant: constants are read-only.",
        "Connect a variable (g.add_variable) to the field it writes."),
    "not mapped to a tile": (
        "Every element of every variable, and every vertex, must live on exactly one tile.",
        "Call g.set_tile_mapping(tensor_or_vertex, tile) (or poputil.map_tensor_linearly) "
        "before building the Engine."),
    "is not connected": (
        "Every field of a vertex must be connected to a tensor.",
        "Pass all fields in add_vertex's connections dict (keys are the fields' names)."),
}


def _rule(text: str) -> str:
    for key, (rule, fix) in RULES.items():
        if key in text:
            return f"{rule}\n  The compiler said: {text}\n  Fix: {fix}"
    return text


def explain(exc: BaseException) -> str:
    """An actionable message for an exception raised by (or inside) the learner's code."""
    text = str(exc)
    if isinstance(exc, TileMemoryError):
        return (f"Tile {exc.tile} overflows: it needs {exc.needed:,} bytes but has "
                f"{exc.available:,}. Largest there: "
                + ", ".join(f"{n} ({b:,} B)" for n, b in exc.largest[:4])
                + ". Fix: spread the biggest tensors over more tiles.")
    if isinstance(exc, GraphError):
        return _rule(text)
    if isinstance(exc, CodeletError):
        if "failed to compile" in text:
            first = text.split("numba said:")[0].strip()
            detail = [ln for ln in text.split("numba said:")[-1].splitlines() if ln.strip()]
            hint = ("\n  numba: " + detail[0].strip()) if detail else ""
            return (f"{first}{hint}\n  Codelets are compiled by numba: use loops over numbers "
                    "and arrays, no Python lists/dicts/strings inside compute(); test it with "
                    "options={'debug.codeletMode': 'python'} to see plain Python errors.")
        if "IndexError" in text:
            return (f"Out-of-bounds access: {text}.\n  A field of n elements has indices "
                    "0 … n-1: check the loop bounds and every index you compute.")
        return text
    if isinstance(exc, (ProgramError, EngineError, IpuLabError)):
        return f"{type(exc).__name__}: {text}"
    return f"your code raised {type(exc).__name__}: {text}{where(exc)}"


def fmt(value) -> str:
    """A number as a learner would write it: 14.0, -3, nan."""
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if not np.isfinite(v):
            return str(v)
        return repr(v) if v != int(v) or abs(v) >= 1e16 else f"{v:.1f}"
    return str(value.item() if hasattr(value, "item") else value)


def fmt_index(name: str, shape: tuple, flat: int) -> str:
    if len(shape) <= 1:
        return f"{name}[{flat}]"
    return f"{name}[{', '.join(str(int(i)) for i in np.unravel_index(flat, shape))}]"


def short(values, limit: int = 8) -> str:
    """A short rendering of an array: [1.0, 2.0, … 16 values]."""
    flat = np.asarray(values).ravel()
    items = ", ".join(fmt(v) for v in flat[:limit])
    return f"[{items}{', …' if flat.size > limit else ''}]" + (
        f" ({flat.size} values)" if flat.size > limit else "")


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)
