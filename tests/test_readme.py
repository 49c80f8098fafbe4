"""Every command the README shows runs as shown: its shell blocks in a fresh clone whose venv is
made by the README's own steps (`make venv`, then `. .venv/bin/activate`), its Python blocks in
that venv. A block that cannot run here (it opens JupyterLab, runs the whole suite, or needs a
notebook's variables) says so in an HTML comment just before it: `<!-- readme-test: skip
(why) -->`; nothing is skipped silently."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import fresh_venv

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"(?:<!--\s*readme-test:\s*(?P<mark>[^>]*?)\s*-->\s*\n)?"
                   r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```\s*$", re.M | re.S)
RUNNABLE = {"sh", "python"}


def blocks(text: str) -> list[dict]:
    """Each fenced block: its language, its text, and its skip reason ('' when it runs)."""
    out = []
    for m in FENCE.finditer(text):
        mark = m.group("mark") or ""
        reason = re.fullmatch(r"skip \((.+)\)", mark)
        if mark and not reason:
            raise ValueError(f"README: a readme-test mark says neither skip (why): {mark!r}")
        out.append({"lang": m.group("lang"), "body": m.group("body"),
                    "skip": reason.group(1) if reason else "", "at": text[:m.start()].count("\n") + 1})
    return out


README = blocks((ROOT / "README.md").read_text())


def test_blocks_reads_languages_and_marks():
    text = ("intro\n```sh\nls\n```\n<!-- readme-test: skip (opens a window) -->\n```python\n"
            "show()\n```\n```text\nout\n```\n")
    got = [(b["lang"], b["body"], b["skip"]) for b in blocks(text)]
    assert got == [("sh", "ls\n", ""), ("python", "show()\n", "opens a window"), ("text", "out\n", "")]
    with pytest.raises(ValueError, match="neither skip"):
        blocks("<!-- readme-test: later -->\n```sh\nls\n```\n")


def test_every_block_is_shell_python_or_text_and_most_run():
    for b in README:
        assert b["lang"] in RUNNABLE | {"text"}, f"README line {b['at']}: say sh, python or text"
    runs = [b for b in README if b["lang"] in RUNNABLE and not b["skip"]]
    assert len(runs) >= 4


def test_the_path_is_set_before_the_first_cli_example():
    first_cli = next(b for b in README if re.search(r"^ipulab\b", b["body"], re.M))
    before = first_cli["body"].split("\nipulab", 1)[0]
    assert ". .venv/bin/activate" in before, "activate the venv before the first `ipulab`"


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone's files, a HOME of its own, and a venv already present for `make venv` to
    install into offline (test -x .venv/bin/python: the Makefile keeps a venv it finds)."""
    root = tmp_path_factory.mktemp("readme")
    checkout = fresh_venv.copy_checkout(root / "ipulab")
    home = root / "home"
    home.mkdir()
    fresh_venv.make(checkout / ".venv")
    return checkout, fresh_venv.offline_env(home)


def _run(cmd: list[str], cwd: Path, env: dict, what: str) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{what} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_readme_blocks_run_as_shown(clone):
    checkout, env = clone
    shell = [b for b in README if b["lang"] == "sh" and not b["skip"]]
    python = [b for b in README if b["lang"] == "python" and not b["skip"]]
    # the first runnable shell block is the user's install: make venv, then activate
    assert "make venv" in shell[0]["body"]
    _run(["bash", "-e", "-c", shell[0]["body"]], checkout, env, f"README line {shell[0]['at']}")
    for b in shell[1:]:     # in the shell the first block activated the venv in
        _run(["bash", "-e", "-c", ". .venv/bin/activate\n" + b["body"]], checkout, env,
             f"README line {b['at']}")
    where = _run([str(checkout / ".venv/bin/python"), "-c", "import ipulab; print(ipulab.__file__)"],
                 checkout, env, "import ipulab")
    assert where.strip().startswith(str(checkout)), "the venv runs the clone's ipulab"
    for b in python:
        _run([str(checkout / ".venv/bin/python"), "-c", b["body"]], env["HOME"], env,
             f"README line {b['at']}")
