"""The `ipulab` command: version, hardware presets, opening the course in JupyterLab,
training the course's CNN or small GPT on a simulated system (`ipulab train`), sharing a
simulated Pod (`ipulab vipu`), and the coursework (building exercises from solutions, grading
notebooks and whole classes, checking the installation)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from ipulab.devices import ALIASES, SYSTEM_NAMES
from ipulab.plan import command as plan_command
from ipulab.vipu import command as vipu_command


def _version() -> str:
    """The installed distribution's version, read from metadata so that numba is not imported."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ipulab")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _table(headers: list[str], rows: list[list[str]], left: int = 2) -> str:
    """A plain-text table: the first `left` (text) columns left-aligned, numbers right-aligned."""
    widths = [max(len(c) for c in col) for col in zip(headers, *rows)]

    def line(cells):
        return "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def info_text() -> str:
    """The chip presets and the systems of ipulab.arch, as two tables."""
    from ipulab.arch import CHIPS, KIB, SYSTEMS

    chips = [[c.name, c.description, str(c.tiles_per_ipu), f"{c.bytes_per_tile / KIB:.0f}",
              f"{c.clock_hz / 1e6:.1f}", str(c.num_worker_contexts),
              str(c.exchange_bytes_per_cycle), f"{c.peak_fp32_flops / 1e12:.1f}",
              f"{c.peak_fp16_flops / 1e12:.1f}"] for c in CHIPS.values()]
    systems = [[s.name, s.description, str(s.num_ipus), str(s.chip.tiles_per_ipu * s.num_ipus),
                f"{s.chip.bytes_per_tile * s.chip.tiles_per_ipu * s.num_ipus / 2**20:.0f}",
                f"{s.peak_fp16_flops / 1e15:.2f}"] for s in SYSTEMS.values()]
    return "\n".join([
        "Chips",
        _table(["chip", "description", "tiles/IPU", "SRAM/tile KiB", "clock MHz", "workers",
                "exch B/cycle", "fp32 TFLOPS", "fp16 TFLOPS"], chips),
        "",
        "Systems (MB as Graphcore counts SRAM: 2**20 bytes)",
        _table(["system", "description", "IPUs", "tiles", "SRAM MB", "fp16 PFLOPS"], systems),
        "",
        "Aliases: " + ", ".join(f"{a} = {name}" for a, name in ALIASES.items()),
    ])


def course_dir(name: str) -> Path:
    """The checkout's solutions/ or exercises/ folder next to the package, else ./name."""
    candidate = Path(__file__).resolve().parent.parent / name
    return candidate if candidate.is_dir() else Path.cwd() / name


def _is_root() -> bool:
    """True when running as root (containers), where Jupyter refuses to start without a flag."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(port: int | None = None, folder: Path | None = None) -> list[str]:
    """The JupyterLab command line that `ipulab lab` runs on `folder` (default: the learner's
    workspace); built apart so tests need no server."""
    from ipulab.course.workspace import default_dir

    cmd = [sys.executable, "-m", "jupyterlab", str(folder or default_dir())]
    if port is not None:
        cmd.append(f"--port={port}")
    if _is_root():
        cmd.append("--allow-root")
    return cmd


def lab_env(folder: Path) -> dict[str, str]:
    """The environment of `ipulab lab`: the workspace's Jupyter config (page_config.json without
    the news and update toasts) first on JUPYTER_CONFIG_PATH, the user's own config after it."""
    from ipulab.course.workspace import write_lab_config

    config = str(write_lab_config(folder))
    rest = os.environ.get("JUPYTER_CONFIG_PATH")
    return dict(os.environ, JUPYTER_CONFIG_PATH=os.pathsep.join([config, rest] if rest else
                                                                [config]))


def lab_main(args) -> int:
    """`ipulab lab [DIR]`: JupyterLab on the learner's workspace (made first if it does not
    exist yet; `ipulab course workspace` refreshes it), so running the course never edits
    the checkout."""
    from ipulab.course.workspace import default_dir, read_manifest, refresh
    from ipulab.errors import WorkspaceError

    folder = Path(args.folder or default_dir()).expanduser().absolute()
    try:
        if not read_manifest(folder):
            print("\n".join(refresh(folder).lines()))
    except WorkspaceError as e:
        print(f"ipulab lab: {e}", file=sys.stderr)
        return 2
    return _run(lab_command(args.port, folder), lab_env(folder))


