"""The notebooks kept here (bow2000_views.ipynb) are run by the browser test only: `make
test`'s --nbval-lax would otherwise collect them as nbval tests too (testpaths include tests/).
(The line that says whether the browser test ran is the root conftest.py's BrowserLine.)"""
collect_ignore_glob = ["*.ipynb"]
