"""setup(): make bokeh figures show inline in a Jupyter notebook, with bundled (offline) JS."""
from __future__ import annotations

_loaded = False


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def setup() -> None:
    """Load bokeh into the notebook once per kernel, from INLINE resources (works offline).

    Idempotent; outside a notebook (plain Python, pytest) it does nothing.
    """
    global _loaded
    if _loaded or not _in_kernel():
        return
    from bokeh.io import output_notebook
    from bokeh.resources import INLINE
    output_notebook(resources=INLINE, hide_banner=True)
    _loaded = True
