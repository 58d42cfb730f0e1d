"""The product's lexical part (``lexical=``, ``lexical_query=``) with a query side of its own.

``research/rounds/lexical_lens.md`` found that a lexical part fused at one weight w for queries and
documents alike helps SciFact and costs STS-B. valuelens' lexical part (:mod:`valuelens.lexical`) lets
queries carry their own weight q. A query embedded at q against a document embedded at d scores
``√((1−q)(1−d))·cos(model) + √(q·d)·cos(lexical)``. Two documents score ``(1−d)·cos(model) + d·cos(lexical)``.
So ranking depends on the ratio ``q·d / ((1−q)(1−d))``, while document–document similarity (STS,
clustering) depends on d alone.

This script uses the product's lens: idf on the package's corpus, fitted at first use. It embeds with
the preset once (the vectors are kept in ``--vectors``) and scores a grid of (d, q) offline.

- Dev: SciFact dev nDCG@10 (tune's carved 100 queries over its 1104-document dev corpus), STS-B dev
  Spearman (tune's quick 600 pairs) and their mean (tune's balanced objective).
- ``--test``: SciFact test over a cut corpus (the 200 test queries' relevant documents and
  ``--distractors`` seeded others), or the full corpus with ``--full``. Scored at the (d, q) fixed on dev
  (``--doc-weight``, ``--query-weight``), at the symmetric w = 0.6 of the earlier round, and for
  all-MiniLM-L6-v2; STS-B test Spearman for each.

Usage::

    python research/lexical_sides.py smollm2-135m --vectors /tmp/lex/smol-dev.npz --out research/rounds/lexical_sides/smollm2-135m-dev.json
    python research/lexical_sides.py gemma3-270m --test --full --doc-weight D --query-weight Q --vectors /tmp/lex/gemma-test.npz --out research/rounds/lexical_sides/gemma3-270m-test.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from lexical_lens import (  # research/ is the script's folder
    load_test_sets,
    ndcg,
    preset_vectors,
    scifact_test_corpus,
    sts,
    sts_texts_and_pairs,
    unit,
)

from valuelens import Encoder
from valuelens.evaluation.reference import reference_model
from valuelens.tuning.data import TuneData

DOC_WEIGHTS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.6)
QUERY_WEIGHTS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.97, 0.99)


def joined(vectors: np.ndarray, lexical: np.ndarray, weight: float) -> np.ndarray:
    """What ``Encoder.encode`` gives at this side's weight (both parts unit length)."""
    return np.concatenate([math.sqrt(1 - weight) * vectors, math.sqrt(weight) * lexical], axis=1)


def score(pre: dict, lex: dict, d: float, q: float, ret: tuple, pairs: tuple) -> dict:
    qids, doc_ids, qrels = ret
    a, b, gold = pairs
    queries, docs = joined(pre["queries"], lex["queries"], q), joined(pre["docs"], lex["docs"], d)
    sts_vectors = joined(pre["sts"], lex["sts"], d)
    r = ndcg(queries @ docs.T, qids, doc_ids, qrels)
    s = sts(sts_vectors[a], sts_vectors[b], gold)
    return {"scifact_ndcg10": round(r, 2), "stsb_spearman": round(s, 2), "balanced": round((r + s) / 2, 2)}


def lens_vectors(args: argparse.Namespace, texts: dict) -> dict:
    """The product's lexical vectors of each set (idf on the package's corpus)."""
    enc = Encoder.from_pretrained(args.model, preset=args.preset, lexical=0.5)
    assert enc.lexical is not None
    return {name: enc.lexical.encode(list(items)).numpy() for name, items in texts.items()}


def dev(args: argparse.Namespace) -> dict:
    data = TuneData.build("quick", distractors=args.distractors)
    ret, pairs = data.retrieval, data.sts
    texts = {"queries": ret.queries, "docs": ret.docs, "sts": pairs.texts}
    pre, seconds = preset_vectors(args, texts)
    lex = lens_vectors(args, texts)
    keys = (ret.query_ids, ret.doc_ids, ret.qrels), (list(pairs.a), list(pairs.b), pairs.gold)
    grid = {}
    for d in DOC_WEIGHTS:
        for q in sorted({d, *QUERY_WEIGHTS}):
            grid[f"d={d} q={q}"] = score(pre, lex, d, q, *keys)
    alone = score(pre, lex, 1e-9, 1e-9, *keys)  # the preset alone
    best = max(grid, key=lambda k: grid[k]["balanced"])
    return {
        "model": args.model,
        "queries": len(ret.queries),
        "documents": len(ret.docs),
        "sts_pairs": len(pairs.gold),
        "preset_forward_seconds_this_run": seconds,
        "preset_alone": alone,
        "grid": grid,
        "balanced_optimum": best,
    }


def test(args: argparse.Namespace) -> dict:
    ret, stsb = load_test_sets()
    qids = list(ret.queries)
    queries = [ret.queries[i] for i in qids]
    doc_ids = scifact_test_corpus(ret, args.full, args.distractors)
    docs = [ret.corpus[d] for d in doc_ids]
    sts_texts, a, b = sts_texts_and_pairs(stsb)
    pairs = (a, b, stsb.scores)
    texts = {"queries": queries, "docs": docs, "sts": sts_texts}
    pre, seconds = preset_vectors(args, texts)
    lex = lens_vectors(args, texts)
    keys = (qids, doc_ids, ret.qrels), pairs
    mini = reference_model()
    ref = {name: unit(mini.encode(list(items))) for name, items in texts.items()}
    d, q = args.doc_weight, args.query_weight
    rows = {
        args.preset: score(pre, lex, 1e-9, 1e-9, *keys),
        f"{args.preset}, lexical={d}, lexical_query={q} (fixed on dev)": score(pre, lex, d, q, *keys),
        f"{args.preset}, lexical=0.6 (one weight, the earlier round's)": score(pre, lex, 0.6, 0.6, *keys),
        "the lexical part alone": score(pre, lex, 1 - 1e-9, 1 - 1e-9, *keys),
        "all-MiniLM-L6-v2": score(ref, ref, 1e-9, 1e-9, *keys),
    }
    return {
        "model": args.model,
        "queries": len(qids),
        "documents": len(doc_ids),
        "corpus": "full" if args.full else f"cut (relevant + {args.distractors} seeded others)",
        "sts_pairs": len(stsb.scores),
        "preset_forward_seconds_this_run": seconds,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--preset", default="best")
    parser.add_argument("--distractors", type=int, default=1000)
    parser.add_argument("--vectors", type=Path, help="keep (and reuse) the preset's vectors in this .npz")
    parser.add_argument("--test", action="store_true", help="the test splits")
    parser.add_argument("--full", action="store_true", help="--test: the full SciFact corpus")
    parser.add_argument("--doc-weight", type=float, default=0.05, help="--test: lexical, fixed on dev")
    parser.add_argument(
        "--query-weight", type=float, default=0.97, help="--test: lexical_query, fixed on dev"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out = test(args) if args.test else dev(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
