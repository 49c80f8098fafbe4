"""`ipulab plan`: map a model onto a system, or search every mapping, from the shell.

    ipulab plan --model bert-large --system pod16 --global-batch 65536 --optimizer lamb
    ipulab plan --model bert-large --system pod16 --optimizer lamb \\
                --mapping "p=4,layers=3/7/7/7,r=4,state=off-chip" --json
    ipulab plan --model gpt3-175b --system pod256 --mapping "t=8x8,r=4,rts,phases=96"

The cli (top floor) hands in what this floor cannot make: extra models (the course CNN, built
with nn) and the report's figures (viz). Exit 0 with a table or JSON; 2 with one line on stderr
for input that cannot be (PlanError: t·p·r, powers of two, GA, phases, model dimensions).
"""
from __future__ import annotations

import itertools
import json
import re
import sys
import textwrap

from ..errors import PlanError
from ..options import PRECISIONS
from .estimate import MB, estimate, system_of
from .mapping import parse_mapping
from .optim import OPTIMIZERS
from .runs import describe_run
from .search import search
from .spec import load_model, spec_from_model
from .presets import PRESETS

# the course's models nn builds (read by spec_from_model on first use: `ipulab` starts
# without nn); the cli's own, if it hands some in, take their place
def _cnn():
    from .. import nn
    return spec_from_model(nn.default_cnn(), (1, 8, 8), "cnn", global_batch=256)


def _gpt():
    from .. import nn
    return spec_from_model(nn.small_gpt(), (32,), "gpt", global_batch=256)


NN_MODELS = {"cnn": _cnn, "gpt": _gpt, "small-gpt": _gpt}
MODELS = tuple(PRESETS) + tuple(NN_MODELS)


def add_parser(subparsers):
    """The `plan` subcommand's arguments."""
    p = subparsers.add_parser(
        "plan", help="map a model onto a Pod (t·p·r, RTS, phases): memory, time, samples/s",
        description="Estimate a mapping of a model onto an IPU system, or (without --mapping) "
        "search every mapping: t·p·r = the system's IPUs, powers of two. Feasible mappings "
        "first, fastest first; the others with the reason they do not fit. A model the "
        "simulator runs (cnn, gpt) is priced by its cycle model, checked against it; a "
        "transformer preset at full scale, its assumptions named.")
    p.add_argument("--model", required=True, metavar="MODEL",
                   help=f"{', '.join(MODELS)}, or a JSON file of transformer dimensions")
    p.add_argument("--system", default="pod16", metavar="SYSTEM",
                   help="pod16, pod64, pod128, pod256, or any system `ipulab info` lists "
                   "(default pod16)")
    p.add_argument("--global-batch", type=int, default=None, metavar="N",
                   help="samples per optimizer step: micro_batch_size × r × micro_batches "
                   "(default: the model's published one)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None,
                   help="sgd (with momentum for a transformer preset: one fp32 state a "
                   "weight; for cnn and gpt nn.Trainer's default, without), adam, adamw (two "
                   "fp32 moments) or lamb (default: lamb for a preset, sgd for cnn and gpt)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp16")
    p.add_argument("--mapping", default=None, metavar="K=V,...",
                   help="e.g. 'p=4,layers=3/7/7/7,r=4,state=off-chip' or "
                   "'t=8x8,r=4,rts,phases=96' (keys: t p layers r rts phases state; micro = "
                   "micro_batch_size, the samples of a micro-batch; ga = micro_batches, the "
                   "micro-batches of a step)")
    p.add_argument("--json", action="store_true", help="print the estimates as JSON")
    p.add_argument("--report", default=None, metavar="HTML",
                   help="also write an HTML report (bokeh, opens offline)")
    return p


