"""The root conftest.py's plugins: RunOnce (a course notebook that the browser test runs in a
session is not run again by nbval, and is where the browser test cannot run; nor a solution
notebook, where the course check's test runs them all) and BrowserLine
(the run's last line says whether the browser test ran)."""
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import load_file

BROWSER = "tests/browser/test_notebook_in_browser.py::test_notebook_in_browser"


def _browser_item(notebook, reason):
    return SimpleNamespace(nodeid=f"{BROWSER}[{notebook}]",
                           module=SimpleNamespace(cannot_run=lambda: reason),
                           callspec=SimpleNamespace(params={"notebook": notebook}))


def _cell(notebook, n):
    return SimpleNamespace(nodeid=f"{notebook}::Cell {n}")


def _select(request, items):
    """The items left after RunOnce, and those it deselected."""
    run_once = request.config.pluginmanager.get_plugin("ipulab-run-once")
    deselected = []
    config = SimpleNamespace(hook=SimpleNamespace(
        pytest_deselected=lambda items: deselected.extend(items)))
    run_once.pytest_collection_modifyitems(config, items)
    return [i.nodeid for i in items], [i.nodeid for i in deselected]


def _session(reason):
    return [_cell("notebooks/01_one_tile.ipynb", 0), _cell("notebooks/01_one_tile.ipynb", 1),
            _cell("notebooks/02_bsp_supersteps.ipynb", 0),
            _cell("solutions/01_one_tile.ipynb", 0),
            SimpleNamespace(nodeid="tests/test_course.py::test_markers_transform"),
            _browser_item("notebooks/01_one_tile.ipynb", reason),
            _browser_item("tests/browser/bow2000_views.ipynb", reason)]


def test_a_notebook_the_browser_runs_is_not_run_again_by_nbval(request):
    kept, dropped = _select(request, _session(None))
    assert dropped == ["notebooks/01_one_tile.ipynb::Cell 0", "notebooks/01_one_tile.ipynb::Cell 1"]
    assert kept == ["notebooks/02_bsp_supersteps.ipynb::Cell 0",      # not in the browser here
                    "solutions/01_one_tile.ipynb::Cell 0",            # no course check here
                    "tests/test_course.py::test_markers_transform",
                    f"{BROWSER}[notebooks/01_one_tile.ipynb]",
                    f"{BROWSER}[tests/browser/bow2000_views.ipynb]"]


@pytest.mark.parametrize("reason", ["no Chromium found", "the playwright package is not installed"])
def test_where_the_browser_test_cannot_run_nbval_runs_every_notebook(request, reason):
    items = _session(reason)
    kept, dropped = _select(request, items)
    assert dropped == [] and len(kept) == 7


def test_the_course_checks_test_runs_the_solutions_instead_of_nbval(request):
    course_check = SimpleNamespace(
        nodeid="tests/test_course.py::test_course_check_passes_the_solutions")
    kept, dropped = _select(request, _session("no Chromium found") + [course_check])
    assert dropped == ["solutions/01_one_tile.ipynb::Cell 0"] and len(kept) == 7


def test_without_the_browser_test_nbval_runs_every_notebook(request):
    items = [i for i in _session(None) if not i.nodeid.startswith(BROWSER)]
    kept, dropped = _select(request, items)
    assert dropped == [] and len(kept) == 5


def test_cannot_run_says_why_the_browser_test_would_skip(monkeypatch):
    """cannot_run() is what the browser fixture skips on (and what RunOnce asks)."""
    browser = load_file(Path(__file__).parent / "browser" / "test_notebook_in_browser.py",
                        "browser_test_module")
    monkeypatch.setattr(browser, "_chromium", lambda: None)
    assert browser.cannot_run() == browser.NO_CHROMIUM
    monkeypatch.setattr(browser, "_chromium", lambda: "/usr/bin/true")
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)     # import fails
    assert "playwright" in browser.cannot_run()


def _report(notebook, when, outcome, longrepr=None):
    return SimpleNamespace(nodeid=f"{BROWSER}[{notebook}]", when=when, outcome=outcome,
                           passed=outcome == "passed", skipped=outcome == "skipped",
                           longrepr=longrepr)


def _line(request, reports):
    """A new BrowserLine (the root conftest.py's plugin class) told of the reports."""
    line = type(request.config.pluginmanager.get_plugin("ipulab-browser-line"))()
    for r in reports:
        line.pytest_runtest_logreport(r)
    return line.line()


def test_the_last_line_says_whether_the_browser_test_ran(request):
    ran = [_report("a.ipynb", "setup", "passed"), _report("a.ipynb", "call", "passed"),
           _report("b.ipynb", "call", "failed")]
    assert _line(request, ran) == ("BROWSER TEST: ran (2 notebook(s), 1 failed; nbval did not run them "
                          "again)", {"red": True})
    skipped = [_report("a.ipynb", "setup", "skipped",
                       ("x.py", 1, "Skipped: browser test skipped: no Chromium found"))]
    assert _line(request, skipped) == ("BROWSER TEST: SKIPPED (no Chromium found)", {"yellow": True})
    broken = [_report("a.ipynb", "setup", "failed", "Traceback\nE   RuntimeError: no lab")]
    assert _line(request, broken) == ("BROWSER TEST: could not run (E   RuntimeError: no lab)",
                             {"red": True})
    assert _line(request, [SimpleNamespace(nodeid="tests/test_nn.py::test_x", when="call",
                                  outcome="passed", passed=True, skipped=False,
                                  longrepr=None)]) is None      # no browser test, no line
