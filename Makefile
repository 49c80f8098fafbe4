# ipulab: `make lab` opens the course, `make test` runs every test (notebooks included).
# `make venv` installs what the lab runs on (no test or benchmark packages) without opening it;
# `make docs` builds the site in docs/_build/html.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: lab venv test bench docs exercises clean distclean

venv: $(STAMP)

# The course opens in the learner's workspace ($IPULAB_WORKSPACE, else ~/ipulab-course), a
# copy of notebooks/ and exercises/ refreshed first (new files added, the learner's edits kept),
# so running it never changes the checkout. `ipulab lab` starts JupyterLab there without the
# news toast (and with --allow-root as root, where Jupyter refuses to run without it).
lab: $(STAMP)
	$(BYTECODE)
	$(VENV)/bin/ipulab course workspace
	$(VENV)/bin/ipulab lab

# The package's bytecode, compiled before anything runs: where PYTHONDONTWRITEBYTECODE is set,
# each process (a test run starts hundreds: kernels, judges, sandboxed submissions) would
# otherwise compile ipulab from source, 0.3 s each. Only what changed is compiled again.
BYTECODE = $(VENV)/bin/python -m compileall -q -j 0 ipulab

# Workers (pytest-xdist), each notebook and each test file whole on one of them, the slowest
# first (conftest.py).
TEST_WORKERS ?= 2
test: $(STAMP) $(VENV)/.test
	$(BYTECODE)
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The test extra (pytest and its plugins, playwright, torch to compare with), once on top of
# the lab's packages. torch is pinned: pip takes a CPU-only wheel where it finds one
# (PIP_FIND_LINKS, or PyTorch's CPU index installed first: see docs/install.md).
$(VENV)/.test: $(STAMP)
	$(VENV)/bin/python -m pip install -e ".[test]"
	touch $@

# The benchmarks compare a training step with PyTorch's on the CPU (the bench extra, once),
# then write docs/results.md, the site's page of the latest results.
bench: $(STAMP) $(VENV)/.bench
	$(VENV)/bin/python benchmarks/run.py

$(VENV)/.bench: $(STAMP)
	$(VENV)/bin/python -m pip install -e ".[bench]"
	touch $@

# The site: every course notebook executed (cached by content in docs/_build/.jupyter_cache,
# so a rebuild runs only what changed), warnings as errors, then every link checked to stay
# on the built site and to point at a page and anchor that exist.
docs: $(STAMP) $(VENV)/.docs
	$(VENV)/bin/python -m sphinx -b html -W --keep-going -q docs docs/_build/html
	$(VENV)/bin/python docs/check_links.py docs/_build/html

$(VENV)/.docs: $(STAMP)
	$(VENV)/bin/python -m pip install -e ".[docs]"
	touch $@

# exercises/ is generated from solutions/ (and committed): run after editing a solution.
exercises: $(STAMP)
	$(VENV)/bin/ipulab course build

# Reinstall only when pyproject.toml or the version changes (the installed metadata carries
# the version `ipulab --version` prints). A Python without ensurepip (Debian without
# python3-venv) gets a venv that borrows the system pip to install its own.
$(STAMP): pyproject.toml ipulab/version.py
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV) \
	  || $(PYTHON) -m venv --clear --without-pip --system-site-packages $(VENV)
	$(VENV)/bin/python -m pip install --upgrade pip
	$(VENV)/bin/python -m pip install -e .
	touch $@

clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis test-artifacts docs/_build
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) \
	  -type d -exec rm -rf {} + -o \( -name '*.nbi' -o -name '*.nbc' \) -type f -exec rm -f {} +

distclean: clean
	rm -rf $(VENV)
