"""The planner against the simulator on part of the cross-check's grid
(benchmarks/plan_crosscheck.py runs all 38 mappings): plan.estimate, given what the Trainer
was given, says the cycles of a training step and the bytes of its fullest IPU within 15 %
of the simulated profile."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import plan_crosscheck  # noqa: E402

CASES = [
    ("cnn", dict(replicas=16, batch_size=16)),
    ("cnn", dict(replicas=4, batch_size=16, tensor_parallel=4)),
    ("cnn", dict(replicas=4, batch_size=16, pipeline=4, micro_batches=4)),
    ("mlp", dict(replicas=8, batch_size=16, tensor_parallel=2)),
    ("mlp", dict(replicas=8, batch_size=16, pipeline=2, micro_batches=2)),
    ("mlp", dict(replicas=16, batch_size=16, precision="fp16", recompute=True)),
    ("mlp", dict(replicas=8, batch_size=16, tensor_parallel=2, momentum=0.9, rts=True,
                 optimizer_state="off-chip")),
    ("cnn", dict(replicas=16, batch_size=16, momentum=0.9, phases=3, rts=True)),
    # pipelines of sharded stages, and 8 shards: the furthest off in cycles
    ("cnn", dict(replicas=4, batch_size=16, pipeline=2, micro_batches=4, tensor_parallel=2)),
    ("mlp", dict(replicas=4, batch_size=16, pipeline=2, micro_batches=4, tensor_parallel=2)),
    ("mlp", dict(replicas=2, batch_size=32, tensor_parallel=8)),
]


@pytest.mark.parametrize("name, options", CASES, ids=[f"{n}-{i}" for i, (n, _) in
                                                      enumerate(CASES)])
def test_the_planner_predicts_the_simulated_step(name, options):
    row = plan_crosscheck.run(name, options)
    assert abs(row["cycles_error"]) <= 0.15, row
    assert abs(row["bytes_error"]) <= 0.15, row
    assert plan_crosscheck.within([row])


def test_the_check_fails_past_the_tolerance():
    row = {"cycles_error": 0.02, "bytes_error": -0.16}
    assert not plan_crosscheck.within([row])
