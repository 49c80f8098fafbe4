"""The house stays straight (DESIGN section 1): every import of the package, function-level ones
included, points down the floors below; viz imports nothing of ipulab; no package reaches into
another package's private names or modules; modules and functions stay short. Inside course/,
the rooms point down too (learner and grading over questions), and what runs in the sandbox
(course/grading/sandboxed/) cannot reach the question bank by any chain of imports."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ipulab"

# Top floor first. A module may import its own package and anything on a LOWER floor.
FLOORS = [
    ["cli"],
    ["widgets"],
    ["course"],
    ["vipu"],
    ["plan"],
    ["nn"],
    ["gcl", "popnn", "poprand"],
    ["popops", "poplin"],
    ["poputil"],
    ["poplar"],
    ["machine"],
    ["devices"],
    ["target"],
    ["arch", "data"],
    ["errors", "version", "options"],
]
FLOOR = {pkg: i for i, names in enumerate(FLOORS) for pkg in names}
ASIDE = {"viz"}            # reads Profile data; imports nothing of ipulab
ROOT = {"__init__", "__main__"}   # the package's front: re-exports, `python -m ipulab`
PLACEHOLDER = re.compile(r"_\d+$")   # popops.expr._1, _2, ...: public by Poplar's convention
# other libraries' public API spelled with an underscore (namedtuple, numba's lowering)
FOREIGN = {"_asdict", "_replace", "_fields", "_getvalue"}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
LONG_MODULES_ALLOWED = ("course/questions/bank/",)        # question banks: statements are prose
# os._exit: documented, not private; pickle._Unpickler: pickle's Python reader, the one whose
# opcodes the judge can replace (grading/unpickling.py)
PUBLIC_UNDERSCORED = {"_exit", "_Unpickler"}


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        yield path, rel, ast.parse(path.read_text(), str(path))


def package_of(rel: Path) -> str:
    return rel.parts[0].removesuffix(".py")


def resolve(rel: Path, node: ast.ImportFrom) -> list[tuple[str, str]]:
    """(imported module path inside ipulab, name) for each name of an ipulab import."""
    if node.level:
        base = list(rel.parent.parts)[:len(rel.parent.parts) - (node.level - 1)]
        parts = base + (node.module.split(".") if node.module else [])
    elif node.module and node.module.split(".")[0] == "ipulab":
        parts = node.module.split(".")[1:]
    else:
        return []
    out = []
    for alias in node.names:
        sub = PACKAGE.joinpath(*parts, alias.name)
        if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists():
            out.append(("/".join(parts + [alias.name]), ""))
        else:
            out.append(("/".join(parts), alias.name))
    return out


def imports(rel: Path, tree):
    """(line, target module path, imported name) of every ipulab import, at any depth."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for target, name in resolve(rel, node):
                yield node.lineno, target, name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ipulab":
                    yield node.lineno, "/".join(alias.name.split(".")[1:]), ""


def test_every_package_has_a_floor():
    packages = {package_of(rel) for _, rel, _ in modules()} - ROOT
    assert packages - set(FLOOR) - ASIDE == set()


def allowed(here: str, there: str) -> bool:
    """Whether a module of package `here` may import package `there`."""
    if there == here:
        return True
    if here in ASIDE or there in ROOT:
        return False
    if there in ASIDE:          # figures are for the floors that show things
        return FLOOR[here] <= FLOOR["course"]
    return FLOOR[there] > FLOOR[here]


def test_imports_point_down():
    wrong = [f"{rel}:{line} imports ipulab.{target.replace('/', '.') or name}"
             for _, rel, tree in modules() if package_of(rel) not in ROOT
             for line, target, name in imports(rel, tree)
             if not allowed(package_of(rel), target.split("/")[0] or "__init__")]
    assert wrong == [], "imports that do not point down:\n" + "\n".join(wrong)


