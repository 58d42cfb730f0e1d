"""End to end with the real default model: LangChain vector stores and retrievers find the right text.

Eight sentences on distinct topics, one query per topic phrased without the document's key words
where possible; each query's answer is unambiguous, and the top-1 hit is asserted.
"""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

pytestmark = [
    pytest.mark.slow,
    # langchain-community 0.4 warns on import that it is being sunset (its FAISS store still works and
    # has no maintained standalone replacement on PyPI yet).
    pytest.mark.filterwarnings("ignore:`langchain-community` is being sunset:DeprecationWarning"),
]

DOCS = [
    "The chef baked fresh bread and croissants in the bakery oven this morning.",
    "The striker scored two goals in the football match on Saturday.",
    "The central bank raised interest rates to fight rising inflation.",
    "Astronomers discovered a new planet orbiting a distant star.",
    "The veterinarian treated the injured dog's broken leg.",
    "Heavy snow and freezing winds closed the mountain roads.",
    "The pianist performed a Chopin sonata at the concert hall.",
    "Doctors recommend washing your hands to avoid catching the flu.",
]
QUERIES = [
    ("Which team won the soccer game?", 1),
    ("What happened to the price of borrowing money?", 2),
    ("telescope observations of other solar systems", 3),
    ("winter storm weather", 5),
    ("classical music recital", 6),
    ("pastries from the baker", 0),
    ("animal hospital for pets", 4),
    ("how to prevent getting sick", 7),
]
METADATAS = [{"topic": i} for i in range(len(DOCS))]


def _check_store(store) -> None:
    retriever = store.as_retriever(search_kwargs={"k": 2})
    for query, target in QUERIES:
        docs = retriever.invoke(query)
        assert len(docs) == 2 and all(isinstance(doc, Document) for doc in docs)
        assert docs[0].page_content == DOCS[target], query
        assert docs[0].metadata["topic"] == target, query
    hits = store.similarity_search(QUERIES[1][0], k=1)
    assert hits[0].page_content == DOCS[QUERIES[1][1]]
    docs = asyncio.run(retriever.ainvoke(QUERIES[0][0]))
    assert docs[0].page_content == DOCS[QUERIES[0][1]]


def test_in_memory_vector_store(real_embeddings) -> None:
    store = InMemoryVectorStore.from_texts(DOCS, embedding=real_embeddings, metadatas=METADATAS)
    _check_store(store)


def test_faiss_vector_store(real_embeddings) -> None:
    from langchain_community.vectorstores import FAISS

    store = FAISS.from_texts(DOCS, embedding=real_embeddings, metadatas=METADATAS)
    _check_store(store)
    assert store.index.ntotal == len(DOCS)
    assert store.index.d == real_embeddings.dimension
