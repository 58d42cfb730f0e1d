"""LangChain integration for valuelens: training-free sentence embeddings from decoder LLMs.

Usage::

    from langchain_valuelens import ValueLensEmbeddings

    embeddings = ValueLensEmbeddings()        # the embedded default model (smollm2-135m), recipe "va"
    vector = embeddings.embed_query("What is the capital of France?")
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from langchain_valuelens.embeddings import ValueLensEmbeddings

try:
    __version__ = version("langchain-valuelens")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["ValueLensEmbeddings", "ValueLensSparseEmbeddings", "__version__"]


def __getattr__(name: str) -> Any:
    """``ValueLensSparseEmbeddings`` (the BM25 part for LangChain-Qdrant), loaded when first asked for: it
    needs ``langchain-qdrant`` (``pip install 'langchain-valuelens[qdrant]'``)."""
    if name != "ValueLensSparseEmbeddings":
        msg = f"module 'langchain_valuelens' has no attribute {name!r}"
        raise AttributeError(msg)
    try:
        from langchain_valuelens.sparse import ValueLensSparseEmbeddings
    except ImportError as exc:
        msg = f"ValueLensSparseEmbeddings needs langchain-qdrant: pip install 'langchain-valuelens[qdrant]' ({exc})"
        raise ImportError(msg) from exc
    return ValueLensSparseEmbeddings
