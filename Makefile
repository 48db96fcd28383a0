# Every target builds .venv from nothing when it is missing, so these work on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench bench-full clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python -m examples.marketdata

lint: $(BIN)/.installed
	$(BIN)/ruff check aoz tests benchmarks examples
	$(BIN)/mypy

test: $(BIN)/.installed lint
	$(BIN)/pytest -q

bench: $(BIN)/.installed
	$(BIN)/python -m benchmarks --quick

bench-full: $(BIN)/.installed
	$(BIN)/python -m benchmarks --full

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
