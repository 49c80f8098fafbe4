"""The `ipulab` command: version, hardware presets, opening the course in JupyterLab,
training the course's CNN on a simulated system (`ipulab train`), and the coursework
(building exercises from solutions, grading notebooks, checking the installation)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


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
    ])


def notebooks_dir() -> Path:
    """The checkout's notebooks/ folder next to the package, else the current directory."""
    candidate = Path(__file__).resolve().parent.parent / "notebooks"
    return candidate if candidate.is_dir() else Path.cwd()


def course_dir(name: str) -> Path:
    """The checkout's solutions/ or exercises/ folder next to the package, else ./name."""
    candidate = Path(__file__).resolve().parent.parent / name
    return candidate if candidate.is_dir() else Path.cwd() / name


def _is_root() -> bool:
    """True when running as root (containers), where Jupyter refuses to start without a flag."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(port: int | None = None, folder: Path | None = None) -> list[str]:
    """The JupyterLab command line that `ipulab lab` runs (built apart so tests need no server)."""
    cmd = [sys.executable, "-m", "jupyterlab", str(folder or notebooks_dir())]
    if port is not None:
        cmd.append(f"--port={port}")
    if _is_root():
        cmd.append("--allow-root")
    return cmd


def _run(cmd: list[str]) -> int:
    """Run a child in the foreground; Ctrl-C goes to it (Jupyter asks before it stops)."""
    proc = subprocess.Popen(cmd)
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
    lab = sub.add_parser("lab", help="open the course notebooks in JupyterLab")
    lab.add_argument("--port", type=int, default=None, help="port for the Jupyter server")
    _train_parser(sub)
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
    csub.add_parser("doctor", help="check that this installation is ready for the course")
    parser.course_parser = course
    return parser


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
        return _run(lab_command(args.port))
    if args.command == "train":
        return train_command(args)
    if args.command == "course":
        return course_main(args, parser)
    parser.print_help()
    return 0


# --- ipulab train ------------------------------------------------------------------------------
# The defaults of the course's run (DESIGN section 7, issue 5): the default CNN on digits on a
# Bow-2000, one replica per IPU, 16 images per replica. They equal nn.Trainer's defaults
# (tests/test_train_cli.py checks); they are repeated here so that the parser stays import-light.
TRAIN_SYSTEMS = ("ipu", "bow2000", "pod16")
TRAIN_EPOCHS = 5        # nn.trainer.DEFAULT_RUN
TRAIN_BATCH_SIZE = 16
TRAIN_LR = 0.1
TRAIN_MOMENTUM = 0.9
PROGRESS_WIDTH = 30


def _train_parser(sub) -> None:
    t = sub.add_parser("train", help="train the course's CNN on digits on a simulated system",
                       description="Train the default CNN (nn.default_cnn) on scikit-learn's "
                       "digits on a simulated IPU system, then print the test accuracy and the "
                       "profile of one training step.")
    t.add_argument("--system", choices=TRAIN_SYSTEMS, default="bow2000",
                   help="one Bow IPU, a Bow-2000 (4 IPUs) or a Bow Pod16 (default: bow2000)")
    t.add_argument("--replicas", type=int, default=None,
                   help="data-parallel replicas (default: one per IPU of the system)")
    t.add_argument("--pipeline", default="none", metavar="none|L1,L2,...",
                   help="cut the model into pipeline stages, one per IPU, at these layer "
                   "indices (e.g. 3,6: layers 0-2, 3-5 and 6- on three IPUs); default none")
    t.add_argument("--micro-batches", type=int, default=None,
                   help="micro-batches per step with --pipeline (default: one per stage)")
    t.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    t.add_argument("--epochs", type=int, default=TRAIN_EPOCHS)
    t.add_argument("--batch-size", type=int, default=TRAIN_BATCH_SIZE,
                   help=f"images per replica per step (default: {TRAIN_BATCH_SIZE})")
    t.add_argument("--lr", type=float, default=TRAIN_LR)
    t.add_argument("--momentum", type=float, default=TRAIN_MOMENTUM)
    t.add_argument("--recompute", action="store_true",
                   help="keep only block inputs; recompute activations in the backward pass")
    t.add_argument("--tiles-per-ipu", type=int, default=None,
                   help="shrink every IPU to this many tiles (fast runs for tests and teaching)")
    t.add_argument("--seed", type=int, default=0, help="initial weights and shuffling")
    t.add_argument("--report", default=None, metavar="OUT.html",
                   help="write an HTML report (bokeh, inline resources: works offline)")


def _progress(epoch: int, epochs: int, step: int, steps: int, loss: float, acc: float) -> str:
    done = PROGRESS_WIDTH * step // steps
    return (f"epoch {epoch}/{epochs} [{'#' * done}{'.' * (PROGRESS_WIDTH - done)}] "
            f"{step}/{steps}  loss {loss:.4f}  accuracy {acc:.3f}")


def step_summary(profile) -> dict:
    """The numbers `ipulab train` reports about one training step's profile."""
    import numpy as np

    src, dst, nbytes = profile.exchange_traffic()
    tpi = profile.tiles_per_ipu
    across = (src // tpi) != (dst // tpi)
    used = (profile.memory_total > 0) | (profile.compute_cycles > 0)
    return {
        "step_seconds": float(profile.total_seconds),
        "step_cycles": int(profile.total_cycles),
        "tiles_used": int(np.count_nonzero(used)),
        "num_tiles": int(profile.num_tiles),
        "peak_tile_bytes": int(profile.memory_total.max()),
        "bytes_per_tile": int(profile.bytes_per_tile),
        "exchange_bytes": int(nbytes[~across].sum()),
        "ipu_link_bytes": int(nbytes[across].sum()),
    }


def _bytes(n: int) -> str:
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,} B"


