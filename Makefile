# One virtualenv (.venv) holds the hooks server, the test tools, the MXNet and ChainerMN examples and this project
# itself (`pip install -e .`, which gives the `localcluster` command).
PYTHON_VERSION := 3.11
# mxnet 1.9.1 and numpy 1.23.5 have wheels for Python 3.11 only (of the versions still supported).
PY ?= $(shell command -v python$(PYTHON_VERSION) 2>/dev/null || echo python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXAMPLE ?= examples/local/dist-train-digits.yaml
# `make test CONTROLPLANE=skip` runs everything but the tests against the real API server (for a machine
# without Go); it says so loudly, and those tests are skipped, not passed. The local cluster itself
# (`make run`) runs on the real control plane only: without Go, make says what to install.
CONTROLPLANE ?= run
# Every installed package pinned, dependencies of dependencies included (see `make constraints`).
CONSTRAINTS := constraints.txt
# What `make test` needs besides Python packages.
TOOLS := kubectl git
IS_PY311 := import sys; sys.exit(sys.version_info[:2] != (3, 11))

.PHONY: help setup check-python check-tools run check test image-check bench bench-scale lint clean constraints controlplane kueue monitoring-tools

## Show the targets and what they do.
help:
	@awk '/^## /{doc=substr($$0, 4); next} /^[a-z][a-z-]*:/{if (doc) printf "  make %-12s %s\n", substr($$1, 1, length($$1)-1), doc; doc=""}' $(MAKEFILE_LIST)

## Check the interpreter: Python 3.11 is required; a .venv made by another one is rebuilt.
check-python:
	@$(PY) -c '$(IS_PY311)' 2>/dev/null || { \
		echo "error: Python $(PYTHON_VERSION) is required (mxnet 1.9.1 and numpy 1.23.5 have no wheels for others);" >&2; \
		echo "  '$(PY)' is $$($(PY) --version 2>&1 || echo missing). Install python$(PYTHON_VERSION), or run: make PY=/path/to/python$(PYTHON_VERSION) ..." >&2; \
		exit 1; }
	@if [ -e $(BIN)/python ] && ! $(BIN)/python -c '$(IS_PY311)' 2>/dev/null; then \
		echo "$(VENV) was made by $$($(BIN)/python --version 2>&1 || echo a missing interpreter): rebuilding it with $(PY)"; \
		rm -rf $(VENV); fi

## Check the tools `make test` needs besides Python packages (kubectl renders the kustomizations).
check-tools:
	@missing=""; for tool in $(TOOLS); do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
		echo "error: missing on PATH:$$missing. kubectl: https://kubernetes.io/docs/tasks/tools/ (any version from 1.27; the tests use 'kubectl kustomize')." >&2; \
		exit 1; fi

# Chainer 7.8.1 builds from source against the venv's setuptools<70 and wheel (requirements-chainer-build.txt),
# without build isolation; so does this project's editable install.
$(STAMP): requirements.txt requirements-localcluster.txt requirements-dev.txt requirements-mxnet.txt requirements-chainer-build.txt \
		requirements-chainer.txt $(CONSTRAINTS) pyproject.toml VERSION | check-python
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) --upgrade pip
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) -r requirements-localcluster.txt -r requirements-dev.txt -r requirements-mxnet.txt \
		-r requirements-chainer-build.txt
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) --no-build-isolation -r requirements-chainer.txt
	PYTHONWARNINGS=ignore $(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

## Create .venv from the pinned requirements (Python 3.11) and install the project into it.
setup: check-python
	@$(MAKE) --no-print-directory $(STAMP)

## Run the example MXJob to Succeeded on the local cluster (on the real control plane, built first: needs Go).
run: setup controlplane
	$(BIN)/localcluster run $(EXAMPLE)

# The real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl),
# built from source at the versions controlplane/*/go.mod pin; the Go caches stay outside the checkout.
CONTROLPLANE_BIN := .controlplane/bin

## Build the pinned control plane from source into .controlplane/bin (needs Go; does nothing when up to date).
controlplane:
	controlplane/build.sh $(CONTROLPLANE_BIN)

## Build the pinned Kueue manager (controlplane/kueue/go.mod) into .controlplane/bin, its manifests beside (needs Go).
# A target of its own, not a step of `controlplane`: its own module and dependencies, and 8 more cold
# minutes that `make run` without --kueue does not need.
kueue:
	controlplane/build-kueue.sh $(CONTROLPLANE_BIN)

## Build kube-state-metrics and promtool into .tools/bin, which tests/install/test_monitoring.py checks monitoring/ with (optional).
monitoring-tools:
	scripts/build-monitoring-tools.sh .tools/bin


# `make test` also builds the Kueue manager (8 to 11 minutes cold, nothing once built) and runs the tests against
# a real Kueue: a job labelled for a LocalQueue must never run outside its quota, and only the real Kueue can
# show that. `make test KUEUE=skip` leaves it out and says so loudly (docs/real-apiserver.md).
KUEUE ?= run

# `make test IMAGE_CHECK=skip` leaves the images out (for a machine where buildah and podman cannot be
# installed: image-check needs root and apt-get); it says so loudly. Anything else runs it.
IMAGE_CHECK ?= run

## Lint, build the control plane (CONTROLPLANE=skip: none) and Kueue (KUEUE=skip: none), image check (IMAGE_CHECK=skip: none), then all the tests.
# The control plane first: without Go, that is said before minutes of image builds.
test: lint check-tools
ifeq ($(CONTROLPLANE),skip)
	@echo "*** CONTROLPLANE=skip: nothing was checked against a real API server (make controlplane builds one) ***"
else
	@$(MAKE) --no-print-directory controlplane
ifeq ($(KUEUE),skip)
	@echo "*** KUEUE=skip: nothing was checked against a real Kueue (make test builds and runs it) ***"
else
	@$(MAKE) --no-print-directory kueue
endif
endif
ifeq ($(IMAGE_CHECK),skip)
	@echo "*** IMAGE_CHECK=skip: the images were NOT built or run (make image-check does that) ***"
else
	@$(MAKE) --no-print-directory image-check
endif
	CONTROLPLANE=$(CONTROLPLANE) KUEUE=$(KUEUE) $(BIN)/python -m pytest $(PARALLEL) $(DURATIONS)

# The tests that start no real process and no control plane (pyproject.toml's markers).
FAST := not e2e and not mxnet and not chainer and not apiserver
# The slowest tests, listed at the end of a run: where the time goes.
DURATIONS := --durations=25
# Test processes (pytest-xdist). Most of the suite's wall time is spent waiting on real processes
# (training, grace periods, stall deadlines), so two processes on 2 CPUs nearly halve it; each starts
# its own control plane. `worksteal` keeps both busy to the end. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS) --dist worksteal

## The contributor's loop (about two minutes): lint, then every test that needs no real process or control plane.
# CONTROLPLANE=skip: the tests that also ask the real API server for its verdict (the `admission`
# fixture, tests/conftest.py) leave that check to `make test`.
check: lint
	CONTROLPLANE=skip $(BIN)/python -m pytest -q -m "$(FAST)" $(PARALLEL) $(DURATIONS)

## Build both images from their Dockerfiles (buildah, podman; root + apt-get) and run the hooks image as deployed.
image-check: setup
	$(BIN)/python scripts/image_check.py

## ruff (style and bugs) and mypy (types) on every Python file; both must pass.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

## One sync, pure and over HTTP, against the floor of its JSON (BENCH_ARGS=--big adds 2,500 replicas).
bench: setup
	$(BIN)/python benchmarks/sync_bench.py $(BENCH_ARGS)

## Big jobs and many jobs on the real control plane (pods on the no-process node); SCALE_ARGS=--quick fits minutes.
bench-scale: setup controlplane
	$(BIN)/python benchmarks/scale_bench.py $(SCALE_ARGS)

## Rewrite constraints.txt from .venv (after changing a requirements file and running `make setup`).
constraints: setup
	{ echo "# Every package of .venv, pinned; made by \`make constraints\` (do not edit by hand)."; \
	  $(BIN)/pip freeze --all --exclude-editable | grep -v '^mxjob-operator' | LC_ALL=C sort -f; } > $(CONSTRAINTS)

## Remove .venv and every cache or state file the tools, the local cluster and image-check leave.
clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .localcluster *.egg-info .image-check .controlplane .tools
