"""Peak RSS of valuelens's capture on a Llama-2-7B-shaped model on CPU, against the bare forward.

Usage::

    python -m bench.memory_7b                        # 28 layers (0-27) in bf16, 4 texts × 32 tokens
    python -m bench.memory_7b --tokens 128 --json out/memory_7b.json
    python -m bench.memory_7b --shape tiny --layers 3      # a dry run in seconds

A randomly initialised model of Llama-2-7B's shape (hidden 4096, MLP 11008, 32 heads, vocab 32000)
is built on the meta device with its first ``--layers`` decoder layers only and materialised in
bf16 (about 11.5 GB for 28 layers; :func:`bench.shapes.build_random_model`). Each row runs in a
fresh process on the same random token ids and reports the peak RSS of its forward (the kernel's
mark reset after loading) and of the whole process:

- ``bare-truncated``: the plain forward through layers 0-27, no hooks;
- ``va``: valuelens VA over layers 20-27 (the encoder's ``ForwardPass.run``);
- ``aligned-wva``: AlignedWVA(FutureEOL) at its ``auto`` layers for Llama-2-7B, capped to <= 27
  (the FutureEOL template only shapes tokenization: the inputs here are token ids already);
- ``hidden-states``: ``output_hidden_states=True`` and a mean of every layer, for contrast.

For the capture rows it also lists what the capture session still holds after the forward
(:func:`retained_tensors`): per-layer ``[B, F]`` vectors and ``[B, N]`` pooling weights, never a
``[B, N, d]`` tensor.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bench.child import run_child
from bench.measure import MemoryMeter, max_rss_mib
from bench.shapes import build_random_model, shape_config

SHAPE = "llama-2-7b"
ROWS = ["bare-truncated", "va", "aligned-wva", "hidden-states"]


class _Tokenizer:
    """Padding settings only: the inputs are token ids already."""

    pad_token_id = 0
    eos_token_id = 0
    padding_side = "right"


def retained_tensors(obj: Any, prefix: str = "session") -> dict[str, tuple[int, ...]]:
    """Every tensor reachable from a capture session (or a ``Capture``) through valuelens objects,
    dicts, lists and tuples, by path → shape. The model (modules, the instrumentation) is not walked.

    Usage: ``assert all(len(s) <= 2 for s in retained_tensors(session).values())``.
    """
    found: dict[str, tuple[int, ...]] = {}
    seen: set[int] = set()

    def walk(value: Any, path: str) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            found[path] = tuple(value.shape)
        elif isinstance(value, nn.Module) or "Instrumentation" in type(value).__name__:
            return
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}[{key!r}]")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")
        elif type(value).__module__.startswith("valuelens") and hasattr(value, "__dict__"):
            for key, item in vars(value).items():
                walk(item, f"{path}.{key}")

    walk(obj, prefix)
    return found


@contextlib.contextmanager
def keep_sessions(runner: Any) -> Iterator[list[Any]]:
    """Collect the capture sessions ``runner.run`` opens (its ``capture`` method, observed)."""
    sessions: list[Any] = []
    original = runner.capture

    @contextlib.contextmanager
    def capture(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with original(*args, **kwargs) as session:
            sessions.append(session)
            yield session

    runner.capture = capture
    try:
        yield sessions
    finally:
        del runner.capture


def _batch(texts: int, tokens: int, vocab: int, seed: int) -> Any:
    from valuelens.tokenization import Batch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (texts, tokens), generator=generator)
    mask = torch.ones_like(ids)
    positions = torch.arange(tokens).expand(texts, -1).contiguous()
    return Batch(ids, mask, positions, torch.zeros(texts, dtype=torch.long), torch.full((texts,), tokens))


def auto_layers(recipe: str, keep: int, shape: str = SHAPE) -> tuple[int, ...]:
    """``recipe``'s ``auto`` layers on the full ``shape`` (20-27 for Llama-2-7B), capped below ``keep``."""
    from valuelens.layers import default_layers
    from valuelens.recipes import get_recipe

    config = shape_config(shape)
    auto = default_layers(get_recipe(recipe), config.model_type, config.num_hidden_layers, config.hidden_size)
    return tuple(layer for layer in auto if layer < keep) or (keep - 1,)


