"""The per-model ``layers="auto"`` bands (:func:`valuelens.layers.default_layers` reads them).

Usage: ``AUTO_LAYERS[("llama", 30, 576)]["aligned-wva"]`` → ``(21, ..., 27)``.

Keyed by model (:func:`valuelens.architectures.model_key`), then by recipe name (``"*"``: every
recipe without its own entry). The first two come from the Value Aggregation paper; the bundled
models' bands were chosen on STS-B dev (never test) with ``valuelens sweep --propose`` as the best
contiguous band of at least three layers (the sweeps and scores: research/rounds/README.md, research/sweeps/).
Data only: no valuelens imports.
"""

from __future__ import annotations

__all__ = ["AUTO_LAYERS"]

AUTO_LAYERS: dict[tuple[str, int, int], dict[str, tuple[int, ...]]] = {
    ("llama", 32, 4096): {"*": tuple(range(20, 28))},  # Llama-2-7B: layers 20-27 (the paper)
    ("qwen3", 36, 4096): {"*": (26, 27, 29, 30, 31)},  # Qwen3-8B (the paper)
    ("llama", 30, 576): {  # SmolLM2-135M
        "*": (21, 22, 23),
        "hs": (8, 9, 10),
        "aligned-wva": tuple(range(21, 28)),
    },
    ("gemma3_text", 18, 640): {  # gemma-3-270m
        "*": tuple(range(10, 16)),
        "va": tuple(range(16)),
        "hs": tuple(range(13, 18)),
        "wva-lt": (10, 11, 12),
        "aligned-wva": (12, 13, 14, 15),
        "wva": (13, 14, 15),
    },
    ("qwen2", 24, 896): {  # Qwen2.5-Coder-0.5B
        "*": (18, 19, 20),
        "va": (19, 20, 21, 22),
        "aligned-va": (19, 20, 21),
        "hs": (21, 22, 23),
    },
}
