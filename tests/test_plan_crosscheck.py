"""The planner against the simulator on part of the cross-check's grid
(benchmarks/plan_crosscheck.py runs all 95 mappings): plan.estimate, given what the Trainer
was given, says the cycles of a training step and the bytes of its fullest IPU within 15 %
of the simulated profile: the course CNN, an MLP and a 2-layer GPT."""
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
    # the GPT (32-tile IPUs): replicas, a pipeline in fp16, recompute with micro-batches,
    # LAMB with RTS (its norms all-reduced), post-norm with Dropout
    ("gpt", dict(replicas=16, batch_size=4)),
    ("gpt", dict(replicas=8, batch_size=8, pipeline=2, micro_batches=2, precision="fp16")),
    ("gpt", dict(replicas=8, batch_size=16, pipeline=2, micro_batches=4, recompute=True)),
    ("gpt", dict(replicas=16, batch_size=4, optimizer="lamb", rts=True, lr=1e-3)),
    ("gpt-wide", dict(replicas=8, batch_size=8, pipeline=2, micro_batches=2)),
    # Megatron's t: 4 shards in fp16 with recompute, 2 shards in a 4-stage pipeline, with
    # phases, and Dropout
    ("gpt", dict(replicas=4, batch_size=8, tensor_parallel=4, precision="fp16",
                 recompute=True)),
    ("gpt", dict(replicas=2, batch_size=16, tensor_parallel=2, pipeline=4, micro_batches=4,
                 precision="fp16")),
    ("gpt", dict(replicas=8, batch_size=4, tensor_parallel=2, momentum=0.9, phases=2)),
    ("gpt-dropout", dict(replicas=8, batch_size=4, tensor_parallel=2)),
    # PopXL's 2-D: t1 x t2 = 2x2, in a pipeline, and in fp16
    ("gpt", dict(replicas=2, batch_size=8, tensor_parallel=(2, 2), pipeline=2,
                 micro_batches=2)),
    ("gpt", dict(replicas=4, batch_size=8, tensor_parallel=(2, 2), precision="fp16")),
]


@pytest.mark.parametrize("name, options", CASES, ids=[f"{n}-{i}" for i, (n, _) in
                                                      enumerate(CASES)])
def test_the_planner_predicts_the_simulated_step(name, options):
    row = plan_crosscheck.run(name, options)
    assert abs(row["cycles_error"]) <= 0.15, row
    assert abs(row["bytes_error"]) <= 0.15, row
    assert plan_crosscheck.within([row])


@pytest.mark.parametrize("name, options", plan_crosscheck.SMALL_GRID,
                         ids=[f"{n}-small-{i}" for i, (n, _) in
                              enumerate(plan_crosscheck.SMALL_GRID)])
def test_the_planner_predicts_notebook_12s_runs_on_small_ipus(name, options):
    """On 4-tile IPUs the weights, their gradients and the optimizer state decide the
    fullest IPU: RTS's gathered weights each die at their last read, a phase's weights and
    state live only through its backward and update."""
    row = plan_crosscheck.run(name, options, plan_crosscheck.SMALL_TILES)
    assert plan_crosscheck.within([row]), row


def test_the_grid_has_twenty_gpt_mappings_of_every_mechanism():
    gpt = [o for n, o in plan_crosscheck.CASES if n.startswith("gpt")]
    assert len(gpt) >= 20 and len(plan_crosscheck.CASES) == 38 + len(gpt)
    for key in ("pipeline", "micro_batches", "recompute", "precision", "rts",
                "optimizer_state", "phases", "execution", "optimizer"):
        assert any(key in o for o in gpt), key
    assert {o["replicas"] for o in gpt} >= {4, 8, 16}
    sharded = [o for o in gpt if o.get("tensor_parallel", 1) != 1]
    assert len(sharded) >= 20 and {o["tensor_parallel"] for o in sharded} >= {2, 4, (2, 2)}
    for key in ("pipeline", "recompute", "precision", "rts", "optimizer_state", "phases"):
        assert any(key in o for o in sharded), key
    small = [o for _, o in plan_crosscheck.SMALL_GRID]
    for key in ("tensor_parallel", "pipeline", "rts", "phases"):
        assert any(key in o for o in small), key
    assert len(plan_crosscheck.EVERY) == len(plan_crosscheck.CASES) + len(small)


def test_the_check_fails_past_the_tolerance():
    row = {"cycles_error": 0.02, "bytes_error": -0.16}
    assert not plan_crosscheck.within([row])
