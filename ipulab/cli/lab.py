"""What `ipulab lab` decides before JupyterLab starts: the port (a free one, named, so the URL
is known), the token (in the child's environment, never on its command line, where `ps` shows
it to every user), whether a browser can open here, and the lines that say where to go."""
from __future__ import annotations

import getpass
import secrets
import socket
import sys

FIRST_PORT = 8888               # Jupyter's own first choice
PORTS_TRIED = 100
WILDCARDS = ("", "0.0.0.0", "::", "*")


def free_port(ip: str | None) -> int:
    """The first port from 8888 on that nothing listens on at ip (default 127.0.0.1)."""
    host = "" if (ip or "127.0.0.1") in WILDCARDS else (ip or "127.0.0.1")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port in range(FIRST_PORT, FIRST_PORT + PORTS_TRIED):
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    return 0                    # none: Jupyter picks one and its log names it


def no_browser_reason(env: dict) -> str | None:
    """Why no browser should open here (an SSH session, no display), or None."""
    if env.get("SSH_CONNECTION") or env.get("SSH_TTY"):
        return "an SSH session: a browser would open on this machine, not yours"
    if sys.platform.startswith("linux") and not (env.get("DISPLAY") or
                                                 env.get("WAYLAND_DISPLAY")):
        return "no display here (no $DISPLAY or $WAYLAND_DISPLAY)"
    return None


def token(env: dict) -> str:
    """The user's own $JUPYTER_TOKEN, else a new random one."""
    return env.get("JUPYTER_TOKEN") or secrets.token_hex(24)


def url(ip: str | None, port: int, key: str) -> str:
    """The lab's address with its token: the machine's name when it listens on every address."""
    host = ip or "127.0.0.1"
    host = socket.gethostname() if host in WILDCARDS else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/lab?token={key}"


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "you"


def banner(folder, link: str, port: int, why_not: str | None) -> list[str]:
    """What `ipulab lab` prints before Jupyter's log: the URL on a line of its own; without a
    browser here, why not and the SSH tunnel that brings the lab to your own machine."""
    lines = [f"JupyterLab on {folder}: open this URL (its token is your key: keep it to "
             "yourself)", link]
    if why_not:
        lines += [f"not opening a browser: {why_not}.",
                  f"From your own machine: ssh -N -L {port}:127.0.0.1:{port} "
                  f"{_login()}@{socket.gethostname()}",
                  f"then open the URL above there (http://127.0.0.1:{port}/lab?token=...)."]
    return lines
