# Two commands: `make demo` and `make test`. Each sets up .venv on its own.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck unit bench compat clean postgresql

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
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

# The saga tests start a throwaway PostgreSQL cluster (tests/saga/conftest.py): install Debian's
# server once when it is missing (CI runs as root on a fresh machine).
postgresql:
	@if ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then \
	  echo "installing postgresql"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; \
	fi

unit: $(VENV)/.dev-installed postgresql
	$(BIN)/pytest

test: lint typecheck unit

bench: $(VENV)/.dev-installed
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/budget_overhead.py
	$(BIN)/python benchmarks/pipeline_overhead.py
	$(BIN)/python benchmarks/saga.py

clean:
	rm -rf $(VENV) .venv-3.* .mypy_cache .pytest_cache .ruff_cache seawall-report

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
