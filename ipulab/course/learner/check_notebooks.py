"""`ipulab course check PATH...`: a learner's self-check of notebooks, from the command line
(it trusts the notebook's own kernel: not a grade; `ipulab course grade` grades a class).

Each notebook runs top to bottom in a fresh kernel (nbclient, errors allowed so one unfinished
question does not hide the others), with $IPULAB_PROGRESS pointing at a temporary file: every
check() the notebook calls is recorded there, and that record is the grade. A question counts
as passed only if its check passed in this run.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..questions.registry import questions, set_for_notebook

_CHECK = re.compile(r"""check\(\s*["']([\w.]+)["']""")


@dataclass
class NotebookGrade:
    path: str
    set_id: str | None
    questions: dict = field(default_factory=dict)    # qid -> {"status", "message", "metrics"}
    errors: list = field(default_factory=list)       # [{"cell", "ename", "evalue"}]
    seconds: float = 0.0
    failure: str = ""                                # the notebook could not be run at all

    @property
    def passed(self) -> int:
        return sum(q["status"] == "passed" for q in self.questions.values())

    @property
    def ok(self) -> bool:
        return not self.failure and bool(self.questions) and self.passed == len(self.questions)


def notebooks_in(paths) -> list[Path]:
    """The notebooks named, and those inside named folders (recursively, sorted)."""
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts))
        elif p.suffix == ".ipynb" and p.exists():
            found.append(p)
        else:
            raise FileNotFoundError(f"{p}: not a notebook or a folder")
    return found


def _set_of(nb, path: Path) -> str | None:
    meta = nb.metadata.get("ipulab", {})
    if meta.get("set"):
        return meta["set"]
    s = set_for_notebook(path.name)
    return s.id if s else None


def _ran(nb) -> bool:
    """Whether any code cell of nb was run (has a count or an output)."""
    return any(c.get("execution_count") is not None or c.get("outputs")
               for c in nb.cells if c.cell_type == "code")


def _execute(nb, path: Path, env: dict, timeout: int) -> str:
    """Run nb's cells in a fresh kernel (errors allowed); why it could not finish, or "". A
    kernel that dies before any cell ran (a start that failed: under load, several kernels
    starting at once) is started once more."""
    from nbclient import NotebookClient

    for attempt in range(2):
        client = NotebookClient(nb, timeout=timeout, allow_errors=True, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent.resolve())}})
        try:
            client.execute(env=env, stderr=subprocess.DEVNULL)   # the kernel's own log lines
            return ""
        except Exception as e:     # kernel died, a cell timed out, ...
            if not attempt and not _ran(nb):
                continue           # the kernel never started (no cell ran): once more
            last = str(e).strip().splitlines()[-1:] or [""]
            return f"{type(e).__name__}: {last[0]}"


def grade_notebook(path, timeout: int = 600) -> NotebookGrade:
    """Run one notebook and collect its checks."""
    import nbformat

    path = Path(path)
    start = time.perf_counter()
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:
        return NotebookGrade(str(path), None, failure=f"cannot read: {e}")
    for cell in nb.cells:          # what it saved from an earlier run is not this run's
        if cell.cell_type == "code":
            cell.execution_count, cell.outputs = None, []
    grade = NotebookGrade(str(path), _set_of(nb, path))
    expected = [q.id for q in questions(grade.set_id)] if grade.set_id else []
    with tempfile.TemporaryDirectory(prefix="ipulab-grade-") as tmp:
        record = Path(tmp) / "progress.json"
        env = dict(os.environ, IPULAB_PROGRESS=str(record))
        grade.failure = _execute(nb, path, env, timeout)
        raised = {}                                   # qid -> the error of its check's cell
        for i, cell in enumerate(nb.cells):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    grade.errors.append({"cell": i, "ename": out.get("ename", ""),
                                         "evalue": str(out.get("evalue", ""))[:300]})
                    for qid in _CHECK.findall(cell.get("source", "")):
                        raised.setdefault(qid, grade.errors[-1])
        try:
            done = json.loads(record.read_text()).get("questions", {})
        except (OSError, ValueError):
            done = {}
    for qid in expected or sorted(done):
        entry = done.get(qid)
        if entry is None and qid in raised:
            e = raised[qid]
            if e["ename"] == "NotImplementedError":
                grade.questions[qid] = {"status": "not answered", "message": ""}
            else:
                grade.questions[qid] = {"status": "failed", "message": f"the cell raised "
                                        f"{e['ename']}: {e['evalue']}"}
        elif entry is None:
            grade.questions[qid] = {"status": "not checked", "message": "no check() ran for it"}
        else:
            grade.questions[qid] = {"status": entry["status"], "message": entry.get("message", ""),
                                    "metrics": entry.get("metrics", {})}
    grade.seconds = time.perf_counter() - start
    return grade


def grade_all(paths, jobs: int = 1, timeout: int = 600) -> list[NotebookGrade]:
    books = notebooks_in(paths)
    if jobs <= 1 or len(books) <= 1:
        return [grade_notebook(p, timeout) for p in books]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=jobs,
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(grade_notebook, books, [timeout] * len(books)))


MARK = {"passed": "✓", "failed": "✗", "not answered": "·", "not checked": "?"}


def table(grades: list[NotebookGrade], verbose: bool = False) -> str:
    rows = [("notebook", "question", "result", "detail")]
    for g in grades:
        name = Path(g.path).name
        if g.failure:
            rows.append((name, "-", "✗ error", g.failure))
        for qid, q in g.questions.items():
            detail = q.get("message", "").splitlines()[0] if q.get("message") else ""
            cycles = (q.get("metrics") or {}).get("cycles")
            if q["status"] == "passed":
                detail = f"{cycles:,} cycles" if cycles else ""
            elif q["status"] == "not answered":
                detail = ""
            rows.append((name, qid, f"{MARK.get(q['status'], '?')} {q['status']}",
                         detail[:70] + ("…" if len(detail) > 70 else "")))
        others = [e for e in g.errors if e["ename"] != "NotImplementedError"]
        for e in others[:3]:
            rows.append((name, f"cell {e['cell']}", f"! {e['ename']}", e["evalue"][:70]))
        total = len(g.questions)
        rows.append((name, "score", f"{g.passed}/{total}", f"{g.seconds:.0f} s"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    passed = sum(g.passed for g in grades)
    total = sum(len(g.questions) for g in grades)
    if verbose:
        for g in grades:
            for qid, q in g.questions.items():
                if q["status"] == "failed":
                    lines.append(f"\n{Path(g.path).name} {qid}:\n  " + "\n  ".join(
                        q["message"].splitlines()))
    lines.append(f"\n{len(grades)} notebook(s): {passed} of {total} questions passed")
    return "\n".join(lines)


def main(paths, jobs: int = 1, timeout: int = 600, json_path: str | None = None, out=None,
         verbose: bool = False) -> int:
    """Grade, print the table (and write JSON); exit code 0 if everything passed, 1 if not, 2
    if a path is not a notebook or folder, or a folder holds no notebook."""
    out = out or sys.stdout
    try:
        books = notebooks_in(paths)
    except FileNotFoundError as e:
        print(f"ipulab course check: {e}", file=sys.stderr)
        return 2
    if not books:
        print(f"ipulab course check: no notebooks in {' '.join(map(str, paths))}", file=sys.stderr)
        return 2
    grades = grade_all(books, jobs, timeout)
    print(table(grades, verbose), file=out)
    if json_path:
        Path(json_path).write_text(json.dumps([dict(asdict(g), ok=g.ok) for g in grades],
                                              indent=1))
    return 0 if all(g.ok for g in grades) else 1
