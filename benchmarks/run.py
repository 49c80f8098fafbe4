"""Run every benchmark and print one table: `make bench`."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def print_table(title: str, rows: list[tuple]) -> None:
    """rows: (what, measured, ratio, target, met)."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
    print(f"\n{title}")
    for what, measured, ratio, target, met in rows:
        mark = "ok " if met else "MISS"
        print(f"  {mark} {what:<{widths[0]}}  {measured:>{widths[1]}}  {ratio:<{widths[2]}}  "
              f"{target:<{widths[3]}}")


if __name__ == "__main__":
    import foundation
    import poplibs
    print_table("Foundation (issue 2)", foundation.main())
    print_table("PopLibs (issue 4)", poplibs.main())
