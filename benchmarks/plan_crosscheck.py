"""The planner against the simulator: plan.estimate, given what nn.Trainer was given (the
model, the device, plan.mapping_from_config(trainer.config), the global batch), predicts the
cycles of a training step and the bytes of its fullest IPU; the Trainer runs the same step
on a cut-down Pod16 and its profile says what they were. A table per mapping, and the worst
errors; exit status 1 when one is past 15 %.

    python benchmarks/plan_crosscheck.py            # the whole grid (about a minute)

Mappings are nn.TrainConfig options (t = tensor_parallel, p = pipeline stages, r = replicas,
micro-batches, recompute, precision, momentum with RTS, off-chip state and phases) with
t·p·r = 16; the simulator's numbers are profile.total_cycles and the largest sum of
profile.memory_total over one IPU's tiles (plan.crosscheck_row).
"""
from __future__ import annotations

import sys

from ipulab import data, devices, nn, plan

TOLERANCE = 0.15

TILES = 16


def mlp():
    """The MLP of the cross-check: 64 -> 64 -> 64 -> 32 -> 10 with ReLUs."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64),
                         nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


MODELS = {"cnn": nn.default_cnn, "mlp": mlp}
GRID = (
    dict(replicas=16, batch_size=8), dict(replicas=16, batch_size=16),
    dict(replicas=16, batch_size=32),
    dict(replicas=8, batch_size=16, tensor_parallel=2),
    dict(replicas=4, batch_size=16, tensor_parallel=4),
    dict(replicas=2, batch_size=32, tensor_parallel=8),
    dict(replicas=8, batch_size=16, pipeline=2, micro_batches=2),
    dict(replicas=8, batch_size=16, pipeline=2, micro_batches=4),
    dict(replicas=4, batch_size=16, pipeline=4, micro_batches=4),
    dict(replicas=4, batch_size=16, pipeline=2, micro_batches=4, tensor_parallel=2),
    dict(replicas=16, batch_size=16, recompute=True),
    dict(replicas=16, batch_size=16, precision="fp16"),
    dict(replicas=4, batch_size=64, tensor_parallel=4),
    dict(replicas=4, batch_size=64, pipeline=4, micro_batches=4),
    dict(replicas=16, batch_size=16, momentum=0.9, rts=True),
    dict(replicas=16, batch_size=16, momentum=0.9, optimizer_state="off-chip"),
    dict(replicas=8, batch_size=16, tensor_parallel=2, momentum=0.9, rts=True,
         optimizer_state="off-chip"),
    dict(replicas=16, batch_size=16, momentum=0.9, phases=2),
    dict(replicas=16, batch_size=16, momentum=0.9, phases=3, rts=True),
)


def run(name: str, options: dict, tiles: int = TILES) -> dict:
    """Simulate one mapping and predict it: a row of the table."""
    x, y, _, _ = data.digits()
    trainer = nn.Trainer(MODELS[name](), devices.pod(16, tiles_per_ipu=tiles), **options)
    n = trainer.global_batch_size
    trainer.fit(x[:n], y[:n], shuffle=False)
    return plan.crosscheck_row(trainer, name)


def main(cases=None) -> list[dict]:
    """Every (model, mapping) of the grid (or `cases`), printed as a table with the worst
    errors; returns the rows."""
    cases = cases or [(name, options) for name in MODELS for options in GRID]
    rows = [run(name, options) for name, options in cases]
    head = ("model", "mapping", "plan cycles", "sim cycles", "err", "plan B/IPU", "sim B/IPU",
            "err")
    table = [head] + [(r["model"], r["mapping"], f"{r['plan_cycles']:,}",
                       f"{r['sim_cycles']:,}", f"{r['cycles_error']:+.1%}",
                       f"{r['plan_bytes']:,}", f"{r['sim_bytes']:,}",
                       f"{r['bytes_error']:+.1%}") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    print("\nThe planner (its cycle model) against the simulator (Pod16, "
          f"{TILES} tiles per IPU)")
    for row in table:
        print("  " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))))
    cyc = max(rows, key=lambda r: abs(r["cycles_error"]))
    mem = max(rows, key=lambda r: abs(r["bytes_error"]))
    print(f"  worst cycles error {cyc['cycles_error']:+.1%} ({cyc['model']}, {cyc['mapping']}); "
          f"worst bytes-per-IPU error {mem['bytes_error']:+.1%} ({mem['model']}, "
          f"{mem['mapping']}); within 15%: cycles "
          f"{sum(abs(r['cycles_error']) <= TOLERANCE for r in rows)}/{len(rows)}, bytes "
          f"{sum(abs(r['bytes_error']) <= TOLERANCE for r in rows)}/{len(rows)}")
    return rows


def within(rows: list[dict]) -> bool:
    """Whether every row's cycles and bytes are within the tolerance."""
    return all(abs(r["cycles_error"]) <= TOLERANCE and abs(r["bytes_error"]) <= TOLERANCE
               for r in rows)


if __name__ == "__main__":
    sys.exit(0 if within(main()) else 1)
