"""Do two tune runs on one model rank the candidates alike? (e.g. a dev corpus of 304 vs 1104 documents)

Usage::

    python research/dev_corpus_rank.py RUN_A RUN_B [--top 10]
    python research/dev_corpus_rank.py --minilm 200 1000     # the reference on those dev corpora

RUN_A and RUN_B are folders ``valuelens tune`` wrote (their ``candidates.jsonl``). Prints, over the
candidates both runs scored: the Spearman correlation of each score (STS-B dev, SciFact dev nDCG@10,
objective) between the runs and the mean change, then the top candidates of each run with their rank in
the other. ``--minilm N...``: all-MiniLM-L6-v2's SciFact dev nDCG@10 over the quick dev corpus with N
distractors (``valuelens tune --distractors N``), to set a run's retrieval score against. Results:
research/rounds/dev_corpus_distractors.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from valuelens.tuning.report import CANDIDATES_FILE

SCORES = ("sts", "retrieval", "objective")


def read(folder: Path) -> dict[str, dict]:
    """Every candidate of a tune folder by its label."""
    lines = (folder / CANDIDATES_FILE).read_text(encoding="utf-8").splitlines()
    return {row["candidate"]: row for row in map(json.loads, lines)}


def minilm(distractors: list[int]) -> None:
    """Print the reference's dev nDCG@10 over each dev corpus."""
    from valuelens.evaluation.metrics import cosine_similarity_matrix, ndcg_at_k, rank_documents
    from valuelens.evaluation.reference import reference_model
    from valuelens.tuning.data import TuneData

    model = reference_model()
    print("| distractors | documents | all-MiniLM-L6-v2 SciFact dev nDCG@10 |\n|---:|---:|---:|")
    for n in distractors:
        ret = TuneData.build("quick", distractors=n).retrieval
        scores = cosine_similarity_matrix(model.encode(list(ret.queries)), model.encode(list(ret.docs)))
        rankings = rank_documents(scores, list(ret.doc_ids), top_k=10)
        ndcg = [ndcg_at_k(r, ret.qrels[q], 10) for q, r in zip(ret.query_ids, rankings, strict=True)]
        print(f"| {n} | {len(ret.docs)} | {100 * float(np.mean(ndcg)):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_a", type=Path, nargs="?")
    parser.add_argument("run_b", type=Path, nargs="?")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--minilm", type=int, nargs="+", metavar="N")
    args = parser.parse_args()
    if args.minilm:
        minilm(args.minilm)
    if args.run_a is None or args.run_b is None:
        return
    a, b = read(args.run_a), read(args.run_b)
    common = [k for k in a if k in b]
    print(f"{len(a)} and {len(b)} candidates, {len(common)} in both")
    print("| score | Spearman A vs B | mean B - A |\n|---|---:|---:|")
    for key in SCORES:
        x, y = np.array([a[k][key] for k in common]), np.array([b[k][key] for k in common])
        print(f"| {key} | {spearmanr(x, y).statistic:.3f} | {np.mean(y - x):+.2f} |")
    rank = {
        name: sorted(common, key=lambda k, run=run: -run[k]["objective"])
        for name, run in (("A", a), ("B", b))
    }
    head = rank["A"][:100]
    x, y = np.array([a[k]["retrieval"] for k in head]), np.array([b[k]["retrieval"] for k in head])
    print(
        f"\nretrieval Spearman over A's {len(head)} best shared candidates: {spearmanr(x, y).statistic:.3f}"
    )
    for name, other in (("A", "B"), ("B", "A")):
        print(f"\nTop {args.top} of {name} (objective):\n")
        print(f"| candidate | A retrieval | A objective | B retrieval | B objective | rank in {other} |")
        print("|---|---:|---:|---:|---:|---:|")
        for k in rank[name][: args.top]:
            row = f"| `{k}` | {a[k]['retrieval']:.2f} | {a[k]['objective']:.2f} | {b[k]['retrieval']:.2f}"
            print(f"{row} | {b[k]['objective']:.2f} | {rank[other].index(k) + 1} |")


if __name__ == "__main__":
    main()
