"""Fresh venvs for the tests that act as a new user: a venv of its own, whose packages (numpy,
numba, JupyterLab, ...) come from the project's .venv through a .pth line instead of PyPI, and
whose pip is kept offline. What is installed INTO it (ipulab from a checkout or a wheel) is the
thing under test; nothing can reach or change the project's .venv."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def offline_env(home: Path) -> dict[str, str]:
    """The environment of a new user's shell, with pip unable to download or build in isolation."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV",
                                                                     "PYTHON", "IPULAB_"))}
    env.update(HOME=str(home), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_CONFIG_FILE=os.devnull,
               # pip's quirk: the variable of a --no-* flag set to 0 turns the flag ON
               PIP_NO_BUILD_ISOLATION="0",
               IPULAB_CACHE=str(home / ".cache" / "ipulab"))
    env.pop("PYTHONPATH", None)
    return env


def make(venv: Path) -> Path:
    """A venv at `venv` that sees the project's installed packages (after its own); its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    # without pip (and the old setuptools ensurepip brings): the project's own pip and setuptools
    # install into it, and build ipulab as the project's venv does
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # the project's site-packages as a plain path: its own .pth files (the editable ipulab of
    # the checkout among them) are not processed, so ipulab comes only from what is installed here
    (Path(site) / "project-packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # and the data files those packages installed beside them (JupyterLab's extensions, the
    # kernel spec, Jupyter's config), where a venv that installed them would have them
    for data in ("share/jupyter", "etc/jupyter"):
        if (Path(sys.prefix) / data).is_dir():
            (venv / data).parent.mkdir(parents=True, exist_ok=True)
            (venv / data).symlink_to(Path(sys.prefix) / data)
    return python


def copy_checkout(target: Path) -> Path:
    """The checkout's files as a fresh clone of its next commit has them: tracked and new ones,
    as they are in the working tree, without what git ignores (.venv, caches, builds)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file() or src.is_symlink():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target / name, follow_symlinks=False)
    return target
