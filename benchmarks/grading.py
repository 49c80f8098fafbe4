"""Grading a class: `ipulab course grade`'s machinery with the real judge, on 2 local dask
workers and then on 1, over the same generated class: submissions per minute and the speed-up.

The class is made from sets 01 and 02: correct answers (solutions/), unanswered notebooks
(exercises/), partly answered ones, wrong ones (a number in every answer off by one) and a few
hostile ones (an endless loop, a huge allocation, a file that is not JSON). Every submission
must come back with a status; the statuses are printed, not asserted.

    python benchmarks/grading.py [--quick] [--submissions N] [--timeout S]
"""
from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

from ipulab.course.questions.build import BEGIN_HIDDEN, BEGIN_SOLUTION, END_HIDDEN, END_SOLUTION
from ipulab.course.grading.class_grader import ProgressLine, grade_class
from ipulab.course.grading.discovery import discover
from ipulab.course.grading.gradebook import Gradebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ("01_one_tile.ipynb", "02_bsp_supersteps.ipynb")
KINDS = {"correct": 0.4, "partial": 0.25, "wrong": 0.2, "unanswered": 0.15}
HOSTILE = {                      # a first cell that no notebook should survive
    "endless": "while True:\n    pass",
    "huge": "hoard = []\nwhile True:\n    hoard.append(bytearray(2**28))",
}
_NUMBER = re.compile(r"(?<![\w.])\d+(?![\w.])")


def _unanswered(block: list[str], indent: str, rng) -> list[str]:
    return [f"{indent}# YOUR CODE HERE", f"{indent}raise NotImplementedError"]


def _wrong(block: list[str], indent: str, rng) -> list[str]:
    """The block with its first number outside comments one higher."""
    out, done = [], False
    for line in block:
        if not done and not line.lstrip().startswith("#") and _NUMBER.search(line):
            line, done = _NUMBER.sub(lambda m: str(int(m.group()) + 1), line, count=1), True
        out.append(line)
    return out


ANSWER = {
    "correct": lambda block, indent, rng: block,
    "wrong": _wrong,
    "partial": lambda block, indent, rng: block if rng.random() < 0.5 else
    _unanswered(block, indent, rng),
}


def student_source(source: str, answer, rng) -> str:
    """A solution cell as a student hands it in: hidden checks dropped, each solution block
    replaced by answer(block lines, indent, rng)."""
    out, block, hidden, indent = [], None, False, ""
    for line in source.split("\n"):
        marker = line.strip()
        if marker in (BEGIN_HIDDEN, END_HIDDEN):
            hidden = marker == BEGIN_HIDDEN
        elif marker == BEGIN_SOLUTION:
            block, indent = [], line[:len(line) - len(line.lstrip())]
        elif marker == END_SOLUTION:
            out.extend(answer(block, indent, rng))
            block = None
        elif not hidden:
            (out if block is None else block).append(line)
    return "\n".join(out)


def submission(name: str, kind: str, rng) -> bytes:
    """The bytes of one submission of notebook `name`, of this kind (or hostile kind)."""
    if kind == "not json":
        return b'{"cells": [this is not JSON'
    if kind == "unanswered":
        return (ROOT / "exercises" / name).read_bytes()
    nb = json.loads((ROOT / "solutions" / name).read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cell["source"] = student_source(source, ANSWER.get(kind, ANSWER["correct"]), rng)
    if kind in HOSTILE:
        nb["cells"].insert(0, {"cell_type": "code", "execution_count": None, "metadata": {},
                               "outputs": [], "source": HOSTILE[kind]})
    return json.dumps(nb, indent=1).encode()


def make_class(folder: Path, n: int, seed: int = 0) -> Counter:
    """n submissions, two per student (sets 01 and 02), the first few hostile; their kinds."""
    rng = random.Random(seed)
    hostile = [*HOSTILE, "not json"] * (1 if n < 100 else 2)
    kinds = Counter()
    for i in range(n):
        name = NOTEBOOKS[i % 2]
        kind = hostile[i // 2] if i % 2 == 0 and i // 2 < len(hostile) else \
            rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        path = folder / f"student{i // 2:03d}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(submission(name, kind, rng))
        kinds[kind] += 1
    return kinds


def grade_once(folder: Path, workers: int, timeout: float) -> tuple[float, Counter]:
    """Seconds to grade the whole class (a fresh gradebook, the cluster's start included)
    and the statuses of every question."""
    found = discover(folder)
    with tempfile.TemporaryDirectory() as tmp, Gradebook(Path(tmp) / "gb.sqlite") as book:
        start = time.perf_counter()
        run = grade_class(found, book, workers=workers, timeout=timeout,
                          progress=ProgressLine(len(found)))
        seconds = time.perf_counter() - start
        assert run.graded + run.refused + run.lost == len(found), run
        return seconds, Counter(r["status"] for r in book.rows())


def main(quick: bool = False, submissions: int | None = None, timeout: float | None = None):
    """The table's rows: submissions per minute on 2 workers and on 1, the speed-up."""
    n = submissions or (12 if quick else 200)
    timeout = timeout or (30.0 if quick else 60.0)
    with tempfile.TemporaryDirectory(prefix="ipulab-class-") as tmp:
        kinds = make_class(Path(tmp), n)
        t2, statuses = grade_once(Path(tmp), 2, timeout)
        t1, _ = grade_once(Path(tmp), 1, timeout)
    speedup = t1 / t2
    return [
        (f"grade {n} submissions, 2 workers", f"{n / t2 * 60:.1f} /min", f"{t2:.0f} s", "", True),
        ("  the same on 1 worker", f"{n / t1 * 60:.1f} /min", f"{t1:.0f} s", "", True),
        ("  speed-up of 2 workers over 1", f"{speedup:.2f}x", "", ">= 1.5x", speedup >= 1.5),
        ("  the class: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()), "", "", "",
         True),
        ("  its questions: " + ", ".join(f"{k} {v}" for k, v in statuses.most_common()), "", "",
         "", True),
    ]


if __name__ == "__main__":
    from run import print_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="12 submissions, 30 s timeout")
    parser.add_argument("--submissions", type=int, default=None, help="default 200")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per notebook (default 60)")
    args = parser.parse_args()
    if args.submissions is not None and args.submissions < 1:
        parser.error("--submissions must be 1 or more")
    print_table("Grading a class (ipulab course grade)",
                main(args.quick, args.submissions, args.timeout))
