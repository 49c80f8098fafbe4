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
    assert (config.optimizer, config.lr, config.momentum) == ("adam", 0.003, 0.0)
    sgd = train_cli.train_config(cli.build_parser().parse_args(["train", "--model", "transformer",
                                                          "--optimizer", "sgd"]))
    assert (sgd.optimizer, sgd.lr, sgd.momentum) == ("sgd", 0.1, 0.9)    # the recipe before
    assert cli.build_parser().parse_args(["train"]).model == "cnn"


def test_a_small_run_prints_token_accuracy_and_the_step(capsys, tmp_path):
    report = tmp_path / "gpt.html"
    code, out, err = run(capsys, "--tiles-per-ipu", "64", "--epochs", "1", "--batch-size", "32",
                         "--report", str(report))
    assert code == 0, err
    assert out.startswith("small GPT sorting tokens, ipu (1 IPU(s) x 64 tiles), 1 replica(s) "
                          "x batch 32, Adam lr 0.003, fp32")
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
    """The README's figures: Adam reaches >= 99 % test token accuracy (>= 98 % of the answer
    tokens, >= 85 % of the answers whole) in 2 epochs on a full Bow IPU; one step is 223,929
    simulated cycles."""
    code, out, err = run(capsys)
    assert code == 0, err
    accuracy = float(row(out, "test token accuracy").rstrip("%")) / 100
    answers = float(row(out, "test answer tokens right").rstrip("%")) / 100
    whole = float(row(out, "test answers all right").split("%")[0]) / 100
    print(out)
    assert accuracy >= 0.99 and answers >= 0.98 and whole >= 0.85
    assert row(out, "cycles by part") == "223,929 cycles"
    assert row(out, "tiles used") == "1,472 of 1,472"


def test_tensor_parallel_from_the_shell(capsys):
    """--tensor-parallel 2x2: the heads and feed-forward over t1, the hidden dimension over t2
    (an epoch of it is tests/test_transformer_scale_out.py's work many times over: the
    flag's config and title here)."""
    args = cli.build_parser().parse_args(["train", "--model", "transformer", "--system",
                                          "pod16", "--tensor-parallel", "2x2"])
    config = train_cli.train_config(args)
    assert config == nn.TrainConfig.transformer_run(system="pod16", tensor_parallel=(2, 2))
    target = config.device().target
    assert config.replica_ipus == 4                                # a replica on 2 x 2 IPUs
    assert "Adam lr 0.003, fp32, tensor parallel 2x2, 2 epoch(s)" in \
        train_cli._title(config.resolve(target), target, "transformer")
    code, out, err = run(capsys, "--tensor-parallel", "2y2")
    assert code == 2 and "--tensor-parallel must be an int >= 1, a pair" in err
    code, out, err = run(capsys, "--tensor-parallel", "3", "--system", "pod16")   # 4 heads
    assert code == 2 and "4 heads, which 3 does not divide" in err


def test_sorted_rows_come_from_the_devices_predictions():
    class Fake:
        def predict(self, x):
            return np.array([[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 2, 1], [0, 0, 0, 0]])

    y = np.array([[5, 5, 1, 1], [5, 5, 1, 2], [5, 5, 2, 2], [5, 5, 1, 1]])
    rows = dict(train_cli._sorted_rows(Fake(), np.zeros((4, 4), np.int64), y))
    assert rows == {"test answer tokens right": "50.00%", "test answers all right":
                    "25.00% of 4"}
