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

from ipulab.devices import ALIASES
from ipulab.plan import command as plan_command
from ipulab.vipu import command as vipu_command

from . import course as course_command
from . import lab as lab_setup
from . import train as train_command_line
from .output import report_problem, table
from .parser import Parser


def _version() -> str:
    """The installed distribution's version, read from metadata so that numba is not imported."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ipulab")
    except PackageNotFoundError:
        return "unknown (not installed)"


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
        table(["chip", "description", "tiles/IPU", "SRAM/tile KiB", "clock MHz", "workers",
                "exch B/cycle", "fp32 TFLOPS", "fp16 TFLOPS"], chips),
        "",
        "Systems (MB as Graphcore counts SRAM: 2**20 bytes)",
        table(["system", "description", "IPUs", "tiles", "SRAM MB", "fp16 PFLOPS"], systems),
        "",
        "Aliases: " + ", ".join(f"{a} = {name}" for a, name in ALIASES.items()),
    ])


def _is_root() -> bool:
    """True when running as root (containers), where Jupyter refuses to start without a flag."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(port: int | None = None, folder: Path | None = None, ip: str | None = None,
                browser: bool = True) -> list[str]:
    """The JupyterLab command line that `ipulab lab` runs on `folder` (default: the learner's
    workspace); built apart so tests need no server."""
    from ipulab.course.learner.workspace import default_dir

    cmd = [sys.executable, "-m", "jupyterlab", str(folder or default_dir())]
    if ip is not None:
        cmd.append(f"--ip={ip}")
    if not browser:
        cmd.append("--no-browser")
    if port is not None:
        cmd += ["--ServerApp.port_retries=0", f"--port={port}"]   # the port the URL names
    if _is_root():
        cmd.append("--allow-root")
    return cmd


def lab_env(folder: Path, token: str | None = None) -> dict[str, str]:
    """The environment of `ipulab lab`: the workspace's Jupyter config (page_config.json without
    the news and update toasts) first on JUPYTER_CONFIG_PATH, the user's own config after it;
    the token as $JUPYTER_TOKEN (not on the command line, where `ps` shows it)."""
    from ipulab.course.learner.workspace import write_lab_config

    config = str(write_lab_config(folder))
    rest = os.environ.get("JUPYTER_CONFIG_PATH")
    env = dict(os.environ, JUPYTER_CONFIG_PATH=os.pathsep.join([config, rest] if rest else
                                                               [config]))
    if token:
        env["JUPYTER_TOKEN"] = token
    return env


def lab_main(args) -> int:
    """`ipulab lab [DIR] [--port N] [--ip ADDR] [--no-browser]`: JupyterLab on the learner's
    workspace (made first if it does not exist yet; `ipulab course workspace` refreshes it),
    so running the course never edits the checkout. The URL with its token is printed on a
    line of its own first; no browser opens without a display or in an SSH session."""
    from ipulab.course.learner.workspace import default_dir, read_manifest, refresh
    from ipulab.errors import WorkspaceError

    folder = Path(args.folder or default_dir()).expanduser().absolute()
    try:
        if not read_manifest(folder):
            print("\n".join(refresh(folder).lines()))
    except WorkspaceError as e:
        print(f"ipulab lab: {e}", file=sys.stderr)
        return 2
    port = args.port if args.port is not None else (lab_setup.free_port(args.ip) or None)
    why_not = "you asked (--no-browser)" if args.no_browser else \
        lab_setup.no_browser_reason(os.environ)
    key = lab_setup.token(os.environ)
    if port is not None:
        link = lab_setup.url(args.ip, port, key)
        print("\n".join(lab_setup.banner(folder, link, port, why_not)), flush=True)
    return _run(lab_command(port, folder, args.ip, why_not is None), lab_env(folder, key))


def _run(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run a child in the foreground; Ctrl-C goes to it (Jupyter asks before it stops), and
    SIGTERM too (a stopped `ipulab lab` leaves no server behind)."""
    import signal

    proc = subprocess.Popen(cmd, env=env)
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                continue
    finally:
        signal.signal(signal.SIGTERM, previous)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with its subcommands."""
    parser = Parser(prog="ipulab", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ipulab {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("info", help="print the chip presets and systems")
    lab = sub.add_parser("lab", help="open your workspace of the course in JupyterLab")
    lab.add_argument("folder", nargs="?", default=None, metavar="DIR",
                     help="the workspace (default: $IPULAB_WORKSPACE, else ~/ipulab-course)")
    lab.add_argument("--port", type=int, default=None,
                     help="port for the Jupyter server (default: the first free from 8888)")
    lab.add_argument("--ip", default=None, metavar="ADDR",
                     help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0: "
                     "every address, e.g. a machine you reach without an SSH tunnel)")
    lab.add_argument("--no-browser", action="store_true",
                     help="open no browser (the default without a display or in an SSH "
                     "session); open the URL printed first")
    train_command_line.add_parser(sub)
    plan_command.add_parser(sub)
    vipu_command.add_parser(sub)
    course_command.add_parser(sub, parser)
    cache = sub.add_parser("cache", help="the executable cache: where it is, what it holds, "
                           "emptying it")
    cache.add_argument("action", choices=("info", "clear"))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `ipulab` command; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:          # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else 1
    try:
        return _dispatch(args, parser)
    except BrokenPipeError:            # `ipulab plan ... | head`: the reader has what it wanted
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())          # Python's last flush goes nowhere, quietly
        return 1


def _dispatch(args, parser) -> int:
    """Run the command the arguments name; its exit code."""
    if args.command == "info":
        print(info_text())
        return 0
    if args.command == "lab":
        return lab_main(args)
    if args.command == "train":
        return train_command_line.train_command(args)
    if args.command == "plan":
        return plan_main(args)
    if args.command == "course":
        return course_command.main(args, parser)
    if args.command == "vipu":
        return vipu_command.run(args)
    if args.command == "cache":
        return cache_command(args.action)
    parser.print_help()
    return 0


def plan_main(args) -> int:
    """`ipulab plan` (ipulab.plan.command) with what only the top floor has: the report's
    figures (viz). The course's nn models (cnn, gpt) are plan's own."""
    if args.report and (problem := report_problem(args.report)):
        print(f"ipulab plan: {problem}", file=sys.stderr)
        return 2

    def report(doc, path):
        from ipulab import viz
        from ipulab.viz.planner import planner_report
        viz.save_html(planner_report(doc), path, f"ipulab plan: {doc['model']}")

    return plan_command.run(args, None, report)


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

