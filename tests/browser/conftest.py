"""Say, at the very end of every `make test`, whether the real-browser test ran or was skipped.

A skipped browser test looks like any other "s" in pytest's progress line; this prints one
unmissable last line instead: "BROWSER TEST: ran (...)", "BROWSER TEST: SKIPPED (reason)" or
"BROWSER TEST: could not run (reason)".

The notebooks kept here (bow2000_views.ipynb) are run by the browser test only: `make test`'s
--nbval-lax would otherwise collect them as nbval tests too (testpaths include tests/).
"""
collect_ignore_glob = ["*.ipynb"]
_outcomes = []          # (when, outcome, reason)
PREFIX = "browser test skipped: "


def _reason(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        text = report.longrepr[2].removeprefix("Skipped: ")
    else:
        text = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""
    return text.removeprefix(PREFIX)


def pytest_runtest_logreport(report):
    if "::test_notebook_in_browser[" not in report.nodeid:     # one per notebook
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _outcomes.append((report.when, report.outcome, _reason(report)))


def _summary():
    if not _outcomes:
        return "BROWSER TEST: not run (deselected)", {"yellow": True}
    ran = [outcome for when, outcome, _ in _outcomes if when == "call"]
    skipped = sorted({r for when, o, r in _outcomes if o == "skipped"})
    broken = sorted({r for when, o, r in _outcomes if when == "setup" and o == "failed"})
    if broken:
        return f"BROWSER TEST: could not run ({'; '.join(broken)})", {"red": True}
    if skipped and not ran:
        return f"BROWSER TEST: SKIPPED ({'; '.join(skipped)})", {"yellow": True}
    failed = ran.count("failed")
    # (the root conftest.py leaves nbval's run of these notebooks out)
    line = f"BROWSER TEST: ran ({len(ran)} notebook(s), {failed} failed; nbval did not run " \
        "them again)"
    if skipped:
        line += f"; SKIPPED some ({'; '.join(skipped)})"
    return line, {"red": True} if failed else {"green": True}


def pytest_unconfigure(config):
    """After pytest's own summary, so the line is the last one printed."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and hasattr(reporter, "write_line"):
        line, markup = _summary()
        reporter.write_line(line, bold=True, **markup)
