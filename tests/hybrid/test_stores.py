"""One joined vector ranks as the hybrid score in the stores users have: FAISS on normalized vectors,
Chroma with cosine distance, LangChain's ``InMemoryVectorStore`` and LlamaIndex's default store rank a
query's documents exactly as ``(1 − w)·cos(dense) + w·BM25/BM25max`` computed directly (BM25 from the
part's hashed weights: ``tests/core/test_bm25.py`` checks those against BM25 itself)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from valuelens import Encoder, EncoderConfig
from valuelens.evaluation.tasks import default_data_dir

W = 0.6  # the queries' lexical weight
K = 8


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[list[str], list[str], str]:
    """40 SciFact abstracts to index, 4 queries, and a file of the abstracts to fit the BM25 statistics on."""
    lines = (default_data_dir() / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:40]
    docs = [f"{row['title']} {row['text']}".strip()[:600] for row in map(json.loads, lines)]
    queries = [
        "white matter development in newborn brains",
        "diffusion tensor imaging of the cortex",
        "protein folding in bacteria",
        "clinical trial of a vaccine",
    ]
    fit = tmp_path_factory.mktemp("fit") / "docs.txt"
    fit.write_text("\n".join(d.replace("\n", " ") for d in docs) + "\n", encoding="utf-8")
    return docs, queries, str(fit)


@pytest.fixture(scope="module")
def encoder(tiny_checkpoint, corpus) -> Encoder:
    spec = EncoderConfig(
        recipe="va",
        layers=[1, 2],
        max_length=256,
        long_text="chunk",
        lexical=0.1,
        lexical_query=W,
        lexical_corpus=corpus[2],
    )
    return Encoder.from_pretrained(tiny_checkpoint, spec)


@pytest.fixture(scope="module")
def expected(encoder, corpus) -> list[list[int]]:
    """Per query, the documents by descending hybrid score, computed from the parts directly."""
    docs, queries, _ = corpus
    plain_spec = encoder.config.replace(lexical=None, lexical_query=None, lexical_corpus=None)
    plain = Encoder(encoder.model, encoder.tokenizer, plain_spec)
    unit = torch.nn.functional.normalize
    cos = (
        unit(plain.encode_query(queries, convert_to_tensor=True), dim=1)
        @ unit(plain.encode(docs, convert_to_tensor=True), dim=1).T
    )
    lens = encoder.lexical
    bm25 = (lens.queries(queries) @ lens.documents(docs).T) * lens.bound  # BM25(q, d) / BM25max(q)
    hybrid = ((1 - W) * cos + W * bm25).numpy()
    return [list(np.argsort(-row, kind="stable")[:K]) for row in hybrid]


def test_the_hybrid_is_neither_ranking_alone(encoder, corpus, expected):
    """So the stores below could fail: the lexical part changes the ranking, and so does the dense one."""
    docs, queries, _ = corpus
    lens = encoder.lexical
    bm25 = (lens.queries(queries) @ lens.documents(docs).T).numpy()
    lexical_only = [list(np.argsort(-row, kind="stable")[:K]) for row in bm25]
    dense = encoder.encode_query(queries) @ encoder.encode(docs).T  # joined vectors: the hybrid itself
    assert [list(np.argsort(-row, kind="stable")[:K]) for row in dense] == expected
    assert lexical_only != expected


def test_faiss_on_normalized_vectors(encoder, corpus, expected):
    faiss = pytest.importorskip("faiss")
    docs, queries, _ = corpus
    index = faiss.IndexFlatIP(encoder.dimension)
    index.add(encoder.encode(docs, normalize=True).astype(np.float32))
    _, found = index.search(encoder.encode_query(queries, normalize=True).astype(np.float32), K)
    assert [list(row) for row in found] == expected


def test_chroma_with_cosine_distance(encoder, corpus, expected):
    chromadb = pytest.importorskip("chromadb")
    from chromadb.config import Settings

    docs, queries, _ = corpus
    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    collection = client.create_collection(
        "hybrid", configuration={"hnsw": {"space": "cosine", "ef_search": 200}}
    )
    collection.add(ids=[str(i) for i in range(len(docs))], embeddings=encoder.encode(docs).tolist())
    result = collection.query(query_embeddings=encoder.encode_query(queries).tolist(), n_results=K)
    assert [[int(i) for i in row] for row in result["ids"]] == expected


def test_langchain_in_memory_vector_store(encoder, corpus, expected):
    from langchain_core.vectorstores import InMemoryVectorStore

    from langchain_valuelens import ValueLensEmbeddings

    docs, queries, _ = corpus
    store = InMemoryVectorStore(embedding=ValueLensEmbeddings(model=encoder))
    store.add_texts(docs, ids=[str(i) for i in range(len(docs))])
    found = [[int(d.id) for d in store.similarity_search(q, k=K)] for q in queries]
    assert found == expected


def test_llama_index_default_vector_store(encoder, corpus, expected):
    from llama_index.core import Document, Settings, VectorStoreIndex

    from llama_index.embeddings.valuelens import ValueLensEmbedding

    docs, queries, _ = corpus
    Settings.llm = None
    model = ValueLensEmbedding(encoder=encoder)
    nodes = [Document(text=text, id_=str(i)) for i, text in enumerate(docs)]
    index = VectorStoreIndex.from_documents(nodes, embed_model=model, transformations=[])
    retriever = index.as_retriever(similarity_top_k=K)
    found = [[int(n.node.ref_doc_id) for n in retriever.retrieve(q)] for q in queries]
    assert found == expected
