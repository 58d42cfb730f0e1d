"""GPU speed/memory of valuelens capture on randomly initialised models of real sizes (bf16).

Usage (on a CUDA machine): ``python bench/gpu_bench.py``. For each size: the plain forward, the
``output_hidden_states`` path, valuelens VA over all layers, VA over the 50-85 % band (early exit)
and WVA(LT); median time of 5 and peak CUDA memory, ratios to the plain forward, one table.
"""

from __future__ import annotations

import statistics
import time

import torch
from transformers import AutoModel, LlamaConfig, Qwen2Config

import valuelens
from valuelens.tokenization import Batch

SIZES = {
    "llama-1.1B (TinyLlama shape)": LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
    ),
    "qwen2-7B shape": Qwen2Config(
        vocab_size=32000,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
    ),
}


def _time(fn) -> tuple[float, float]:
    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), torch.cuda.max_memory_allocated() / 2**30


class _Tok:  # token ids are random: a minimal stand-in for padding settings only
    pad_token_id = 0
    eos_token_id = 0
    padding_side = "right"


def bench_size(name: str, config) -> None:
    """Print one table row per configuration for a randomly initialised model of ``config``'s size."""
    torch.manual_seed(0)
    model = AutoModel.from_config(config, dtype=torch.bfloat16).cuda().eval()
    b, n = 64, 128
    ids = torch.randint(1, config.vocab_size, (b, n), device="cuda")
    mask = torch.ones_like(ids)
    lengths = torch.randint(n // 2, n + 1, (b,))
    for row, length in enumerate(lengths):
        mask[row, length:] = 0
    positions = (mask.cumsum(1) - 1).clamp_min(0)
    batch = Batch(ids.cpu(), mask.cpu(), positions.cpu(), torch.zeros(b, dtype=torch.long), lengths)
    specs = ("va all", "va band", "wva-lt all", "hs all")
    encoders = {s: valuelens.Encoder(model, _Tok(), recipe=s.split()[0], layers=s.split()[1]) for s in specs}

    def plain() -> None:
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=mask, use_cache=False)

    def hidden() -> None:
        with torch.inference_mode():
            out = model(input_ids=ids, attention_mask=mask, use_cache=False, output_hidden_states=True)
            w = mask.unsqueeze(-1).float()
            torch.stack([(h.float() * w).sum(1) / w.sum(1) for h in out.hidden_states[1:]]).mean(0)

    def capture(encoder: valuelens.Encoder) -> None:
        with torch.inference_mode():
            encoder.embed_batch(batch)

    rows = {"plain forward": _time(plain), "output_hidden_states + mean": _time(hidden)}
    for label, encoder in encoders.items():
        rows[f"valuelens {label}"] = _time(lambda encoder=encoder: capture(encoder))
    base = rows["plain forward"]
    for label, (sec, mem) in rows.items():
        print(
            f"| {name} | {label} | {1000 * sec:.1f} | {sec / base[0]:.2f} | {mem:.2f} | {mem / base[1]:.2f} |"
        )


def main() -> None:
    print("| model | configuration | ms | × plain | peak GiB | × plain |\n|---|---|---:|---:|---:|---:|")
    for name, config in SIZES.items():
        bench_size(name, config)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
