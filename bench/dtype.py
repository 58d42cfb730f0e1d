"""bf16 against fp32 on CPU: speed on the length mix and the STS-B test score, per model.

Usage::

    python -m bench.dtype --models smollm2-135m,gemma3-270m,qwen2.5-coder-0.5b --texts 32 --limit 100

Each (model, dtype) runs in a fresh process: ``Encoder.from_pretrained(model, recipe="aligned-wva",
prompt="futureeol", dtype=...)``, one warm-up batch, then the timed encode of the mix
(:func:`bench.texts.length_mix`), then ``valuelens.evaluation.evaluate(encoder, "stsb",
limit=...)`` (a seeded subsample of the test pairs, the same for both dtypes; Spearman of cosines
×100). The table gives texts/s, bf16's speed relative to fp32, both scores and their difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from bench.child import run_child
from bench.measure import MemoryMeter
from bench.texts import length_mix

MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]
DTYPES = ["float32", "bfloat16"]


def run_one(
    model: str, dtype: str, *, texts: int, limit: int, batch_size: int, recipe: str, prompt: str
) -> dict[str, Any]:
    from valuelens import Encoder, TruncationWarning
    from valuelens.evaluation import evaluate

    encoder = Encoder.from_pretrained(model, recipe=recipe, prompt=prompt, device="cpu", dtype=dtype)
    mix = length_mix(texts)
    meter = MemoryMeter(torch.device("cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        encoder.encode(mix[:batch_size], batch_size=batch_size)
        start = time.perf_counter()
        encoder.encode(mix, batch_size=batch_size)
        seconds = time.perf_counter() - start
    memory = meter.read()
    start = time.perf_counter()
    result = evaluate(encoder, "stsb", limit=limit, batch_size=batch_size) if limit else None
    return {
        "model": model,
        "dtype": dtype,
        "layers": list(encoder.layers),
        "texts": len(mix),
        "seconds": round(seconds, 3),
        "texts_per_s": len(mix) / seconds,
        "peak_mib": memory["peak_mib"],
        "loaded_mib": memory["loaded_mib"],
        "stsb": 100 * result.main_score if result is not None else None,
        "stsb_pairs": result.n_examples if result is not None else 0,
        "stsb_seconds": round(time.perf_counter() - start, 1),
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]] | None:
    parser = argparse.ArgumentParser(prog="python -m bench.dtype", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--texts", type=int, default=32, help="texts of the length mix timed")
    parser.add_argument(
        "--limit", type=int, default=100, help="STS-B test pairs scored (seeded subsample; 0: speed only)"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--recipe", default="aligned-wva")
    parser.add_argument("--prompt", default="futureeol")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    options = {
        "texts": args.texts,
        "limit": args.limit,
        "batch_size": args.batch_size,
        "recipe": args.recipe,
        "prompt": args.prompt,
    }
    report_options = {**options, "threads": args.threads}
    if args.one:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        if args.threads:
            torch.set_num_threads(args.threads)
        print(json.dumps(run_one(*args.one, **options)))
        return None
    results = []
    for model in args.models.split(","):
        for dtype in args.dtypes.split(","):
            command = ["-m", "bench.dtype", "--one", model, dtype]
            command += [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
            command += [f"--threads={args.threads}"] if args.threads else []
            result = run_child(command)
            if "failed" in result:
                result = {"model": model, "dtype": dtype, **result}
            results.append(result)
            print(
                f"  {model} {dtype}: {result.get('texts_per_s', result.get('failed'))}",
                file=sys.stderr,
                flush=True,
            )
    print(to_markdown(results, report_options))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"options": report_options, "rows": results}, indent=2) + "\n", encoding="utf-8"
        )
    return results


def to_markdown(results: list[dict[str, Any]], options: dict[str, Any]) -> str:
    lines = [
        f"recipe {options['recipe']} ({options['prompt']}); speed on {options['texts']} mixed texts; "
        f"STS-B test, {options['limit']} seeded pairs, Spearman ×100; a fresh process each; "
        f"torch threads: {options.get('threads') or 'default'}",
        "",
        "| model | dtype | texts/s | speed × fp32 | peak MiB | STS-B | Δ vs fp32 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    fp32 = {r["model"]: r for r in results if r.get("dtype") == "float32" and "failed" not in r}
    for r in results:
        if "failed" in r:
            lines.append(f"| {r['model']} | {r['dtype']} | failed: {r['failed']} | | | | |")
            continue
        base = fp32.get(r["model"])
        speed = f"{r['texts_per_s'] / base['texts_per_s']:.2f}" if base else ""
        scored = r["stsb"] is not None and base is not None and base["stsb"] is not None
        delta = f"{r['stsb'] - base['stsb']:+.2f}" if scored else ""
        score = f"{r['stsb']:.2f}" if r["stsb"] is not None else "not scored"
        lines.append(
            f"| {r['model']} | {r['dtype']} | {r['texts_per_s']:.2f} | {speed} | {r['peak_mib']:.0f} | {score} | {delta} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
