"""Test-session settings shared by tests/, notebooks/ and solutions/ (nbval kernels inherit the
environment): course checks record progress in a throwaway file, not in the learner's home,
and compiled executables are not written to the cache folder. Under `make test` (pytest-xdist
--dist loadfile) each file is one unit of work, the browser test two, and the slowest start
first."""
import gc
import os
import sys
import tempfile

import pytest

# pytest's processes (not the kernels and commands they start) write bytecode even where
# PYTHONDONTWRITEBYTECODE is set: rewriting every test module's asserts again took each
# worker 4.5 s. (ipulab's own is compiled by `make test` before pytest starts.)
sys.dont_write_bytecode = False
os.environ.setdefault("IPULAB_PROGRESS",
                      os.path.join(tempfile.mkdtemp(prefix="ipulab-test-"), "progress.json"))
# The executable cache stays in memory here: a test run would otherwise write a gigabyte of
# short-lived executables to disk (tests/test_executable_cache.py covers the disk).
os.environ.setdefault("IPULAB_CACHE_MIN_SECONDS", "60")

BROWSER = "tests/browser/test_notebook_in_browser.py"
COURSE_CHECK = "tests/test_course.py::test_course_check_passes_the_solutions"
BROWSER_SHARES = 2          # the browser test's notebooks, in this many units (one JupyterLab each)
# The files that take longest (a minute or more of a 2-core run, measured), slowest first: a
# worker that takes one of them last would finish long after the other.
SLOWEST_FIRST = [BROWSER, "tests/test_course.py", "tests/test_judge.py",
                 "tests/test_plan_crosscheck.py", "tests/test_judge_class.py",
                 "tests/test_transformer_run.py", "tests/test_plan_api.py", "tests/test_readme.py",
                 "tests/test_benchmarks_smoke.py", "tests/test_judge_wire.py",
                 "tests/test_transformer_scale_out.py", "notebooks/12_a_transformer_on_a_pod.ipynb",
                 "notebooks/09_bow2000_cnn_training.ipynb", "notebooks/08_many_ipus.ipynb",
                 "notebooks/10_scaling_to_pods.ipynb"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The slowest files first (a stable sort: each file's tests keep their order)."""
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_configure(config):
    config.pluginmanager.register(RunOnce(), "ipulab-run-once")
    config.pluginmanager.register(BrowserLine(), "ipulab-browser-line")


class RunOnce:
    """A notebook runs once in a session. Where the browser test runs a course notebook
    (selected, and Chromium and playwright are here), nbval does not run it again: both run
    every cell on this interpreter's kernel and fail on an error; the browser test also checks
    what JupyterLab shows. Where the course check's test is selected, nbval does not run the
    solutions: `ipulab course check` runs each in a fresh kernel too, with the check() a learner
    calls, and its test fails on any error and on any question not passed. (`pytest
    --nbval-lax notebooks/ solutions/` alone still runs them all under nbval.)"""

    @pytest.hookimpl(trylast=True)          # after -k and -m have chosen
    def pytest_collection_modifyitems(self, config, items):
        elsewhere = self.in_the_browser(items) | self.in_the_course_check(items)
        kept, again = [], []
        for item in items:
            (again if item.nodeid.split("::")[0] in elsewhere else kept).append(item)
        if again:
            config.hook.pytest_deselected(items=again)
            items[:] = kept

    @staticmethod
    def in_the_browser(items) -> set:
        """The notebooks (paths) the browser test runs in this session."""
        browser = [i for i in items
                   if i.nodeid.startswith(f"{BROWSER}::test_notebook_in_browser[")]
        if not browser or browser[0].module.cannot_run() is not None:
            return set()
        return {i.callspec.params["notebook"] for i in browser}

    @staticmethod
    def in_the_course_check(items) -> set:
        """The solution notebooks (paths), where the course check's test runs them all."""
        if not any(i.nodeid == COURSE_CHECK for i in items):
            return set()
        return {path for i in items if (path := i.nodeid.split("::")[0]).startswith("solutions/")}


def pytest_collection_finish(session):
    """What collection loaded (the test modules, ipulab, numba, bokeh) lives all session: frozen,
    the collector's passes skip it (tests/conftest.py freezes after each test file too)."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(optionalhook=True)     # a hook of pytest-xdist: without it, not called
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile (a notebook's cells share one kernel, a module its fixtures), except
    that the browser test's notebooks go in BROWSER_SHARES units, run by workers at once."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileUnits(LoadFileScheduling):
        def __init__(self, config, log=None):
            super().__init__(config, log)
            self.shares = {}

        def _split_scope(self, nodeid):
            path = nodeid.split("::")[0]
            if path != BROWSER or not nodeid.endswith("]"):
                return path
            share = self.shares.setdefault(nodeid, len(self.shares) % BROWSER_SHARES)
            return f"{path}[share {share}]"

    return FileUnits(config, log)


class BrowserLine:
    """The last line of a run that had the browser test: "BROWSER TEST: ran (...)", "BROWSER
    TEST: SKIPPED (reason)" or "BROWSER TEST: could not run (reason)". A skipped browser test
    looks like any other "s" in pytest's progress line. Here, not in tests/browser/: under
    pytest-xdist only the controller prints, and it loads no conftest below the test paths."""

    PREFIX = "browser test skipped: "

    def __init__(self):
        self.outcomes = []          # (when, outcome, reason), one per notebook

    def pytest_runtest_logreport(self, report):
        if "::test_notebook_in_browser[" not in report.nodeid:
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.outcomes.append((report.when, report.outcome, self.reason(report)))

    def reason(self, report) -> str:
        if report.skipped and isinstance(report.longrepr, tuple):
            text = report.longrepr[2].removeprefix("Skipped: ")
        else:
            text = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""
        return text.removeprefix(self.PREFIX)

    def line(self):
        """(the line, its colour), or None where the browser test had no part in the run."""
        if not self.outcomes:
            return None
        ran = [outcome for when, outcome, _ in self.outcomes if when == "call"]
        skipped = sorted({r for when, o, r in self.outcomes if o == "skipped"})
        broken = sorted({r for when, o, r in self.outcomes if when == "setup" and o == "failed"})
        if broken:
            return f"BROWSER TEST: could not run ({'; '.join(broken)})", {"red": True}
        if skipped and not ran:
            return f"BROWSER TEST: SKIPPED ({'; '.join(skipped)})", {"yellow": True}
        failed = ran.count("failed")
        line = f"BROWSER TEST: ran ({len(ran)} notebook(s), {failed} failed; nbval did not " \
            "run them again)"                                     # (RunOnce)
        if skipped:
            line += f"; SKIPPED some ({'; '.join(skipped)})"
        return line, {"red": True} if failed else {"green": True}

    def pytest_unconfigure(self, config):
        """After pytest's own summary, so the line is the last one printed."""
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        said = self.line()
        if said is not None and reporter is not None and hasattr(reporter, "write_line"):
            reporter.write_line(said[0], bold=True, **said[1])
