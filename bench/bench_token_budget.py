"""Token-budget batching against fixed batch sizes, on a realistic length mix, in one process.

Usage: ``python bench/bench_token_budget.py [--model smollm2-135m] [--sentences 384] [--abstracts 64]``

The mix is STS-B test sentences (~12 tokens) and SciFact abstracts (~300 tokens) from ``data/``,
shuffled with a fixed seed. Each row embeds the same texts with recipe ``va`` (the default model's
auto layers), after one warm-up call; the table gives seconds, texts/s and the ratio to the first row.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from pathlib import Path

import valuelens

ROOT = Path(__file__).resolve().parents[1]


def length_mix(n_sentences: int, n_abstracts: int, seed: int = 0) -> list[str]:
    """STS-B test sentences and SciFact abstracts, shuffled."""
    with (ROOT / "data/stsb/test.jsonl").open(encoding="utf-8") as f:
        sentences = [json.loads(line)["sentence1"] for line in f][:n_sentences]
    with gzip.open(ROOT / "data/scifact/corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        abstracts = [json.loads(line)["text"] for _, line in zip(range(n_abstracts), f, strict=False)]
    texts = sentences + abstracts
    random.Random(seed).shuffle(texts)
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--sentences", type=int, default=384)
    parser.add_argument("--abstracts", type=int, default=64)
    args = parser.parse_args()
    texts = length_mix(args.sentences, args.abstracts)
    encoder = valuelens.Encoder.from_pretrained(args.model, recipe="va", device="cpu")
    rows = [("batch_size=32", {"batch_size": 32}), ("batch_size=8", {"batch_size": 8})]
    rows += [
        (f"batch_size=64, max_tokens_per_batch={budget}", {"batch_size": 64, "max_tokens_per_batch": budget})
        for budget in (2048, 4096)
    ]
    encoder.encode(texts[:16])  # warm-up
    first = None
    print(
        f"{len(texts)} texts ({args.sentences} STS-B sentences, {args.abstracts} SciFact abstracts), {encoder!r}"
    )
    print("| batching | seconds | texts/s | speed vs first row |\n|---|---:|---:|---:|")
    for label, kwargs in rows:
        start = time.perf_counter()
        encoder.encode(texts, **kwargs)
        seconds = time.perf_counter() - start
        first = first or seconds
        print(f"| {label} | {seconds:.1f} | {len(texts) / seconds:.1f} | {first / seconds:.2f} |")


if __name__ == "__main__":
    main()
