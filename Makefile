# Postroom's one task runner. `make run` and `make test` bootstrap .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DATA_DIR ?= ./postroom-data

.PHONY: run test lint format typecheck pytest bench clean

# The runtime install: re-done when pyproject.toml changes.
$(VENV)/.runtime: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

# The development install (runtime + dev extra).
$(VENV)/.dev: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(VENV)/.runtime $@

run: $(VENV)/.runtime
	@test -d "$(DATA_DIR)" || $(BIN)/postroom init
	$(BIN)/postroom serve

test: $(VENV)/.dev lint typecheck pytest

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

format: $(VENV)/.dev
	$(BIN)/ruff check --fix src tests bench
	$(BIN)/ruff format src tests bench

typecheck: $(VENV)/.dev
	$(BIN)/mypy --strict src/

# Three test processes (whole files each: module fixtures and ordering stay as written);
# many tests wait on sockets, subprocesses and databases, so three help even on 2 cores.
PYTEST_WORKERS ?= 3

pytest: $(VENV)/.dev
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile

bench: $(VENV)/.dev
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
