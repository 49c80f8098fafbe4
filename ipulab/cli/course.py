"""`ipulab course`: building the exercises, a learner's self-check, grading a class, the
learner's workspace and the doctor (the work is ipulab.course's; this is its command line)."""
from __future__ import annotations

import sys
from pathlib import Path


def add_parser(sub, parser) -> None:
    """`ipulab course ...`'s subcommands and arguments (parser.course_parser: its help)."""
    course = sub.add_parser("course", help="coursework: build exercises, grade notebooks, doctor")
    csub = course.add_subparsers(dest="course_command", metavar="ACTION")
    build = csub.add_parser("build", help="write exercises/ from solutions/ (nbgrader markers)")
    build.add_argument("--solutions", type=Path, default=None,
                       help="solution notebooks (default: the checkout's solutions/)")
    build.add_argument("--exercises", type=Path, default=None,
                       help="where to write the exercises (default: the checkout's exercises/)")
    build.add_argument("--check", action="store_true",
                       help="write nothing; exit 1 if exercises/ is out of date")
    check = csub.add_parser("check", help="a learner's self-check: run your own notebooks and show "
                            "their checks (not a grade: see grade; exit 0: all passed)")
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


def _grade_parser(csub) -> None:
    """`ipulab course grade`'s arguments (the work is ipulab.course.grading.class_grader's)."""
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
                   help="seconds a notebook may take in all, its cells and its checks "
                   "(default 600)")
    g.add_argument("--workers", metavar="N", type=int, default=2,
                   help="local dask worker processes (default 2; 0: grade in this process, "
                   "one notebook at a time, without dask)")
    g.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="a running dask scheduler, e.g. tcp://host:8786, instead of local "
                   "workers (its workers must see SUBMISSIONS at the same path)")


def course_dir(name: str) -> Path:
    """The checkout's solutions/ or exercises/ folder next to the package, else ./name."""
    candidate = Path(__file__).resolve().parents[2] / name
    return candidate if candidate.is_dir() else Path.cwd() / name


def workspace_command(args) -> int:
    """`ipulab course workspace [DIR] [--reset FILE]`: make or refresh the learner's copy of
    the course (ipulab.course.learner.workspace), or restore one file; prints DIR last."""
    from ipulab.course.learner import workspace
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


def main(args, parser) -> int:
    """`ipulab course build | check | grade | workspace | doctor`."""
    if args.course_command == "build":
        from ipulab.course.questions.build import BuildError, build
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
        from ipulab.course.learner.check_notebooks import main as grade_main
        return grade_main(args.paths, jobs=args.jobs, timeout=args.timeout,
                          json_path=args.json_path, verbose=args.verbose)
    if args.course_command == "grade":
        from ipulab.course.grading.class_grader import main as class_grade
        return class_grade(args.submissions, gradebook=args.gradebook, csv_path=args.csv,
                           feedback=args.feedback, timeout=args.timeout, workers=args.workers,
                           scheduler=args.scheduler)
    if args.course_command == "workspace":
        return workspace_command(args)
    if args.course_command == "doctor":
        from ipulab.course.learner.doctor import doctor
        report = doctor()
        print(repr(report))
        return 0 if report.ok else 1
    parser.course_parser.print_help()
    return 0

