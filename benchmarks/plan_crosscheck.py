"""The planner against the simulator: plan.estimate, given what nn.Trainer was given (the
model, the device, plan.mapping_from_config(trainer.config), the global batch), predicts the
cycles of a training step and the bytes of its fullest IPU; the Trainer runs the same step
on a cut-down Pod16 and its profile says what they were. A table per mapping, and the worst
errors; exit status 1 when one is past 15 %.

    python benchmarks/plan_crosscheck.py            # the whole grid (a few minutes)
    python benchmarks/plan_crosscheck.py gpt        # one model's rows (cnn, mlp or gpt)

Mappings are nn.TrainConfig options (t = tensor_parallel, p = pipeline stages, r = replicas,
micro-batches, recompute, precision, momentum with RTS, off-chip state and phases) with
t·p·r = 16; the simulator's numbers are profile.total_cycles and the largest sum of
profile.memory_total over one IPU's tiles (plan.crosscheck_row). The course CNN and an MLP run
on 16-tile IPUs, a 2-layer GPT (nn.small_gpt() and variants: post-norm, Dropout, ReLU,
bidirectional, a wider feed-forward) on 32-tile IPUs, learning ipulab.data.sort_tokens(),
the GPT also under tensor parallelism as nn/megatron.py builds it (Megatron's t = 2 and 4,
PopXL's 2-D 2x2) with the other mechanisms (TP_GRID); and notebook 12's runs of its GPT
(16 positions, Adam) on 4-tile IPUs, where weights and optimizer state outweigh the
activations, so that what RTS and phases free is what decides the fullest IPU (SMALL_GRID).
"""
from __future__ import annotations

import multiprocessing
import sys

from ipulab import data, devices, nn, plan

TOLERANCE = 0.15
RUNS_PER_PROCESS = 4

TILES = 16
GPT_TILES = 32      # popops.multi_slice needs a tile per column block of the table
SMALL_TILES = 4     # notebook 12's Pod16: devices.pod(16, tiles_per_ipu=4)


