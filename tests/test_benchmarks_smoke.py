"""The benchmarks run at tiny sizes, so they cannot rot between `make bench` runs.

Their own asserts check the simulated results against numpy; times are not asserted.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import foundation  # noqa: E402
import speed  # noqa: E402
import step  # noqa: E402
import training  # noqa: E402
import views  # noqa: E402


def test_compute_set_benchmark_runs_and_checks_results():
    for codelet in (foundation.Dot, foundation.DotSimd):
        t_sim, t_np, t_py = foundation.bench_compute_set(codelet, n_vertices=64, n=32)
        assert min(t_sim, t_np, t_py) > 0


def test_exchange_benchmark_moves_every_byte():
    t_sim, t_np, t_compile, profile = foundation.bench_exchange(total_bytes=4 * 5888 * 8)
    assert profile.total_cycles > 0
    assert profile.exchange_cycles.max() > 0 and profile.inter_ipu_exchange_cycles.max() > 0


def test_compile_benchmark_runs():
    t_compile, t_build = foundation.bench_compile(n_vertices=500)
    assert t_compile > 0 and t_build > 0


def test_training_benchmark_runs_and_checks_the_first_loss():
    """1, 4 and 16 IPUs of 8 tiles, 256 digits: every table row is filled in (bench_training
    itself checks the first step's loss against the float32 numpy reference)."""
    targets, table = training.main(tiles_per_ipu=8, samples=256, repeat=2)
    assert len(targets) == 6 and targets[3][0].startswith("one epoch of digits (4 steps of 64)")
    assert "x numpy float32" in targets[0][2] or "x PyTorch CPU" in targets[0][2]
    header, *rows = table
    assert len(header) == 8 and [r[0] for r in rows] == list(training.SYSTEMS)
    assert [r[1] for r in rows] == ["1 x 16", "4 x 16", "16 x 16"]
    assert rows[0][4] == "0" and rows[1][4] != "0"     # IPU-Link bytes only with many IPUs


def test_speed_benchmark_runs():
    """Fresh processes, the executable cache in memory and on disk (a temporary folder), and
    tutorial 6 (whose result tut6 checks), all at small sizes."""
    rows = speed.main(quick=True)
    assert [r[0].strip().split()[0] for r in rows] == ["build", "one", "the", "in", "tutorial"]
    assert all(r[1] for r in rows)


def test_step_benchmark_runs_side_by_side():
    """Both systems and the small GPT at 8 tiles per IPU, a round of two steps each, against
    PyTorch (or without it): every row filled in."""
    rows = step.main(quick=True)
    assert [r[0].split(",")[-1].strip() for r in rows[:2]] == ["4 replicas x 16",
                                                              "16 replicas x 16"]
    assert rows[2][0].strip().startswith("per image") and "small GPT" in rows[3][0]
    assert all("x " in r[2] for r in rows[:2] + rows[3:4])


def test_views_benchmark_times_every_view():
    """Every figure, widget and dashboard tab of a (small) Bow-2000, and the drive."""
    rows = views.main(quick=True)
    names = [r[0] for r in rows]
    assert len(names) == 6 + 4 + 4 + 1 and names[-1].startswith("the widgets driven")
    assert all(r[1].endswith(" ms") for r in rows)
