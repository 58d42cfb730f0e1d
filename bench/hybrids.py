"""The hybrids users already build, measured on SciFact (the 200 test queries over the full corpus;
nDCG@10 ×100): each host's own BM25 and fusion around a dense side, the dense side being
all-MiniLM-L6-v2, valuelens' model part (its lexical part off) or valuelens' single joined vector (what
``preset="best"`` puts in a store: the model part and the BM25 part), beside bm25s alone.

- LangChain: ``EnsembleRetriever`` (langchain-classic; weighted reciprocal-rank fusion, weights 0.5 / 0.5)
  over ``BM25Retriever`` (langchain-community: rank_bm25's BM25Okapi on ``str.split()`` tokens, its default)
  and an ``InMemoryVectorStore`` retriever;
- LlamaIndex: ``QueryFusionRetriever`` (mode ``reciprocal_rerank``, one query: no LLM) over ``BM25Retriever``
  (llama-index-retrievers-bm25: bm25s with its English stemmer) and a ``VectorStoreIndex`` retriever;
- Qdrant (local mode) hybrid through langchain-qdrant: the dense side and valuelens' BM25 part as native
  sparse vectors, fused by Qdrant (RRF);
- "dense alone": each dense side by itself; for the joined vector that is valuelens' one vector (one cosine,
  at the query weight chosen on the dev split by research/bm25_hybrid.py), and bm25s alone.

Every retriever returns its top 100 to the fusion. The dense vectors come from files, so the hosts' retrieval
and fusion run for real without a forward pass here: valuelens' from research/bm25_hybrid.py (``--vectors``),
MiniLM's computed once and kept in ``--minilm``.

Its packages: ``pip install -r requirements/bench.txt`` (langchain-classic, langchain-community, rank-bm25,
llama-index-retrievers-bm25, PyStemmer) beside the adapters' ``[test]`` and ``[qdrant]`` extras.

Usage::

    python -m bench.hybrids --vectors /tmp/hyb/smollm2.npz --minilm /tmp/hyb/minilm.npz --weight 0.5 \
        --out research/results/hybrids-smollm2-135m.json
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

K = 100


def _ndcg(rankings: dict[str, list[str]], qrels: dict) -> float:
    from valuelens.evaluation.metrics import retrieval_scores

    return round(100 * retrieval_scores(rankings, {q: qrels[q] for q in rankings})["ndcg_at_10"], 2)


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-12)


def _lookup(texts: Sequence[str], vectors: np.ndarray) -> dict[str, list[float]]:
    return {t: [float(x) for x in v] for t, v in zip(texts, vectors, strict=True)}


def langchain_embeddings(documents: dict[str, list[float]], queries: dict[str, list[float]]) -> Any:
    """A LangChain ``Embeddings`` serving precomputed vectors (documents and queries apart)."""
    from langchain_core.embeddings import Embeddings

    probe = [0.0] * len(next(iter(documents.values())))  # langchain-qdrant embeds "dummy_text" for the size

    class Cached(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [documents.get(t, probe) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return queries[text]

    return Cached()


def llama_index_embedding(documents: dict[str, list[float]], queries: dict[str, list[float]]) -> Any:
    from llama_index.core.embeddings import BaseEmbedding

    class Cached(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return queries[query]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return queries[query]

        def _get_text_embedding(self, text: str) -> list[float]:
            return documents[text]

    return Cached(model_name="cached", embed_batch_size=256)


def langchain_ensemble(doc_ids, docs, queries, embeddings) -> dict[str, list[str]]:
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.vectorstores import InMemoryVectorStore

    metadatas = [{"id": i} for i in doc_ids]
    bm25 = BM25Retriever.from_texts(docs, metadatas=metadatas, k=K)
    store = InMemoryVectorStore(embedding=embeddings)
    store.add_texts(docs, metadatas=metadatas)
    ensemble = EnsembleRetriever(
        retrievers=[bm25, store.as_retriever(search_kwargs={"k": K})], weights=[0.5, 0.5]
    )
    return {qid: [d.metadata["id"] for d in ensemble.invoke(q)] for qid, q in queries.items()}


def llama_index_fusion(doc_ids, docs, queries, embed_model) -> dict[str, list[str]]:
    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever

    Settings.llm = None
    nodes = [TextNode(text=text, id_=i) for i, text in zip(doc_ids, docs, strict=True)]
    index = VectorStoreIndex(nodes, embed_model=embed_model)
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=K)
    fusion = QueryFusionRetriever(
        [index.as_retriever(similarity_top_k=K), bm25],
        mode="reciprocal_rerank",
        num_queries=1,
        use_async=False,
        similarity_top_k=K,
    )
    return {qid: [n.node.node_id for n in fusion.retrieve(q)] for qid, q in queries.items()}


def qdrant_hybrid(doc_ids, docs, queries, embeddings) -> dict[str, list[str]]:
    from langchain_qdrant import QdrantVectorStore, RetrievalMode

    from langchain_valuelens import ValueLensSparseEmbeddings

    store = QdrantVectorStore.from_texts(
        docs,
        embedding=embeddings,
        sparse_embedding=ValueLensSparseEmbeddings(),
        retrieval_mode=RetrievalMode.HYBRID,
        location=":memory:",
        collection_name="hybrid",
        ids=[str(uuid.uuid5(uuid.NAMESPACE_URL, i)) for i in doc_ids],
        metadatas=[{"id": i} for i in doc_ids],
    )
    return {qid: [d.metadata["id"] for d in store.similarity_search(q, k=K)] for qid, q in queries.items()}


def bm25s_alone(doc_ids, docs, queries) -> dict[str, list[str]]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    found = {}
    for qid, q in queries.items():
        scores = retriever.get_scores(
            bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)[0]
        )
        found[qid] = [doc_ids[i] for i in np.argsort(-scores, kind="stable")[:K]]
    return found


def joined(docs, queries, vectors: dict[str, np.ndarray], weight: float) -> dict[str, np.ndarray]:
    """valuelens' one vector: the model part joined with the BM25 part (documents at 0.05, queries at
    ``weight``), the vectors ``Encoder(preset="best")`` gives a store."""
    import torch

    from valuelens.bm25 import BM25Lens, BM25Part
    from valuelens.states import bm25_state

    lens = BM25Lens(bm25_state("english"))
    dense_docs = torch.from_numpy(vectors["docs"])
    joined_docs = BM25Part(lens.documents(docs), False, 0.05, weight, lens.bound).join(dense_docs)
    joined_q = BM25Part(lens.queries(list(queries.values())), True, 0.05, weight, lens.bound).join(
        torch.from_numpy(vectors["queries-test"])
    )
    return {"docs": joined_docs.numpy(), "queries-test": joined_q.numpy()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=Path, required=True, help="research/bm25_hybrid.py's vectors")
    parser.add_argument(
        "--minilm", type=Path, required=True, help="MiniLM's vectors (computed once, kept here)"
    )
    parser.add_argument(
        "--weight", type=float, required=True, help="the one vector's query weight (chosen on dev)"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from valuelens.evaluation.tasks import load_task

    test = load_task("scifact").load("test")
    doc_ids, docs = list(test.corpus), list(test.corpus.values())
    queries = dict(test.queries)
    saved = np.load(args.vectors)
    valuelens_vectors = {k: saved[k] for k in saved.files}
    if args.minilm.is_file():
        cached = np.load(args.minilm)
        minilm = {k: cached[k] for k in cached.files}
    else:
        from valuelens.evaluation.reference import reference_model

        model = reference_model()
        minilm = {
            "docs": _unit(model.encode(docs, batch_size=64)),
            "queries-test": _unit(model.encode(list(queries.values()))),
        }
        np.savez(args.minilm, **minilm)
    one = joined(docs, queries, valuelens_vectors, args.weight)
    sides = {
        "all-MiniLM-L6-v2": minilm,
        "valuelens": valuelens_vectors,
        f"valuelens one vector (w {args.weight})": one,
    }
    rows = []

    def run(system: str, dense: str, fn, *fn_args) -> None:
        tick = time.perf_counter()
        score = _ndcg(fn(*fn_args), test.qrels)
        rows.append(
            {
                "system": system,
                "dense side": dense,
                "ndcg": score,
                "seconds": round(time.perf_counter() - tick, 1),
            }
        )
        print(rows[-1], flush=True)

    run("bm25s alone (k1 1.5, b 0.75, stemmed)", "-", bm25s_alone, doc_ids, docs, queries)
    for name, vectors in sides.items():
        documents = _lookup(docs, vectors["docs"])
        query_vectors = _lookup(list(queries.values()), vectors["queries-test"])
        dense_only = {
            qid: [doc_ids[i] for i in np.argsort(-row, kind="stable")[:K]]
            for qid, row in zip(
                queries, _unit(vectors["queries-test"]) @ _unit(vectors["docs"]).T, strict=True
            )
        }
        run("dense alone", name, lambda r: r, dense_only)
        run(
            "LangChain EnsembleRetriever + BM25Retriever",
            name,
            langchain_ensemble,
            doc_ids,
            docs,
            queries,
            langchain_embeddings(documents, query_vectors),
        )
        run(
            "LlamaIndex QueryFusionRetriever + BM25Retriever",
            name,
            llama_index_fusion,
            doc_ids,
            docs,
            queries,
            llama_index_embedding(documents, query_vectors),
        )
        run(
            "Qdrant hybrid (valuelens BM25 sparse)",
            name,
            qdrant_hybrid,
            doc_ids,
            docs,
            queries,
            langchain_embeddings(documents, query_vectors),
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"weight": args.weight, "rows": rows}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
