"""The benchmarks run at tiny sizes, so they cannot rot between `make bench` runs.

Their own asserts check the simulated results against numpy; times are not asserted.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import foundation  # noqa: E402


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
