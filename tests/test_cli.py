"""The `ipulab` command: version, preset tables, and the JupyterLab command line it would run."""
import json
import os
import sys
from pathlib import Path

from ipulab import cli


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "ipulab 0.1.0"


def test_info_lists_presets_and_systems(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "1472" in out and "1216" in out
    assert "1,850" in out or "1850" in out
    assert "bow2000" in out and "pod256" in out


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 0
    assert "usage: ipulab" in capsys.readouterr().out


def test_unknown_command_fails(capsys):
    assert cli.main(["bogus"]) == 2


def test_lab_command(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "_is_root", lambda: False)
    assert cli.lab_command(folder=tmp_path) == [sys.executable, "-m", "jupyterlab", str(tmp_path)]
    assert cli.lab_command(8899, tmp_path)[-1] == "--port=8899"
    monkeypatch.setattr(cli, "_is_root", lambda: True)
    assert cli.lab_command(8899, tmp_path)[-2:] == ["--port=8899", "--allow-root"]


def test_lab_opens_the_workspace(tmp_path, monkeypatch):
    """`ipulab lab` opens the learner's workspace (made if missing), never the checkout, with
    the workspace's Jupyter config (no news toast) first on JUPYTER_CONFIG_PATH."""
    monkeypatch.setenv("IPULAB_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "/elsewhere")
    monkeypatch.setenv("DISPLAY", ":0")                # a desktop: the browser opens
    for name in ("SSH_CONNECTION", "SSH_TTY"):
        monkeypatch.delenv(name, raising=False)
    assert cli.lab_command()[3] == str(tmp_path / "ws")
    seen = []
    monkeypatch.setattr(cli, "_run", lambda cmd, env: seen.append((cmd, env)) or 0)
    assert cli.main(["lab", "--port", "9000"]) == 0
    (cmd, env), = seen
    assert cmd == cli.lab_command(9000, tmp_path / "ws")
    assert (tmp_path / "ws" / "notebooks" / "00_welcome_the_ipu.ipynb").is_file()
    first, rest = env["JUPYTER_CONFIG_PATH"].split(os.pathsep)
    assert rest == "/elsewhere"
    page = json.loads((Path(first) / "labconfig" / "page_config.json").read_text())
    assert page["disabledExtensions"]["@jupyterlab/apputils-extension:announcements"]


def test_cli_import_stays_light():
    """Importing the command module must not pull in the simulator (numba) by itself."""
    import subprocess
    code = "import sys, ipulab.cli; assert 'numba' not in sys.modules, 'numba'"
    subprocess.run([sys.executable, "-c", code], check=True)
