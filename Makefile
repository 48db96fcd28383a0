# Every target builds .venv from nothing when it is missing, so these work on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench bench-full wheel clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# The compiled hot path (aoz/_speedups.pyx): pip's editable install builds it (and warns,
# and goes on, where it cannot); this rebuilds it in place when its source has changed
# (a no-op when it is current).
$(BIN)/.speedups: $(BIN)/.installed aoz/_speedups.pyx setup.py
	$(BIN)/python setup.py -q build_ext --inplace
	rm -rf build
	touch $@

demo: $(BIN)/.speedups
	$(BIN)/python -m examples.marketdata

lint: $(BIN)/.installed
	$(BIN)/ruff check aoz tests benchmarks examples setup.py
	$(BIN)/mypy

# The suite runs on both hot paths: the compiled one (what users get where it builds),
# then the pure-Python twin (AOZ_PURE_PYTHON=1). The second run leaves out tests/bench
# only: those benchmark smoke runs already put both paths side by side (systems aoz and
# aoz-py, benchmarks.hotpath) in the first.
test: $(BIN)/.speedups lint
	$(BIN)/pytest -q
	AOZ_PURE_PYTHON=1 $(BIN)/pytest -q --ignore=tests/bench

bench: $(BIN)/.speedups
	$(BIN)/python -m benchmarks --quick

bench-full: $(BIN)/.speedups
	$(BIN)/python -m benchmarks --full

# A wheel an index can take: built here, then tagged manylinux by auditwheel (which
# checks the compiled hot path needs nothing beyond the manylinux libraries).
wheel: $(BIN)/.installed
	rm -rf build dist/raw
	$(BIN)/pip wheel -q --no-deps --no-build-isolation -w dist/raw .
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/auditwheel repair -w dist dist/raw/aoz-*.whl
	rm -rf build dist/raw

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache aoz/_speedups.c aoz/_speedups.*.so
