"""Run every benchmark and print one table: `make bench`."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# Every table printed, (title, kind, rows), for docs/results.md at the end of the run.
TABLES: list[tuple[str, str, list[tuple]]] = []


def print_table(title: str, rows: list[tuple]) -> None:
    """rows: (what, measured, ratio, target, met)."""
    TABLES.append((title, "targets", rows))
    widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
    print(f"\n{title}")
    for what, measured, ratio, target, met in rows:
        mark = "ok " if met else "MISS"
        print(f"  {mark} {what:<{widths[0]}}  {measured:>{widths[1]}}  {ratio:<{widths[2]}}  "
              f"{target:<{widths[3]}}")


def print_columns(title: str, rows: list[tuple]) -> None:
    """rows[0] is the header; the first column is left-aligned, the others right-aligned."""
    TABLES.append((title, "columns", rows))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    print(f"\n{title}")
    for r in rows:
        cells = [f"{r[0]:<{widths[0]}}"] + [f"{c:>{w}}" for c, w in zip(r[1:], widths[1:])]
        print("       " + "  ".join(cells))


if __name__ == "__main__":
    import foundation
    import grading
    import plan_crosscheck
    import poplibs
    import results_page
    import speed
    import step
    import training
    import views
    print_table("Foundation (issue 2)", foundation.main())
    print_table("PopLibs (issue 4)", poplibs.main())
    targets, scaling = training.main()
    print_table("Training (issue 5)", targets)
    print_columns("Training: cost from 1 to 16 IPUs (one replica of 16 per IPU)", scaling)
    print_table("Speed: waiting for a graph (issues 11, 23)", speed.main())
    print_table("A training step against PyTorch (issue 23)", step.main())
    print_table("Views of a Bow-2000 (issues 3, 23)", views.main())
    plan_crosscheck.main()
    print_table("Grading a class (issue 12; 200 notebooks: about 20 minutes)",
                grading.main(quick="--quick" in sys.argv))
    print(f"\nresults page: {results_page.write(TABLES)}")
