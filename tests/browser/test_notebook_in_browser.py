"""Run course notebooks in a real browser: JupyterLab + a system Chromium driven by Playwright.

nbval proves the notebooks' Python runs; this proves that and what a learner sees: JupyterLab
opens the notebook, "Run All Cells" runs every cell on the venv's kernel, no output is an
error, the ipywidgets render as widgets (not as "VBox(...)" text), the bokeh figures draw on a
canvas and none is wider than its cell (nothing cut at the right edge), and no JupyterLab news
toast covers the page. So where it runs, nbval does not run its notebooks again in the same
session (the root conftest.py's RunOnce; cannot_run() says where it cannot).

The test runs the course as a learner does: `ipulab course workspace` copies it into a
throw-away workspace outside the checkout, and JupyterLab (127.0.0.1, free port, no token,
throw-away config/data/runtime dirs with a "python3" kernelspec pointing at this interpreter,
the workspace's own Jupyter config as `ipulab lab` gives it) is rooted there. Running each
notebook must leave `git status --porcelain` of the checkout's course folders as it was. A
screenshot of each notebook that fails goes to test-artifacts/browser/ (a JPEG: encoding a
PNG of a notebook's full height took a second); of every notebook with
IPULAB_BROWSER_SCREENSHOTS=all. It runs every course notebook
with a widget or a figure (all of them) and tests/browser/bow2000_views.ipynb (every viz
figure and widget for a full Bow-2000, issue 3), which must finish within its TIME_LIMITS
entry.

The notebooks share one browser, one JupyterLab server and one JupyterLab page per pytest
worker (module fixtures): each notebook opens in the page, and closes with its kernel shut
down after its checks (loading JupyterLab anew took 3.5 s of a notebook's 10); a notebook
that fails gets the page closed, so the next starts on a fresh one. `make test`
(--dist loadfile) runs them in two shares, on two workers at once (the root conftest.py),
and each worker starts its own: every check is per notebook, so any split is sound. It
needs Chromium
($IPULAB_CHROMIUM, else /usr/bin/chromium or another usual place: `sudo apt-get install
chromium` on Debian/Ubuntu, `brew install --cask chromium` on macOS) and the playwright package
(the `dev` extra; Playwright's own browser download is never used). Without them it skips, and
tests/browser/conftest.py prints "BROWSER TEST: SKIPPED (reason)"; with
IPULAB_REQUIRE_BROWSER_TEST=1 (set by .ci/run) it fails instead of skipping.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

# notebook -> what must render in it besides error-free outputs: "widgets" (ipywidgets) and/or
# "bokeh" (at least one bokeh canvas). Every course notebook with a widget or a figure is here
# (test_every_notebook_with_a_widget_or_figure_runs_here checks): adding one is one line.
BOTH = frozenset({"widgets", "bokeh"})
NOTEBOOKS = {
    "notebooks/00_welcome_the_ipu.ipynb": BOTH,
    "notebooks/01_one_tile.ipynb": BOTH,
    "notebooks/02_bsp_supersteps.ipynb": BOTH,
    "notebooks/03_the_exchange.ipynb": BOTH,
    "notebooks/04_poplar_graph_api.ipynb": BOTH,
    "notebooks/05_profiling.ipynb": BOTH,
    "notebooks/06_matmul_on_1472_tiles.ipynb": BOTH,
    "notebooks/07_popLibs_ops_and_conv.ipynb": BOTH,
    "notebooks/08_many_ipus.ipynb": BOTH,
    "notebooks/09_bow2000_cnn_training.ipynb": BOTH,
    "notebooks/10_scaling_to_pods.ipynb": BOTH,
    "notebooks/11_sharing_a_pod.ipynb": BOTH,
    "notebooks/12_a_transformer_on_a_pod.ipynb": BOTH,
    "tests/browser/bow2000_views.ipynb": BOTH,
}
# notebook -> seconds from "Run All Cells" until every cell has executed and every widget and
# bokeh figure has rendered; over it, the test fails (RUN only bounds how long the test waits
# for a notebook without a limit).
TIME_LIMITS = {
    "tests/browser/bow2000_views.ipynb": 120,   # issue 3: the full Bow-2000 figures render in time
}
WIDGETS = {nb for nb, wants in NOTEBOOKS.items() if "widgets" in wants}
BOKEH = {nb for nb, wants in NOTEBOOKS.items() if "bokeh" in wants}

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "browser"
# Where Chromium usually is: Debian's package, Ubuntu's, a PATH entry, macOS's Homebrew cask.
CHROMIUM_PLACES = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/snap/bin/chromium",
                   "/Applications/Chromium.app/Contents/MacOS/Chromium"]
NO_CHROMIUM = ("no Chromium found (Debian/Ubuntu: sudo apt-get install chromium; macOS: "
               "brew install --cask chromium; or set IPULAB_CHROMIUM to its path)")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

# Bounded waits (seconds). RUN is for "Run All Cells" until every code cell has a count.
SERVER_START = 90
PAGE_LOAD = 120
KERNEL_START = 120
RUN = float(os.environ.get("IPULAB_BROWSER_RUN_TIMEOUT", 180))
# A notebook that fails is always photographed; one that passes only with this set to "all"
# (the full-height screenshots took 48 of the test's 336 s of CPU).
EVERY_SCREENSHOT = os.environ.get("IPULAB_BROWSER_SCREENSHOTS", "") == "all"
RENDER = 30
POLL = 250          # ms between looks at the page

# The visible notebook panel (hidden panels of other tabs stay in the DOM with lm-mod-hidden).
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"


def _skip(reason):
    reason = f"browser test skipped: {reason}"
    if os.environ.get("IPULAB_REQUIRE_BROWSER_TEST") == "1":
        pytest.fail(f"{reason} — but IPULAB_REQUIRE_BROWSER_TEST=1 requires it", pytrace=False)
    pytest.skip(reason)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(method, url, timeout=10):
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
    return json.loads(body) if body else None


def _write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def _jupyter_env(home):
    """Throw-away Jupyter dirs: a "python3" kernelspec running this interpreter, quiet settings."""
    config, data, runtime = home / "config", home / "data", home / "runtime"
    for d in (config, data, runtime):
        d.mkdir(parents=True, exist_ok=True)
    _write_json(data / "kernels" / "python3" / "kernel.json", {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python",
        "metadata": {"debugger": True}})
    settings = config / "lab" / "user-settings" / "@jupyterlab"
    # Attach every cell to the DOM (the default windowing may leave off-screen cells unrendered).
    _write_json(settings / "notebook-extension" / "tracker.jupyterlab-settings",
                {"windowingMode": "none"})
    # No news or update toasts: the workspace's own config (as `ipulab lab` gives it) disables
    # JupyterLab's announcements plugin, and the test checks that no toast shows.
    env = dict(os.environ)
    env.pop("JUPYTER_PLATFORM_DIRS", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    env.update(JUPYTER_CONFIG_DIR=str(config), JUPYTER_DATA_DIR=str(data),
               JUPYTER_RUNTIME_DIR=str(runtime), JUPYTER_PATH=str(data),
               IPYTHONDIR=str(home / "ipython"), PYTHONUNBUFFERED="1")
    return env


def _chromium():
    """The Chromium to drive: $IPULAB_CHROMIUM, else the first of the usual places."""
    given = os.environ.get("IPULAB_CHROMIUM")
    if given:
        return given if os.path.exists(given) else None
    found = [p for p in CHROMIUM_PLACES if os.path.exists(p)]
    found += [p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p]
    return found[0] if found else None


def _git_status():
    """`git status --porcelain` of the checkout (None when it is not a git checkout)."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def cannot_run() -> str | None:
    """Why the browser test cannot run here (no Chromium, no playwright), or None: it can.
    The root conftest.py asks too: where it can, nbval does not run its notebooks again."""
    if _chromium() is None:
        return NO_CHROMIUM
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = cannot_run()
    if reason is not None:
        _skip(reason)
    from playwright.sync_api import sync_playwright
    chromium = _chromium()
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=60_000)
    except Exception:
        pw.stop()
        raise
    yield b
    try:
        b.close()
    finally:
        pw.stop()


