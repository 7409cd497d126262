# Two commands do all set-up on a fresh machine:
#   make run    installs into .venv and runs the main job
#   make test   installs into .venv (with test extras) and runs the test suite
# An existing torch (e.g. a CUDA build in the system Python) is kept: the venv
# sees system site-packages, and torch 2.13.0 (CPU) is installed only if absent.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TEST_PROCS ?= $(shell echo $$(( $$(nproc) + 1 )))

# Compute nodes without network access (README: "On compute nodes without network access"):
#   make wheelhouse        on a machine with network: every wheel aihpc needs into $(WHEELHOUSE)/,
#                          for PY_VERSION and PLATFORM (default: this machine's); TORCH=2.13.0 adds
#                          torch, EXTRAS=test,onnx the extras
#   make install-offline   on the node: installs from $(WHEELHOUSE)/ only, keeping an existing torch
WHEELHOUSE ?= wheelhouse

.PHONY: run test lint install clean wheelhouse install-offline

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e ".[test]"
	touch $@

install: $(VENV)/.installed

run: $(VENV)/.installed
	$(VENV)/bin/aihpc run

# The SLURM tests need Debian's slurm and munge packages, the browser test of
# the report Debian's chromium (both installed here when running as root);
# where they cannot be installed those tests skip, saying why.  Tests run in
# one process per core and one more (pytest-xdist): whole timed runs wait on the clock (their
# time budget, SLURM, pip) more than they compute, so the extra process keeps the cores busy
# while they wait.  Whole timed runs are in xdist groups
# (runs, runs2, faults, slurm, verify, large, install, ranks), each group's tests one at a
# time; xdist starts the groups first, the single tests fill the processes after them.
# `python benchmarks/test_groups.py` sums a --junitxml file's seconds by group.
# The linter and the formatter's check on src/ and tests/, the type checker on what pyproject.toml
# names (all configured there).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy

test: lint
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		scripts/slurm/setup-cluster.sh --install-only || echo "SLURM packages not installed: the SLURM tests will skip"; \
		scripts/install-browser.sh || echo "Chromium not installed: the browser test of the report will skip"; \
	fi
	$(PY) -m pytest -n $(TEST_PROCS) --dist loadgroup --no-loadscope-reorder

wheelhouse:
	@$(PYTHON) scripts/offline.py wheelhouse --dest "$(WHEELHOUSE)" \
		$(if $(PY_VERSION),--python-version "$(PY_VERSION)") $(if $(PLATFORM),--platform "$(PLATFORM)") \
		$(if $(TORCH),--torch "$(TORCH)") $(if $(EXTRAS),--extras "$(EXTRAS)")

install-offline:
	@$(PYTHON) scripts/offline.py install --wheelhouse "$(WHEELHOUSE)" --venv "$(VENV)" $(if $(EXTRAS),--extras "$(EXTRAS)")

clean:
	rm -rf $(VENV) src/*.egg-info .pytest_cache
