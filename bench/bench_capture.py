"""Speed and memory of valuelens's capture against the obvious alternatives, side by side in one run.

Usage: ``python bench/bench_capture.py [--model smollm2-135m] [--texts 64] [--source scifact]``

Each configuration runs in a fresh subprocess over the same texts:

- ``plain``: the backbone forward alone, no pooling (the floor);
- ``hidden_states``: ``output_hidden_states=True`` then mean-pool every layer (the naive HS path);
- ``valuelens hs (all layers)``: the same embeddings through valuelens's hooks;
- ``valuelens va (all layers)`` / ``va (band)``: value vectors, all layers / the 50-85 % band (early exit);
- ``eager attentions``: ``output_attentions=True`` under eager attention (what WVA(LT) needs naively);
- ``valuelens wva-lt (all layers)``: last-token attention probabilities computed for one row only.

Each configuration runs twice (interleaved with the others) and its faster run counts; a run is the
best of ``--repeats`` passes over all texts after one warm-up. Memory is the peak resident memory
above the resident memory after the warm-up (the kernel's peak mark is reset there): what the forward
and the pooling add on top of the loaded model. Ratios are to ``plain``.
"""

from __future__ import annotations

import argparse
import json
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


def _texts(n: int, source: str) -> list[str]:
    """``n`` real texts: STS-B test sentences (short) or SciFact abstracts (long)."""
    from valuelens.evaluation import load_task

    if source == "scifact":
        corpus = load_task("scifact").load("test").corpus
        return [t for t in corpus.values() if t.strip()][:n]
    data = load_task("stsb").load("test")
    return list(dict.fromkeys([*data.texts1, *data.texts2]))[:n]


def _status(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak_rss() -> int:
    """Reset the kernel's peak-RSS mark (Linux ``clear_refs``) and return the current RSS in KiB."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    return _status("VmRSS")


def run_one(config: str, model_name: str, n: int, batch_size: int, repeats: int, source: str) -> dict:
    import torch

    import valuelens

    texts = _texts(n, source)
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
    items, _ = enc.tokenize(texts)
    order = sorted(range(len(items)), key=lambda i: -len(items[i].ids))
    batches = [
        enc.collate([items[i] for i in order[s : s + batch_size]]) for s in range(0, len(order), batch_size)
    ]

    def once() -> None:
        with torch.inference_mode():
            for b in batches:
                if config in encoders:
                    encoders[config].embed_batch(b)
                    continue
                inputs = {
                    "input_ids": b.input_ids,
                    "attention_mask": b.attention_mask,
                    "position_ids": b.position_ids,
                }
                if config == "plain":
                    model(**inputs, use_cache=False)
                elif config == "hidden_states":
                    out = model(**inputs, use_cache=False, output_hidden_states=True)
                    w = b.attention_mask.unsqueeze(-1).float()
                    _ = [(h.float() * w).sum(1) / w.sum(1) for h in out.hidden_states[1:]]
                else:  # eager attentions
                    out = model(**inputs, use_cache=False, output_attentions=True)
                    _ = [a[:, :, -1].float().mean(1) for a in out.attentions]

    once()  # warm-up
    baseline = _reset_peak_rss()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    return {"config": config, "seconds": min(times), "peak_extra_mib": (_status("VmHWM") - baseline) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--source", choices=["stsb", "scifact"], default="scifact", help="short sentences or long abstracts"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(
            json.dumps(run_one(args.one, args.model, args.texts, args.batch_size, args.repeats, args.source))
        )
        return
    best: dict[str, dict] = {}
    for _ in range(2):  # two rounds, configurations interleaved; the faster run of each counts
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
            ]
            cmd += [
                "--batch-size",
                str(args.batch_size),
                "--repeats",
                str(args.repeats),
                "--source",
                args.source,
            ]
            out = json.loads(
                subprocess.run(cmd, capture_output=True, text=True, check=True)
                .stdout.strip()
                .splitlines()[-1]
            )
            if config not in best or out["seconds"] < best[config]["seconds"]:
                best[config] = out
    base = best["plain"]
    print(f"```\npython bench/bench_capture.py {' '.join(sys.argv[1:])}\n```\n")
    print(
        f"model {args.model}; {args.texts} {args.source} texts; batch {args.batch_size}; best of 2 x {args.repeats} passes\n"
    )
    print("| configuration | seconds | × plain | extra peak RSS MiB |")
    print("|---|---:|---:|---:|")
    for config in CONFIGS:
        r = best[config]
        print(
            f"| {config} | {r['seconds']:.2f} | {r['seconds'] / base['seconds']:.2f} | {r['peak_extra_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
