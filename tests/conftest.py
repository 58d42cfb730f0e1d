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

from tiny_models import ARCHITECTURES, build_tiny_model, build_tokenizer, save_tiny_model
from valuelens.errors import DataNotFoundError
from valuelens.evaluation.tasks import DATA_DIR_ENV, default_data_dir

#: why a test that reads a benchmark set is skipped (only when no data folder exists at all, outside CI)
NO_DATA = (
    f"no benchmark data folder: set ${DATA_DIR_ENV} or put the sets in ../shared/data beside the checkout "
    "(docs/data.md)"
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that fails because a benchmark set is missing is reported as skipped, with the reason,
    when no data folder exists at all and this is not CI (CI always has ../shared/data: there a missing
    set is a failure)."""
    report = yield
    excinfo = call.excinfo
    if (
        excinfo is not None
        and excinfo.errisinstance(DataNotFoundError)
        and not os.environ.get("CI")
        and default_data_dir() is None
    ):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {NO_DATA}")
    return report


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


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> str:
    """A tiny random Llama and the tiny tokenizer saved once per session as a Hugging Face folder.

    Shared by every test that loads a checkpoint from disk: read it (or copy it), never write into it."""
    return str(save_tiny_model(tmp_path_factory.mktemp("tiny-checkpoint")))