@pytest.fixture(scope="module")
def workspace(browser, tmp_path_factory):
    """A learner's workspace outside the checkout, made by the installed `ipulab course
    workspace` (as `make lab` does), with the browser test's own notebook at its top; and
    the checkout's `git status --porcelain` before anything ran."""
    before = _git_status()
    ws = tmp_path_factory.mktemp("workspace")
    exe = Path(sys.executable).with_name("ipulab")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ipulab"]
    out = subprocess.run([*cmd, "course", "workspace", str(ws)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == str(ws), out
    for nb in NOTEBOOKS:
        if not (ws / nb).exists():
            (ws / nb).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / nb, ws / nb)
    return ws, before


@pytest.fixture(scope="module")
def jupyter_server(browser, workspace, tmp_path_factory):
    """Base URL of a JupyterLab serving the workspace (started after the browser, so a skip is
    cheap), with the Jupyter config `ipulab lab` gives a workspace."""
    from ipulab.cli import lab_env

    ws, _ = workspace
    home = tmp_path_factory.mktemp("jupyter")
    env = _jupyter_env(home)
    env["JUPYTER_CONFIG_PATH"] = lab_env(ws)["JUPYTER_CONFIG_PATH"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    log_name = f"jupyter-server{'-' + worker if worker else ''}.log"
    log_path = home / log_name                  # copied to test-artifacts/browser/ at the end
    log = open(log_path, "w")
    proc = base = None
    for _attempt in range(3):                   # the free port may be taken before we bind it
        port = _free_port()
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
               "--ServerApp.port_retries=0", "--IdentityProvider.token=",
               "--ServerApp.password=", f"--ServerApp.root_dir={ws}",
               "--LabApp.expose_app_in_browser=True",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        if os.getuid() == 0:
            cmd.append("--allow-root")
        proc = subprocess.Popen(cmd, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + SERVER_START
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                _http("GET", f"{base}/api/status", timeout=2)
                break
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.5)
        if proc.poll() is None:
            break
    try:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited ({proc.returncode}):\n{log_path.read_text()[-4000:]}")
        try:
            _http("GET", f"{base}/api/status", timeout=5)
        except (urllib.error.URLError, OSError) as e:
            pytest.fail(f"JupyterLab not ready after {SERVER_START} s ({e}):\n"
                        f"{log_path.read_text()[-4000:]}")
        spec = _http("GET", f"{base}/api/kernelspecs", timeout=10)["kernelspecs"]["python3"]
        assert spec["spec"]["argv"][0] == sys.executable, f"python3 kernelspec is {spec}"
        yield base
    finally:
        _stop_server(proc, base)
        log.close()
        shutil.copyfile(log_path, ARTIFACTS / log_name)


def _stop_server(proc, base):
    try:                                        # kernels first: they run in their own sessions
        for k in _http("GET", f"{base}/api/kernels", timeout=5) or []:
            _http("DELETE", f"{base}/api/kernels/{k['id']}", timeout=15)
    except Exception:
        pass
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


VIEWPORT = {"width": 1400, "height": 1000}
# Close every open document without a "save changes?" dialog (the workspace is thrown away).
CLOSE_ALL_JS = """() => {
  for (const w of [...window.jupyterapp.shell.widgets('main')]) {
    if (w.context && w.context.model) w.context.model.dirty = false;
    w.close();
  }
}"""


class Lab:
    """One JupyterLab page, loaded once and reused by notebook after notebook; the console
    errors it logs go to `console`, which each notebook empties first."""

    def __init__(self, browser, base):
        self.browser, self.base = browser, base
        self.context = self.page = None
        self.console = []

    def open(self, notebook):
        """The page with the notebook opening in it (the page loaded first if need be); a
        page that cannot open it is dropped."""
        self.console.clear()
        try:
            if self.page is None:
                self._load()
            self.page.evaluate("(path) => window.jupyterapp.commands.execute("
                               "'docmanager:open', {path, factory: 'Notebook'})", notebook)
        except Exception:
            self.drop()
            raise
        return self.page

    def _load(self):
        self.context = self.browser.new_context(viewport=VIEWPORT)
        self.context.set_default_timeout(30_000)
        page = self.context.new_page()
        page.on("console", lambda m: self.console.append(f"console.{m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        # ?reset: a clean JupyterLab workspace, nothing open
        page.goto(f"{self.base}/lab?reset", wait_until="domcontentloaded",
                  timeout=PAGE_LOAD * 1000)
        page.wait_for_function("() => window.jupyterapp", timeout=PAGE_LOAD * 1000)
        page.evaluate("() => window.jupyterapp.restored.then(() => true)")
        self.page = page

    def finish(self, passed: bool):
        """Close the notebook; after a failure (or if it will not close), the page itself:
        the next notebook loads a fresh one."""
        if not passed:
            self.drop()
            return
        try:
            self.page.evaluate(CLOSE_ALL_JS)
            self.page.wait_for_selector(".jp-NotebookPanel", state="detached")
            self.page.set_viewport_size(VIEWPORT)
        except Exception:
            self.drop()
            raise

    def drop(self):
        if self.context is not None:
            self.context.close()
        self.context = self.page = None


@pytest.fixture(scope="module")
def lab(browser, jupyter_server):
    """The page the notebooks open in, one after another."""
    shared = Lab(browser, jupyter_server)
    yield shared
    shared.drop()


# One JS snapshot of the visible notebook: DOM state plus, if window.jupyterapp is exposed, the
# notebook model (execution counts and output types, independent of how they are drawn). A
# look while the cells run ("full" false) reads each output's type only; the look that finds
# the run finished ("full" true) also counts each cell's widget and bokeh outputs, which needs
# a copy of their data (toJSON: BokehJS itself, inlined, is a megabyte), once per cell. That
# copy at every look cost the browser test 249 against 233 s of CPU (one run each).
STATE_JS = """([panelSel, full]) => {
  const panel = document.querySelector(panelSel);
  if (!panel) return {panel: false};
  const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]
      .map(p => p.textContent.trim());
  const stderr = [...panel.querySelectorAll(
      '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
      .map(o => o.textContent);
  const cells = panel.querySelectorAll('.jp-Notebook .jp-Cell').length;
  let model = null, kernel = null, modelError = null;
  try {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    if (k) kernel = {name: k.name, status: k.status, connection: k.connectionStatus};
    if (w && w.content && w.content.model) {
      const cells = [...w.content.model.cells].filter(c => c.type === 'code');
      model = cells.map(c => {
        const errors = [];
        for (let i = 0; i < c.outputs.length; i++) {
          const o = c.outputs.get(i);
          if (o.type === 'error') {
            const e = o.toJSON();
            errors.push(`${e.ename}: ${e.evalue}`);
          }
        }
        const cell = {count: c.executionCount, errors};
        if (full) {
          const outs = c.outputs.toJSON();
          const has = mime => outs.filter(o => o.data && mime in o.data).length;
          cell.widgetViews = has('application/vnd.jupyter.widget-view+json');
          cell.bokehShows = has('application/vnd.bokehjs_exec.v0+json');
        }
        return cell;
      });
    }
  } catch (e) { model = null; modelError = String(e); }
  return {panel: true, status: ind ? ind.dataset.status : null, prompts, stderr, model, cells,
          kernel, exposed: !!window.jupyterapp, modelError,
          dialog: !!document.querySelector('.jp-Dialog')};
}"""


# How many outputs outside ipywidgets hold a canvas: each bokeh show() draws one figure or
# layout in its own output. BokehJS 3 draws inside shadow roots, which querySelectorAll does not
# enter, so this walks them.
BOKEH_DRAWN_JS = """(panelSel) => {
  const panel = document.querySelector(panelSel);
  if (!panel) return 0;
  const canvases = (root) => {
    let n = root.querySelectorAll('canvas').length;
    for (const el of root.querySelectorAll('*')) if (el.shadowRoot) n += canvases(el.shadowRoot);
    return n;
  };
  return [...panel.querySelectorAll('.jp-OutputArea-output')]
      .filter(o => !o.querySelector('.jupyter-widgets') && canvases(o) > 0).length;
}"""


# Every canvas of every output (BokehJS 3 draws inside shadow roots, so this walks them): its
# width and how far it reaches past the right edge of its output area (the cell's width).
FIT_JS = """(panelSel) => {
  const panel = document.querySelector(panelSel);
  if (!panel) return [];
  const canvases = (root, out) => {
    for (const c of root.querySelectorAll('canvas')) out.push(c);
    for (const el of root.querySelectorAll('*')) if (el.shadowRoot) canvases(el.shadowRoot, out);
    return out;
  };
  const found = [];
  [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].forEach((cell, i) => {
    for (const o of cell.querySelectorAll('.jp-OutputArea-output')) {
      const box = o.getBoundingClientRect();
      for (const c of canvases(o, [])) {
        const r = c.getBoundingClientRect();
        if (r.width > 0 && r.height > 0)
          found.push({cell: i, width: Math.round(r.width), output: Math.round(box.width),
                      over: Math.round(Math.max(r.right - box.right, r.width - box.width))});
      }
    }
  });
  return found;
}"""
NEWS_TOAST = "official Jupyter news"


def _errors(state):
    """Error outputs in a state: model errors, and stderr outputs that show a Traceback/Error."""
    found = [e for cell in state.get("model") or [] for e in cell["errors"]]
    found += [t.strip()[:2000] for t in state.get("stderr", [])
              if "Traceback" in t or "Error" in t]
    return found


def _kernel_ready(state, n_cells):
    """Every cell on the page, the toolbar says idle and (if visible) the kernel is connected."""
    if not state.get("panel") or state.get("status") != "idle" or state["cells"] != n_cells:
        return False
    if not state.get("exposed"):
        return True
    kernel = state.get("kernel") or {}
    return kernel.get("status") == "idle" and kernel.get("connection") == "connected"


def _finished(state, n_code):
    """Kernel idle and every code cell numbered — or stopped early by an error."""
    if not state.get("panel") or state.get("status") != "idle":
        return False
    prompts = state["prompts"]
    if any("*" in p for p in prompts):
        return False
    numbered = sum(p.startswith("[") and p[1:-2].isdigit() and p.endswith("]:") for p in prompts)
    model = state.get("model")
    model_done = model is None or (len(model) == n_code
                                   and all(c["count"] is not None for c in model))
    return (numbered == n_code and model_done) or bool(_errors(state))


def _dismiss_dialogs(page):
    """Accept a "Select Kernel" (or any other) dialog: its default is the notebook's kernel."""
    dialog = page.locator(".jp-Dialog")
    if dialog.count():
        text = dialog.first.inner_text(timeout=5_000)
        page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept").first.click(timeout=10_000)
        return text
    return None


def _run_all(page):
    """Run > Run All Cells from the menu bar; the command itself if the menu does not work."""
    try:
        page.locator(f"{PANEL} .jp-Notebook").first.click(position={"x": 5, "y": 5},
                                                         timeout=10_000)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click(timeout=10_000)
        # JupyterLab 4: data-command="runmenu:run-all", label "Run All Cells".
        page.locator(".lm-Menu-item:not(.lm-mod-disabled)").filter(
            has=page.locator(".lm-Menu-itemLabel", has_text="Run All Cells")).filter(
            has_not_text="Restart").first.click(timeout=10_000)
        return "menu"
    except Exception as e:
        print(f"\n(Run menu failed: {e}; running the command instead)")
        page.keyboard.press("Escape")
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        return "command"


def _appears(locator):
    """Whether locator matches something within RENDER seconds."""
    try:
        locator.first.wait_for(state="attached", timeout=RENDER * 1000)
        return True
    except Exception:
        return False


def _settled(page, js):
    """What js reports once it reports the same twice in a row, POLL ms apart (or after
    RENDER seconds)."""
    seen = page.evaluate(js, PANEL)
    deadline = time.monotonic() + RENDER
    while time.monotonic() < deadline:
        page.wait_for_timeout(POLL)
        now = page.evaluate(js, PANEL)
        if now == seen:
            break
        seen = now
    return seen


def _screenshot(page, path):
    """The whole notebook: grow the viewport to the notebook's height, then screenshot."""
    try:
        height = page.evaluate(f"""() => {{
            const p = document.querySelector('{PANEL}');
            const s = p && (p.querySelector('.jp-WindowedPanel-outer')
                            || p.querySelector('.jp-Notebook'));
            return s ? s.scrollHeight : 0; }}""")
        page.set_viewport_size({"width": 1400, "height": int(min(max(height + 250, 1000), 15000))})
        page.wait_for_timeout(250)
        page.evaluate(f"""() => {{
            const p = document.querySelector('{PANEL}');
            for (const s of p ? p.querySelectorAll('.jp-WindowedPanel-outer, .jp-Notebook') : [])
                s.scrollTop = 0; }}""")
        page.wait_for_timeout(400)
    except Exception:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True, type="jpeg", quality=80, timeout=60_000)
    return path


def _shutdown_kernel(base, path):
    try:
        for s in _http("GET", f"{base}/api/sessions", timeout=5) or []:
            if s.get("path") == path:
                _http("DELETE", f"{base}/api/sessions/{s['id']}", timeout=15)
    except Exception:
        pass


@pytest.mark.parametrize("notebook", list(NOTEBOOKS))
def test_notebook_in_browser(notebook, lab, jupyter_server, workspace):
    src = REPO / notebook
    cells = json.loads(src.read_text())["cells"]
    n_cells, n_code = len(cells), sum(c["cell_type"] == "code" for c in cells)
    rel = notebook                              # the workspace's copy, as a learner opens it

    state, failed, notes = {}, True, []
    shot, failed_shot = ARTIFACTS / f"{src.stem}.jpg", ARTIFACTS / f"{src.stem}-FAILED.jpg"
    failed_shot.unlink(missing_ok=True)
    shot.unlink(missing_ok=True)                # (no stale picture of an earlier run)
    console = lab.console

    def fail(msg):
        errs = []                               # distinct errors, first lines, with counts
        for c in console:
            if not c.startswith("console.warning"):
                c = c.strip().splitlines()[0][:300] if c.strip() else c
                errs.append(c) if c not in errs else None
        counts = {c: sum(x.strip().startswith(c) for x in console) for c in errs}
        errs = [f"{c}  (x{n})" if n > 1 else c for c, n in counts.items()]
        pytest.fail(f"{notebook}: {msg}\n"
                    f"execution prompts: {state.get('prompts')}\n"
                    f"kernel status: {state.get('status')}; notes: {notes}\n"
                    f"screenshot: {failed_shot}\n"
                    f"browser console errors ({len(errs)}):\n  " + "\n  ".join(errs[-30:]),
                    pytrace=False)

    def snapshot(full=False):
        nonlocal state
        state = page.evaluate(STATE_JS, [PANEL, full])
        if state.get("modelError"):     # the checks that count outputs would count none
            fail(f"reading the notebook model failed: {state['modelError']}")
        return state

    t0 = time.monotonic()
    page = lab.open(rel)
    try:
        page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell", timeout=PAGE_LOAD * 1000)

        # The kernel starts: wait for idle, accepting a "Select Kernel" dialog if one appears.
        deadline = time.monotonic() + KERNEL_START
        while True:
            text = _dismiss_dialogs(page)
            if text:
                notes.append(f"dismissed dialog: {text[:200]!r}")
            if _kernel_ready(snapshot(), n_cells):
                break
            if time.monotonic() > deadline:
                fail(f"notebook not loaded or kernel not idle after {KERNEL_START} s: "
                     f"{state.get('cells')} of {n_cells} cells shown, kernel {state.get('kernel')}")
            page.wait_for_timeout(POLL)
        if len(state["prompts"]) != n_code:
            fail(f"the page shows {len(state['prompts'])} code cells, the notebook has {n_code}")
        if not state.get("exposed"):
            notes.append("window.jupyterapp not exposed: DOM checks only")
        notes.append(f"kernel {state.get('kernel')}")

        limit = TIME_LIMITS.get(notebook)
        run_start = time.monotonic()
        notes.append(f"run via {_run_all(page)}")
        deadline = run_start + (limit if limit is not None else RUN)
        while not (_finished(snapshot(), n_code) and _finished(snapshot(full=True), n_code)):
            if time.monotonic() > deadline:
                if limit is not None:
                    fail(f"cells still not all executed {limit} s after Run All "
                         f"(its time limit, TIME_LIMITS)")
                fail(f"cells still not all executed after {RUN:.0f} s")
            if state.get("dialog"):
                notes.append(f"dialog during run: {_dismiss_dialogs(page)!r:.200}")
            page.wait_for_timeout(POLL)
        run_seconds = time.monotonic() - t0
        notes.append(f"Run All to last cell {time.monotonic() - run_start:.1f} s")

        errors = _errors(state)
        if errors:
            fail("error output(s):\n" + "\n---\n".join(errors))

        out = f"{PANEL} .jp-OutputArea-output"
        if notebook in WIDGETS:
            if not _appears(page.locator(f"{out} .jupyter-widgets")):
                fail("no ipywidgets rendered (.jupyter-widgets)")
            widget_bits = page.locator(f"{out} [class*='widget-']").count()
            if not widget_bits:
                fail("ipywidgets container rendered but no .widget-* elements")
            # Every widget output drawn as a widget: one root .jupyter-widgets per output.
            views = sum(c["widgetViews"] for c in state.get("model") or [])
            deadline = time.monotonic() + RENDER
            while (roots := page.locator(f"{out} > .jupyter-widgets").count()) < views \
                    and time.monotonic() < deadline:
                page.wait_for_timeout(POLL)
            notes.append(f"{roots} widget views drawn for {views} widget outputs, "
                         f"{widget_bits} .widget-* elements")
            if roots < views:
                fail(f"only {roots} of {views} widget outputs rendered as widgets")
            text = page.locator(f"{PANEL} .jp-OutputArea").all_inner_texts()
            if any("Error displaying widget" in t for t in text):
                fail("'Error displaying widget' in an output")
        if notebook in BOKEH:
            canvas = page.locator(f"{out} .bk-Canvas canvas, {out} .bk-root canvas, "
                                  f"{out} [class*='bk-'] canvas")
            if not _appears(canvas):
                fail("no bokeh canvas rendered")
            box = canvas.first.bounding_box()
            if not box or box["width"] < 10 or box["height"] < 10:
                fail(f"bokeh canvas has no size: {box}")
            notes.append(f"{canvas.count()} bokeh canvas(es), first {box['width']:.0f}x"
                         f"{box['height']:.0f}")
            # Every show() drawn, not only the first (the model knows how many there were).
            shows = sum(c.get("bokehShows", 0) for c in state.get("model") or [])
            deadline = time.monotonic() + RENDER
            while (drawn := page.evaluate(BOKEH_DRAWN_JS, PANEL)) < shows \
                    and time.monotonic() < deadline:
                page.wait_for_timeout(POLL)
            notes.append(f"{drawn} bokeh outputs drawn for {shows} show() outputs")
            if drawn < shows:
                fail(f"only {drawn} of {shows} bokeh show() outputs drew a canvas")
            cut = _settled(page, FIT_JS)            # layouts settle after the last draw
            widest = max(cut, key=lambda c: c["width"], default=None)
            if widest:
                notes.append(f"widest figure {widest['width']} px (cell {widest['cell']}, "
                             f"output {widest['output']} px wide)")
            too_wide = list({(c["cell"], c["width"]): c for c in cut if c["over"] > 1}.values())
            if too_wide:
                fail("figure(s) wider than their cell, cut at the right edge: " + "; ".join(
                    f"cell {c['cell']}: {c['width']} px figure, {c['over']} px past an "
                    f"output {c['output']} px wide" for c in too_wide))
        if page.get_by_text(NEWS_TOAST).count():
            fail(f"JupyterLab's news toast is showing ({NEWS_TOAST!r})")
        changed = _checkout_changes(workspace[1])
        if changed:
            fail(f"running the notebook changed the checkout:\n{changed}")
        if limit is not None:
            # The limit covers rendering too: from Run All until every check above passed
            # (+1 s: the wait above polls every 0.5 s).
            rendered_seconds = time.monotonic() - run_start
            notes.append(f"Run All to all rendered {rendered_seconds:.1f} s (limit {limit} s)")
            if rendered_seconds > limit + 1:
                fail(f"Run All to everything rendered took {rendered_seconds:.1f} s, over its "
                     f"time limit of {limit} s")
        failed = False
        print(f"\n{notebook}: {n_code} code cells ran in the browser in {run_seconds:.1f} s "
              f"(page load to last cell); {'; '.join(notes)}")
    finally:
        try:
            if failed or EVERY_SCREENSHOT:
                _screenshot(page, failed_shot if failed else shot)
        except Exception as e:
            print(f"\n(screenshot failed: {e})")
        try:
            lab.finish(passed=not failed)
        finally:
            _shutdown_kernel(jupyter_server, rel)


COURSE = ("notebooks/", "exercises/", "solutions/", "tests/browser/")


def _checkout_changes(before):
    """What `git status --porcelain` shows in the checkout's course folders now and did not
    before (a notebook saved, or a file written, into the checkout instead of the workspace);
    '' when nothing changed or the checkout is not a git checkout."""
    after = _git_status()
    if before is None or after is None:
        return ""
    mine = lambda status: {line for line in status.splitlines() if line[3:].startswith(COURSE)}
    return "\n".join(sorted(mine(after) - mine(before)))


def _shows_a_widget_or_figure(path):
    """Whether a notebook's code makes a widget or a bokeh figure (the browser test's work)."""
    code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                     if c["cell_type"] == "code")
    return any(word in code for word in ("widgets.", "ipywidgets", "ipw.", "show(", "viz."))


def test_every_notebook_with_a_widget_or_figure_runs_here():
    """A course notebook (a new 12, say) with a widget or a figure must have its line in
    NOTEBOOKS, or what learners see of it is never checked in a browser."""
    course = sorted(p for p in (REPO / "notebooks").glob("*.ipynb") if _shows_a_widget_or_figure(p))
    missing = [str(p.relative_to(REPO)) for p in course if str(p.relative_to(REPO)) not in NOTEBOOKS]
    assert course and not missing, f"add to NOTEBOOKS: {missing}"
    assert all((REPO / nb).exists() for nb in NOTEBOOKS)
