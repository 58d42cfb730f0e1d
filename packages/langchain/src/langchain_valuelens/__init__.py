"""LangChain integration for valuelens: training-free sentence embeddings from decoder LLMs.

Usage::

    from langchain_valuelens import ValueLensEmbeddings

    embeddings = ValueLensEmbeddings()        # the embedded default model (smollm2-135m), recipe "va"
    vector = embeddings.embed_query("What is the capital of France?")
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from langchain_valuelens.embeddings import ValueLensEmbeddings

try:
    __version__ = version("langchain-valuelens")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["ValueLensEmbeddings", "__version__"]
