"""valuelens' BM25 lexical part as the sparse encoders of LlamaIndex's Qdrant vector store.

Usage::

    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from llama_index.embeddings.valuelens import bm25_sparse_fns

    doc_fn, query_fn = bm25_sparse_fns()                 # English word frequencies; or lexical_corpus=FILE
    store = QdrantVectorStore("docs", client=client, enable_hybrid=True,
                              sparse_doc_fn=doc_fn, sparse_query_fn=query_fn)

Each function takes a list of texts and returns their term indices and weights (documents: BM25 weights;
queries: term counts), so Qdrant's sparse dot product is BM25 (:meth:`valuelens.bm25.BM25Lens.sparse`).
The dense side is a :class:`ValueLensEmbedding` (without ``lexical``: Qdrant fuses the two itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from valuelens.config import EncoderConfig
from valuelens.states import bm25_lens

__all__ = ["SparseEncoder", "bm25_sparse_fns"]

#: LlamaIndex-Qdrant's sparse encoder: texts → (indices per text, values per text).
SparseEncoder = Callable[[list[str]], tuple[list[list[int]], list[list[float]]]]


def bm25_sparse_fns(**fields: Any) -> tuple[SparseEncoder, SparseEncoder]:
    """The documents' and the queries' sparse encoders; ``fields`` are the spec's ``lexical_language``,
    ``lexical_corpus``, ``lexical_k1`` and ``lexical_b``. No model is loaded."""
    unknown = sorted(set(fields) - {"lexical_language", "lexical_corpus", "lexical_k1", "lexical_b"})
    if unknown:
        msg = f"unknown field(s) {', '.join(unknown)}: use lexical_language, lexical_corpus, lexical_k1, lexical_b"
        raise ValueError(msg)
    lens = bm25_lens(EncoderConfig(lexical=0.5, **fields))  # validated as every spec is

    def encoder(query: bool) -> SparseEncoder:
        def encode(texts: list[str]) -> tuple[list[list[int]], list[list[float]]]:
            rows = lens.sparse(list(texts), query=query)
            return [indices for indices, _ in rows], [values for _, values in rows]

        return encode

    return encoder(False), encoder(True)
