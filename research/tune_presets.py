"""Score candidate specs on STS-B **dev** (never test) for one model: the search behind ``preset="best"``.

Usage::

    python research/tune_presets.py --model smollm2-135m --grid grids/smollm2.json --out research/rounds/smollm2-135m-dev.json

The grid is a JSON list of ``EncoderConfig`` dicts (``"postprocess"`` may name a kind such as
``"abtt:1"``, fitted here on STS-B **train** sentences). Specs that share a forward pass run together
(:func:`valuelens.encode_many`). Prints and writes one row per spec: dev Spearman ×100, ms/text.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from valuelens import Encoder, EncoderConfig, encode_many, models
from valuelens.evaluation.metrics import paired_cosine
from valuelens.evaluation.tasks import find_set
from valuelens.loading import load_model


def stsb_pairs(split: str, limit: int | None) -> tuple[list[str], list[str], np.ndarray]:
    """STS-B ``split`` as (sentence1s, sentence2s, gold scores); with ``limit``, a seeded sample of pairs."""
    rows = [json.loads(line) for line in (find_set("stsb") / f"{split}.jsonl").read_text().splitlines()]
    if limit and limit < len(rows):  # a seeded sample across the genres (the file is sorted by genre)
        keep = sorted(np.random.default_rng(0).choice(len(rows), limit, replace=False))
        rows = [rows[i] for i in keep]
    return (
        [r["sentence1"] for r in rows],
        [r["sentence2"] for r in rows],
        np.array([r["score"] for r in rows]),
    )


def train_sentences(n: int | None) -> list[str]:
    """``n`` seeded distinct STS-B train sentences (unlabeled; all when ``None``), to fit a post-processing on."""
    rows = [json.loads(x) for x in (find_set("stsb") / "train.jsonl").read_text().splitlines()]
    pool = list(dict.fromkeys(t for r in rows for t in (r["sentence1"], r["sentence2"])))
    if n is None:
        return pool
    return [pool[i] for i in sorted(np.random.default_rng(0).choice(len(pool), n, replace=False))]


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic) * 100


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--grid", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--limit", type=int, default=None, help="a seeded sample of N pairs")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--train-texts", type=int, default=2000)
    args = parser.parse_args()
    torch.manual_seed(0)
    grid = json.loads(Path(args.grid).read_text())
    model, tokenizer = load_model(models.path(args.model), device="cpu")
    s1, s2, gold = stsb_pairs(args.split, args.limit)
    texts = list(dict.fromkeys(s1 + s2))
    index = {t: i for i, t in enumerate(texts)}
    a, b = [index[t] for t in s1], [index[t] for t in s2]
    specs, post = [], []
    for entry in grid:
        entry = dict(entry)
        post.append(entry.pop("postprocess", None))
        specs.append(EncoderConfig.from_dict(entry))
    encoders = [Encoder(model, tokenizer, spec, name_or_path=args.model) for spec in specs]
    start = time.perf_counter()
    vectors = encode_many(encoders, texts, batch_size=32, max_tokens_per_batch=4096, show_progress=True)
    elapsed = time.perf_counter() - start
    rows = []
    fit_on = [i for i, pp in enumerate(post) if pp]
    train_vecs: dict[int, np.ndarray] = {}
    if fit_on:  # unlabeled STS-B train sentences, embedded only by the specs that fit a post-processing
        train = train_sentences(args.train_texts)
        fitted_vecs = encode_many(
            [encoders[i] for i in fit_on], train, batch_size=32, max_tokens_per_batch=4096
        )
        train_vecs = {i: np.asarray(v) for i, v in zip(fit_on, fitted_vecs, strict=True)}
    default = EncoderConfig().to_dict()
    for i, (spec, vec, pp) in enumerate(zip(specs, vectors, post, strict=True)):
        emb = np.asarray(vec, dtype=np.float64)
        if pp:
            from valuelens.postprocess import Postprocess

            kind, _, param = pp.partition(":")
            kw = {"k": int(param)} if kind == "abtt" and param else {"dim": int(param)} if param else {}
            fitted = Postprocess.fit(train_vecs[i], kind=kind, **kw)
            emb = fitted.transform(torch.from_numpy(emb).float()).numpy()
        score = _spearman(paired_cosine(emb[a], emb[b]), gold)
        shown = {k: v for k, v in spec.to_dict().items() if v != default[k] or k == "recipe"}
        label = json.dumps({**shown, **({"postprocess": pp} if pp else {})})
        rows.append({"spec": {**spec.to_dict(), "postprocess": pp}, "score": score, "label": label})
        print(f"{score:6.2f}  {label}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {"model": args.model, "split": args.split, "limit": args.limit, "seconds": elapsed, "rows": rows},
            indent=1,
        )
    )
    print(f"{len(texts)} texts, {elapsed:.0f} s for {len(specs)} specs")


if __name__ == "__main__":
    main()
