"""LlamaIndex integration for valuelens: training-free sentence embeddings from decoder LLMs.

Usage::

    from llama_index.core import Settings
    from llama_index.embeddings.valuelens import ValueLensEmbedding

    Settings.embed_model = ValueLensEmbedding(model_name="smollm2-135m", recipe="va")
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from llama_index.embeddings.valuelens.base import DEFAULT_EMBED_BATCH_SIZE, ValueLensEmbedding
from llama_index.embeddings.valuelens.sparse import bm25_sparse_fns

try:
    __version__ = version("llama-index-embeddings-valuelens")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["DEFAULT_EMBED_BATCH_SIZE", "ValueLensEmbedding", "__version__", "bm25_sparse_fns"]
