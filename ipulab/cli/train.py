"""`ipulab train`: the course's CNN (or small GPT) trained on a simulated system, its progress,
the result table (accuracy, the step's time and cycles by part, memory) and the report.

The parser stays import-light (no nn, bokeh or scikit-learn): the defaults of the course's runs
are nn.TrainConfig.default_run()'s (the CNN) and transformer_run()'s (the small GPT), filled in
when `train` runs."""
from __future__ import annotations

import sys

from ipulab.devices import SYSTEM_NAMES
from ipulab.vipu import command as vipu_command

from .output import report_problem, table

PROGRESS_WIDTH = 30
MODELS = ("cnn", "transformer")


def add_parser(sub) -> None:
    t = sub.add_parser("train", help="train the course's CNN (or small GPT) on a simulated "
                       "system", description="Train the default CNN (nn.default_cnn) on "
                       "scikit-learn's digits, or with --model transformer the course's small "
                       "GPT (nn.small_gpt) on ipulab.data.sort_tokens(), on a simulated IPU "
                       "system, then print the test accuracy and the profile of one training "
                       "step. Defaults: the course's runs (nn.TrainConfig.default_run(), "
                       "transformer_run()).")
    t.add_argument("--model", choices=MODELS, default="cnn",
                   help="cnn (default): the CNN on digits, on a Bow-2000; transformer: the "
                   "small GPT learning to sort tokens, on one Bow IPU")
    t.add_argument("--system", choices=SYSTEM_NAMES, default=None,
                   help="a system of `ipulab info` (default: bow2000; ipu = one Bow IPU)")
    t.add_argument("--replicas", type=int, default=None,
                   help="data-parallel replicas (default: one per IPU of the system, or per "
                   "pipeline of IPUs)")
    t.add_argument("--pipeline", default="none", metavar="none|L1,L2,...",
                   help="cut the model into pipeline stages, one per IPU, at these layer "
                   "indices (e.g. 3,6: layers 0-2, 3-5 and 6- on three IPUs); default none")
    t.add_argument("--micro-batches", type=int, default=None,
                   help="micro-batches per step with --pipeline (default: one per stage)")
    t.add_argument("--tensor-parallel", default=None, metavar="T|T1xT2", help="IPUs sharing "
                   "each layer (default 1); T1xT2 (e.g. 2x2) splits a transformer 2-D, as PopXL")
    t.add_argument("--precision", choices=("fp32", "fp16"), default=None, help="default fp32")
    t.add_argument("--epochs", type=int, default=None,
                   help="default 5 (the transformer: 2)")
    t.add_argument("--batch-size", type=int, default=None,
                   help="images (sequences) per replica per step (default: 16)")
    t.add_argument("--optimizer", choices=("sgd", "adam", "adamw", "lamb"), default=None,
                   help="sgd (the CNN's default: with momentum 0.9), adam (the "
                   "transformer's) or adamw (as torch.optim), or lamb (You et al. 2019, as "
                   "Graphcore's BERT); run on the tiles")
    t.add_argument("--lr", type=float, default=None,
                   help="default 0.1 with sgd, 0.01 with adam and adamw (the transformer: "
                   "0.003), 0.02 with lamb")
    t.add_argument("--momentum", type=float, default=None, help="sgd's; default 0.9")
    t.add_argument("--weight-decay", type=float, default=None,
                   help="L2 for sgd and adam, decoupled for adamw, in the update for lamb "
                   "(default 0; adamw 0.01)")
    t.add_argument("--recompute", action="store_true",
                   help="keep only block inputs; recompute activations in the backward pass")
    t.add_argument("--tiles-per-ipu", type=int, default=None,
                   help="shrink every IPU to this many tiles (fast runs for tests and teaching)")
    t.add_argument("--seed", type=int, default=None, help="initial weights and shuffling (0)")
    t.add_argument("--report", default=None, metavar="OUT.html",
                   help="write an HTML report (bokeh, inline resources: works offline)")
    vipu_command.add_train_options(t)


def _progress(epoch: int, epochs: int, step: int, steps: int, loss: float, acc: float,
              what: str = "accuracy") -> str:
    """The progress bar with the last step's batch loss and accuracy (labelled as the batch's,
    in the format of the result table's test accuracy)."""
    done = PROGRESS_WIDTH * step // steps
    return (f"epoch {epoch}/{epochs} [{'#' * done}{'.' * (PROGRESS_WIDTH - done)}] "
            f"{step}/{steps}  batch loss {loss:.4f}  batch {what} {acc:.2%}")


