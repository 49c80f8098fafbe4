"""The `ipulab` command: version, hardware presets, opening the course in JupyterLab, and the
coursework (building exercises from solutions, grading notebooks, checking the installation)."""
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
    if args.command == "course":
        return course_main(args, parser)
    parser.print_help()
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
