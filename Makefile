# trm-stack developer entry points. Everything runs inside one project venv ($(VENV)).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON_BOOTSTRAP ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
NOX := $(VENV)/bin/nox
# The CPU build of torch, installed before anything else so no resolver ever picks the CUDA build:
# from PyTorch's CPU index when it answers (5 s probe), else the plain pin from the configured index
# (trm/devtorch.py; `$(PY) -m trm.devtorch --dry-run` prints the decision).
TORCH_VERSION ?= 2.13.0
DATA_DIR ?= data

.PHONY: help venv test test-e2e test-oldest-torch lint data runbooks gpu-check

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m trm.devtorch --version '$(TORCH_VERSION)'
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed ## create/refresh the project venv (idempotent; fast when nothing changed)

test: venv ## run the CPU test suite (pytest-xdist)
	$(NOX) -s tests

test-e2e: venv ## the end-to-end and multi-process CPU tests (marker e2e) that `make test` leaves out (Kaggle ones: kaggle-test; launcher ones: launch-test); CI runs all
	$(NOX) -s tests_e2e

test-oldest-torch: venv ## the core CPU tests under the CUDA 12.8 images' torch (2.10), in build/venv-torch-oldest
	$(NOX) -s tests_oldest_torch

lint: venv ## ruff + the type check's ratchet (mypy) + the secret scan + shellcheck + actionlint (.github/workflows)
	$(NOX) -s lint

data: venv ## build the default datasets (ARC-AGI-1 and ARC-AGI-2 + ConceptARC, 1000 augmentations)
	$(PY) -m trm data build-arc --output-dir $(DATA_DIR)/arc1concept-aug-1000 \
		--subsets training evaluation concept --test-set-name evaluation
	$(PY) -m trm data build-arc --output-dir $(DATA_DIR)/arc2concept-aug-1000 \
		--subsets training2 evaluation2 concept --test-set-name evaluation2

runbooks: venv ## runbook/jobs checks and every `bash cpu` runbook block (nox -s runbooks)
	$(NOX) -s runbooks

# ---- container images (docker/images.toml; docker/README.md) ------------------------------------------
# make image push REGISTRY=127.0.0.1:5000 VARIANTS=cpu   (VARIANTS: space-separated, default all)
# make release REGISTRY=ghcr.io/my-org VARIANTS="cpu sm90"   (all of it, from a clean checkout; docker/README.md)
VARIANTS ?=
REGISTRY ?=
BUILD_BASE ?=
RUNTIME_BASE ?=
IMAGES_LOCK ?= docker/images.lock.json
IMAGE_SELECT = $(if $(strip $(VARIANTS)),--variants $(VARIANTS))
IMAGE_BASES = $(if $(BUILD_BASE),--build-base '$(BUILD_BASE)') $(if $(RUNTIME_BASE),--runtime-base '$(RUNTIME_BASE)')

.PHONY: lock wheelhouse image push release image-test

lock: venv ## re-resolve the hash-locked image requirements in docker/requirements/ (needs the index)
	$(PY) -m tools.images lock $(IMAGE_SELECT)

wheelhouse: venv ## download the locked packages of VARIANTS once into docker/wheelhouse/<lock>/
	$(PY) -m tools.images wheelhouse $(IMAGE_SELECT)

image: wheelhouse ## build images for VARIANTS (default all); BUILD_BASE/RUNTIME_BASE override the bases
	$(PY) -m tools.images build $(IMAGE_SELECT) $(IMAGE_BASES)

push: venv ## push the built VARIANTS to REGISTRY=host[:port][/path]; digests go to docker/images.lock.json
	$(PY) -m tools.images push --registry '$(REGISTRY)' --lock-file '$(IMAGES_LOCK)' $(IMAGE_SELECT) $(IMAGE_BASES)

release: venv ## clean checkout -> build, push, pin docker/images.lock.json by registry digest, re-stamp runbooks + jobs/
	$(PY) -m tools.release --registry '$(REGISTRY)' $(IMAGE_SELECT) $(IMAGE_BASES) $(RELEASE_ARGS)

image-test: venv ## real image test: engine, local base, build cpu, smoke, local registry, push, pull by digest
	$(NOX) -s docker

# ---- training run lifecycle (trm.train / trm.eval) ----------------------------------------------------
.PHONY: smoke-local

smoke-local: venv ## CPU smoke: tiny ARC set, train, SIGTERM + resume, evaluate, submission.json (~1 min)
	$(NOX) -s smoke

launch-dry-run: venv ## what scripts/train_prod.sh would do on this host (steps, hardware tier, torchrun command)
	PYTHON=$(abspath $(PY)) bash scripts/train_prod.sh --dry-run

launch-test: venv ## train_prod.sh end to end on CPU: data, torchrun 2 gloo ranks, kill + resume, handoff (slow)
	$(NOX) -s launch

.PHONY: kaggle-test
kaggle-test: venv ## Kaggle bundle end to end: wheelhouse download, offline venv install, inference (slow)
	$(NOX) -s kaggle

# ---- GPU host check (docs/gpu-host-checks.md) -----------------------------------------------------------
# A GPU host may have no venv: its own Python with its own CUDA torch runs the check (never installs torch);
# on a bare host, install the kit first: pip install --no-index --find-links build/gpu-kit -r build/gpu-kit/requirements.txt
.PHONY: gpu-kit gpu-check-sim gpu-run-1 gpu-run-2 gpu-run-3
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
KIT_PYTHON ?= 3.12
SIM_PYTHON ?= python3.12
SIM_TORCH ?= torch==$(TORCH_VERSION) --index-url https://download.pytorch.org/whl/cpu
gpu-check: ## on a GPU host: one report in build/gpu-acceptance/ within --budget-s (ARGS="--dry-run" prints the plan)
	$(GPU_PYTHON) -m tools.gpu.check $(ARGS)

gpu-run-1: ## GPU loan, call 1: facts, kit, extension build (left running), gpu tests, extension vs ours, training on it
	$(GPU_PYTHON) -m tools.gpu.check --call 1 $(ARGS)

gpu-run-2: ## GPU loan, call 2 (right after call 1): H200 probe, step A/B vs upstream, SDPA backends, profiler split
	$(GPU_PYTHON) -m tools.gpu.check --call 2 $(ARGS)

gpu-run-3: ## GPU loan, call 3 (time left after calls 1-2, or a later loan): Sudoku learning curves, ours vs upstream, ~5 min; then the compile-mode comparison if time is left
	$(GPU_PYTHON) -m tools.gpu.check --call 3 $(ARGS)

gpu-kit: venv ## build/gpu-kit/: wheels (Python KIT_PYTHON) + adam-atan2 sdist for a bare GPU host, offline (UPSTREAM=DIR adds it; HOST_HAS="numpy …" leaves out what the host has)
	$(PY) -m tools.gpu.kit build --python-version $(KIT_PYTHON) $(if $(UPSTREAM),--upstream '$(UPSTREAM)') $(if $(HOST_HAS),--host-has $(HOST_HAS))

gpu-check-sim: venv ## rehearse a bare GPU host here: SIM_PYTHON venv + SIM_TORCH (CPU) + the kit --no-index, then gpu-check
	$(PY) -m tools.gpu.kit simulate --python '$(SIM_PYTHON)' --torch '$(SIM_TORCH)' --budget-s $(or $(BUDGET_S),540)
