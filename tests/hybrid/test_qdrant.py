"""The BM25 part through Qdrant's native sparse vectors (local mode, no server), by each host's own
contract: LangChain-Qdrant's ``SparseEmbeddings`` (``ValueLensSparseEmbeddings``) and LlamaIndex-Qdrant's
``sparse_doc_fn`` / ``sparse_query_fn`` (``bm25_sparse_fns``). Sparse search ranks as BM25 computed
directly; hybrid search runs end to end and finds what each part finds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from valuelens import Encoder, EncoderConfig
from valuelens.bm25 import Analyzer, BM25Lens, BM25State
from valuelens.evaluation.tasks import default_data_dir

pytest.importorskip("qdrant_client")
K = 5


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[list[str], list[str], str]:
    lines = (default_data_dir() / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:40]
    docs = [f"{row['title']} {row['text']}".strip()[:600] for row in map(json.loads, lines)]
    queries = ["white matter development in newborn brains", "diffusion tensor imaging", "vaccine trial"]
    fit = tmp_path_factory.mktemp("fit") / "docs.txt"
    fit.write_text("\n".join(d.replace("\n", " ") for d in docs) + "\n", encoding="utf-8")
    return docs, queries, str(fit)


@pytest.fixture(scope="module")
def bm25_ranks(corpus) -> list[list[int]]:
    """Per query, the documents BM25 scores above zero, best first (ties by index), at most K."""
    docs, queries, fit = corpus
    lines = Path(fit).read_text(encoding="utf-8").splitlines()
    lens = BM25Lens(BM25State.fit(Analyzer(), [line for line in lines if line]))  # as lexical_corpus=fit
    found = []
    for query in queries:
        counts, _ = lens.query_weights(query)
        scores = np.array([sum(n * lens.weights(d).get(k, 0.0) for k, n in counts.items()) for d in docs])
        order = [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] > 0]
        found.append(order[:K])
    return found


@pytest.fixture(scope="module")
def dense(tiny_checkpoint) -> Encoder:
    return Encoder.from_pretrained(
        tiny_checkpoint, EncoderConfig(recipe="va", layers=[1, 2], max_length=256, long_text="chunk")
    )


def test_langchain_qdrant_sparse_and_hybrid(corpus, bm25_ranks, dense):
    from langchain_qdrant import QdrantVectorStore, RetrievalMode, SparseEmbeddings as HostSparse

    from langchain_valuelens import ValueLensEmbeddings, ValueLensSparseEmbeddings

    docs, queries, fit = corpus
    sparse = ValueLensSparseEmbeddings(lexical_corpus=fit)
    assert isinstance(sparse, HostSparse)
    ids = [str(i) for i in range(len(docs))]
    sparse_store = QdrantVectorStore.from_texts(
        docs,
        ids=[_uuid(i) for i in ids],
        sparse_embedding=sparse,
        retrieval_mode=RetrievalMode.SPARSE,
        location=":memory:",
        collection_name="sparse",
        metadatas=[{"i": i} for i in range(len(docs))],
    )
    for query, expected in zip(queries, bm25_ranks, strict=True):
        found = [d.metadata["i"] for d in sparse_store.similarity_search(query, k=len(expected))]
        assert found == expected
    hybrid = QdrantVectorStore.from_texts(
        docs,
        embedding=ValueLensEmbeddings(model=dense),
        sparse_embedding=sparse,
        retrieval_mode=RetrievalMode.HYBRID,
        location=":memory:",
        collection_name="hybrid",
        metadatas=[{"i": i} for i in range(len(docs))],
    )
    for query, expected in zip(queries, bm25_ranks, strict=True):
        found = [d.metadata["i"] for d in hybrid.similarity_search(query, k=K)]
        assert len(found) == K and expected[0] in found  # fused: BM25's best match is kept
    with pytest.raises(ValueError, match="unknown field"):
        ValueLensSparseEmbeddings(lexical_dim=16)


# LlamaIndex's store asks for payload indexes, which local-mode Qdrant (no server) does not keep
@pytest.mark.filterwarnings("ignore:Payload indexes have no effect in the local Qdrant:UserWarning")
def test_llama_index_qdrant_sparse_and_hybrid(corpus, bm25_ranks, dense):
    from llama_index.core import Document, Settings, StorageContext, VectorStoreIndex
    from llama_index.core.vector_stores.types import VectorStoreQueryMode
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    from llama_index.embeddings.valuelens import ValueLensEmbedding, bm25_sparse_fns

    docs, queries, fit = corpus
    Settings.llm = None
    doc_fn, query_fn = bm25_sparse_fns(lexical_corpus=fit)
    store = QdrantVectorStore(
        "docs",
        client=QdrantClient(":memory:"),
        enable_hybrid=True,
        sparse_doc_fn=doc_fn,
        sparse_query_fn=query_fn,
    )
    index = VectorStoreIndex.from_documents(
        [Document(text=text, id_=str(i)) for i, text in enumerate(docs)],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=ValueLensEmbedding(encoder=dense),
        transformations=[],
    )
    for query, expected in zip(queries, bm25_ranks, strict=True):
        retriever = index.as_retriever(
            vector_store_query_mode=VectorStoreQueryMode.SPARSE, sparse_top_k=len(expected)
        )
        assert [int(n.node.ref_doc_id) for n in retriever.retrieve(query)] == expected
        hybrid = index.as_retriever(
            vector_store_query_mode=VectorStoreQueryMode.HYBRID, similarity_top_k=K, sparse_top_k=K
        )
        found = [int(n.node.ref_doc_id) for n in hybrid.retrieve(query)]
        assert expected[0] in found


def _uuid(text: str) -> str:
    import uuid

    return str(uuid.uuid5(uuid.NAMESPACE_URL, text))
