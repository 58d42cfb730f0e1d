"""Does fitting a preset's post-processing on the retrieval corpus itself beat the preset's own state?

A user who indexes documents can fit the all-but-the-top on those documents (`valuelens fit`, or
`postprocess="fit:abtt:4@my_docs.txt"`). This embeds SciFact's dev queries and a dev corpus (the dev
queries' relevant documents plus ``--distractors`` others, as `valuelens tune --distractors`) once,
without post-processing, then scores nDCG@10 with: the preset's own state, none, and centering or
all-but-the-top (k = 1, 2, 4, 8) fitted on the dev corpus's documents (unlabeled), alone or with the
480 texts of the package's fitting corpus (``valuelens/presets/fit_corpus.txt``). Dev data only.

Usage::

    python research/corpus_fit.py smollm2-135m --distractors 1000 --out research/rounds/corpus_fit/smollm2-135m.json
    python research/corpus_fit.py smollm2-135m --preset untuned --out research/rounds/corpus_fit/smollm2-135m-untuned.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from valuelens import Encoder
from valuelens.evaluation.metrics import cosine_similarity_matrix, rank_documents, retrieval_scores
from valuelens.postprocess import Postprocess
from valuelens.presets.builtin import FitRequest
from valuelens.states import fit_corpus
from valuelens.tuning.data import TuneData


def ndcg(queries: np.ndarray, docs: np.ndarray, data: TuneData) -> float:
    """SciFact dev nDCG@10 (x100) of these query and document vectors."""
    ret = data.retrieval
    rankings = rank_documents(cosine_similarity_matrix(queries, docs), ret.doc_ids, top_k=1000)
    return 100 * retrieval_scores(dict(zip(ret.query_ids, rankings, strict=True)), ret.qrels)["ndcg_at_10"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--preset", default="best")
    parser.add_argument("--distractors", type=int, default=1000)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--vectors", type=Path, help="keep (and reuse) the raw vectors in this .npz")
    args = parser.parse_args()

    data = TuneData.build("quick", distractors=args.distractors)
    ret = data.retrieval
    enc = Encoder.from_pretrained(args.model, preset=args.preset)
    own = enc.postprocess
    enc.postprocess = None  # raw vectors; the query side shares it (made after this line)
    start = time.perf_counter()
    saved = dict(np.load(args.vectors)) if args.vectors is not None and args.vectors.is_file() else {}
    embedded = [name for name in ("queries", "docs", "package") if name not in saved]
    if "queries" not in saved:
        saved["queries"] = np.asarray(enc.encode_query(list(ret.queries), show_progress=True))
        saved["docs"] = np.asarray(enc.encode(list(ret.docs), show_progress=True))
    if "package" not in saved:
        request = FitRequest.parse("fit:center")  # no @FILE: the package's corpus, as first use reads it
        assert request is not None
        saved["package"] = np.asarray(enc.encode(fit_corpus(request)[0]))
    if args.vectors is not None:
        np.savez(args.vectors, **saved)
    q, d, package = saved["queries"], saved["docs"], saved["package"]
    seconds = time.perf_counter() - start

    rows: dict[str, float] = {"none": ndcg(q, d, data)}
    if own is not None:
        rows[f"the preset's own state ({own.kind}, k={own.k})"] = ndcg(
            own.transform(q), own.transform(d), data
        )
    fits = [("center", 1)] + [("abtt", k) for k in (1, 2, 4, 8)]
    sources = {
        f"the {len(d)} corpus documents": d,
        f"the package's {len(package)} texts": package,
        f"the package's {len(package)} texts + the {len(d)} corpus documents": np.concatenate([package, d]),
    }
    for source, texts in sources.items():
        for kind, k in fits:
            state = Postprocess.fit(texts, kind, k)
            name = f"{kind}{f':{k}' if kind == 'abtt' else ''} fitted on {source}"
            rows[name] = ndcg(state.transform(q), state.transform(d), data)
    for name, value in rows.items():
        print(f"{value:6.2f}  {name}")
    result = {
        "model": args.model,
        "preset": args.preset,
        "queries": len(ret.queries),
        "documents": len(ret.docs),
        "embedded_in_this_run": embedded,
        "embedding_seconds": round(seconds, 1),
        "ndcg_at_10": {name: round(value, 2) for name, value in rows.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