def plan(args, models: dict | None = None) -> tuple[dict, list]:
    """The JSON document of a `plan` run and its estimates (PlanError on bad input)."""
    spec = load_model(args.model, {**NN_MODELS, **(models or {})})
    system = system_of(args.system)
    optimizer = args.optimizer or ("lamb" if spec.kind == "transformer" else "sgd")
    options = dict(optimizer=optimizer, precision=args.precision)
    if spec.simulated:            # as nn.Trainer's defaults: SGD without momentum, no recompute
        options.update(momentum=False, recompute=False)
    if args.global_batch is not None and args.global_batch < 1:
        raise PlanError(f"--global-batch must be at least 1, not {args.global_batch}")
    if args.mapping is not None:
        found = [estimate(spec, system, parse_mapping(args.mapping, **options),
                          args.global_batch)]
    else:
        found = search(spec, system, args.global_batch, **options)
    doc = {"model": spec.name, "system": system.name, "parameters": spec.parameters,
           "optimizer": optimizer, "precision": args.precision,
           "sram_bytes_per_ipu": found[0].sram_bytes,
           "assumptions": list(dict.fromkeys(a for e in found for a in e.assumptions)),
           "mappings": [e.to_dict() for e in found]}
    return doc, found


def _short(label: str) -> str:
    """A mapping's label for the table, a layers list as runs of 3 or more ([3,7x3],
    [1x32,2x32]: not 128 characters of a p 64 list)."""
    def runs(m):
        groups = ((v, len(list(g))) for v, g in itertools.groupby(m.group(1).split(",")))
        return "[" + ",".join(f"{v}x{n}" if n > 2 else ",".join([v] * n)
                              for v, n in groups) + "]"
    return re.sub(r"\[([\d,]+)\]", runs, label)


TABLE_WIDTH = 200       # characters of a table line: a longer reason goes on under itself


def table(found) -> str:
    """The estimates as a text table: mapping, a replica's batch (micro-batches x samples),
    fits, peak MiB per IPU, samples/s, reason (precision and optimizer: the heading's)."""
    rows = [(_short(describe_run(e.mapping, "table")), _replica_batch(e.mapping),
             "yes" if e.fits else "no",
             f"{e.peak_bytes_per_ipu / MB:,.{2 if e.peak_bytes_per_ipu < 10 * MB else 0}f}"
             if e.memory else "-",
             f"{e.samples_per_second:,.1f}", e.reason) for e in found]
    head = ("mapping", "batch", "fits", "MiB/IPU", "samples/s", "why")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(5)]
    indent = sum(widths) + 2 * len(widths)          # where "why" starts; wrapped under it
    line = (lambda r: "  ".join([r[0].ljust(widths[0]), r[1].rjust(widths[1]),
                                 r[2].ljust(widths[2]), r[3].rjust(widths[3]),
                                 r[4].rjust(widths[4]),
                                 ("\n" + " " * indent).join(
                                     textwrap.wrap(r[5], max(TABLE_WIDTH - indent, 40))
                                     or [""])]))
    return "\n".join([line(head), line(tuple("-" * w for w in widths) + ("---",))]
                     + [line(r) for r in rows])


def _replica_batch(m) -> str:
    """A replica's batch per step: '64x1' (micro-batches x samples each), or '16'."""
    size, count = m.micro_batch_size, m.micro_batches
    if not size:
        return "-"
    return str(size) if count in (None, 1) else f"{count}x{size}"


def run(args, models: dict | None = None, report=None) -> int:
    """Run `ipulab plan`: print the table (or JSON), write the report with report(doc, path)
    when --report is given. Returns the exit code."""
    try:
        doc, found = plan(args, models)
    except PlanError as e:
        print(f"ipulab plan: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(f"{doc['model']} ({doc['parameters']:,} parameters) on {doc['system']}, "
              f"{doc['optimizer']}, {doc['precision']}: "
              f"{sum(e.fits for e in found)} of {len(found)} mappings fit")
        print(table(found))
        print("\n".join(textwrap.fill(a, 100, initial_indent="- ", subsequent_indent="  ")
                        for a in doc["assumptions"]))
    if args.report and report is not None:
        report(doc, args.report)
        if not args.json:
            print(f"report: {args.report}")
    return 0