def mlp():
    """The MLP of the cross-check: 64 -> 64 -> 64 -> 32 -> 10 with ReLUs."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64),
                         nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def gpt(norm_first: bool = True, dropout: float = 0.0, activation: str = "gelu",
        causal: bool = True, ffn: int = 256, heads: int = 4):
    """A 2-layer GPT as nn.small_gpt() (vocabulary 64, 32 positions, d 64), its blocks'
    options changed."""
    blocks = [nn.TransformerEncoderLayer(64, heads, ffn, dropout=dropout, activation=activation,
                                         norm_first=norm_first, causal=causal)
              for _ in range(2)]
    return nn.Sequential(nn.Embedding(64, 64), nn.PositionalEmbedding(32, 64), *blocks,
                         nn.LayerNorm(64), nn.Linear(64, 64))


MODELS = {"cnn": nn.default_cnn, "mlp": mlp, "gpt": nn.small_gpt,
          "gpt-post": lambda: gpt(norm_first=False),
          "gpt-dropout": lambda: gpt(dropout=0.1),
          "gpt-relu": lambda: gpt(activation="relu", ffn=128),
          "gpt-bidirectional": lambda: gpt(causal=False, heads=2),
          "gpt-wide": lambda: gpt(ffn=512, norm_first=False, dropout=0.1),
          "gpt-16": lambda: nn.small_gpt(seq_len=16)}      # notebook 12's
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
ADAM = dict(lr=1e-3)
GPT_GRID = (
    ("gpt", dict(replicas=16, batch_size=4)),
    ("gpt", dict(replicas=16, batch_size=8)),
    ("gpt", dict(replicas=16, batch_size=16)),
    ("gpt", dict(replicas=16, batch_size=4, precision="fp16")),
    ("gpt", dict(replicas=16, batch_size=4, recompute=True)),
    ("gpt", dict(replicas=8, batch_size=8, pipeline=2, micro_batches=2)),
    ("gpt", dict(replicas=8, batch_size=8, pipeline=2, micro_batches=2, precision="fp16")),
    ("gpt", dict(replicas=4, batch_size=16, pipeline=4, micro_batches=4)),
    ("gpt", dict(replicas=8, batch_size=16, pipeline=2, micro_batches=4, recompute=True)),
    ("gpt", dict(replicas=4, batch_size=16, pipeline=4, micro_batches=4, precision="fp16",
                 recompute=True)),
    ("gpt", dict(replicas=16, batch_size=4, momentum=0.9, rts=True)),
    ("gpt", dict(replicas=16, batch_size=4, momentum=0.9, optimizer_state="off-chip")),
    ("gpt", dict(replicas=16, batch_size=4, momentum=0.9, phases=2)),
    ("gpt", dict(replicas=16, batch_size=4, momentum=0.9, phases=3, rts=True)),
    ("gpt", dict(replicas=16, batch_size=4, momentum=0.9, execution="phased")),
    ("gpt", dict(replicas=16, batch_size=4, optimizer="adam", **ADAM)),
    ("gpt", dict(replicas=16, batch_size=4, optimizer="adamw", optimizer_state="off-chip",
                 **ADAM)),
    ("gpt", dict(replicas=16, batch_size=4, optimizer="lamb", **ADAM)),
    ("gpt", dict(replicas=16, batch_size=4, optimizer="lamb", rts=True, **ADAM)),
    ("gpt-post", dict(replicas=16, batch_size=4)),
    ("gpt-dropout", dict(replicas=16, batch_size=4)),
    ("gpt-relu", dict(replicas=16, batch_size=4)),
    ("gpt-bidirectional", dict(replicas=16, batch_size=4)),
    ("gpt-wide", dict(replicas=8, batch_size=8, pipeline=2, micro_batches=2)),
)
TP_GRID = (      # over t IPUs of a stage: heads, feed-forward and vocabulary split (t1), the
    # hidden dimension (t2)
    ("gpt", dict(replicas=8, batch_size=4, tensor_parallel=2)),
    ("gpt", dict(replicas=4, batch_size=4, tensor_parallel=4)),
    ("gpt", dict(replicas=8, batch_size=8, tensor_parallel=2, precision="fp16")),
    ("gpt", dict(replicas=8, batch_size=4, tensor_parallel=2, recompute=True)),
    ("gpt", dict(replicas=4, batch_size=8, tensor_parallel=4, precision="fp16",
                 recompute=True)),
    ("gpt", dict(replicas=4, batch_size=8, tensor_parallel=2, pipeline=2, micro_batches=2)),
    ("gpt", dict(replicas=2, batch_size=8, tensor_parallel=4, pipeline=2, micro_batches=4)),
    ("gpt", dict(replicas=2, batch_size=16, tensor_parallel=2, pipeline=4, micro_batches=4,
                 precision="fp16")),
    ("gpt", dict(replicas=8, batch_size=4, tensor_parallel=2, momentum=0.9, rts=True)),
    ("gpt", dict(replicas=8, batch_size=4, tensor_parallel=2, momentum=0.9,
                 optimizer_state="off-chip")),
    ("gpt", dict(replicas=8, batch_size=4, tensor_parallel=2, momentum=0.9, phases=2)),
    ("gpt", dict(replicas=4, batch_size=4, tensor_parallel=4, momentum=0.9,
                 execution="phased")),
    ("gpt", dict(replicas=4, batch_size=4, tensor_parallel=4, optimizer="lamb", rts=True,
                 **ADAM)),
    ("gpt", dict(replicas=8, batch_size=4, tensor_parallel=2, optimizer="adam",
                 optimizer_state="off-chip", **ADAM)),
    ("gpt-post", dict(replicas=8, batch_size=4, tensor_parallel=2)),
    ("gpt-dropout", dict(replicas=8, batch_size=4, tensor_parallel=2)),
    ("gpt-relu", dict(replicas=8, batch_size=4, tensor_parallel=2)),
    ("gpt-bidirectional", dict(replicas=8, batch_size=4, tensor_parallel=2)),
    ("gpt-wide", dict(replicas=4, batch_size=8, tensor_parallel=4)),
    ("gpt", dict(replicas=4, batch_size=4, tensor_parallel=(2, 2))),
    ("gpt", dict(replicas=4, batch_size=8, tensor_parallel=(2, 2), precision="fp16")),
    ("gpt", dict(replicas=2, batch_size=8, tensor_parallel=(2, 2), pipeline=2,
                 micro_batches=2)),
    ("gpt", dict(replicas=4, batch_size=4, tensor_parallel=(2, 2), momentum=0.9, rts=True)),
    ("gpt", dict(replicas=4, batch_size=4, tensor_parallel=(2, 2), momentum=0.9,
                 optimizer_state="off-chip")),
    ("gpt", dict(replicas=4, batch_size=4, tensor_parallel=(2, 2), recompute=True)),
    ("gpt-dropout", dict(replicas=4, batch_size=4, tensor_parallel=(2, 2))),
    ("gpt-relu", dict(replicas=4, batch_size=4, tensor_parallel=(2, 2))),
    ("gpt-post", dict(replicas=4, batch_size=4, tensor_parallel=(2, 2))),
)
CASES = [(name, options) for name in ("cnn", "mlp") for options in GRID] + list(GPT_GRID) + \
    list(TP_GRID)
NB12 = dict(optimizer="adam", lr=3e-3, eps=1e-4)
SMALL_GRID = (      # notebook 12's section 4, every run that fits on 4-tile IPUs
    ("gpt-16", dict(replicas=4, batch_size=4, tensor_parallel=4, **NB12)),
    ("gpt-16", dict(replicas=4, batch_size=4, tensor_parallel=(2, 2), **NB12)),
    ("gpt-16", dict(replicas=4, batch_size=4, pipeline=4, micro_batches=4, **NB12)),
    ("gpt-16", dict(replicas=16, batch_size=1, rts=True, **NB12)),
    ("gpt-16", dict(replicas=16, batch_size=1, phases=2, **NB12)),
)
EVERY = CASES + [(name, options, SMALL_TILES) for name, options in SMALL_GRID]


def run(name: str, options: dict, tiles: int | None = None) -> dict:
    """Simulate one mapping and predict it: a row of the table. A model of tokens learns
    to sort questions of half its positions."""
    model = MODELS[name]()
    x, y, _, _ = data.sort_tokens(length=model[1].max_len // 2) if model.takes_tokens else \
        data.digits()
    tiles = tiles or (GPT_TILES if model.takes_tokens else TILES)
    trainer = nn.Trainer(model, devices.pod(16, tiles_per_ipu=tiles), **options)
    n = trainer.global_batch_size
    trainer.fit(x[:n], y[:n], shuffle=False)
    return plan.crosscheck_row(trainer, name)


def _run(case) -> dict:
    return run(*case)


def main(cases=None) -> list[dict]:
    """Every (model, mapping[, tiles per IPU]) of the grid (or `cases`), printed as a table
    with the worst errors; returns the rows. A few runs per worker process: a process keeps
    its last compiled steps in memory, and a GPT's are large."""
    cases = cases or EVERY
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=RUNS_PER_PROCESS) as pool:
        rows = pool.map(_run, cases, chunksize=1)
    head = ("model", "mapping", "plan cycles", "sim cycles", "err", "plan B/IPU", "sim B/IPU",
            "err")
    table = [head] + [(r["model"], r["mapping"], f"{r['plan_cycles']:,}",
                       f"{r['sim_cycles']:,}", f"{r['cycles_error']:+.1%}",
                       f"{r['plan_bytes']:,}", f"{r['sim_bytes']:,}",
                       f"{r['bytes_error']:+.1%}") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    print(f"\nThe planner (its cycle model) against the simulator (Pod16, {TILES} tiles per IPU; "
          f"the GPT's {GPT_TILES}, gpt-16's {SMALL_TILES})")
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
    chosen = [case for case in EVERY if not sys.argv[1:] or
              case[0].split("-")[0] in sys.argv[1:]]
    sys.exit(0 if within(main(chosen)) else 1)
