"""docs/results.md as `make bench` writes it: the run's tables as markdown, with date and machine."""
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import results_page  # noqa: E402

ROWS = [("step, Bow-2000", "1.87 ms", "1.21x", "<= 2x", True),
        ("tutorial 6 | compile", "0.73 s", "", "<= 0.5 s", False)]
SCALING = [("IPUs", "cycles", "images/s"), ("1", "2,000", "900"), ("4", "2,100", "3,400")]


def test_render_has_date_machine_and_every_row():
    when = datetime(2026, 12, 1, 23, 5, tzinfo=timezone.utc)
    page = results_page.render([("Speed", "targets", ROWS), ("Scaling", "columns", SCALING)],
                               when, "Linux x86_64, 2 cores", "python benchmarks/run.py")
    assert "2026-12-01 23:05 UTC" in page and "Linux x86_64, 2 cores" in page
    assert "| ok | step, Bow-2000 | 1.87 ms | 1.21x | <= 2x |" in page
    # a missed target says so; a | inside a cell does not split the row
    assert "| MISS | tutorial 6 \\| compile | 0.73 s |  | <= 0.5 s |" in page
    assert "| IPUs | cycles | images/s |\n|---|---|---|\n| 1 | 2,000 | 900 |" in page
    assert page.index("## Speed") < page.index("## Scaling")


def test_write_puts_the_page_where_asked(tmp_path):
    page = results_page.write([("Speed", "targets", ROWS)], tmp_path / "results.md")
    text = page.read_text()
    assert text.startswith("# Benchmark results") and "machine: " in text and "cores" in text


def test_the_page_is_the_sites():
    assert results_page.PAGE == Path(__file__).resolve().parents[1] / "docs" / "results.md"
