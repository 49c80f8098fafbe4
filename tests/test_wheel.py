"""`python -m build` makes a wheel and an sdist, and the wheel alone, installed in a fresh venv
(no checkout on the path), runs `ipulab info` and the first notebook's code. The venv's other
packages come from the project's .venv (tests/fresh_venv.py): pip installs the wheel offline."""
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import fresh_venv

ROOT = Path(__file__).resolve().parents[1]
FIRST_NOTEBOOK = ROOT / "notebooks" / "00_welcome_the_ipu.ipynb"

# Runs the notebook in a kernel of the venv's own python, and says where its ipulab came from.
RUN_NOTEBOOK = """
import sys, nbformat, nbclient
nb = nbformat.read(sys.argv[1], as_version=4)
nb.cells.append(nbformat.v4.new_code_cell("import ipulab; print('IPULAB_AT', ipulab.__file__)"))
nbclient.NotebookClient(nb, timeout=600, kernel_name="python3").execute()
errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
assert not errors, errors[0]
print([o.text for o in nb.cells[-1].outputs if o.output_type == "stream"][0])
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The wheel and sdist of a clean copy of the checkout (the build leaves nothing in it)."""
    root = tmp_path_factory.mktemp("wheel")
    src = fresh_venv.copy_checkout(root / "src")
    dist = root / "dist"
    env = fresh_venv.offline_env(root)
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist),
                           str(src)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root, dist, env


def test_build_makes_a_wheel_and_an_sdist(built):
    _, dist, _ = built
    from ipulab.version import __version__
    names = sorted(p.name for p in dist.iterdir())
    assert names == [f"ipulab-{__version__}-py3-none-any.whl", f"ipulab-{__version__}.tar.gz"]


def test_the_wheel_alone_runs_info_and_the_first_notebook(built):
    root, dist, env = built
    python = fresh_venv.make(root / "venv")
    wheel = next(dist.glob("*.whl"))
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", str(wheel)], env=env,
                   check=True, capture_output=True, timeout=300)
    run = root / "run"
    run.mkdir()
    info = subprocess.run([str(root / "venv" / "bin" / "ipulab"), "info"], cwd=run, env=env,
                          capture_output=True, text=True, timeout=120)
    assert info.returncode == 0 and "1472" in info.stdout, info.stderr[-2000:]
    nb = nbformat.read(FIRST_NOTEBOOK, as_version=4)
    nbformat.write(nb, run / FIRST_NOTEBOOK.name)
    done = subprocess.run([str(python), "-c", RUN_NOTEBOOK, FIRST_NOTEBOOK.name], cwd=run,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    where = done.stdout.strip().splitlines()[-1]
    assert where.startswith("IPULAB_AT " + str(root / "venv")), where
