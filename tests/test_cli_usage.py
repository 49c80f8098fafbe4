"""Usage errors of the `ipulab` command (issue 44): no abbreviations (`--epoch 1` is not
`--epochs`), an unknown flag after a subcommand gets that subcommand's usage and a
did-you-mean, an invalid choice is one short line, long lists of choices are folded."""
from __future__ import annotations

import argparse

import pytest

from ipulab import cli


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def parsers(parser=None):
    """Every parser of the command, the top one first."""
    parser = parser or cli.build_parser()
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from parsers(sub)


def test_no_parser_takes_abbreviations():
    found = list(parsers())
    assert len(found) > 12
    assert [p.prog for p in found if p.allow_abbrev] == []


@pytest.mark.parametrize("argv, usage, meant", [
    (["train", "--epoch", "1"], "usage: ipulab train", "--epochs"),
    (["train", "--epcohs", "2"], "usage: ipulab train", "--epochs"),
    (["train", "--tiles", "16"], "usage: ipulab train", "--tiles-per-ipu"),
    (["plan", "--model", "cnn", "--sytem", "pod16"], "usage: ipulab plan", "--system"),
    (["course", "workspace", "--rest", "x.ipynb"], "usage: ipulab course workspace", "--reset"),
    (["course", "grade", "subs", "--worker", "2"], "usage: ipulab course grade", "--workers"),
    (["lab", "--prot", "8888"], "usage: ipulab lab", "--port"),
])
def test_an_unknown_flag_gets_its_subcommands_usage_and_a_suggestion(capsys, argv, usage, meant):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert usage in err and "usage: ipulab [-h]" not in err, err
    last = err.strip().splitlines()[-1]
    assert f"unrecognized arguments: {argv[-2]}" in last and f"did you mean {meant}?" in last
    assert "Traceback" not in err


def test_the_vipu_actions_stay_one_line_with_a_suggestion(capsys):
    code, out, err = run(capsys, "vipu", "list", "partitions", "--jsn")
    assert code == 2 and err.count("\n") == 1 and "did you mean --json?" in err, err


@pytest.mark.parametrize("argv, words", [
    (["train", "--system", "moon"], ["--system", "invalid choice 'moon'", "more"]),
    (["train", "--system", "pod12"], ["invalid choice 'pod12'", "did you mean pod1"]),
    (["train", "--precision", "bf16"], ["invalid choice 'bf16'", "fp32, fp16"]),
    (["trian"], ["invalid choice 'trian'", "did you mean train?"]),
    (["plan", "--model", "cnn", "--optimizer", "adan"], ["did you mean adam?"]),
])
def test_an_invalid_choice_is_one_short_line(capsys, argv, words):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert len(err) < 200 and "usage:" not in err, err
    for w in words:
        assert w in err, err


def test_long_lists_of_choices_are_folded_in_the_help(capsys):
    code, out, _ = run(capsys, "train", "--help")
    assert code == 0 and "--system SYSTEM" in out and "{ipu1,ipu2" not in out
    assert max(len(line) for line in out.splitlines()) <= 200
