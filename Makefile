# ipulab: `make lab` opens the course, `make test` runs every test (notebooks included).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: lab test bench exercises clean distclean

# Jupyter refuses to run as root (containers) unless told to.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)

test: $(STAMP)
	$(VENV)/bin/python -m pytest

# The benchmarks compare a training step with PyTorch's on the CPU (the bench extra, once;
# pip takes a CPU-only build where it finds one, e.g. PIP_FIND_LINKS or PyTorch's CPU index).
bench: $(STAMP) $(VENV)/.bench
	$(VENV)/bin/python benchmarks/run.py

$(VENV)/.bench: $(STAMP)
	$(VENV)/bin/python -m pip install -e ".[bench]"
	touch $@

# exercises/ is generated from solutions/ (and committed): run after editing a solution.
exercises: $(STAMP)
	$(VENV)/bin/ipulab course build

# Reinstall only when pyproject.toml changes. A Python without ensurepip (Debian without
# python3-venv) gets a venv that borrows the system pip to install its own.
$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV) \
	  || $(PYTHON) -m venv --clear --without-pip --system-site-packages $(VENV)
	$(VENV)/bin/python -m pip install --upgrade pip
	$(VENV)/bin/python -m pip install -e ".[dev]"
	touch $@

clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis test-artifacts
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) \
	  -type d -exec rm -rf {} + -o \( -name '*.nbi' -o -name '*.nbc' \) -type f -exec rm -f {} +

distclean: clean
	rm -rf $(VENV)
