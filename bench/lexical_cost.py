"""What the lexical part costs at encode time: one encoder per variant of a preset (its lexical part off,
the BM25 part, the input-embedding part), the same texts, timed in turns in one process so that the ratios
compare like with like; vector sizes beside them.

Each variant encodes ``--texts`` texts of :func:`bench.texts.length_mix` as documents (the BM25 part's
document side: analysis, weights, hashing, padding) ``--repeats`` times, interleaved (A B C A B C ...),
after a warm-up; the best of the repeats is kept. The whole encode is dominated by the forward pass, whose
noise can exceed the part's cost, so the part's own work (``Encoder.lexical_part``) is timed apart too. The BM25 statistics are built before timing (they are
counted once and cached: a one-off, reported apart).

Usage::

    python -m bench.lexical_cost smollm2-135m --texts 96 --repeats 3 --out research/results/lexical-cost-smollm2-135m.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from bench.texts import length_mix
from valuelens import Encoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--preset", default="best")
    parser.add_argument("--texts", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    texts = length_mix(args.texts)
    shipped = Encoder.from_pretrained(args.model, preset=args.preset)
    base = shipped.config.replace(lexical=None, lexical_query=None)
    variants = {
        "lexical part off": base,
        "BM25 part (lexical_kind='bm25', 0.05 / 0.7)": base.replace(
            lexical=0.05, lexical_query=0.7, lexical_kind="bm25"
        ),
        "input-embedding part (lexical_kind='embeddings', 0.2 / 0.95)": base.replace(
            lexical=0.2, lexical_query=0.95, lexical_kind="embeddings"
        ),
    }
    encoders: dict[str, Encoder] = {}
    setup: dict[str, float] = {}
    for name, config in variants.items():
        tick = time.perf_counter()
        encoders[name] = Encoder(shipped.model, shipped.tokenizer, config)
        encoders[name].encode(texts[:8], batch_size=args.batch_size)  # warm-up; builds the lexical state
        setup[name] = round(time.perf_counter() - tick, 2)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, encoder in encoders.items():
            tick = time.perf_counter()
            encoder.encode(texts, batch_size=args.batch_size)
            seconds[name].append(time.perf_counter() - tick)
    # the part's own work (analysis, weights, hashing, join inputs), apart from the forward's noise
    lexical_seconds = {
        name: min(_timed(lambda e=encoder: e.lexical_part(texts)) for _ in range(args.repeats))
        for name, encoder in encoders.items()
        if encoder.config.lexical is not None
    }
    off = min(seconds["lexical part off"])
    rows = [
        {
            "variant": name,
            "dimension": encoders[name].dimension,
            "best_seconds": round(min(s), 3),
            "texts_per_second": round(len(texts) / min(s), 2),
            "throughput_vs_off": round(off / min(s), 3),
            "first_use_seconds": setup[name],
            "lexical_part_seconds": round(lexical_seconds[name], 3) if name in lexical_seconds else 0.0,
        }
        for name, s in seconds.items()
    ]
    out = {
        "model": args.model,
        "preset": args.preset,
        "texts": len(texts),
        "repeats": args.repeats,
        "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "rows": rows,
    }
    for row in rows:
        print(row)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


def _timed(run) -> float:
    tick = time.perf_counter()
    run()
    return time.perf_counter() - tick


if __name__ == "__main__":
    main()