def train_report(trainer, result: dict, path) -> Path:
    """The HTML report of a run: loss and accuracy per step, the BSP trace of one training step
    and the tile memory heatmap, saved with bokeh's INLINE resources."""
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.models import ColumnDataSource, Div
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    from ipulab import viz

    h = trainer.history
    src = ColumnDataSource({"step": list(range(1, len(h["loss"]) + 1)), "loss": h["loss"],
                            "accuracy": h["accuracy"]})
    loss = figure(title="Training loss (mean over the global batch)", x_axis_label="step",
                  y_axis_label="loss", width=620, height=260)
    loss.line("step", "loss", source=src)
    acc = figure(title="Training accuracy (of each global batch)", x_axis_label="step",
                 y_axis_label="accuracy", width=620, height=260, x_range=loss.x_range)
    acc.line("step", "accuracy", source=src, color="darkorange")
    profile = trainer.profile()
    rows = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in result["table"])
    head = Div(text=f"<h2>ipulab train</h2><p>{result['title']}</p><table>{rows}</table>")
    layout = column(head, loss, acc, viz.bsp_trace(profile), viz.tile_memory_heatmap(profile))
    path = Path(path)
    path.write_text(file_html(layout, INLINE, "ipulab train"), encoding="utf-8")
    return path


def train_command(args) -> int:
    """`ipulab train`: build, train, evaluate, print the table (and write the report)."""
    pipeline = None
    if args.pipeline.lower() != "none":
        try:
            pipeline = [int(c) for c in args.pipeline.split(",")]
        except ValueError:
            print(f"ipulab train: --pipeline must be 'none' or layer indices like 3,6, not "
                  f"{args.pipeline!r}", file=sys.stderr)
            return 2
    for name in ("epochs", "batch_size", "replicas", "tiles_per_ipu", "micro_batches"):
        v = getattr(args, name)
        if v is not None and v < (0 if name == "epochs" else 1):
            print(f"ipulab train: --{name.replace('_', '-')} must be >= "
                  f"{0 if name == 'epochs' else 1}, not {v}", file=sys.stderr)
            return 2

    import ipulab
    from ipulab import nn
    from ipulab.data import digits
    from ipulab.errors import IpuLabError

    make = {"ipu": lambda t: ipulab.devices.ipu("bow", tiles_per_ipu=t),
            "bow2000": ipulab.devices.bow2000, "pod16": ipulab.devices.pod16}[args.system]
    try:
        device = make(args.tiles_per_ipu)
        stages = 1 if pipeline is None else len(pipeline) + 1
        replicas = args.replicas or max(1, device.target.num_ipus // stages)
        x_train, y_train, x_test, y_test = digits()
        trainer = nn.Trainer(nn.default_cnn(x_train.shape[1:]), device, replicas=replicas,
                             batch_size=args.batch_size, lr=args.lr, momentum=args.momentum,
                             precision=args.precision, seed=args.seed, pipeline=pipeline,
                             micro_batches=args.micro_batches, recompute=args.recompute,
                             input_shape=x_train.shape[1:])
    except (IpuLabError, ValueError) as e:
        print(f"ipulab train: {e}", file=sys.stderr)
        return 2
    target = device.target
    title = (f"default CNN on digits, {args.system} ({target.num_ipus} IPU(s) x "
             f"{target.tiles_per_ipu} tiles), {replicas} replica(s) x batch {args.batch_size}, "
             f"SGD lr {args.lr} momentum {args.momentum}, {args.precision}, "
             + ("" if pipeline is None else f"pipeline stages at {pipeline} with "
                f"{trainer.micro_batches} micro-batches, ")
             + ("recompute, " if args.recompute else "") +
             f"{args.epochs} epoch(s)")
    print(title)
    tty = sys.stdout.isatty()

    def progress(tr, epoch, step, steps, loss, acc):
        line = _progress(epoch + 1, args.epochs, step + 1, steps, loss, acc)
        if tty:
            print("\r" + line, end="\n" if step + 1 == steps else "", flush=True)
        elif step + 1 == steps:          # logs and pipes: one line per epoch
            print(line, flush=True)

    trainer.fit(x_train, y_train, epochs=args.epochs, seed=args.seed, callback=progress)
    evaluation = trainer.evaluate(x_test, y_test)
    table = [("test accuracy", f"{evaluation.accuracy:.2%}"),
             ("test loss", f"{evaluation.loss:.4f}")]
    try:
        s = step_summary(trainer.profile())
    except IpuLabError:            # --epochs 0: no step ran
        s = None
    if s is not None:
        ips = trainer.global_batch_size / s["step_seconds"]
        table += [
            ("simulated step time", f"{s['step_seconds'] * 1e6:,.1f} us ({s['step_cycles']:,} "
                                    f"cycles)"),
            ("images/s (simulated)", f"{ips:,.0f}"),
            ("tiles used", f"{s['tiles_used']:,} of {s['num_tiles']:,}"),
            ("peak tile memory", f"{_bytes(s['peak_tile_bytes'])} of "
                                 f"{_bytes(s['bytes_per_tile'])}"),
            ("exchange bytes per step", _bytes(s["exchange_bytes"])),
            ("IPU-Link bytes per step", _bytes(s["ipu_link_bytes"])),
        ]
    print()
    print(_table(["result", "value"], [list(r) for r in table], left=2))
    if args.report:
        if s is None:
            print("ipulab train: no training step ran, so no report", file=sys.stderr)
            return 1
        path = train_report(trainer, {"title": title, "table": table}, args.report)
        print(f"\nreport: {path}")
    return 0


def course_main(args, parser) -> int:
    """`ipulab course build | check | doctor`."""
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
    if args.course_command == "doctor":
        from ipulab.course.doctor import doctor
        report = doctor()
        print(repr(report))
        return 0 if report.ok else 1
    parser.course_parser.print_help()
    return 0
