"""`ipulab train --model transformer`: the course's small GPT learning sort_tokens, with its
recipe in nn.TrainConfig.transformer_run(); a small run in seconds, the full one (the figures
the README gives) marked slow."""
import numpy as np
import pytest

from ipulab import cli, nn
from ipulab.cli import train as train_cli


def run(capsys, *args):
    code = cli.main(["train", "--model", "transformer", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def row(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(name))[len(name):].strip()


def test_the_flag_picks_the_transformer_run():
    a = cli.build_parser().parse_args(["train", "--model", "transformer", "--lr", "0.05"])
    assert train_cli.train_config(a) == nn.TrainConfig.transformer_run(lr=0.05)
    config = nn.TrainConfig.transformer_run()
    assert (config.system, config.replicas, config.batch_size, config.epochs) == \
        ("ipu", 1, 16, 2)
    assert cli.build_parser().parse_args(["train"]).model == "cnn"


def test_a_small_run_prints_token_accuracy_and_the_step(capsys, tmp_path):
    report = tmp_path / "gpt.html"
    code, out, err = run(capsys, "--tiles-per-ipu", "64", "--epochs", "1", "--batch-size", "32",
                         "--report", str(report))
    assert code == 0, err
    assert out.startswith("small GPT sorting tokens, ipu (1 IPU(s) x 64 tiles), 1 replica(s) "
                          "x batch 32, SGD lr 0.1 momentum 0.9")
    # one progress line (stdout is not a terminal): 4,096 // 32 = 128 steps
    assert "epoch 1/1 [" + "#" * train_cli.PROGRESS_WIDTH + "] 128/128" in out
    assert "batch token accuracy " in out and "%" in out.split("batch token accuracy ")[1][:8]
    for name in ("test token accuracy", "test loss", "test answer tokens right",
                 "test answers all right", "simulated step time", "sequences/s (simulated)",
                 "cycles by part", "peak tile memory"):
        assert name in out
    total = int(row(out, "cycles by part").split()[0].replace(",", ""))
    assert f"({total:,} cycles)" in row(out, "simulated step time")
    assert report.stat().st_size > 0 and f"report: {report}" in out


def test_bad_flags_are_one_line(capsys):
    code, out, err = run(capsys, "--batch-size", "5000")
    assert code == 2 and "more than the 4,096 training samples" in err


@pytest.mark.slow
def test_the_course_run_learns_to_sort(capsys):
    """The README's figures: the recipe reaches >= 90 % test token accuracy in 2 epochs on a
    full Bow IPU, and one step is 210,519 simulated cycles."""
    code, out, err = run(capsys)
    assert code == 0, err
    accuracy = float(row(out, "test token accuracy").rstrip("%")) / 100
    answers = float(row(out, "test answer tokens right").rstrip("%")) / 100
    print(out)
    assert accuracy >= 0.9 and answers >= 0.8
    assert row(out, "cycles by part") == "210,519 cycles"
    assert row(out, "tiles used") == "1,472 of 1,472"


def test_sorted_rows_come_from_the_devices_predictions():
    class Fake:
        def predict(self, x):
            return np.array([[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 2, 1], [0, 0, 0, 0]])

    y = np.array([[5, 5, 1, 1], [5, 5, 1, 2], [5, 5, 2, 2], [5, 5, 1, 1]])
    rows = dict(train_cli._sorted_rows(Fake(), np.zeros((4, 4), np.int64), y))
    assert rows == {"test answer tokens right": "50.00%", "test answers all right":
                    "25.00% of 4"}
