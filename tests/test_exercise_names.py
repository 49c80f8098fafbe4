"""Every exercise notebook runs, cell by cell, as a learner starts it: each answer still raises
NotImplementedError, nothing else may fail, and at each check the names its statement tells the
learner to use (`nn.Trainer`, `wide_mlp()`, `devices.pod(...)`) are defined in the notebook.
(test_course.py's graded run checks the same notebooks' errors through `ipulab course check`;
this one also reads the statements, so a name a statement uses and no cell defines fails.)"""
import ast
import builtins
import contextlib
import io
import re
from pathlib import Path

import nbformat
import pytest

from ipulab.course.questions import registry

EXERCISES = Path(__file__).resolve().parent.parent / "exercises"
# Calls a statement writes as mathematics (mean_r: the mean over the replicas) or describes on
# the checker's side (where a profile comes from), not names the learner calls in the notebook.
PROSE = {"exp", "sqrt", "relu", "ceil", "mean_r", "compute", "cycle_estimate", "state_dict",
         "map_tensor_linearly", "trainer", "profile"}
_CALL = re.compile(r"(?<![\w.'\"])([A-Za-z_]\w*)((?:\.\w+)*)\s*\(")


def statement_names(statement: str) -> set[str]:
    """The names called in a statement's code spans: 'nn.Trainer', 'wide_mlp', ..."""
    names = set()
    for span in re.findall(r"`([^`]+)`", statement):
        for m in _CALL.finditer(span):
            names.add(m.group(1) + m.group(2))
    return {n for n in names if n.split(".")[0] not in PROSE and not hasattr(builtins, n)}


def unresolved(names, namespace, defined_here) -> list[str]:
    """Names whose first part the notebook has not defined (or whose attribute is missing)."""
    missing = []
    for name in sorted(names):
        root, *attrs = name.split(".")
        if root in defined_here:
            continue
        if root not in namespace:
            missing.append(name)
            continue
        obj = namespace[root]
        if not _module_like(obj):
            continue                # g.get_tile_mapping, profile.steps: an answer's arguments
        for attr in attrs:
            if not hasattr(obj, attr):
                missing.append(name)
                break
            obj = getattr(obj, attr)
    return missing


def _module_like(obj) -> bool:
    return type(obj).__name__ == "module"


def _tree(source: str):
    try:
        return ast.parse(source)
    except SyntaxError:
        return ast.parse("")


def _bound(source: str) -> set[str]:
    """Names a cell binds: def, class, assignment, import."""
    out = set()
    for node in ast.walk(_tree(source)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def _parameters(source: str) -> set[str]:
    """The parameters of a cell's functions: `g.get_tile_mapping` in a statement is a method
    of the answer's argument g, not a name of the notebook."""
    return {a.arg for node in ast.walk(_tree(source)) if isinstance(node, ast.FunctionDef)
            for a in node.args.args + node.args.kwonlyargs}


@pytest.mark.parametrize("path", sorted(EXERCISES.glob("*.ipynb")), ids=lambda p: p.stem)
def test_exercise_cells_fail_only_by_not_implemented_and_know_their_statements_names(
        path, tmp_path, monkeypatch):
    monkeypatch.setenv("IPULAB_PROGRESS", str(tmp_path / "progress.json"))
    monkeypatch.chdir(tmp_path)
    nb = nbformat.read(path, as_version=4)
    namespace = {"__name__": "__main__"}
    seen_not_implemented = False
    cells = [c for c in nb.cells if c.cell_type == "code"]
    parameters = set().union(*(_parameters(c.source) for c in cells))
    for number, cell in enumerate(cells):
        asked = [q for q in registry.REGISTRY if f'check("{q}"' in cell.source]
        for qid in asked:
            missing = unresolved(statement_names(registry.get(qid).statement), namespace,
                                 _bound(cell.source) | parameters)
            assert not missing, (f"{path.name}: {qid}'s statement uses {missing}, which no "
                                 "cell before its check defines")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(cell.source, f"{path.name} cell {number}", "exec"), namespace)
        except NotImplementedError:
            seen_not_implemented = True
        except Exception as e:         # noqa: BLE001 — any other error is the finding
            pytest.fail(f"{path.name}, code cell {number}: {type(e).__name__}: {e}"
                        + ("" if seen_not_implemented else
                           " (before the first NotImplementedError)"))
    assert seen_not_implemented, f"{path.name} should stop at a NotImplementedError"
