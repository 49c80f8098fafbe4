"""doctor(): is this installation ready for the course? Each check says OK, or what is wrong and
the exact command that fixes it."""
from __future__ import annotations

import html
import importlib.util
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ...version import __version__
from .record import path

PIP = f"{sys.executable} -m pip install"
REQUIRED = [("numpy", "numpy", None), ("numba", "numba", "0.57"), ("bokeh", "bokeh", "3.0"),
            ("ipywidgets", "ipywidgets", "8.0"), ("jupyter_bokeh", "jupyter_bokeh", "3.0"),
            ("nbformat", "nbformat", None)]


@dataclass
class Finding:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _version_tuple(v: str) -> tuple:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def check_versions() -> list[Finding]:
    out = []
    py = sys.version_info
    out.append(Finding("python", py >= (3, 10), f"{sys.version.split()[0]} at {sys.executable}",
                       "" if py >= (3, 10) else "install Python 3.10 or newer and recreate the "
                       "environment (make distclean && make lab)"))
    out.append(Finding("ipulab", True, f"{__version__} from "
                       f"{Path(__file__).resolve().parents[2]}"))
    for module, dist, minimum in REQUIRED:      # found, not imported: the doctor stays quick
        try:
            if importlib.util.find_spec(module) is None:
                raise ImportError(f"no module named {module!r}")
            v = metadata.version(dist)
        except Exception as e:
            out.append(Finding(dist, False, f"not installed in this kernel's environment ({e})",
                               f'{PIP} "{dist}"'))
            continue
        ok = minimum is None or _version_tuple(v) >= _version_tuple(minimum)
        out.append(Finding(dist, ok, v + ("" if ok else f" (need >= {minimum})"),
                           "" if ok else f'{PIP} --upgrade "{dist}>={minimum}"'))
    return out


def check_numba() -> list[Finding]:
    out = []
    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        out.append(Finding("numba JIT", False, "NUMBA_DISABLE_JIT is set: every codelet would "
                           "run as slow Python", "unset NUMBA_DISABLE_JIT   (then restart the kernel)"))
        return out
    try:
        import numpy as np

        from .numba_probe import float_sum

        ok = float(float_sum(np.arange(4, dtype=np.float32))) == 6.0
        out.append(Finding("numba JIT", ok, "runs a compiled loop" if ok else
                           "compiled a loop that returned a wrong sum",
                           "" if ok else f"{PIP} --force-reinstall numba llvmlite"))
    except Exception as e:
        out.append(Finding("numba JIT", False, f"cannot compile: {type(e).__name__}: {e}",
                           f"{PIP} --force-reinstall numba llvmlite"))
        return out
    from ...poplar.codelet_cache import PREFIX, cache_dir
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".doctor.{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
        cached = len(list(d.glob(f"{PREFIX}*.py")))
        out.append(Finding("codelet cache", True, f"{d} is writable; {cached} library codelet "
                           "build(s) cached" + ("" if cached else " (the first run of a library "
                                                 "operation compiles it once, then it is cached)")))
    except OSError as e:
        out.append(Finding("codelet cache", False, f"{d} is not writable ({e.strerror}): library "
                           "codelets would be recompiled in every kernel",
                           "export IPULAB_CACHE=/a/writable/folder   (then restart Jupyter)"))
    return out


def check_bokeh() -> list[Finding]:
    try:
        from bokeh.resources import INLINE
        js = INLINE.js_raw
        size = sum(len(s) for s in js)
    except Exception as e:
        return [Finding("bokeh inline", False, f"cannot load bokeh's bundled JavaScript: {e}",
                        f"{PIP} --force-reinstall bokeh")]
    ok = INLINE.mode == "inline" and size > 100_000
    return [Finding("bokeh inline", ok,
                    f"bundled JavaScript available ({size / 1e6:.1f} MB, works offline)" if ok else
                    f"bundled JavaScript missing or truncated ({size:,} characters)",
                    "" if ok else f"{PIP} --force-reinstall bokeh")]


