"""The planner's small-scale mode against the simulator, on part of the cross-check's grid
(benchmarks/plan_crosscheck.py runs all 38 mappings): the cycles of a training step and the
bytes of its fullest IPU within 15 % (issue 13; on the whole grid the worst are -13.5 % for
cycles and -12.7 % for bytes)."""
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
    # the mappings whose bytes were furthest off before vertices, constants and liveness
    # were counted as the simulator counts them (-43 % and -39 %)
    ("cnn", dict(replicas=4, batch_size=16, pipeline=2, micro_batches=4, tensor_parallel=2)),
    ("mlp", dict(replicas=2, batch_size=32, tensor_parallel=8)),
]


@pytest.mark.parametrize("name, options", CASES, ids=[f"{n}-{i}" for i, (n, _) in
                                                      enumerate(CASES)])
def test_small_scale_mode_predicts_the_simulated_step(name, options):
    row = plan_crosscheck.run(name, options)
    assert abs(row["cycles_error"]) <= 0.15, row
    assert abs(row["bytes_error"]) <= 0.15, row


def test_the_mapping_of_a_trainer_config():
    from ipulab import nn
    from ipulab.widgets.planner import mapping_of
    model = nn.default_cnn()
    cfg = nn.TrainConfig(replicas=4, batch_size=16, pipeline=[3, 6], micro_batches=4)
    m = mapping_of(cfg, model, (1, 8, 8))
    assert (m.pipeline, m.layers_per_stage, m.micro, m.ga) == (3, (3, 3, 2), 4, 4)
    assert m.t * m.pipeline * m.replicas == 12
