# Every target builds .venv from nothing when it is missing, so these work on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-spark test-compiled test-twin test-rest lint bench bench-full wheel clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# The compiled modules (aoz/_mesh/_speedups.pyx, aoz/omnm/_fast.pyx): pip's editable install
# builds them (and warns, and goes on, where it cannot); this rebuilds them in place when
# their source has changed (a no-op when they are current).
$(BIN)/.speedups: $(BIN)/.installed aoz/_mesh/_speedups.pyx aoz/omnm/_fast.pyx setup.py
	$(BIN)/python setup.py -q build_ext --inplace
	rm -rf build
	touch $@

demo: $(BIN)/.speedups
	$(BIN)/python -m examples.marketdata

lint: $(BIN)/.installed
	$(BIN)/ruff check aoz tests benchmarks examples setup.py
	$(BIN)/mypy

# `make test`: lint and the suite on both hot paths, in about 5 minutes on 2 cores. Three
# jobs run side by side (their output is printed whole as each ends):
# - lint (ruff, mypy): the test jobs spend most of their time waiting on sockets and
#   subprocesses, and lint fills that gap;
# - test-spark: the tests marked `spark` (Java: the standalone cluster, the demo, the
#   shared SparkSession), one after another in one pytest process, so their JVMs never
#   compete with each other (tests/conftest.py marks every test using a Spark fixture);
# - test-compiled then test-twin: everything else on pytest-xdist workers, one per core
#   (TEST_WORKERS=n to change it). Tests bind random ports, or take a port from
#   tests/ports.py (a slice per worker), so workers never share one.
# The compiled hot path (what users get where it builds) runs the whole suite; the
# pure-Python twin (AOZ_PURE_PYTHON=1) runs the tests marked `twin`: those under
# tests/{hotpath,node,delivery,queues,faults,omnm}/ (and modules that opt in with that
# mark), which run a node's data plane in-process or the omnm codec. The twins replace
# only the data plane's drain, sender and publish entries (aoz/_mesh/_hotpath.py vs
# aoz/_mesh/_speedups.pyx) and omnm's codec (aoz/omnm/_codec.py vs _fast.pyx); everything else
# (protocol/, message, subscription, discovery, the CLI, Spark) is one Python source on
# both paths, so the rest of the suite would only run the same code twice.
# tests/hotpath/test_twins.py also compares the two twins directly in every run.
TEST_WORKERS ?= auto
PYTEST := $(BIN)/pytest -q --durations=10

test: $(BIN)/.speedups
	$(MAKE) --no-print-directory -j3 --output-sync=target lint test-spark test-rest

test-spark: $(BIN)/.speedups
	$(PYTEST) -m spark

test-compiled: $(BIN)/.speedups
	$(PYTEST) -n $(TEST_WORKERS) -m "not spark"

test-twin: $(BIN)/.speedups
	AOZ_PURE_PYTHON=1 $(PYTEST) -n $(TEST_WORKERS) -m twin

# the twin run goes on after a failed compiled run, so one CI run reports both
test-rest: $(BIN)/.speedups
	$(MAKE) --no-print-directory test-compiled; rc=$$?; \
	$(MAKE) --no-print-directory test-twin || rc=1; exit $$rc

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
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache aoz/_mesh/_speedups.c aoz/_mesh/_speedups.*.so \
		aoz/omnm/_fast.c aoz/omnm/_fast.*.so