def _labextension(name: str) -> Path | None:
    from jupyter_core.paths import jupyter_path
    for base in jupyter_path("labextensions"):
        p = Path(base) / name / "package.json"
        if p.exists():
            return p.parent
    return None


def check_widgets() -> list[Finding]:
    out = []
    for label, ext, dist in (("ipywidgets in JupyterLab", "@jupyter-widgets/jupyterlab-manager",
                              "jupyterlab_widgets"),
                             ("bokeh in widgets", "@bokeh/jupyter_bokeh", "jupyter_bokeh")):
        try:
            found = _labextension(ext)
        except Exception:  # no jupyter_core: nothing to look in
            found = None
        out.append(Finding(label, found is not None,
                           f"JupyterLab extension {ext} installed" if found else
                           f"JupyterLab extension {ext} not found in this environment",
                           "" if found else f'{PIP} "{dist}"   (in the environment that runs '
                           "JupyterLab; then restart JupyterLab and reload the page)"))
    try:
        from IPython import get_ipython
        shell = get_ipython()
        kernel = getattr(shell, "kernel", None) if shell is not None else None
    except Exception:
        kernel = None
    if kernel is not None:
        ok = hasattr(kernel, "comm_manager") or "comm" in sys.modules
        out.append(Finding("widget comms", ok, "this kernel can talk to widgets" if ok else
                           "this kernel has no comm manager: widgets cannot display",
                           "" if ok else f'{PIP} --upgrade ipykernel "ipywidgets>=8"   (then '
                           "restart the kernel)"))
    return out


def check_progress() -> list[Finding]:
    p = path()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        probe = p.with_name(f".doctor.{os.getpid()}")
        probe.write_text("ok")
        probe.unlink()
        return [Finding("progress file", True, f"{p}")]
    except OSError as e:
        return [Finding("progress file", False, f"cannot write next to {p} ({e.strerror})",
                        "export IPULAB_PROGRESS=/a/writable/folder/progress.json   (then restart "
                        "Jupyter)")]


class Report(list):
    """The doctor's findings; shows as a table (text or HTML). .ok is True when all pass."""

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self)

    def problems(self) -> list[Finding]:
        return [f for f in self if not f.ok]

    def __repr__(self) -> str:
        width = max(len(f.name) for f in self)
        lines = [("✓ " if f.ok else "✗ ") + f"{f.name:<{width}}  {f.detail}"
                 + (f"\n  {'':<{width}}  fix: {f.fix}" if f.fix else "") for f in self]
        head = ("doctor: everything is ready for the course" if self.ok else
                f"doctor: {len(self.problems())} problem(s) — run the fix, then doctor() again")
        return head + "\n" + "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{'✓' if f.ok else '✗'}</td><td>{html.escape(f.name)}</td>"
            f"<td>{html.escape(f.detail)}"
            + (f"<br><b>fix:</b> <code>{html.escape(f.fix)}</code>" if f.fix else "")
            + "</td></tr>" for f in self)
        color = "#2e7d32" if self.ok else "#c62828"
        head = ("doctor: everything is ready for the course" if self.ok else
                f"doctor: {len(self.problems())} problem(s) — run the fix, then doctor() again")
        return (f"<div><b style='color:{color}'>{head}</b><table>{rows}</table></div>")


def doctor() -> Report:
    """Check versions, numba and its cache, bokeh's inline resources, widgets, the progress file."""
    report = Report()
    for part in (check_versions, check_numba, check_bokeh, check_widgets, check_progress):
        try:
            report.extend(part())
        except Exception as e:      # the doctor itself must never fail
            report.append(Finding(part.__name__.replace("check_", ""), False,
                                  f"{type(e).__name__}: {e}", f'{PIP} -e ".[dev]"'))
    return report
