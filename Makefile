# One virtualenv (.venv) holds the hooks server, the test tools and the MXNet example.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXAMPLE ?= examples/local/dist-train-digits.yaml

.PHONY: setup run test bench lint clean

$(STAMP): requirements.txt requirements-dev.txt requirements-mxnet.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt -r requirements-mxnet.txt
	touch $@

setup: $(STAMP)

## Run the example MXJob to Succeeded on the local cluster (no Kubernetes needed).
run: setup
	$(BIN)/python -m localcluster run $(EXAMPLE)

## Run the linters (ruff, mypy), then the whole test suite.
test: lint
	$(BIN)/python -m pytest

## ruff (style and bugs) and mypy (types) on every Python file; both must pass.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

## One sync, pure and over HTTP, against the floor of its JSON (BENCH_ARGS=--big adds 2,500 replicas).
bench: setup
	$(BIN)/python benchmarks/sync_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
