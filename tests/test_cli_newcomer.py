"""What a newcomer tripped on at the command line (issue 22): `ipulab train --report` and
`ipulab plan --report` with a path that cannot be written (a missing folder, a folder, a file in
the way) are one line and exit code 2 before any work; the progress line labels its numbers as
the batch's, in the result table's format."""
from __future__ import annotations

import pytest

from ipulab import cli
from ipulab.cli import train as train_cli


@pytest.fixture
def no_work(monkeypatch):
    """Any training or planning now is a failure: the check must come first."""
    def work(*args, **kwargs):
        raise AssertionError("work started before the report's path was checked")
    monkeypatch.setattr(train_cli, "train_config", work)
    monkeypatch.setattr(cli.plan_command, "run", work)


@pytest.mark.parametrize("command", [["train"], ["plan", "--model", "bert-large"]])
@pytest.mark.parametrize("where, words", [
    ("missing/r.html", "missing does not exist"),
    (".", "is a folder: give a file in it"),
    ("file/r.html", "file is not a folder"),
])
def test_a_report_path_that_cannot_be_written(tmp_path, capsys, no_work, command, where, words):
    (tmp_path / "file").write_text("in the way")
    path = str(tmp_path / where)
    assert cli.main([*command, "--report", path]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and words in err
    assert err.startswith(f"ipulab {command[0]}: --report {path}")


def test_a_writable_path_passes(tmp_path):
    assert cli.report_problem(str(tmp_path / "r.html")) is None
    (tmp_path / "old.html").write_text("replaced")
    assert cli.report_problem(str(tmp_path / "old.html")) is None


def test_the_progress_line_labels_the_batch_as_the_table_labels_the_test():
    line = train_cli._progress(1, 5, 22, 22, 1.74712, 0.671875)
    assert line.endswith("22/22  batch loss 1.7471  batch accuracy 67.19%")


def test_the_gpt3_search_table_is_readable(capsys):
    """A p 64 mapping's layers list was 128 characters of the table's mapping column (165
    wide): runs of a layer count are written once (1x32)."""
    assert cli.main(["plan", "--model", "gpt3-175b", "--system", "pod256"]) == 0
    lines = capsys.readouterr().out.splitlines()
    mapping_width = len(lines[2].split("  ")[0])             # the dashes under "mapping"
    assert mapping_width <= 70, lines[1]
    assert any("p 64 [1x32,2x32]" in line for line in lines)
