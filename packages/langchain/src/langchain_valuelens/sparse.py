"""``ValueLensSparseEmbeddings``: valuelens' BM25 lexical part as LangChain-Qdrant sparse embeddings.

Usage::

    from langchain_qdrant import QdrantVectorStore, RetrievalMode
    from langchain_valuelens import ValueLensEmbeddings, ValueLensSparseEmbeddings

    store = QdrantVectorStore.from_texts(
        texts, embedding=ValueLensEmbeddings(preset="best", lexical=None),   # the model's part
        sparse_embedding=ValueLensSparseEmbeddings(), retrieval_mode=RetrievalMode.HYBRID,
        location=":memory:", collection_name="docs",
    )

Qdrant stores the dense and the sparse vector side by side and fuses their rankings itself; the sparse
vectors are the BM25 part's unhashed weights (documents: BM25 weights; queries: term counts), so their
dot product is BM25 (:meth:`valuelens.bm25.BM25Lens.sparse`). Needs ``langchain-valuelens[qdrant]``.
"""

from __future__ import annotations

from typing import Any

from langchain_qdrant import SparseEmbeddings, SparseVector

from valuelens.bm25 import BM25Lens
from valuelens.config import EncoderConfig
from valuelens.states import bm25_lens

__all__ = ["ValueLensSparseEmbeddings"]


class ValueLensSparseEmbeddings(SparseEmbeddings):
    """BM25 sparse vectors (see the module docstring); the fields are the spec's ``lexical_*`` ones:
    ``lexical_language`` (default ``"english"``), ``lexical_corpus`` (texts of your own to count the
    statistics on; default: English word frequencies), ``lexical_k1``, ``lexical_b``. No model is loaded."""

    def __init__(self, **fields: Any) -> None:
        unknown = sorted(set(fields) - {"lexical_language", "lexical_corpus", "lexical_k1", "lexical_b"})
        if unknown:
            msg = f"unknown field(s) {', '.join(unknown)}: use lexical_language, lexical_corpus, lexical_k1, lexical_b"
            raise ValueError(msg)
        self.config = EncoderConfig(lexical=0.5, **fields)  # validated as every spec is
        self._lens: BM25Lens = bm25_lens(self.config)

    def _vectors(self, texts: list[str], *, query: bool) -> list[SparseVector]:
        return [
            SparseVector(indices=indices, values=values)
            for indices, values in self._lens.sparse(list(texts), query=query)
        ]

    def embed_documents(self, texts: list[str]) -> list[SparseVector]:
        return self._vectors(texts, query=False)

    def embed_query(self, text: str) -> SparseVector:
        return self._vectors([text], query=True)[0]
