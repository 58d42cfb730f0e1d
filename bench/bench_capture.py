"""Speed and memory of valuelens's capture against the obvious alternatives, side by side in one run.

Usage: ``python bench/bench_capture.py [--model smollm2-135m] [--texts 256] [--batch-size 32]``

Each configuration runs in a fresh subprocess (so peak RSS is its own) over the same texts:

- ``plain``: the backbone forward alone, no pooling (the floor);
- ``hidden_states``: ``output_hidden_states=True`` then mean-pool every layer (the naive HS path);
- ``valuelens hs (all layers)``: the same embeddings through valuelens's hooks;
- ``valuelens va (all layers)`` / ``va (band)``: value vectors, all layers / the default band (early exit);
- ``eager attentions``: ``output_attentions=True`` under eager attention (what WVA(LT) needs naively);
- ``valuelens wva-lt (all layers)``: last-token attention probabilities computed for one row only.

Times are the median of ``--repeats`` passes over all texts after one warm-up; ratios are to ``plain``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

CONFIGS = [
    "plain",
    "hidden_states",
    "valuelens hs (all layers)",
    "valuelens va (all layers)",
    "valuelens va (band)",
    "eager attentions",
    "valuelens wva-lt (all layers)",
]


def _texts(n: int) -> list[str]:
    import json as _json
    from pathlib import Path

    rows = [
        _json.loads(line)
        for line in (Path(__file__).parents[1] / "data/stsb/test.jsonl").read_text().splitlines()
    ]
    texts = list(dict.fromkeys(t for r in rows for t in (r["sentence1"], r["sentence2"])))
    return texts[:n]


def run_one(config: str, model_name: str, n: int, batch_size: int, repeats: int) -> dict:
    import torch

    import valuelens

    torch.set_num_threads(max(1, torch.get_num_threads()))
    texts = _texts(n)
    enc = valuelens.Encoder.from_pretrained(model_name, recipe="hs", layers="all", truncate_layers=False)
    model, tok = enc.model, enc.tokenizer
    if config == "eager attentions":
        model.set_attn_implementation("eager")
    encoders = {
        "valuelens hs (all layers)": valuelens.Encoder(model, tok, recipe="hs", layers="all"),
        "valuelens va (all layers)": valuelens.Encoder(model, tok, recipe="va", layers="all"),
        "valuelens va (band)": valuelens.Encoder(model, tok, recipe="va", layers="band"),
        "valuelens wva-lt (all layers)": valuelens.Encoder(model, tok, recipe="wva-lt", layers="all"),
    }
    batches = []
    items, _ = enc.tokenize(texts)
    order = sorted(range(len(items)), key=lambda i: -len(items[i].ids))
    for start in range(0, len(order), batch_size):
        batches.append(enc.collate([items[i] for i in order[start : start + batch_size]]))

    def once() -> None:
        with torch.inference_mode():
            if config in encoders:
                for batch in batches:
                    encoders[config].embed_batch(batch)
                return
            for b in batches:
                kwargs = {
                    "input_ids": b.input_ids,
                    "attention_mask": b.attention_mask,
                    "position_ids": b.position_ids,
                    "use_cache": False,
                }
                if config == "plain":
                    model(**kwargs)
                elif config == "hidden_states":
                    out = model(**kwargs, output_hidden_states=True)
                    w = b.attention_mask.unsqueeze(-1).float()
                    _ = [(h.float() * w).sum(1) / w.sum(1) for h in out.hidden_states[1:]]
                elif config == "eager attentions":
                    out = model(**kwargs, output_attentions=True)
                    _ = [a[:, :, -1].float().mean(1) for a in out.attentions]

    once()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    return {
        "config": config,
        "seconds": statistics.median(times),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.model, args.texts, args.batch_size, args.repeats)))
        return
    rows = []
    for config in CONFIGS:
        cmd = [
            sys.executable,
            __file__,
            "--one",
            config,
            "--model",
            args.model,
            "--texts",
            str(args.texts),
            "--batch-size",
            str(args.batch_size),
            "--repeats",
            str(args.repeats),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        rows.append(json.loads(out))
    base = rows[0]
    print(
        f"model {args.model}; {args.texts} STS-B texts; batch {args.batch_size}; median of {args.repeats}\n"
    )
    print("| configuration | seconds | × plain | peak RSS MiB | × plain |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['config']} | {r['seconds']:.2f} | {r['seconds'] / base['seconds']:.2f} | {r['peak_rss_mib']:.0f} | {r['peak_rss_mib'] / base['peak_rss_mib']:.2f} |"
        )


if __name__ == "__main__":
    main()
