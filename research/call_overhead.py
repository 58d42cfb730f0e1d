"""What batching can gain on this CPU, by text length: single texts of 4–256 words timed alone (the
line t(L) = a + b·L fitted to them), and 8 equal texts in one forward against 8 forwards at 8, 32 and
256 words. Short texts gain from fewer calls and wider matrices; a text that fills the cores by itself
gains nothing, whichever server batches it.

Usage::

    python research/call_overhead.py smollm2-135m --threads 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from valuelens import Encoder

WORDS = ("the quick brown fox jumps over the lazy dog and keeps running through the field " * 60).split()


def text(n: int) -> str:
    return " ".join(WORDS[:n])


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        tick = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tick)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--preset", default="best")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    encoder = Encoder.from_pretrained(args.model, preset=args.preset)
    words = [4, 16, 32, 64, 128, 256]
    tokens = np.array([len(encoder.tokenizer(text(n))["input_ids"]) for n in words])
    encoder.encode([text(n) for n in words])  # warm-up
    seconds = np.array([best_of(lambda n=n: encoder.encode([text(n)]), args.repeats) for n in words])
    for n, t in zip(tokens, seconds, strict=True):
        print(f"{n:4d} tokens (without the prompt): {1000 * t:7.1f} ms")
    b, a = np.polyfit(tokens, seconds, 1)
    print(f"a = {1000 * a:.1f} ms per call, b = {1000 * b:.3f} ms per token: a / b = {a / b:.1f} tokens")
    for n in (8, 32, 256):
        batch = best_of(lambda n=n: encoder.encode([text(n)] * 8), args.repeats)
        calls = best_of(lambda n=n: [encoder.encode([text(n)]) for _ in range(8)], args.repeats)
        print(
            f"8 texts of {n} words: one call {1000 * batch:.0f} ms, 8 calls {1000 * calls:.0f} ms: {calls / batch:.2f}x"
        )


if __name__ == "__main__":
    main()
