"""Long texts: ``long_text="truncate"`` against ``"chunk"`` on Lee (documents) and SciFact (abstracts).

Usage::

    python -m bench.long_text --lee-lengths 64,128 --scifact-lengths 128,256,512 --queries 40 --others 100 --threads 1
    python -m bench.long_text --model gemma3-270m --lee-lengths 128 --scifact-lengths 512

The encoder is ``--model`` (default: the bundled default model) under ``preset="best"`` (CPU, float32), with ``max_length`` and
``long_text`` changed (its fitted post-processing state serves every value of both). Per ``max_length``:

- **Lee** (50 news documents, 1225 pairs): Spearman ×100 of the pairs' cosines,
  :func:`valuelens.evaluation.evaluate` as ``valuelens eval`` runs it.
- **SciFact** (test split, nDCG@10 ×100), restricted to where the two settings differ: ``--queries``
  queries drawn with a seeded generator from those with a relevant abstract longer than ``max_length``,
  against a corpus of every relevant abstract of the drawn queries plus ``--others`` other abstracts
  (also drawn). Texts that fit get the same vector under both settings (``tests/core/test_long_text.py``),
  so the queries and the abstracts that fit are embedded once and the long abstracts once per setting.

"longer" counts the texts that do not fit in ``max_length`` under the preset's prompt (what truncation
cuts and chunking splits); "windows" is the mean number of windows per long text under ``"chunk"``;
the seconds are the encode time of each setting: the whole evaluation for Lee, the long abstracts for
SciFact. Not a test: a measurement, whose table is in docs/performance.md ("Long texts").
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import warnings
from typing import Any

import numpy as np
import torch

SEED = 0


@functools.cache
def _base(model: str | None) -> Any:
    """``model`` (``None``: the bundled default) under ``preset="best"``, loaded once."""
    from valuelens import Encoder

    return Encoder.from_pretrained(model, preset="best", device="cpu")


def _encoders(max_length: int, model: str | None) -> dict[str, Any]:
    """``{"truncate": Encoder, "chunk": Encoder}`` at ``max_length``, over the one loaded model."""
    from valuelens import Encoder

    base = _base(model)
    return {
        mode: Encoder(base.model, base.tokenizer, base.config.replace(max_length=max_length, long_text=mode))
        for mode in ("truncate", "chunk")
    }


def _windows_per_long_text(plan: Any) -> float:
    """Mean windows per text that ``plan`` (a :class:`valuelens.chunking.ChunkPlan`) split."""
    windows = len(plan.items) - plan.n_texts + plan.n_chunked
    return windows / max(plan.n_chunked, 1)


def _encode(encoder: Any, texts: list[str], batch_size: int) -> tuple[np.ndarray, float]:
    from valuelens import TruncationWarning

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)  # truncation is what this bench measures
        vectors = encoder.encode(texts, batch_size=batch_size)
    return vectors, time.perf_counter() - start


def lee_row(max_length: int, batch_size: int, model: str | None = None) -> dict[str, Any]:
    from valuelens import chunking
    from valuelens.evaluation import PairData, evaluate, load_task

    task = load_task("lee")
    pairs = task.load("test")
    assert isinstance(pairs, PairData)
    docs = sorted(set(pairs.texts1) | set(pairs.texts2))
    row: dict[str, Any] = {"set": "Lee (Spearman)", "max_length": max_length, "texts": len(docs)}
    for mode, encoder in _encoders(max_length, model).items():
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = evaluate(encoder, task, batch_size=batch_size)
        row[mode] = 100 * result.main_score
        row[f"{mode}_s"] = time.perf_counter() - start
        if mode == "chunk":
            plan = chunking.split(encoder, docs)
            row["longer"] = plan.n_chunked
            row["windows"] = _windows_per_long_text(plan)
    return row


def scifact_row(
    max_length: int, n_queries: int, others: int, batch_size: int, model: str | None = None
) -> dict[str, Any]:
    from valuelens import chunking
    from valuelens.evaluation import RetrievalData, load_task
    from valuelens.evaluation.metrics import cosine_similarity_matrix, rank_documents, retrieval_scores

    data = load_task("scifact").load("test")
    assert isinstance(data, RetrievalData)
    encoders = _encoders(max_length, model)
    relevant = {q: [d for d, rel in data.qrels[q].items() if rel > 0] for q in data.queries}
    judged = sorted({d for docs in relevant.values() for d in docs})
    long_judged = {
        judged[i] for i in chunking.split(encoders["chunk"], [data.corpus[d] for d in judged]).chunked
    }
    queries = [q for q in data.queries if any(d in long_judged for d in relevant[q])]
    rng = np.random.default_rng(SEED)
    if n_queries and n_queries < len(queries):
        queries = [queries[i] for i in sorted(rng.choice(len(queries), size=n_queries, replace=False))]
    kept = sorted({d for q in queries for d in relevant[q]})
    pool = sorted(set(data.corpus) - set(kept))
    drawn = [pool[i] for i in sorted(rng.choice(len(pool), size=min(others, len(pool)), replace=False))]
    doc_ids = kept + drawn
    docs = [data.corpus[d] for d in doc_ids]
    plan = chunking.split(encoders["chunk"], docs)
    long_rows = list(plan.chunked)
    fit_rows = [i for i in range(len(docs)) if i not in set(long_rows)]
    # texts that fit get the same vector under both settings (tests/core/test_long_text.py): embedded once
    query_texts = [data.queries[q] for q in queries]
    assert not chunking.split(encoders["chunk"], query_texts).chunked
    q_emb, _ = _encode(encoders["truncate"], query_texts, batch_size)
    fit_emb, _ = _encode(encoders["truncate"], [docs[i] for i in fit_rows], batch_size)
    row: dict[str, Any] = {
        "set": f"SciFact (nDCG@10, {len(queries)} q)",
        "max_length": max_length,
        "texts": len(docs),
        "longer": len(long_rows),
        "windows": _windows_per_long_text(plan),
    }
    qrels = {q: data.qrels[q] for q in queries}
    for mode, encoder in encoders.items():
        long_emb, seconds = _encode(encoder, [docs[i] for i in long_rows], batch_size)
        d_emb = np.empty((len(docs), q_emb.shape[1]), dtype=np.float32)
        d_emb[fit_rows], d_emb[long_rows] = fit_emb, long_emb
        ranked = rank_documents(cosine_similarity_matrix(q_emb, d_emb), doc_ids, top_k=100)
        row[mode] = 100 * retrieval_scores(dict(zip(queries, ranked, strict=True)), qrels)["ndcg_at_10"]
        row[f"{mode}_s"] = seconds
    return row


def to_markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| set | max_length | texts | longer | windows per long text | truncate | chunk | Δ | seconds truncate / chunk |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['max_length']} | {r['texts']} | {r['longer']} | {r['windows']:.1f} | "
            f"{r['truncate']:.2f} | {r['chunk']:.2f} | {r['chunk'] - r['truncate']:+.2f} | "
            f"{r['truncate_s']:.0f} / {r['chunk_s']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.long_text", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--model", default=None, help="a bundled model name or folder (default: the default model)"
    )
    parser.add_argument("--lee-lengths", default="64,128", help="comma-separated max_length values for Lee")
    parser.add_argument("--scifact-lengths", default="128,256,512", help="... for SciFact")
    parser.add_argument(
        "--queries",
        type=int,
        default=40,
        help="SciFact queries drawn (seeded) from those with a long relevant abstract; 0: all",
    )
    parser.add_argument(
        "--others", type=int, default=100, help="SciFact abstracts drawn (seeded) besides the relevant ones"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for name, lengths, measure in (
        ("lee", args.lee_lengths, lambda n: lee_row(n, args.batch_size, args.model)),
        (
            "scifact",
            args.scifact_lengths,
            lambda n: scifact_row(n, args.queries, args.others, args.batch_size, args.model),
        ),
    ):
        for max_length in (int(v) for v in lengths.split(",") if v.strip()):
            rows.append(measure(max_length))
            print(name, rows[-1], file=sys.stderr, flush=True)
    print(to_markdown(rows))
    return rows


if __name__ == "__main__":
    main()