class UsageError(Exception):
    """A flag's value that cannot run: one line for stderr, exit code 2."""


def train_config(args):
    """The nn.TrainConfig of `ipulab train`'s flags, over the course's default run."""
    from ipulab.errors import ConfigError, GraphError
    from ipulab.nn import TrainConfig

    changes = {name: getattr(args, name) for name in (
        "system", "replicas", "micro_batches", "precision", "epochs", "batch_size", "lr",
        "momentum", "tiles_per_ipu", "seed", "optimizer", "weight_decay", "tensor_parallel")
        if getattr(args, name) is not None}
    if args.recompute:
        changes["recompute"] = True
    if args.pipeline.lower() != "none":
        try:
            changes["pipeline"] = [int(c) for c in args.pipeline.split(",")]
        except ValueError:
            raise UsageError(f"--pipeline must be 'none' or layer indices like 3,6, not "
                             f"{args.pipeline!r}") from None
    run = TrainConfig.transformer_run if getattr(args, "model", "cnn") == "transformer" else \
        TrainConfig.default_run
    try:
        return run(**changes)
    except ConfigError as e:
        raise UsageError(f"--{e.option.replace('_', '-')} {e.rule}, not {e.value!r}") from None
    except GraphError as e:
        raise UsageError(str(e)) from None


def lr_note(config, args) -> str | None:
    """A note when the course run's SGD lr, tuned for its global batch (a Bow-2000's 4
    replicas x 16), drives a smaller global batch without --lr: each step then moves as far
    on fewer images, so the loss swings and the accuracy suffers (the README's one-IPU run).
    It names the lr scaled to this batch (linear scaling, Goyal et al. 2017)."""
    from ipulab.arch import SYSTEMS
    from ipulab.nn import TrainConfig

    course = TrainConfig.default_run()
    reference = course.resolve(SYSTEMS[course.system]).global_batch_size
    if args.lr is not None or getattr(args, "model", "cnn") != "cnn" or \
            config.optimizer != "sgd" or config.global_batch_size >= reference:
        return None
    scaled = config.lr * config.global_batch_size / reference
    return (f"note: lr {config.lr:g} is the course run's, for a global batch of {reference}; "
            f"this run's is {config.global_batch_size}, so its steps are noisier (the loss "
            f"swings, accuracy suffers): --lr {scaled:g} scales it to this batch")


def _title(config, target, model: str = "cnn") -> str:
    pipeline = "" if config.pipeline is None else \
        f"pipeline stages at {list(config.pipeline)} with {config.micro_batches} micro-batches, "
    t1, t2 = config.tensor_parallel_grid
    shards = f"tensor parallel {t1}{f'x{t2}' * (t2 > 1)}, " * (t1 * t2 > 1)
    system = target.system.name if target.partition else config.system   # pod16:NAME#id
    what = "small GPT sorting tokens" if model == "transformer" else "default CNN on digits"
    return (f"{what}, {system} ({target.num_ipus} IPU(s) x "
            f"{target.tiles_per_ipu} tiles), {config.replicas} replica(s) x batch "
            f"{config.batch_size}, {_optimizer_title(config)}, "
            f"{config.precision}, {shards}{pipeline}{'recompute, ' if config.recompute else ''}"
            f"{config.epochs} epoch(s)")


def _optimizer_title(config) -> str:
    decay = "" if config.weight_decay is None else f" weight decay {config.weight_decay}"
    if config.optimizer == "sgd":
        return f"SGD lr {config.lr} momentum {config.momentum}{decay}"
    name = {"adam": "Adam", "adamw": "AdamW", "lamb": "LAMB"}[config.optimizer]
    return f"{name} lr {config.lr}{decay}"


def _progress_printer(epochs: int, what: str = "accuracy"):
    """The fit callback: a progress bar redrawn after every step on a terminal, one line per
    epoch in logs and pipes."""
    tty = sys.stdout.isatty()

    def progress(tr, epoch, step, steps, loss, acc):
        line = _progress(epoch + 1, epochs, step + 1, steps, loss, acc, what)
        if tty:
            print("\r" + line, end="\n" if step + 1 == steps else "", flush=True)
        elif step + 1 == steps:
            print(line, flush=True)
    return progress


