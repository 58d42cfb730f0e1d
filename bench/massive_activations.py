"""Why the all-layer HS mean can score 0 on SciFact: one massive coordinate, and document length.

Usage: ``python bench/massive_activations.py smollm2-135m gemma3-270m qwen2.5-0.5b --out research/results/massive-activations``

On the seeded ``scifact:20`` sample that ``valuelens eval`` scores (20 queries, 200 documents), for the
HS mean over all layers, the HS mean over the auto layers and VA, one shared forward pass per batch:

- the coordinate with the largest mean magnitude and its mean share of a vector's squared norm;
- the Spearman correlation, averaged over queries, of a document's cosine score with its token count;
- nDCG@10 as ``valuelens eval`` computes it, then with that one coordinate set to 0 in every vector.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from valuelens import Encoder, encode_many
from valuelens.evaluation import load_task
from valuelens.evaluation.metrics import cosine_similarity_matrix, rank_documents, retrieval_scores
from valuelens.evaluation.runner import RETRIEVAL_TOP_K
from valuelens.io import report_path

RECIPES = {"hs@all": {"recipe": "hs", "layers": "all"}, "hs": {"recipe": "hs"}, "va": {"recipe": "va"}}


def _ndcg(q: np.ndarray, d: np.ndarray, qids: list[str], dids: list[str], qrels) -> float:
    rankings = dict(
        zip(qids, rank_documents(cosine_similarity_matrix(q, d), dids, top_k=RETRIEVAL_TOP_K), strict=True)
    )
    return retrieval_scores(rankings, qrels)["ndcg_at_10"]


def diagnose(model: str, limit: int) -> list[str]:
    """Markdown rows (one per recipe) for ``model`` on the ``scifact:limit`` sample."""
    data = load_task("scifact").load("test", limit=limit)
    qids, dids = list(data.queries), list(data.corpus)
    texts = [data.queries[q] for q in qids] + [data.corpus[d] for d in dids]
    # one loaded model for all three (as `valuelens eval` does), so encode_many shares its forward passes
    probe = Encoder.from_pretrained(model, recipe="hs", layers="all", truncate_layers=False)
    encoders = [
        Encoder(probe.model, probe.tokenizer, name_or_path=probe.name_or_path, **kw)
        for kw in RECIPES.values()
    ]
    tokens = np.array([len(encoders[0].tokenizer(data.corpus[d])["input_ids"]) for d in dids])
    rows = []
    for label, emb in zip(RECIPES, encode_many(encoders, texts, show_progress=True), strict=True):
        q, d = emb[: len(qids)], emb[len(qids) :]
        top = int(np.argmax(np.abs(emb).mean(axis=0)))
        share = float(np.mean(emb[:, top] ** 2 / (emb**2).sum(axis=1)))
        scores = cosine_similarity_matrix(q, d)
        rho = float(np.mean([spearmanr(row, tokens).statistic for row in scores]))
        q0, d0 = q.copy(), d.copy()
        q0[:, top] = d0[:, top] = 0.0
        rows.append(
            f"| {model} | {label} | {top} | {share:.2f} | {rho:+.2f} "
            f"| {100 * _ndcg(q, d, qids, dids, data.qrels):.1f} | {100 * _ndcg(q0, d0, qids, dids, data.qrels):.1f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--limit", type=int, default=20, help="SciFact queries (as scifact:N in eval)")
    parser.add_argument("--out", type=Path, help="write OUT.md")
    args = parser.parse_args()
    lines = [
        "```",
        "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "```",
        "",
        f"SciFact test, the seeded `scifact:{args.limit}` sample of `valuelens eval`.",
        "",
        "| model | recipe | top coordinate | its share of ‖x‖² | Spearman(score, doc tokens) "
        "| nDCG@10 | nDCG@10, top coordinate set to 0 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for model in args.models:
        lines += diagnose(model, args.limit)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out is not None:
        report_path(args.out, ".md").write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
