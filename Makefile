# Two commands do all set-up on a fresh machine:
#   make run    installs into .venv and runs the main job
#   make test   installs into .venv (with test extras) and runs the test suite
# An existing torch (e.g. a CUDA build in the system Python) is kept: the venv
# sees system site-packages, and torch 2.13.0 (CPU) is installed only if absent.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TEST_PROCS ?= $(shell echo $$(( $$(nproc) + 2 )))

# Compute nodes without network access (docs/guide/offline.md):
#   make wheelhouse        on a machine with network: every wheel aihpc needs into $(WHEELHOUSE)/,
#                          for PY_VERSION and PLATFORM (default: this machine's); TORCH=2.13.0 adds
#                          torch, EXTRAS=test,onnx the extras
#   make install-offline   on the node: installs from $(WHEELHOUSE)/ only, keeping an existing torch
WHEELHOUSE ?= wheelhouse

.PHONY: run test lint install clean wheelhouse install-offline

# The venv's pip is first brought up to date (a current pip installs the rest faster than Python
# 3.11's own).  Nothing is compiled to bytecode whole: `make run` and the tests load a fraction of
# the modules installed, so importing the ones every run and test loads compiles and caches those,
# and `make run` and `make test` cache the rest as they first load it, whatever
# PYTHONDONTWRITEBYTECODE says.  Measured: docs/measurements/2026-11-27-test-suite-time.md.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install --quiet --no-compile --upgrade pip || echo "pip not upgraded: installing with the venv's own"
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --no-compile torch==2.13.0
	$(PY) -m pip install --no-compile -e ".[test]"
	PYTHONDONTWRITEBYTECODE= $(PY) -c "import torch._dynamo, distributed, optuna, pandas, aihpc.runner.run"
	touch $@

install: $(VENV)/.installed

run: $(VENV)/.installed
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/aihpc run

# The SLURM tests need Debian's slurm and munge packages, the browser test of
# the report Debian's chromium (both installed here when running as root);
# where they cannot be installed those tests skip, saying why.  Tests run in two processes
# more than cores (pytest-xdist): a whole timed run keeps its workers busy until its clock runs
# out, however many cores it gets, so whole runs that overlap share the cores and leave more to
# the rest (measured: docs/measurements/2026-11-27-test-suite-time.md).  Whole timed runs are in xdist groups (slurm, runs,
# runs2, large, faults, ranks, install, verify), each group's tests one at a time, as are the
# modules whose tests share a costly module fixture, so that it is made once.  The groups start
# first, in the order tests/conftest.py gives (--no-loadscope-reorder keeps xdist from
# reordering them by their number of tests); the single tests fill the processes after them.
# `python benchmarks/test_groups.py` sums a --junitxml file's seconds by group.
# The linter and the formatter's check on src/ and tests/, the type checker on what pyproject.toml
# names (all configured there).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy

# make test runs `make lint` beside the tests, not before them: the type checker takes most of one
# core, and before the tests the other core waited.  What lint says is printed after the tests'
# summary, and make test fails if either fails.  The tests' Python processes write their bytecode
# caches even where the environment says not to (PYTHONDONTWRITEBYTECODE): hundreds of them import
# aihpc, and each would otherwise compile it again.
test: $(VENV)/.installed
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		scripts/slurm/setup-cluster.sh --install-only || echo "SLURM packages not installed: the SLURM tests will skip"; \
		scripts/install-browser.sh || echo "Chromium not installed: the browser test of the report will skip"; \
	fi
	@$(MAKE) --no-print-directory lint > $(VENV)/lint.log 2>&1 & lint=$$!; \
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n $(TEST_PROCS) --dist loadgroup --no-loadscope-reorder; \
	tests=$$?; wait $$lint; linted=$$?; \
	echo "make lint:"; cat $(VENV)/lint.log; \
	[ $$linted -eq 0 ] || echo "make test: make lint failed (above)"; \
	[ $$tests -eq 0 ] && [ $$linted -eq 0 ]

wheelhouse:
	@$(PYTHON) scripts/offline.py wheelhouse --dest "$(WHEELHOUSE)" \
		$(if $(PY_VERSION),--python-version "$(PY_VERSION)") $(if $(PLATFORM),--platform "$(PLATFORM)") \
		$(if $(TORCH),--torch "$(TORCH)") $(if $(EXTRAS),--extras "$(EXTRAS)")

install-offline:
	@$(PYTHON) scripts/offline.py install --wheelhouse "$(WHEELHOUSE)" --venv "$(VENV)" $(if $(EXTRAS),--extras "$(EXTRAS)")

clean:
	rm -rf $(VENV) src/*.egg-info .pytest_cache
