"""`ipulab course build`: exercises/ from solutions/, with nbgrader's markers.

In code cells, the lines from `### BEGIN SOLUTION` to `### END SOLUTION` become
`# YOUR CODE HERE` + `raise NotImplementedError` (at the marker's indentation); the lines from
`### BEGIN HIDDEN CHECKS` to `### END HIDDEN CHECKS` are removed (a cell left empty is dropped).
In markdown cells a solution block becomes `YOUR ANSWER HERE`. Outputs and execution counts are
cleared. The transform needs only nbformat, never the simulator.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN CHECKS", "### END HIDDEN CHECKS"
_MARKER = re.compile(r"^(\s*)(### (?:BEGIN|END) (?:SOLUTION|HIDDEN CHECKS))\s*$")


class BuildError(ValueError):
    """A notebook whose markers do not pair up."""


@dataclass
class CellChange:
    solutions: int = 0
    hidden: int = 0


def transform_source(source: str, markdown: bool = False, where: str = "") -> tuple[str, CellChange]:
    """The exercise version of one cell's source, and what was replaced."""
    out: list[str] = []
    change = CellChange()
    open_block: tuple[str, int] | None = None        # (marker, line number)
    for number, line in enumerate(source.split("\n"), 1):
        m = _MARKER.match(line)
        if m:
            indent, marker = m.groups()
            if marker.startswith("### BEGIN"):
                if open_block:
                    raise BuildError(f"{where}line {number}: {marker!r} inside the block opened by "
                                     f"{open_block[0]!r} on line {open_block[1]}")
                open_block = (marker, number)
                if marker == BEGIN_SOLUTION:
                    change.solutions += 1
                    out.extend(["YOUR ANSWER HERE"] if markdown else
                               [f"{indent}# YOUR CODE HERE", f"{indent}raise NotImplementedError"])
                else:
                    change.hidden += 1
            else:
                expected = BEGIN_SOLUTION if marker == END_SOLUTION else BEGIN_HIDDEN
                if not open_block or open_block[0] != expected:
                    raise BuildError(f"{where}line {number}: {marker!r} without {expected!r}")
                open_block = None
            continue
        if open_block is None:
            out.append(line)
    if open_block:
        raise BuildError(f"{where}line {open_block[1]}: {open_block[0]!r} is never closed")
    text = "\n".join(out)
    if change.hidden:                  # removing a block must not leave a trail of blank lines
        text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    return text, change


def exercise_notebook(nb, name: str = ""):
    """A new notebook node: the exercise version of solution notebook `nb`."""
    import copy

    import nbformat
    ex = copy.deepcopy(nb)
    cells = []
    totals = CellChange()
    for i, cell in enumerate(ex.cells):
        where = f"{name}: cell {i}: "
        if cell.cell_type in ("code", "markdown"):
            cell.source, change = transform_source(cell.source, cell.cell_type == "markdown", where)
            totals.solutions += change.solutions
            totals.hidden += change.hidden
            if change.hidden and not cell.source.strip():
                continue
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in ("execution", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
        cells.append(cell)
    ex.cells = cells
    ex.metadata.pop("widgets", None)
    ex.metadata.setdefault("ipulab", {})["generated_from"] = f"solutions/{name}" if name else \
        "solutions/"
    nbformat.validate(ex)
    return ex, totals


def notebook_text(nb) -> str:
    import nbformat
    return nbformat.writes(nb) + "\n"


def build(solutions: Path, exercises: Path, check_only: bool = False, log=print) -> list[str]:
    """Write exercises/ from solutions/. With check_only, write nothing and return the names of
    the notebooks that are missing, different or stale (an empty list: up to date)."""
    import nbformat
    solutions, exercises = Path(solutions), Path(exercises)
    if not solutions.is_dir():
        raise FileNotFoundError(f"no solutions folder at {solutions}")
    sources = sorted(p for p in solutions.glob("*.ipynb"))
    if not sources:
        raise FileNotFoundError(f"no notebooks in {solutions}")
    differ = []
    if not check_only:
        exercises.mkdir(parents=True, exist_ok=True)
    for src in sources:
        nb = nbformat.read(src, as_version=4)
        ex, totals = exercise_notebook(nb, src.name)
        text = notebook_text(ex)
        dst = exercises / src.name
        current = dst.read_text() if dst.exists() else None
        if current != text:
            differ.append(src.name)
            if not check_only:
                dst.write_text(text)
                log(f"wrote {dst} ({totals.solutions} solution block(s) replaced, "
                    f"{totals.hidden} hidden check block(s) removed)")
        elif not check_only:
            log(f"up to date: {dst}")
    names = {p.name for p in sources}
    for stale in sorted(exercises.glob("*.ipynb")) if exercises.is_dir() else []:
        if stale.name not in names:
            differ.append(stale.name)
            if not check_only:
                stale.unlink()
                log(f"removed {stale} (no solution notebook of that name)")
    return differ
