"""The built site's course pages in Chromium (`make docs` first): each notebook page shows its
outputs, none is an error, no script fails, and every bokeh figure draws. Skipped when the site
is not built, unless IPULAB_REQUIRE_DOCS_SITE=1 (.ci/run, after `make docs`) requires it."""
import os
from pathlib import Path

import pytest

from test_notebook_in_browser import CHROMIUM_ARGS, _chromium, cannot_run

SITE = Path(__file__).resolve().parents[2] / "docs" / "_build" / "html"
NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
PAGES = [SITE / "course" / "notebooks" / f"{nb.stem}.html" for nb in NOTEBOOKS]

# What a page shows once its scripts ran: outputs, errors, and bokeh's views (each drawn when
# its element has a size) against the figures the page embeds (one data-root-id each).
STATE = """() => {
  // bokeh 3 gives each document a Notifications view that draws nothing
  const views = (window.Bokeh ? Object.values(window.Bokeh.index) : [])
    .filter(v => v.model.type !== 'Notifications');
  return {outputs: document.querySelectorAll('.cell_output').length,
          tracebacks: document.querySelectorAll('.output.traceback, .output.error').length,
          embedded: document.querySelectorAll('[data-root-id]').length,
          views: views.length,
          undrawn: views.filter(v => !(v.el && v.el.getBoundingClientRect().height > 0)).length};
}"""


def _require(reason):
    if os.environ.get("IPULAB_REQUIRE_DOCS_SITE") == "1":
        pytest.fail(f"{reason} — but IPULAB_REQUIRE_DOCS_SITE=1 requires it", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def page():
    missing = [p.name for p in PAGES if not p.is_file()]
    if missing:
        _require(f"docs site not built (make docs): no {', '.join(missing[:3])}")
    reason = cannot_run()
    if reason:
        _require(reason)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        tab = browser.new_page()
        tab.errors = []
        tab.on("pageerror", lambda e: tab.errors.append(str(e)))
        yield tab
        browser.close()


def test_every_notebook_has_its_page():
    assert len(PAGES) == 13 and len({p.name for p in PAGES}) == 13


@pytest.mark.parametrize("path", PAGES, ids=[p.stem for p in PAGES])
def test_course_page_renders_outputs_and_figures(page, path):
    page.errors.clear()
    page.goto(path.as_uri(), wait_until="domcontentloaded", timeout=60_000)
    page.wait_for_function(
        "() => !document.querySelector('[data-root-id]') || (window.Bokeh &&"
        " Object.values(window.Bokeh.index).filter(v => v.model.type !== 'Notifications').length"
        " >= document.querySelectorAll('[data-root-id]').length)",
        timeout=60_000)
    state = page.evaluate(STATE)
    assert state["outputs"] > 0, f"{path.name}: no cell output"
    assert state["tracebacks"] == 0, f"{path.name}: an output is an error"
    assert page.errors == [], f"{path.name}: scripts failed: {page.errors[:3]}"
    assert state["views"] >= state["embedded"], f"{path.name}: {state}"
    assert state["undrawn"] == 0, f"{path.name}: {state['undrawn']} bokeh views not drawn"


def test_most_course_pages_have_figures(page):
    with_figures = 0
    for path in PAGES:
        page.goto(path.as_uri(), wait_until="domcontentloaded", timeout=60_000)
        with_figures += page.evaluate("() => document.querySelectorAll('[data-root-id]').length") > 0
    assert with_figures >= 10
