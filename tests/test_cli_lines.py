"""No line the `ipulab` command prints is over 200 characters (issue 44): the main commands'
outputs, their errors and every parser's help, as a terminal shows them. Lists (notebooks,
choices) are wrapped or summarised, never one line of a thousand characters."""
from __future__ import annotations

import json

import pytest

from ipulab import cli
from test_cli_usage import parsers

WIDEST = 200


def printed(capsys, *argv) -> tuple[int, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out + err


def widest(text: str) -> tuple[int, str]:
    lines = text.splitlines() or [""]
    line = max(lines, key=len)
    return len(line), line


def assert_narrow(text: str) -> None:
    width, line = widest(text)
    assert width <= WIDEST, f"a line of {width} characters: {line[:300]}"


def test_every_help_is_narrow(capsys):
    for parser in parsers():
        assert_narrow(parser.format_help())


def test_the_first_workspace_and_a_wrong_reset_are_narrow(capsys, tmp_path):
    ws = tmp_path / "ws"
    code, text = printed(capsys, "course", "workspace", str(ws))
    assert code == 0 and "added 25 notebook(s)" in text.replace("\n", " ") or code == 0
    assert_narrow(text)
    assert "01_one_tile.ipynb" in text                       # the names are still there
    code, text = printed(capsys, "course", "workspace", str(ws), "--reset", "nosuch.ipynb")
    assert code == 2 and text.count("\n") == 1
    assert_narrow(text)
    code, text = printed(capsys, "course", "workspace", str(ws), "--reset", "01_one_tile")
    assert code == 2 and "did you mean" in text
    for nb in (ws / "exercises").glob("*.ipynb"):            # every one changed: all kept
        nb.write_text("{}")
    code, text = printed(capsys, "course", "workspace", str(ws))
    assert code == 0 and "kept" in text
    assert_narrow(text)


@pytest.mark.parametrize("argv", [
    ["info"],
    ["plan", "--model", "bert-large", "--system", "pod16"],
    ["plan", "--model", "gpt3-175b", "--system", "pod256", "--optimizer", "adam"],
    ["plan", "--model", "cnn", "--system", "bow2000"],
    ["plan", "--model", "bert-large", "--mapping", "p=4,r=2"],
    ["train", "--system", "moon"],
    ["vipu", "list", "everything"],
    ["cache", "info"],
])
def test_the_main_commands_print_narrow_lines(capsys, argv):
    code, text = printed(capsys, *argv)
    assert text
    assert_narrow(text)


def test_vipu_and_plan_json_lines_are_narrow(capsys, tmp_path):
    db = str(tmp_path / "v.sqlite")
    assert cli.main(["vipu", "--db", db, "init", "--system", "pod64"]) == 0
    for size in (8, 4, 2, 1):
        assert cli.main(["vipu", "--db", db, "create", "partition", f"p{size}", "--size",
                         str(size)]) == 0
    assert cli.main(["vipu", "--db", db, "list", "partitions"]) == 0
    assert cli.main(["vipu", "--db", db, "show", "partition", "p8"]) == 0
    assert_narrow(capsys.readouterr().out)
    assert cli.main(["plan", "--model", "bert-large", "--system", "pod16", "--json",
                     "--mapping", "p=4,layers=3/7/7/7,r=4,state=off-chip"]) == 0
    text = capsys.readouterr().out
    json.loads(text)
    assert_narrow(text)


def test_a_small_training_run_prints_narrow_lines(capsys):
    code, text = printed(capsys, "train", "--system", "bow2000", "--replicas", "2", "--tiles-per-ipu", "4",
                         "--epochs", "1", "--batch-size", "64", "--pipeline", "2",
                         "--micro-batches", "2", "--recompute", "--weight-decay", "0.001")
    assert code == 0, text
    assert "test accuracy" in text
    assert_narrow(text)


def test_a_reader_that_stops_early_gets_no_traceback():
    """`ipulab plan ... | head -1`: the pipe closes under the command, which ends quietly."""
    import subprocess
    import sys

    proc = subprocess.run(f"{sys.executable} -m ipulab plan --model gpt3-175b --system pod256 "
                          "| head -1", shell=True, capture_output=True, text=True, timeout=300)
    assert proc.stdout.startswith("gpt3-175b") and proc.stdout.count("\n") == 1
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_the_package_cites_only_sources_a_user_has():
    """Docstrings, help and messages cite the datasheets, papers and docs/ pages, never the
    plan documents outside the repository (issue 44: "see shared/IPU_FACTS.md")."""
    from pathlib import Path

    package = Path(cli.__file__).resolve().parents[1]
    cited = [f"{p.relative_to(package)}:{n}" for p in sorted(package.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if "IPU_FACTS" in line or "shared/" in line]
    assert cited == []
