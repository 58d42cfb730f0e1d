"""Locks the public API of ``langchain_valuelens``."""

from __future__ import annotations

from importlib.metadata import version

from langchain_core.embeddings import Embeddings

import langchain_valuelens
from langchain_valuelens import ValueLensEmbeddings

EXPECTED_ALL = ["ValueLensEmbeddings", "ValueLensSparseEmbeddings", "__version__"]


def test_all_imports() -> None:
    assert sorted(langchain_valuelens.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert hasattr(langchain_valuelens, name)


def test_version_from_metadata() -> None:
    assert langchain_valuelens.__version__ == version("langchain-valuelens")


def test_is_a_langchain_embeddings() -> None:
    assert issubclass(ValueLensEmbeddings, Embeddings)
    assert ValueLensEmbeddings.model_config["extra"] == "forbid"
