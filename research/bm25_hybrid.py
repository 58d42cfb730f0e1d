"""One vector against BM25: a preset's model part joined with the BM25 part, on SciFact's full corpus.

The model part of ``--preset`` (its lexical part off) embeds SciFact's 5,183 documents once (kept in
``--vectors``), its 100 carved dev queries and its 200 test queries; then, with no more forward passes:
- the BM25 part alone (hashed at the defaults, English word frequencies: the default; and its statistics
  counted on the corpus: what ``lexical_corpus`` on one's own documents gives), and bm25s on the same
  corpus (the textbook baseline: stemmed, English stop words);
- the joined vector at query weights w, ranked by the cosine a store computes:
  ``(1 − w)·cos + w·BM25/BM25max(q)`` (the part's normalization, per query);
- the same two scores fused the way hybrid retrievers fuse them, for comparison: min-max normalized
  per query (α on the model side) and reciprocal-rank fusion (k = 60);
- the preset as shipped (its own lexical part, joined as its encoder joins it) from the same vectors.
w and α are chosen on dev (nDCG@10, 100 queries); test (200 queries) is reported at the dev choice.
STS-B dev and test (Spearman ×100; texts embedded as documents, so the BM25 part joins at the documents'
weight ``--document-weight``) show what the part costs document–document similarity.

With ``--write-preset``, the bundled preset of ``MODEL`` takes the BM25 part at the weight chosen on dev
for the default statistics ("one vector, word frequencies") and the documents' weight: its ``preset.json``
(``valuelens/presets/tuned/MODEL-PRESET``) keeps the tuned model part and records where the lexical
fields came from under ``lexical_choice``.

With ``--distractors N`` the corpus is the documents relevant to the dev and test queries and N others
(seeded): for the larger models, whose forward over all 5,183 abstracts takes hours on a laptop CPU; the
rows then compare systems on that corpus only.

Usage::

    python research/bm25_hybrid.py smollm2-135m --vectors /tmp/hyb/smollm2.npz \
        --out research/rounds/bm25_hybrid/smollm2-135m.json --write-preset
    python research/bm25_hybrid.py gemma3-270m --distractors 700 --vectors /tmp/hyb/gemma-700.npz \
        --out research/rounds/bm25_hybrid/gemma3-270m.json --write-preset
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from bm25_part import bm25s_scores  # research/ is the script's folder

from valuelens import Encoder
from valuelens.bm25 import Analyzer, BM25Lens, BM25Part, BM25State
from valuelens.evaluation.metrics import rank_documents, retrieval_scores
from valuelens.evaluation.tasks import SEED, load_task
from valuelens.states import bm25_state

#: The system whose dev choice a preset takes: the joined vector under the default statistics.
PRESET_SYSTEM = "one vector, word frequencies"
WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def ndcg(scores: np.ndarray, query_ids: list[str], doc_ids: list[str], qrels) -> float:
    rankings = dict(zip(query_ids, rank_documents(scores, doc_ids, top_k=100), strict=True))
    return round(100 * retrieval_scores(rankings, {q: qrels[q] for q in query_ids})["ndcg_at_10"], 2)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-12)


def minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
    return (x - lo) / np.where(hi > lo, hi - lo, 1.0)


def rrf(a: np.ndarray, b: np.ndarray, k: float = 60.0) -> np.ndarray:
    def ranks(x: np.ndarray) -> np.ndarray:
        order = np.argsort(-x, axis=1, kind="stable")
        out = np.empty_like(order)
        np.put_along_axis(out, order, np.arange(x.shape[1])[None, :].repeat(x.shape[0], 0), axis=1)
        return out

    return 1 / (k + ranks(a) + 1) + 1 / (k + ranks(b) + 1)


def corpus_ids(dev, test, distractors: int | None) -> list[str]:
    """The full corpus (``distractors`` None) or the relevant documents of every dev and test query and
    ``distractors`` others drawn with the evaluation seed, in corpus order."""
    ids = list(test.corpus)
    if distractors is None:
        return ids
    relevant = {d for qrels in (dev.qrels, test.qrels) for judged in qrels.values() for d in judged}
    others = [i for i in ids if i not in relevant]
    drawn = np.random.default_rng(SEED).choice(len(others), size=min(distractors, len(others)), replace=False)
    keep = relevant | {others[i] for i in drawn}
    return [i for i in ids if i in keep]


def sts_rows(shipped: Encoder, args: argparse.Namespace) -> list[dict]:
    """STS-B dev and test Spearman: the model part alone, joined with the BM25 part (documents' weight),
    and the preset as shipped (its own lexical part). Vectors kept beside ``--vectors`` (``.sts.npz``)."""
    from scipy.stats import spearmanr

    file = args.vectors.with_suffix(".sts.npz")
    sets = {split: load_task("stsb").load(split) for split in ("dev", "test")}
    texts = sorted({t for data in sets.values() for t in (*data.texts1, *data.texts2)})
    if file.is_file():
        dense_vectors = np.load(file)["dense"]
    else:
        dense = Encoder(
            shipped.model, shipped.tokenizer, shipped.config.replace(lexical=None, lexical_query=None)
        )
        dense_vectors = dense.encode(texts, batch_size=32)
        np.savez(file, dense=dense_vectors)
    index = {t: i for i, t in enumerate(texts)}
    lens = BM25Lens(bm25_state("english"))
    variants = {
        "model part alone": unit(dense_vectors),
        f"with the BM25 part (documents' weight {args.document_weight})": BM25Part(
            lens.documents(texts), False, args.document_weight, args.document_weight, lens.bound
        )
        .join(torch.from_numpy(dense_vectors))
        .numpy(),
    }
    if shipped.lexical is not None:
        composition = shipped.composition
        variants[f"{args.preset} as shipped"] = composition.join(
            torch.from_numpy(dense_vectors), composition.lexical_part(texts)
        ).numpy()
    rows = []
    for name, vectors in variants.items():
        v = unit(np.asarray(vectors, dtype=np.float64))
        for split, data in sets.items():
            a = v[[index[t] for t in data.texts1]]
            b = v[[index[t] for t in data.texts2]]
            rho = spearmanr((a * b).sum(1), data.scores).statistic
            rows.append({"split": split, "system": name, "spearman": round(100 * float(rho), 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--preset", default="best")
    parser.add_argument("--vectors", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--document-weight", type=float, default=0.05, help="the BM25 part's documents' weight"
    )
    parser.add_argument(
        "--distractors",
        type=int,
        help="a smaller corpus: the documents relevant to any dev or test query and this many others (seeded)",
    )
    parser.add_argument(
        "--write-preset", action="store_true", help="write the dev choice into the bundled preset"
    )
    args = parser.parse_args()
    task = load_task("scifact")
    dev, test = task.load("dev"), task.load("test")
    assert list(dev.corpus) == list(test.corpus)  # one corpus, two sets of queries
    doc_ids = corpus_ids(dev, test, args.distractors)
    docs = [test.corpus[i] for i in doc_ids]
    splits = {"dev": dev, "test": test}
    shipped = Encoder.from_pretrained(args.model, preset=args.preset)
    out: dict = {"model": args.model, "preset": args.preset, "spec": repr(shipped), "documents": len(docs)}
    out["rows"] = []
    if args.vectors.is_file():
        saved = np.load(args.vectors)
        vectors = {k: saved[k] for k in saved.files}
    else:
        tick = time.perf_counter()
        dense = Encoder(
            shipped.model, shipped.tokenizer, shipped.config.replace(lexical=None, lexical_query=None)
        )
        vectors = {"docs": dense.encode(docs, batch_size=16, show_progress=True)}
        for name, data in splits.items():
            vectors[f"queries-{name}"] = dense.encode_query(list(data.queries.values()))
        out["forward_seconds"] = round(time.perf_counter() - tick)
        args.vectors.parent.mkdir(parents=True, exist_ok=True)
        np.savez(args.vectors, **vectors)
    analyzer = Analyzer("english")
    lenses = {
        "word frequencies": BM25Lens(bm25_state("english")),
        "the corpus": BM25Lens(BM25State.fit(analyzer, docs)),
    }
    doc_blocks = {name: lens.documents(docs) for name, lens in lenses.items()}
    chosen: dict[str, float] = {}
    for split, data in splits.items():
        qids, queries = list(data.queries), list(data.queries.values())
        cos = unit(vectors[f"queries-{split}"]) @ unit(vectors["docs"]).T

        def row(system: str, scores: np.ndarray, *, split=split, qids=qids, data=data, **extra) -> None:
            score = ndcg(scores, qids, doc_ids, data.qrels)
            out["rows"].append({"split": split, "system": system, "ndcg": score, **extra})

        row("model part alone", cos)
        row("bm25s (stemmed, English stop words)", bm25s_scores(queries, docs))
        for name, lens in lenses.items():
            q_blocks = lens.queries(queries)
            lexical = (q_blocks @ doc_blocks[name].T).numpy() * lens.bound  # BM25/BM25max, hashed
            row(f"BM25 part alone (hashed, D={lens.dim} x{lens.hashes}, {name})", lexical)
            for w in WEIGHTS:
                joined_docs = BM25Part(doc_blocks[name], False, args.document_weight, w, lens.bound).join(
                    torch.from_numpy(vectors["docs"])
                )
                joined_q = BM25Part(q_blocks, True, args.document_weight, w, lens.bound).join(
                    torch.from_numpy(vectors[f"queries-{split}"])
                )
                row(f"one vector, {name}", (joined_q @ joined_docs.T).numpy(), w=w)
                row(f"min-max fusion, {name}", (1 - w) * minmax(cos) + w * minmax(lexical), w=w)
            row(f"RRF fusion, {name}", rrf(cos, lexical))
        shipped_scores = cos
        if shipped.lexical is not None:  # the preset's own lexical part, joined as its encoder joins it
            composition = shipped.composition
            joined = composition.join(torch.from_numpy(vectors["docs"]), composition.lexical_part(docs))
            shipped_scores = shipped.encode_query(queries, normalize=True) @ joined.numpy().T
        row(f"{args.preset} as shipped ({shipped.config.lexical_kind} lexical part)", shipped_scores)
    out["sts"] = sts_rows(shipped, args)
    for system in {r["system"] for r in out["rows"] if "w" in r}:
        dev_rows = [r for r in out["rows"] if r["system"] == system and r["split"] == "dev"]
        best = max(dev_rows, key=lambda r: r["ndcg"])
        chosen[system] = best["w"]
        test_row = next(
            r for r in out["rows"] if r["system"] == system and r["split"] == "test" and r["w"] == best["w"]
        )
        out.setdefault("chosen_on_dev", []).append(
            {"system": system, "w": best["w"], "dev": best["ndcg"], "test": test_row["ndcg"]}
        )
    for r in out["rows"]:
        if "w" not in r:
            print(r)
    for r in sorted(out["chosen_on_dev"], key=lambda r: r["system"]):
        print(r)
    for r in out["sts"]:
        print(r)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    if args.write_preset:
        print(write_preset(args, out))


def write_preset(args: argparse.Namespace, out: dict) -> Path:
    """The bundled ``MODEL-PRESET`` folder with the BM25 part at the dev choice of :data:`PRESET_SYSTEM`."""
    from dataclasses import replace

    from valuelens.presets.folder import PresetFolder
    from valuelens.presets.table import TUNED_NAMES

    root = Path(__file__).resolve().parents[1] / "shared_core/src/valuelens/presets/tuned"
    folder = PresetFolder.read(root / f"{args.model}-{args.preset}")
    assert TUNED_NAMES[folder.objective] == args.preset
    choice = next(r for r in out["chosen_on_dev"] if r["system"] == PRESET_SYSTEM)
    sts_dev = next(
        r["spearman"] for r in out["sts"] if r["split"] == "dev" and r["system"].startswith("with the BM25")
    )
    spec = {
        **folder.spec,
        "lexical": args.document_weight,
        "lexical_query": choice["w"],
        "lexical_kind": "bm25",
    }
    info = {
        **folder.info,
        "lexical_choice": {
            "by": "research/bm25_hybrid.py",
            "chosen_on": "SciFact dev: the 100 seeded queries carved from its judged split, over "
            + (
                "the full corpus"
                if args.distractors is None
                else f"{out['documents']} documents (the judged ones and {args.distractors} others, seeded)"
            ),
            "system": PRESET_SYSTEM,
            "lexical_query": choice["w"],
            "dev_ndcg_at_10": choice["dev"],
            "sts_dev_spearman": sts_dev,
        },
    }
    return replace(folder, spec=spec, info=info).write()


if __name__ == "__main__":
    main()