def private_names(tree) -> set[str]:
    """Private names a module defines: functions, classes, attributes set on self or a class."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return {n for n in out if n.startswith("_") and not n.startswith("__")}


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and \
        not PLACEHOLDER.match(name) and name not in FOREIGN


def test_no_private_access_across_packages():
    trees = list(modules())
    defined: dict[str, set] = {}
    for _, rel, tree in trees:
        defined.setdefault(package_of(rel), set()).update(private_names(tree))
    wrong = []
    for _, rel, tree in trees:
        here = package_of(rel)
        for line, target, name in imports(rel, tree):
            there = target.split("/")[0] if target else "__init__"
            if there != here and (any(is_private(p) for p in target.split("/")) or
                                  is_private(name)):
                wrong.append(f"{rel}:{line} imports private ipulab.{target.replace('/', '.')}"
                             f"{'.' + name if name else ''}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr) and \
                    not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) \
                    and node.attr not in defined[here] and node.attr not in PUBLIC_UNDERSCORED:
                wrong.append(f"{rel}:{node.lineno} reaches into {ast.unparse(node)}")
    assert wrong == [], "private access across packages:\n" + "\n".join(wrong)


def test_modules_and_functions_stay_short():
    long = []
    for path, rel, tree in modules():
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES and not str(rel).startswith(LONG_MODULES_ALLOWED):
            long.append(f"{rel}: {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    assert long == [], "too long:\n" + "\n".join(long)


# course/'s rooms: a room may import its own modules and those of the rooms below it
COURSE_ROOMS = [["learner", "grading"], ["questions"], ["codelets"]]
COURSE_ROOM = {room: i for i, names in enumerate(COURSE_ROOMS) for room in names}
SANDBOXED = "course/grading/sandboxed"
OUT_OF_THE_SANDBOX = ("course/questions", "course/learner")


def course_room(target: str) -> str | None:
    """The room of a module path inside ipulab ('course/questions/kit' -> 'questions')."""
    parts = target.split("/")
    return parts[1] if len(parts) > 1 and parts[0] == "course" else None


def test_course_rooms_point_down():
    wrong = [f"{rel}:{line} imports ipulab.{target.replace('/', '.')}"
             for _, rel, tree in modules() if package_of(rel) == "course" and len(rel.parts) > 2
             for line, target, name in imports(rel, tree)
             if course_room(target) not in (None, rel.parts[1]) and
             COURSE_ROOM.get(course_room(target), -1) <= COURSE_ROOM[rel.parts[1]]]
    assert wrong == [], "course/ rooms that do not point down:\n" + "\n".join(wrong)


def module_file(target: str) -> Path | None:
    """The file of a module path inside ipulab ('course/grading/wire'), or None."""
    base = PACKAGE.joinpath(*target.split("/")) if target else PACKAGE
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def reachable(start: Path) -> set[str]:
    """Every ipulab module path that importing `start` can import, at any depth of imports
    (function-level ones included), with the packages each of them runs on the way."""
    seen, todo = set(), [start]
    while todo:
        path = todo.pop()
        rel = path.relative_to(PACKAGE)
        here = "/".join(rel.with_suffix("").parts).removesuffix("/__init__").removesuffix(
            "__init__")
        if here in seen:
            continue
        seen.add(here)
        parents = ["/".join(here.split("/")[:i]) for i in range(len(here.split("/")))]
        targets = [t for _, t, _ in imports(rel, ast.parse(path.read_text()))] + parents
        todo += [f for f in map(module_file, targets) if f is not None]
    return seen


def test_the_sandboxed_side_cannot_reach_the_question_bank():
    """By structure, not by lazy imports: no chain of imports from a module that runs in the
    sandbox leads to questions/ (the bank, its checks) or learner/ (which uses them)."""
    starts = sorted((PACKAGE / SANDBOXED).glob("*.py"))
    assert starts, SANDBOXED
    wrong = {f"{start.name} reaches ipulab.{m.replace('/', '.')}" for start in starts
             for m in reachable(start) if m.startswith(OUT_OF_THE_SANDBOX)}
    assert wrong == set(), "\n".join(sorted(wrong))


def test_the_reach_of_an_import_is_followed():
    """The walk above can fail: the judge reaches the questions (whose registry loads the bank)."""
    assert "course/questions/registry" in reachable(PACKAGE / "course" / "grading" / "judge.py")


def test_one_class_per_name_in_the_course_package():
    """One word, one meaning: no two classes of course/ share a name."""
    where: dict[str, list[str]] = {}
    for _, rel, tree in modules():
        if package_of(rel) == "course":
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    where.setdefault(node.name, []).append(str(rel))
    assert {n: w for n, w in where.items() if len(w) > 1} == {}


@pytest.mark.parametrize("here,source,ok", [
    ("nn", "from ..widgets import TrainingDashboard", False),
    ("nn", "def f():\n    from ipulab import cli", False),
    ("nn", "from ..errors import GraphError", True),
    ("viz", "from ..poplar import Profile", False),
    ("poplar", "from ipulab import IPUModel", False),
])
def test_the_walker_sees_upward_imports(here, source, ok):
    """The check above can fail: an upward import is seen, even inside a function."""
    rel = Path(here, "x.py")
    found = [allowed(here, target.split("/")[0] or "__init__")
             for _, target, _ in imports(rel, ast.parse(source))]
    assert found == [ok]