def _run(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run a child in the foreground; Ctrl-C goes to it (Jupyter asks before it stops)."""
    proc = subprocess.Popen(cmd, env=env)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with its subcommands."""
    parser = argparse.ArgumentParser(prog="ipulab", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ipulab {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("info", help="print the chip presets and systems")
    lab = sub.add_parser("lab", help="open your workspace of the course in JupyterLab")
    lab.add_argument("folder", nargs="?", default=None, metavar="DIR",
                     help="the workspace (default: $IPULAB_WORKSPACE, else ~/ipulab-course)")
    lab.add_argument("--port", type=int, default=None, help="port for the Jupyter server")
    _train_parser(sub)
    plan_command.add_parser(sub)
    vipu_command.add_parser(sub)
    course = sub.add_parser("course", help="coursework: build exercises, grade notebooks, doctor")
    csub = course.add_subparsers(dest="course_command", metavar="ACTION")
    build = csub.add_parser("build", help="write exercises/ from solutions/ (nbgrader markers)")
    build.add_argument("--solutions", type=Path, default=None,
                       help="solution notebooks (default: the checkout's solutions/)")
    build.add_argument("--exercises", type=Path, default=None,
                       help="where to write the exercises (default: the checkout's exercises/)")
    build.add_argument("--check", action="store_true",
                       help="write nothing; exit 1 if exercises/ is out of date")
    check = csub.add_parser("check", help="run notebooks and grade their checks (exit 0: all passed)")
    check.add_argument("paths", nargs="+", metavar="PATH", help="notebooks or folders of notebooks")
    check.add_argument("--jobs", "-j", type=int, default=1, help="notebooks run in parallel")
    check.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    check.add_argument("--json", dest="json_path", default=None, help="also write the grades as JSON")
    check.add_argument("--verbose", "-v", action="store_true",
                       help="print the whole message of every failed check")
    _grade_parser(csub)
    ws = csub.add_parser(
        "workspace", help="copy the course's notebooks and exercises into your own folder",
        description="Copy the course's notebooks/ and exercises/ (not solutions/) into DIR, "
        "where running and editing them never changes the checkout; print DIR. Run again, it "
        "adds what is new and never overwrites a notebook you changed (it says which it kept).")
    ws.add_argument("folder", nargs="?", default=None, metavar="DIR",
                    help="the workspace (default: $IPULAB_WORKSPACE, else ~/ipulab-course)")
    ws.add_argument("--reset", metavar="FILE", default=None,
                    help="restore one notebook as the course has it, e.g. "
                    "exercises/01_one_tile.ipynb (your version is overwritten)")
    csub.add_parser("doctor", help="check that this installation is ready for the course")
    parser.course_parser = course
    cache = sub.add_parser("cache", help="the executable cache: where it is, what it holds, "
                           "emptying it")
    cache.add_argument("action", choices=("info", "clear"))
    return parser


def _grade_parser(csub) -> None:
    """`ipulab course grade`'s arguments (the work is ipulab.course.classgrade's)."""
    g = csub.add_parser(
        "grade", help="grade a class's notebooks into a gradebook, on dask (sandboxed)",
        description="Grade every notebook of every student (SUBMISSIONS/STUDENT/*.ipynb, or "
        "nbgrader's submitted/STUDENT/ASSIGNMENT/*.ipynb), each in the judge's sandbox, as "
        "dask tasks. Results go into a SQLite gradebook as each notebook ends; a rerun grades "
        "only notebooks that changed. Writes a CSV and a feedback page per student, prints "
        "students x sets. Exit code 0 when every notebook has a status, whatever the grades.")
    g.add_argument("submissions", metavar="SUBMISSIONS", help="a folder per student")
    g.add_argument("--gradebook", metavar="DB", default=None,
                   help="the SQLite gradebook, kept between runs (default: gradebook.sqlite "
                   "next to SUBMISSIONS)")
    g.add_argument("--csv", metavar="FILE", default=None,
                   help="one row per student and question (default: the gradebook's name "
                   "with .csv); feedback/STUDENT.html pages go next to it")
    g.add_argument("--feedback", metavar="DIR", default=None,
                   help="where the feedback pages go (default: feedback/ next to the CSV)")
    g.add_argument("--timeout", metavar="S", type=float, default=600.0,
                   help="seconds allowed per notebook (default 600)")
    g.add_argument("--workers", metavar="N", type=int, default=2,
                   help="local dask worker processes (default 2; 0: grade in this process, "
                   "one notebook at a time, without dask)")
    g.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="a running dask scheduler, e.g. tcp://host:8786, instead of local "
                   "workers (its workers must see SUBMISSIONS at the same path)")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `ipulab` command; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:          # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else 1
    if args.command == "info":
        print(info_text())
        return 0
    if args.command == "lab":
        return lab_main(args)
    if args.command == "train":
        return train_command(args)
    if args.command == "plan":
        return plan_main(args)
    if args.command == "course":
        return course_main(args, parser)
    if args.command == "vipu":
        return vipu_command.run(args)
    if args.command == "cache":
        return cache_command(args.action)
    parser.print_help()
    return 0


def plan_main(args) -> int:
    """`ipulab plan` (ipulab.plan.command) with what only the top floor has: the course CNN
    (built with nn) as --model cnn, and the report's figures (viz)."""
    def cnn():
        from ipulab import nn, plan
        return plan.spec_from_model(nn.default_cnn(), (1, 8, 8), "cnn", global_batch=256)

    def report(doc, path):
        from ipulab import viz
        from ipulab.viz.planner import planner_report
        viz.save_html(planner_report(doc), path, f"ipulab plan: {doc['model']}")

    return plan_command.run(args, {"cnn": cnn}, report)


# --- ipulab train ------------------------------------------------------------------------------
# The parser stays import-light (no nn, bokeh or scikit-learn): the defaults of the course's runs
# are nn.TrainConfig.default_run()'s (the CNN) and transformer_run()'s (the small GPT), filled
# in when `train` runs.
PROGRESS_WIDTH = 30
MODELS = ("cnn", "transformer")


def _train_parser(sub) -> None:
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
    t.add_argument("--precision", choices=("fp32", "fp16"), default=None, help="default fp32")
    t.add_argument("--epochs", type=int, default=None,
                   help="default 5 (the transformer: 2)")
    t.add_argument("--batch-size", type=int, default=None,
                   help="images (sequences) per replica per step (default: 16)")
    t.add_argument("--optimizer", choices=("sgd", "adam", "adamw", "lamb"), default=None,
                   help="sgd (default: with momentum 0.9), adam or adamw (as torch.optim), or "
                   "lamb (You et al. 2019, as Graphcore's BERT); run on the tiles")
    t.add_argument("--lr", type=float, default=None,
                   help="default 0.1 with sgd, 0.01 with adam and adamw, 0.02 with lamb")
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
    done = PROGRESS_WIDTH * step // steps
    return (f"epoch {epoch}/{epochs} [{'#' * done}{'.' * (PROGRESS_WIDTH - done)}] "
            f"{step}/{steps}  loss {loss:.4f}  {what} {acc:.3f}")


class UsageError(Exception):
    """A flag's value that cannot run: one line for stderr, exit code 2."""


def train_config(args):
    """The nn.TrainConfig of `ipulab train`'s flags, over the course's default run."""
    from ipulab.errors import ConfigError, GraphError
    from ipulab.nn import TrainConfig

    changes = {name: getattr(args, name) for name in (
        "system", "replicas", "micro_batches", "precision", "epochs", "batch_size", "lr",
        "momentum", "tiles_per_ipu", "seed", "optimizer", "weight_decay")
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


def _title(config, target, model: str = "cnn") -> str:
    pipeline = "" if config.pipeline is None else \
        f"pipeline stages at {list(config.pipeline)} with {config.micro} micro-batches, "
    system = target.system.name if target.partition else config.system   # pod16:NAME#id
    what = "small GPT sorting tokens" if model == "transformer" else "default CNN on digits"
    return (f"{what}, {system} ({target.num_ipus} IPU(s) x "
            f"{target.tiles_per_ipu} tiles), {config.replicas} replica(s) x batch "
            f"{config.batch_size}, {_optimizer_title(config)}, "
            f"{config.precision}, {pipeline}{'recompute, ' if config.recompute else ''}"
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

    try:
        config = train_config(args)
        trainer, (x_train, y_train, x_test, y_test) = _trainer(
            config, vipu_command.train_device(args, config.tiles_per_ipu), args.model)
    except (UsageError, IpuLabError) as e:
        print(f"ipulab train: {e}", file=sys.stderr)
        return 2
    title = _title(trainer.config, trainer.device.target, args.model)
    print(title)
    gpt = args.model == "transformer"
    trainer.fit(x_train, y_train, epochs=config.epochs, seed=config.seed,
                callback=_progress_printer(config.epochs, "token accuracy" if gpt else
                                           "accuracy"))
    rows = _result_rows(trainer, trainer.evaluate(x_test, y_test),
                        _sorted_rows(trainer, x_test, y_test) if gpt else ())
    print()
    print(_table(["result", "value"], [list(r) for r in rows], left=2))
    if args.report:
        from ipulab import viz

        report = viz.training_report(trainer.history, trainer.profile(), title, rows)
        print(f"\nreport: {viz.save_html(report, args.report, 'ipulab train')}")
    return 0


def cache_command(action: str) -> int:
    """`ipulab cache info | clear`: compiled graphs kept under a key of their content."""
    from ipulab.poplar import executables as X

    where = X.folder()
    if action == "clear":
        print(f"removed {X.clear()} executable(s) from {where}")
        return 0
    files = X.entries()
    size = sum(f.stat().st_size for f in files)
    state = "on" if X.enabled() else "off (IPULAB_CACHE=off)"
    print(f"executable cache: {state}\nfolder: {where}\nentries: {len(files)} "
          f"({size / 2**20:,.1f} MiB)")
    return 0


def workspace_command(args) -> int:
    """`ipulab course workspace [DIR] [--reset FILE]`: make or refresh the learner's copy of
    the course (ipulab.course.workspace), or restore one file; prints DIR last."""
    from ipulab.course import workspace
    from ipulab.errors import WorkspaceError

    try:
        if args.reset is not None:
            path = workspace.reset(args.reset, args.folder)
            print(f"restored {path} as the course has it")
            print(path.parents[1])
            return 0
        print("\n".join(workspace.refresh(args.folder).lines()))
    except WorkspaceError as e:
        print(f"ipulab course workspace: {e}", file=sys.stderr)
        return 2
    return 0


def course_main(args, parser) -> int:
    """`ipulab course build | check | grade | workspace | doctor`."""
    if args.course_command == "build":
        from ipulab.course.build import BuildError, build
        solutions = args.solutions or course_dir("solutions")
        exercises = args.exercises or course_dir("exercises")
        try:
            differ = build(solutions, exercises, check_only=args.check)
        except (FileNotFoundError, BuildError) as e:
            print(f"ipulab course build: {e}", file=sys.stderr)
            return 2
        if args.check:
            if differ:
                print(f"{exercises} is out of date for: {', '.join(differ)}; run "
                      "`ipulab course build`")
                return 1
            print(f"{exercises} is up to date with {solutions}")
        return 0
    if args.course_command == "check":
        from ipulab.course.grade import main as grade_main
        return grade_main(args.paths, jobs=args.jobs, timeout=args.timeout,
                          json_path=args.json_path, verbose=args.verbose)
    if args.course_command == "grade":
        from ipulab.course.classgrade import main as class_grade
        return class_grade(args.submissions, gradebook=args.gradebook, csv_path=args.csv,
                           feedback=args.feedback, timeout=args.timeout, workers=args.workers,
                           scheduler=args.scheduler)
    if args.course_command == "workspace":
        return workspace_command(args)
    if args.course_command == "doctor":
        from ipulab.course.doctor import doctor
        report = doctor()
        print(repr(report))
        return 0 if report.ok else 1
    parser.course_parser.print_help()
    return 0
