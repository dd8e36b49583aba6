# One virtualenv (.venv) holds the hooks server, the test tools and the MXNet and ChainerMN examples.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXAMPLE ?= examples/local/dist-train-digits.yaml

.PHONY: setup run test bench lint clean

$(STAMP): requirements.txt requirements-dev.txt requirements-mxnet.txt requirements-chainer-build.txt requirements-chainer.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt -r requirements-mxnet.txt
	$(BIN)/pip install --quiet -r requirements-chainer-build.txt
	$(BIN)/pip install --quiet --no-build-isolation -r requirements-chainer.txt
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

## Time the pure sync and the HTTP round trip for 1 to 5,000 replicas.
bench: setup
	$(BIN)/python benchmarks/sync_bench.py

clean:
	rm -rf $(VENV) .pytest_cache
