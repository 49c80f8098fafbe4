"""What the commands print and write: plain-text tables, and a report path checked before
any work."""
from __future__ import annotations

import os
from pathlib import Path


def table(headers: list[str], rows: list[list[str]], left: int = 2) -> str:
    """A plain-text table: the first `left` (text) columns left-aligned, numbers right-aligned."""
    widths = [max(len(c) for c in col) for col in zip(headers, *rows)]

    def line(cells):
        return "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def report_problem(path: str) -> str | None:
    """Why --report PATH could not be written (a folder, a missing folder, no permission), or
    None: checked before any work, so a long run does not end in a traceback."""
    target = Path(path).expanduser()
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        return f"--report {path} is a folder: give a file in it, e.g. {target / 'report.html'}"
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        return f"--report {path}: {folder} {what}"
    if target.exists() and not os.access(target, os.W_OK):
        return f"--report {path}: no permission to write {target}"
    if not target.exists() and not os.access(folder, os.W_OK | os.X_OK):
        return f"--report {path}: no permission to write in {folder}"
    return None
