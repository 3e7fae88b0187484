# Two commands: `make demo` and `make test`. Each sets up .venv on its own.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck unit soak docs web reliability bench compat clean services

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

$(VENV)/.sim-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[sim]'
	touch $@

demo: $(VENV)/.sim-installed
	$(BIN)/seawall demo

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check src tests benchmarks docs/_ext
	$(BIN)/ruff format --check src tests benchmarks docs/_ext
	$(BIN)/lint-imports

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

# Servers the tests start themselves on loopback ports, and the headless Chromium (with its
# driver) that tests/web drives, from Debian's packages: installed once (apt-get update, then one
# install of whatever is missing), skipped when present. Without the recommended packages
# (Chromium alone recommends over a hundred: a desktop's sound, printing, GPU drivers and
# fonts): the headless browser runs without a GPU or a sandbox of its own (tests/web), and the
# PostgreSQL server binaries come with the postgresql package's dependencies.
services:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || [ -x /usr/lib/chromium/chromedriver ] || \
	  missing="$$missing chromium-driver"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  echo "installing:$$missing"; \
	  $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-install-recommends $$missing; \
	fi

# The whole suite, slow tests included, with branch coverage (the floor is fail_under in
# pyproject.toml), on every core: pytest-xdist's workers take a test module each (--dist
# loadscope), so that a module's fixtures are made once. For a quick run while working, skip
# the tests marked slow (the demo, goodput on a real server) and coverage:
# .venv/bin/pytest -m "not slow"
unit: $(VENV)/.dev-installed services
	$(BIN)/pytest -n auto --dist loadscope \
	  --cov=seawall --cov-branch --cov-report=term-missing:skip-covered

# Real-time proofs, each in a pytest run of its own: the WSGI goodput test, then a client fleet
# and a shedding server under injected faults (about a minute of real time).
# SEAWALL_SOAK_SECONDS=300 lengthens its measured windows.
soak: $(VENV)/.dev-installed
	$(BIN)/pytest -m realtime tests/server
	$(BIN)/pytest -m soak tests/soak

# The documentation site (mkdocs.yml) into site/, warnings as errors: a broken link or
# cross-reference, in a page or a docstring, fails the build (never --quiet: it hides the
# warnings that --strict counts).
docs: $(VENV)/.dev-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The interactive demo page on 127.0.0.1 (prints its URL; PORT=0 picks a free port).
PORT ?= 8000
web: $(VENV)/.dev-installed
	$(BIN)/seawall web --port $(PORT)

test: lint typecheck docs unit soak

# The soak and property tests with their figures in docs/figures, and docs/reliability.md
# rewritten from them.
reliability: $(VENV)/.dev-installed
	SEAWALL_FIGURES=docs/figures $(BIN)/pytest -m "soak or not soak" -q \
	  tests/soak tests/test_hostile_values.py tests/test_config_hostile.py
	$(BIN)/python tests/figures.py

bench: $(VENV)/.dev-installed
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/budget_overhead.py
	$(BIN)/python benchmarks/pipeline_overhead.py
	$(BIN)/python benchmarks/saga.py
	$(BIN)/python benchmarks/redis_budget.py

clean:
	rm -rf $(VENV) .venv-3.* .mypy_cache .pytest_cache .ruff_cache seawall-report .coverage site .artefacts

# The test suite on other interpreters, each in its own venv (skips those not installed):
# make compat PYTHONS="python3.10 python3.13"
PYTHONS ?= python3.10 python3.12 python3.13
compat:
	@for py in $(PYTHONS); do \
	  if $$py -c 'import sys' >/dev/null 2>&1; then \
	    v=$$($$py -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	    echo "== Python $$v"; \
	    $$py -m venv .venv-$$v && .venv-$$v/bin/python -m pip install --quiet -e '.[dev]' && \
	    .venv-$$v/bin/pytest -q -p no:cacheprovider || exit 1; \
	  else echo "== $$py: not installed, skipped"; fi; \
	done