def run_one(
    row: str, *, layers: int, texts: int, tokens: int, seed: int, shape: str = SHAPE
) -> dict[str, Any]:
    """Build the model, then run ``row`` once; peak RSS of the forward and of the process."""
    from valuelens import Encoder

    start = time.perf_counter()
    model = build_random_model(shape, dtype=torch.bfloat16, device="cpu", layers=layers, seed=seed)
    build_s = time.perf_counter() - start
    batch = _batch(texts, tokens, int(model.config.vocab_size), seed)
    inputs = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids,
    }
    encoder = None
    if row == "va":
        encoder = Encoder(model, _Tokenizer(), recipe="va", layers=auto_layers("va", layers, shape))
    elif row == "aligned-wva":
        layers_used = auto_layers("aligned-wva", layers, shape)
        encoder = Encoder(model, _Tokenizer(), recipe="aligned-wva", prompt="futureeol", layers=layers_used)
    gc.collect()
    meter = MemoryMeter(torch.device("cpu"))
    start = time.perf_counter()
    retained: dict[str, tuple[int, ...]] = {}
    with torch.inference_mode():
        if encoder is not None:
            with keep_sessions(encoder.runner) as sessions:
                out = encoder.runner.run(batch, encoder.readouts)[0]
            retained = retained_tensors(sessions[0])
            shape = tuple(out.shape)
        elif row == "hidden-states":
            hidden = model(**inputs, use_cache=False, output_hidden_states=True).hidden_states
            shape = tuple(torch.stack([h.float().mean(1) for h in hidden[1:]]).mean(0).shape)
        else:
            shape = tuple(model(**inputs, use_cache=False).last_hidden_state.shape)
    forward_s = time.perf_counter() - start
    memory = meter.read()
    parameters = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    layers_used = encoder.layers if encoder is not None else tuple(range(layers))
    return {
        "row": row,
        "layers": [min(layers_used), max(layers_used)],
        "output": list(shape),
        "weights_mib": round(parameters, 1),
        "build_s": round(build_s, 1),
        "forward_s": round(forward_s, 1),
        **memory,
        "process_peak_mib": round(max_rss_mib(), 1),
        "retained": {path: list(s) for path, s in retained.items()},
        "retained_3d": [path for path, s in retained.items() if len(s) >= 3],
    }


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.memory_7b", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--layers", type=int, default=28, help="decoder layers to materialise (28: layers 0-27)"
    )
    parser.add_argument("--texts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32, help="tokens per text")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--shape", default=SHAPE, help="a shape of bench.shapes.SHAPES ('tiny' for a dry run)"
    )
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    options = {
        "layers": args.layers,
        "texts": args.texts,
        "tokens": args.tokens,
        "seed": args.seed,
        "shape": args.shape,
    }
    if args.one:
        print(json.dumps(run_one(args.one, **options)))
        return None
    results = []
    for row in args.rows.split(","):
        result = run_child(
            ["-m", "bench.memory_7b", "--one", row, *(f"--{k}={v}" for k, v in options.items())]
        )
        if "failed" in result:
            result = {"row": row, **result}
        results.append(result)
        print(f"  {row}: {result.get('peak_mib', result.get('failed'))}", file=sys.stderr, flush=True)
    report = {"options": options, "rows": results}
    print(to_markdown(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def to_markdown(report: dict[str, Any]) -> str:
    o = report["options"]
    base = next((r for r in report["rows"] if r.get("row") == "bare-truncated" and "peak_mib" in r), None)
    lines = [
        f"{o['shape']} shape, layers 0–{o['layers'] - 1} materialised in bf16 on CPU; {o['texts']} texts × "
        f"{o['tokens']} tokens; a fresh process per row; peak = VmHWM of the forward (reset after loading)",
        "",
        "| row | layers | weights MiB | RSS after load MiB | forward peak MiB | × bare truncated | extra over load MiB | extra × bare | process peak MiB | forward s | tensors the capture keeps |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["rows"]:
        if "failed" in r:
            lines.append(f"| {r['row']} | failed: {r['failed']} | | | | | | | | | |")
            continue
        ratio = f"{r['peak_mib'] / base['peak_mib']:.4f}" if base else ""
        extra = f"{r['extra_mib'] / base['extra_mib']:.2f}" if base and base["extra_mib"] > 0 else ""
        kept = ""
        if r["retained"]:
            shapes = sorted({tuple(s) for s in r["retained"].values()})
            kept = f"{len(r['retained'])} tensors, shapes {', '.join(map(str, shapes))}; 3-D: {len(r['retained_3d'])}"
        lines.append(
            f"| {r['row']} | {r['layers'][0]}–{r['layers'][1]} | {r['weights_mib']:.0f} | {r['loaded_mib']:.0f} | "
            f"{r['peak_mib']:.0f} | {ratio} | {r['extra_mib']:.0f} | {extra} | {r['process_peak_mib']:.0f} | "
            f"{r['forward_s']:.0f} | {kept} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
