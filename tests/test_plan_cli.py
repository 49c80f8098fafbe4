"""`ipulab plan` through ipulab.cli.main: the table, the JSON fields, the report, exit codes."""
from __future__ import annotations

import json

import pytest

from ipulab.cli import main

FIELDS = {"tensor_parallel", "pipeline", "replicas", "rts", "phases", "optimizer_state",
          "layers_per_stage", "fits", "reason", "samples_per_second", "peak_bytes_per_ipu"}


def run_json(capsys, *argv):
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_one_mapping_as_json(capsys):
    doc = run_json(capsys, "--model", "bert-large", "--system", "pod16", "--optimizer", "lamb",
                   "--mapping", "p=4,layers=3/7/7/7,r=4,state=off-chip")
    assert doc["model"] == "bert-large" and doc["system"] == "pod16"
    assert doc["parameters"] == 335_141_888
    [m] = doc["mappings"]
    assert FIELDS <= set(m)
    assert m["tensor_parallel"] == [1, 1] and m["pipeline"] == 4 and m["replicas"] == 4
    assert m["layers_per_stage"] == [3, 7, 7, 7] and m["phases"] == 1
    assert m["optimizer_state"] == "off-chip" and m["fits"] is True and m["rts"] is False
    assert 0 < m["peak_bytes_per_ipu"] <= 940_572_672 and m["samples_per_second"] > 0


def test_on_chip_lamb_state_does_not_fit(capsys):
    doc = run_json(capsys, "--model", "bert-large", "--system", "pod16", "--optimizer", "lamb",
                   "--mapping", "p=4,layers=3/7/7/7,r=4,state=on-chip")
    assert doc["mappings"][0]["fits"] is False
    assert "In-Processor Memory" in doc["mappings"][0]["reason"]


def test_search_feasible_first_then_the_others_with_reasons(capsys, tmp_path):
    report = tmp_path / "plan.html"
    assert main(["plan", "--model", "bert-large", "--system", "pod16", "--global-batch",
                 "65536", "--optimizer", "lamb", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "mappings fit" in out and "In-Processor Memory" in out
    assert report.stat().st_size > 100_000 and "bokeh" in report.read_text()[:200_000]
    doc = run_json(capsys, "--model", "bert-large", "--system", "pod16",
                   "--global-batch", "65536")
    fits = [m["fits"] for m in doc["mappings"]]
    assert fits == sorted(fits, reverse=True) and True in fits and False in fits
    assert all(m["reason"] for m in doc["mappings"])


def test_gpt3_175b_published_mapping_fits_phased(capsys):
    doc = run_json(capsys, "--model", "gpt3-175b", "--system", "pod256", "--optimizer", "adam",
                   "--mapping", "t=8x8,r=4,rts,phases=96")
    m = doc["mappings"][0]
    assert m["tensor_parallel"] == [8, 8] and m["phases"] == 96 and m["rts"] is True
    assert m["fits"] is True


def test_the_cnn_and_a_json_model(capsys, tmp_path):
    doc = run_json(capsys, "--model", "cnn", "--system", "bow2000")
    assert doc["parameters"] == 6090 and doc["mappings"]
    f = tmp_path / "tiny.json"
    f.write_text(json.dumps({"layers": 4, "hidden": 256, "heads": 4, "seq": 128,
                             "vocab": 1000, "micro": 4, "global_batch": 256}))
    doc = run_json(capsys, "--model", str(f), "--system", "pod16")
    assert doc["model"] == "tiny" and all(m["pipeline"] <= 4 for m in doc["mappings"])


@pytest.mark.parametrize("argv, words", [
    (["--system", "pod12"], "power of two"),
    (["--mapping", "p=4,r=2"], "t·p·r"),
    (["--mapping", "t=3,r=16"], "power of two"),
    (["--mapping", "p=4,r=4,micro=8", "--global-batch", "96"], "2p − 1"),
    (["--mapping", "r=16,phases=30"], "phases"),
    (["--model", "nope"], "unknown model"),
    (["--system", "moon"], "unknown system"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, words):
    args = ["plan", "--model", "bert-large", "--system", "pod16", *argv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_inconsistent_json_model(capsys, tmp_path):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"layers": 4, "hidden": 250, "heads": 4, "seq": 128, "vocab": 10}))
    assert main(["plan", "--model", str(f)]) == 2
    assert "divisible by heads" in capsys.readouterr().err


# --- a model file is untrusted: bounded before any work (issue 38) ------------------------------
TINY = {"layers": 4, "hidden": 256, "heads": 4, "seq": 128, "vocab": 1000}


def refused_model(capsys, tmp_path, text: str, *words):
    f = tmp_path / "hostile.json"
    f.write_text(text)
    assert main(["plan", "--model", str(f), "--system", "pod16"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(f) in err or f.name in err, err
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize("key, value, words", [
    ("layers", 10**9, ["layers", "at most 128"]),
    ("layers", 1000, ["layers", "at most 128"]),
    ("hidden", 2**20, ["hidden", "at most 32,768"]),
    ("seq", 10**7, ["seq", "at most 65,536"]),
    ("vocab", 10**12, ["vocab", "at most"]),
    ("ffn", 10**9, ["ffn", "at most"]),
    ("positions", 10**9, ["positions", "at most"]),
])
def test_a_model_past_a_bound_is_refused_before_any_work(capsys, tmp_path, key, value, words):
    refused_model(capsys, tmp_path, json.dumps({**TINY, key: value}), *words)


def test_a_model_of_too_many_parameters_is_refused(capsys, tmp_path):
    spec = {"layers": 128, "hidden": 32768, "heads": 128, "seq": 2048, "vocab": 50000}
    refused_model(capsys, tmp_path, json.dumps(spec), "parameters", "at most 1,000,000,000,000")


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"layers": ' + "[" * 100_000 + "4" + "]" * 100_000 + "}",
    '{"layers": {"n": 4}, "hidden": 256, "heads": 4, "seq": 128, "vocab": 1000}',
])
def test_nesting_deeper_than_the_format_is_refused(capsys, tmp_path, text):
    refused_model(capsys, tmp_path, text, "nest")


def test_a_huge_model_file_is_refused_unread(capsys, tmp_path):
    refused_model(capsys, tmp_path, json.dumps({**TINY, "name": "x" * 200_000}), "bytes")


def test_the_largest_preset_is_within_the_bounds(capsys, tmp_path):
    """gpt3-175b's dimensions as a file: the bounds leave room for the published models."""
    spec = {"layers": 96, "hidden": 12288, "heads": 96, "seq": 2048, "vocab": 50257,
            "global_batch": 128}
    f = tmp_path / "gpt3.json"
    f.write_text(json.dumps(spec))
    doc = run_json(capsys, "--model", str(f), "--system", "pod256", "--mapping",
                   "t=8x8,r=4,rts,phases=96", "--optimizer", "adam")
    assert doc["parameters"] > 170e9
