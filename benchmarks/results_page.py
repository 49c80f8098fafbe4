"""docs/results.md, the site's page of benchmark results: written by `make bench`
(benchmarks/run.py) from the tables it printed, with the run's date and machine; never by hand."""
from __future__ import annotations

import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "results.md"


def machine() -> str:
    """One line naming the machine: OS, architecture, CPU, cores, Python, load when the run ended."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = ", load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    return (f"{platform.system()} {platform.release()} {platform.machine()}, {cpu}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}{load}")


def _cell(value) -> str:
    return str(value).replace("|", "\\|")


def table(kind: str, rows: list[tuple]) -> list[str]:
    """A markdown table. kind "targets": rows of (what, measured, ratio, target, met);
    kind "columns": rows[0] is the header."""
    if kind == "targets":
        header = ("", "what", "measured", "ratio", "target")
        body = [("ok" if met else "MISS", what, measured, ratio, target)
                for what, measured, ratio, target, met in rows]
    else:
        header, body = rows[0], rows[1:]
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in body]
    return lines


def render(tables: list[tuple[str, str, list[tuple]]], when: datetime, where: str,
           command: str) -> str:
    """The page: a heading, when and where the run was, then each (title, kind, rows) table."""
    out = ["# Benchmark results", "",
           "Written by `make bench` (benchmarks/run.py) at the end of its latest run; not edited by",
           "hand. [Benchmarks](benchmarks.md) says what each one measures.", "",
           f"- run: {when.strftime('%Y-%m-%d %H:%M UTC')}, `{command}`",
           f"- machine: {where}", ""]
    for title, kind, rows in tables:
        out += [f"## {title}", ""] + table(kind, rows) + [""]
    return "\n".join(out)


def write(tables: list[tuple[str, str, list[tuple]]], page: Path = PAGE) -> Path:
    """Write the page for a run that just ended on this machine."""
    command = " ".join(["python", *sys.argv]) if sys.argv and sys.argv[0] else "python"
    page.write_text(render(tables, datetime.now(timezone.utc), machine(), command))
    return page
