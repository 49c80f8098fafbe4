"""The house stays straight (DESIGN section 1): every import of the package, function-level ones
included, points down the floors below; viz imports nothing of ipulab; no package reaches into
another package's private names or modules; modules and functions stay short."""
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
LONG_MODULES_ALLOWED = ("course/bank/",)        # question banks: statements are prose
PUBLIC_UNDERSCORED = {"_exit"}                  # os._exit: documented, not private


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
