"""How close does valuelens' BM25 lexical part come to BM25 itself, and what does hashing into D cost?

The part alone (no model, no forward pass) on SciFact: nDCG@10 of the carved dev split (100 queries) and
the test split (200 queries), each over the full 5,183-document corpus, for
- bm25s 0.3.16 (Lucene variant, its own tokenizer with PyStemmer and English stop words; k1 1.5, b 0.75,
  its defaults), as a user runs it: the reference the part should reach;
- the part's exact BM25 (its own analysis, unhashed: ``BM25Lens.sparse``), idf and avgdl counted on the
  corpus it ranks (what a user who fits ``lexical_corpus`` on the documents they index gets), or from
  English word frequencies (no corpus: the default), at k1 in {0.9, 1.2, 1.5} and b in {0.4, 0.75};
- the part as the store sees it: the hashed document and query vectors of ``BM25Lens`` at D in
  {256, ..., 16384}, each stem hashed to 1, 2, 4 or 8 coordinates, ranked by their inner product, with the
  collision rate per D (the share of a document's coordinates that another of its terms also takes).

Choose on dev; test is reported. Usage::

    python research/bm25_part.py --out research/rounds/bm25_part/scifact.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from valuelens.bm25 import Analyzer, BM25Lens, BM25State
from valuelens.evaluation.metrics import rank_documents, retrieval_scores
from valuelens.evaluation.tasks import load_task

DIMS = (1024, 2048, 4096, 8192, 16384)
HASHES = (1, 2, 4, 8)


def ndcg(scores: np.ndarray, query_ids: list[str], doc_ids: list[str], qrels) -> float:
    rankings = dict(zip(query_ids, rank_documents(scores, doc_ids, top_k=100), strict=True))
    return round(100 * retrieval_scores(rankings, {q: qrels[q] for q in query_ids})["ndcg_at_10"], 2)


def exact_scores(lens: BM25Lens, queries: list[str], docs: list[str]) -> np.ndarray:
    """BM25(q, d) from the unhashed weights (a sparse dot product over the terms seen)."""
    from scipy import sparse

    q_rows, d_rows = lens.sparse(queries, query=True), lens.sparse(docs)
    vocabulary: dict[int, int] = {}
    for indices, _ in (*q_rows, *d_rows):
        for index in indices:
            vocabulary.setdefault(index, len(vocabulary))

    def matrix(rows: list[tuple[list[int], list[float]]]) -> sparse.csr_matrix:
        indptr = np.cumsum([0, *(len(i) for i, _ in rows)])
        indices = np.asarray([vocabulary[i] for row, _ in rows for i in row], dtype=np.int64)
        values = np.asarray([v for _, row in rows for v in row], dtype=np.float64)
        return sparse.csr_matrix((values, indices, indptr), shape=(len(rows), len(vocabulary)))

    return (matrix(q_rows) @ matrix(d_rows).T).toarray()


def collision_rate(lens: BM25Lens, docs: list[str]) -> float:
    shared = total = 0
    for text in docs:
        slots = [slot for k in lens.weights(text) for slot, _ in lens._slots(k)]
        total += len(slots)
        shared += len(slots) - len(set(slots)) if slots else 0
    return round(100 * shared / max(total, 1), 3)


def bm25s_scores(queries: list[str], docs: list[str]) -> np.ndarray:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)
    return np.stack([retriever.get_scores(q) for q in tokens])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    task = load_task("scifact")
    out: dict = {"rows": []}
    for split in ("dev", "test"):
        data = task.load(split)
        doc_ids, docs = list(data.corpus), list(data.corpus.values())
        query_ids, queries = list(data.queries), list(data.queries.values())
        tick = time.perf_counter()
        out["rows"].append(
            {
                "split": split,
                "system": "bm25s 0.3.16 (k1 1.5, b 0.75)",
                "ndcg": ndcg(bm25s_scores(queries, docs), query_ids, doc_ids, data.qrels),
            }
        )
        analyzer = Analyzer("english")
        states = {
            "corpus": BM25State.fit(analyzer, docs),
            "word frequencies": BM25State.from_word_frequencies(analyzer),
        }
        for source, state in states.items():
            for k1 in (0.9, 1.2, 1.5):
                for b in (0.4, 0.75):
                    lens = BM25Lens(state, k1=k1, b=b)
                    score = ndcg(exact_scores(lens, queries, docs), query_ids, doc_ids, data.qrels)
                    out["rows"].append(
                        {"split": split, "system": f"exact, idf {source}, k1 {k1}, b {b}", "ndcg": score}
                    )
            for dim in DIMS:
                for hashes in HASHES:
                    lens = BM25Lens(state, dim=dim, hashes=hashes)
                    hashed = (lens.queries(queries) @ lens.documents(docs).T).numpy()
                    row = {
                        "split": split,
                        "system": f"hashed D={dim} x{hashes}, idf {source}, k1 1.5, b 0.75",
                        "ndcg": ndcg(hashed, query_ids, doc_ids, data.qrels),
                    }
                    if split == "dev" and source == "corpus":
                        row["collisions_pct"] = collision_rate(lens, docs)
                    out["rows"].append(row)
        print(f"{split}: {time.perf_counter() - tick:.0f} s", flush=True)
    for row in out["rows"]:
        print(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
