"""`ipulab lab` on a remote or headless machine (issue 44): --ip and --no-browser; the URL with
its token on a line of its own before Jupyter's log; no browser where there is no display or
in an SSH session, and the SSH tunnel to use instead."""
from __future__ import annotations

import socket

import pytest

from ipulab import cli
from ipulab.cli.lab import free_port

DISPLAYS = ("DISPLAY", "WAYLAND_DISPLAY", "SSH_CONNECTION", "SSH_TTY", "JUPYTER_TOKEN")


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """main(["lab", ...]) with the JupyterLab child replaced: (code, cmd, env, stdout lines)."""
    monkeypatch.setenv("IPULAB_WORKSPACE", str(tmp_path / "ws"))
    for name in DISPLAYS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli, "_is_root", lambda: False)

    def run(capsys, *argv, **env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        seen = []
        monkeypatch.setattr(cli, "_run", lambda cmd, e: seen.append((cmd, e)) or 0)
        code = cli.main(["lab", *argv])
        (cmd, child_env), = seen
        return code, cmd, child_env, capsys.readouterr().out.splitlines()
    return run


def test_ip_no_browser_and_the_url_on_its_own_line(lab, capsys):
    code, cmd, env, out = lab(capsys, "--ip", "0.0.0.0", "--no-browser", "--port", "9001",
                              DISPLAY=":0")
    assert code == 0
    assert {"--ip=0.0.0.0", "--no-browser", "--port=9001",
            "--ServerApp.port_retries=0"} <= set(cmd)
    token = env["JUPYTER_TOKEN"]
    assert len(token) >= 32 and token not in " ".join(cmd)      # not in `ps` for all to see
    assert f"http://{socket.gethostname()}:9001/lab?token={token}" in out


def test_a_headless_machine_opens_no_browser_and_says_how_to_tunnel(lab, capsys):
    code, cmd, env, out = lab(capsys, "--port", "9002")
    assert code == 0 and "--no-browser" in cmd
    assert f"http://127.0.0.1:9002/lab?token={env['JUPYTER_TOKEN']}" in out
    text = "\n".join(out)
    assert "no display" in text and "ssh -N -L 9002:127.0.0.1:9002" in text
    assert max(len(line) for line in out) <= 200


def test_an_ssh_session_opens_no_browser_either(lab, capsys):
    _, cmd, _, out = lab(capsys, "--port", "9003", DISPLAY="localhost:10.0",
                         SSH_CONNECTION="10.0.0.2 50000 10.0.0.1 22")
    assert "--no-browser" in cmd and any("SSH session" in line for line in out)


def test_a_desktop_opens_the_browser(lab, capsys):
    _, cmd, _, out = lab(capsys, "--port", "9004", DISPLAY=":0")
    assert "--no-browser" not in cmd
    assert not any("ssh -N" in line for line in out)


def test_the_users_own_token_is_kept(lab, capsys):
    _, _, env, out = lab(capsys, "--port", "9005", JUPYTER_TOKEN="my-own-token", DISPLAY=":0")
    assert env["JUPYTER_TOKEN"] == "my-own-token"
    assert "http://127.0.0.1:9005/lab?token=my-own-token" in out


def test_without_a_port_a_free_one_is_chosen_and_named(lab, capsys):
    taken = socket.socket()
    taken.bind(("127.0.0.1", free_port("127.0.0.1")))
    taken.listen(1)
    try:
        busy = taken.getsockname()[1]
        _, cmd, _, out = lab(capsys, DISPLAY=":0")
        port = next(int(c.split("=")[1]) for c in cmd if c.startswith("--port="))
        assert port != busy and any(f"127.0.0.1:{port}/lab?token=" in line for line in out)
    finally:
        taken.close()
