"""Does the lexical weight chosen on tune's 304-document dev corpus hold over the full SciFact corpus?

``valuelens tune`` (quick mode) scores the lexical part's document and query weights (``lexical``,
``lexical_query``) on 100 dev queries over 304 documents; the issue's retrieval target is measured over
all 5,183. The lexical part alone falls from about 81 to 59 nDCG@10 between the two corpora
(``research/rounds/lexical_weighting``), the model's part by other amounts, so the best weights may
differ. This script embeds the full corpus once under a bundled ``best`` preset, splits each vector
into its model part and its lexical part (the last ``hidden`` dimensions, :class:`LexicalPart.join`),
and scores every weight pair offline:

- **dev** (the choice): SciFact's 100 dev queries over the full corpus (no test query is read for it)
  and STS-B dev (tune's 600 quick pairs); balanced = their mean, as tune's objective;
- **test** (reported after the choice): SciFact's 200 test queries over the full corpus, for the pair
  chosen on dev and for the preset's own pair; STS-B test (1379 pairs) for both.

all-MiniLM-L6-v2 is scored on the same queries and corpus for reference (its vectors are kept beside
``--vectors``).

Usage::

    python research/lexical_weight_full.py gemma3-270m --vectors /tmp/lw/gemma-full.npz --out research/rounds/lexical_weighting/gemma3-270m-full.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lexical_lens import load_test_sets, ndcg, sts, sts_texts_and_pairs, unit

from valuelens import Encoder
from valuelens.evaluation.reference import reference_model
from valuelens.tuning.data import TuneData

DOC_WEIGHTS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
QUERY_WEIGHTS = (0.5, 0.8, 0.9, 0.95, 0.98)


def embed(enc: Encoder, vectors: Path) -> dict[str, np.ndarray]:
    """The preset's vectors of every set, kept in ``vectors`` (a rerun reads them back)."""
    if vectors.is_file():
        return dict(np.load(vectors))
    dev = TuneData.build("quick", distractors=10**6)
    ret, stsb = load_test_sets()
    if list(ret.corpus) != list(dev.retrieval.doc_ids):
        raise SystemExit("the dev and test corpora differ in order")
    sts_test, _, _ = sts_texts_and_pairs(stsb)
    queries = enc.for_queries()
    out = {}
    for name, texts, encoder in (
        ("dev_queries", dev.retrieval.queries, queries),
        ("test_queries", list(ret.queries.values()), queries),
        ("sts_dev", dev.sts.texts, enc),
        ("sts_test", sts_test, enc),
        ("docs", dev.retrieval.docs, enc),
    ):
        start = time.perf_counter()
        out[name] = np.asarray(encoder.encode(list(texts), show_progress=True))
        print(f"{name}: {len(texts)} texts in {time.perf_counter() - start:.0f} s", flush=True)
    vectors.parent.mkdir(parents=True, exist_ok=True)
    np.savez(vectors, **out)
    return out


def reference(vectors: Path) -> dict[str, np.ndarray]:
    """all-MiniLM-L6-v2's unit vectors of the queries and the full corpus, kept in ``vectors``."""
    if vectors.is_file():
        return dict(np.load(vectors))
    dev = TuneData.build("quick", distractors=10**6)
    ret, _ = load_test_sets()
    model = reference_model()
    out = {
        name: unit(np.asarray(model.encode(list(texts))))
        for name, texts in (
            ("dev_queries", dev.retrieval.queries),
            ("test_queries", list(ret.queries.values())),
            ("docs", dev.retrieval.docs),
        )
    }
    np.savez(vectors, **out)
    return out


def split(x: np.ndarray, hidden: int) -> tuple[np.ndarray, np.ndarray]:
    """A joined vector's model part and lexical part, each of unit length."""
    return unit(x[:, :-hidden]), unit(x[:, -hidden:])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model")
    parser.add_argument("--vectors", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    enc = Encoder.from_pretrained(args.model, preset="best")
    w0, q0 = enc.config.lexical, enc.config.lexical_query
    hidden = int(enc.parts.backbone.get_input_embeddings().weight.shape[1])
    v = embed(enc, args.vectors)
    dev = TuneData.build("quick", distractors=10**6)
    ret_test, stsb_test = load_test_sets()
    _, ta, tb = sts_texts_and_pairs(stsb_test)
    parts = {k: split(x, hidden) for k, x in v.items()}
    doc_ids = list(dev.retrieval.doc_ids)
    cross = {
        k: (parts[k][0] @ parts["docs"][0].T, parts[k][1] @ parts["docs"][1].T)
        for k in ("dev_queries", "test_queries")
    }

    def retrieval(which: str, w: float, q: float) -> float:
        dense, lexical = cross[which]
        sim = math.sqrt((1 - q) * (1 - w)) * dense + math.sqrt(q * w) * lexical
        if which == "dev_queries":
            return ndcg(sim, dev.retrieval.query_ids, doc_ids, dev.retrieval.qrels)
        return ndcg(sim, list(ret_test.queries), doc_ids, ret_test.qrels)

    def similarity(which: str, w: float, a: list[int], b: list[int], gold) -> float:
        dense, lexical = parts[which]
        joined = np.concatenate([math.sqrt(1 - w) * dense, math.sqrt(w) * lexical], axis=1)
        return sts(joined[a], joined[b], gold)

    pairs = dev.sts
    grid = {}
    for w in DOC_WEIGHTS:
        s = similarity("sts_dev", w, list(pairs.a), list(pairs.b), pairs.gold)
        for q in QUERY_WEIGHTS:
            r = retrieval("dev_queries", w, q)
            grid[f"{w}/{q}"] = {
                "scifact_dev_full": round(r, 2),
                "stsb_dev": round(s, 2),
                "balanced": round((r + s) / 2, 2),
            }
    chosen = max(grid, key=lambda k: grid[k]["balanced"])
    w1, q1 = map(float, chosen.split("/"))
    test = {}
    for name, (w, q) in {f"preset's {w0}/{q0}": (w0, q0), f"dev-chosen {chosen}": (w1, q1)}.items():
        test[name] = {
            "scifact_test_full": round(retrieval("test_queries", w, q), 2),
            "stsb_test": round(similarity("sts_test", w, ta, tb, stsb_test.scores), 2),
        }
    minilm = reference(args.vectors.with_name(args.vectors.stem + "-minilm.npz"))
    test["all-MiniLM-L6-v2"] = {
        "scifact_test_full": round(
            ndcg(minilm["test_queries"] @ minilm["docs"].T, list(ret_test.queries), doc_ids, ret_test.qrels),
            2,
        )
    }
    out = {
        "model": args.model,
        "spec": enc.config.name if hasattr(enc.config, "name") else str(enc),
        "documents": len(doc_ids),
        "dev_queries": len(dev.retrieval.queries),
        "test_queries": len(ret_test.queries),
        "dev_grid": grid,
        "preset_on_dev": grid.get(f"{w0}/{q0}"),
        "minilm_on_dev": {
            "scifact_dev_full": round(
                ndcg(
                    minilm["dev_queries"] @ minilm["docs"].T,
                    dev.retrieval.query_ids,
                    doc_ids,
                    dev.retrieval.qrels,
                ),
                2,
            )
        },
        "chosen_on_dev": chosen,
        "test": test,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(
        json.dumps({k: out[k] for k in ("preset_on_dev", "minilm_on_dev", "chosen_on_dev", "test")}, indent=1)
    )


if __name__ == "__main__":
    main()