def _result_rows(trainer, evaluation, extra=()) -> list[tuple[str, str]]:
    """The result table: accuracy (per token for a model with a label per position), extra
    rows, one step's time and speed, where its cycles go (compute, on-chip exchange, IPU-Link
    exchange, sync, host: the dashboard's breakdown), memory, bytes."""
    from ipulab.viz import fmt_bytes
    from ipulab.viz.explain import breakdown_rows, step_breakdown

    profile = trainer.profile()
    s = profile.step_summary()
    ips = trainer.global_batch_size / s["step_seconds"]
    tokens = trainer.positions > 1
    return [("test token accuracy" if tokens else "test accuracy", f"{evaluation.accuracy:.2%}"),
            ("test loss", f"{evaluation.loss:.4f}"), *extra,
            ("simulated step time", f"{s['step_seconds'] * 1e6:,.1f} us ({s['step_cycles']:,} "
                                    f"cycles)"),
            ("sequences/s (simulated)" if tokens else "images/s (simulated)", f"{ips:,.0f}"),
            ("tiles used", f"{s['tiles_used']:,} of {s['num_tiles']:,}"),
            ("peak tile memory", f"{fmt_bytes(s['peak_tile_bytes'], 1)} of "
                                 f"{fmt_bytes(s['bytes_per_tile'], 1)}"),
            ("exchange bytes per step", fmt_bytes(s["exchange_bytes"], 1)),
            *breakdown_rows(step_breakdown(profile, trainer.global_batch_size))]


def _trainer(config, device=None, model: str = "cnn"):
    """The trainer of the default CNN (or the small GPT) on the device (default: the config's
    system), built now, and its data (digits, or sort_tokens)."""
    from ipulab import nn
    from ipulab.data import digits, sort_tokens

    data = sort_tokens() if model == "transformer" else digits()
    x_train = data[0]
    device = device or config.device()
    config = config.resolve(device.target)
    if config.global_batch_size > len(x_train):
        raise UsageError(f"--batch-size {config.batch_size} x {config.replicas} replica(s) is "
                         f"more than the {len(x_train):,} training samples")
    net = nn.small_gpt() if model == "transformer" else nn.default_cnn(x_train.shape[1:])
    return nn.Trainer(net, device, config=config, input_shape=x_train.shape[1:]), data


def _sorted_rows(trainer, x_test, y_test) -> list[tuple[str, str]]:
    """The small GPT's own measure, from its predictions on the device: the answers' tokens
    (the second half: the question sorted) it gets right, and the whole answers."""
    half = y_test.shape[1] // 2
    right = trainer.predict(x_test)[:, half:] == y_test[:, half:]
    return [("test answer tokens right", f"{right.mean():.2%}"),
            ("test answers all right", f"{right.all(1).mean():.2%} of {len(right):,}")]


def train_command(args) -> int:
    """`ipulab train`: build, train, evaluate, print the table (and write the report)."""
    from ipulab.errors import IpuLabError

    if args.report and (problem := report_problem(args.report)):
        print(f"ipulab train: {problem}", file=sys.stderr)
        return 2
    try:
        config = train_config(args)
        trainer, (x_train, y_train, x_test, y_test) = _trainer(
            config, vipu_command.train_device(args, config.tiles_per_ipu), args.model)
    except (UsageError, IpuLabError) as e:
        print(f"ipulab train: {e}", file=sys.stderr)
        return 2
    title = _title(trainer.config, trainer.device.target, args.model)
    print(title)
    if note := lr_note(trainer.config, args):
        print(note)
    gpt = args.model == "transformer"
    trainer.fit(x_train, y_train, epochs=config.epochs, seed=config.seed,
                callback=_progress_printer(config.epochs, "token accuracy" if gpt else
                                           "accuracy"))
    rows = _result_rows(trainer, trainer.evaluate(x_test, y_test),
                        _sorted_rows(trainer, x_test, y_test) if gpt else ())
    print()
    print(table(["result", "value"], [list(r) for r in rows], left=2))
    if args.report:
        from ipulab import viz

        report = viz.training_report(trainer.history, trainer.profile(), title, rows)
        print(f"\nreport: {viz.save_html(report, args.report, 'ipulab train')}")
    return 0

