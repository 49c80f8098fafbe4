"""Sphinx configuration of ipulab's site: MyST pages, the course notebooks executed by myst-nb
(cached between builds), the API from docstrings and the CLI from ipulab's own parsers."""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import ipulab.version  # noqa: E402  (after the path: the checkout's ipulab, not an installed one)
import cli_reference  # noqa: E402

project = "ipulab"
author = "the ipulab authors"
release = ipulab.version.__version__
version = release

extensions = ["myst_nb", "sphinx.ext.autodoc"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Every course notebook runs at build time; outputs are cached by notebook content in a
# gitignored folder, so a rebuild re-runs only the notebooks that changed.
nb_execution_mode = "cache"
nb_execution_cache_path = str(HERE / "_build" / ".jupyter_cache")
nb_execution_timeout = 900
nb_execution_raise_on_error = True
nb_merge_streams = True
# bokeh's own mime types (application/vnd.bokehjs_load/exec) only tell JupyterLab's bokeh
# extension what the bundle's JavaScript does; the site runs that JavaScript (the browser test
# checks that the figures draw), so myst-nb's "unknown mime type" for them is no fault.

autodoc_member_order = "bysource"
autodoc_default_options = {"undoc-members": False}
# ipulab is imported for real (autodoc reads live docstrings); nothing is mocked.
# The course notebooks step from a title to ### sections in places: not an error of the site.
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]

html_theme = "alabaster"
html_title = f"ipulab {release}"
html_static_path = []
# Offline site: no fonts or scripts from elsewhere.
html_theme_options = {"font_family": "sans-serif", "head_font_family": "sans-serif",
                      "page_width": "1200px"}


def plain_text_docstring(app, what, name, obj, options, lines):
    """ipulab's docstrings are plain text (`x * y`, [1, 2], tables in columns), not reST: show
    each as written, in a literal block, rather than let reST misread it."""
    if any(line.strip() for line in lines):
        lines[:] = ["::", ""] + ["   " + line for line in lines] + [""]


def setup(app):
    """Write the CLI reference from ipulab.cli's parser before the pages are read; show
    docstrings as the plain text they are."""
    app.connect("builder-inited", lambda app: cli_reference.write(HERE / "cli.md"))
    app.connect("autodoc-process-docstring", plain_text_docstring)
