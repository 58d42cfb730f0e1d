"""Shared fixtures: an offline tokenizer and tiny randomly initialised decoders of ten families.

Every tiny model is built once per test run from a config (no download) and deep-copied per test,
so a test may mutate its copy freely.
"""

from __future__ import annotations

import copy
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tiny_models import ARCHITECTURES, build_tiny_model, build_tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer_session():
    return build_tokenizer()


@pytest.fixture
def tiny_tokenizer(tiny_tokenizer_session):
    return copy.deepcopy(tiny_tokenizer_session)


@pytest.fixture(params=ARCHITECTURES)
def arch(request) -> str:
    return request.param


@pytest.fixture
def tiny_model(arch, tiny_tokenizer_session):
    return build_tiny_model(arch, len(tiny_tokenizer_session))


@pytest.fixture
def tiny_llama(tiny_tokenizer_session):
    return build_tiny_model("llama", len(tiny_tokenizer_session))
