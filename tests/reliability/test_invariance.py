"""Batch and padding invariance for every recipe: a text alone equals the same text inside a batch.

tests/core/test_encoder.py covers ``va`` across batch sizes and four recipes across padding sides on
every family; here every recipe of ``valuelens.RECIPES`` runs on one family, with and without a
prompt, in fp32 and bf16: alone (no padding) vs batches of 1, 7 and 64 texts of mixed lengths, with
right and left padding. The bar is a cosine of 0.99999 in fp32 and 0.999 in bf16.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tiny_models import CORPUS, build_tiny_model
from valuelens import RECIPES, Encoder

# 70 texts from 1 to ~60 tokens: batches of 64 mix lengths and leave a short last batch
TEXTS = [" ".join(CORPUS[j % len(CORPUS)] for j in range(i % 5 + 1))[: 3 + (i * 37) % 280] for i in range(70)]
ALONE = [0, 1, 13, 42, 55, 69]  # the texts embedded on their own (batch size 1: no padding)
BAR = {torch.float32: 0.99999, torch.bfloat16: 0.999}


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (a64 * b64).sum(-1) / (np.linalg.norm(a64, axis=-1) * np.linalg.norm(b64, axis=-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("prompt", [None, "prompteol"])
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_alone_equals_in_batch(tiny_tokenizer, recipe, prompt, dtype):
    model = build_tiny_model("llama", len(tiny_tokenizer), head=False).to(dtype)
    enc = Encoder(model, tiny_tokenizer, recipe=recipe, layers="all", prompt=prompt)
    alone = enc.encode([TEXTS[i] for i in ALONE], batch_size=1)  # batch size 1: no padding at all
    assert np.isfinite(alone).all()
    worst = 1.0
    for side in ("right", "left"):
        tiny_tokenizer.padding_side = side
        for batch_size in (7, 64):
            got = enc.encode(TEXTS, batch_size=batch_size)
            assert np.isfinite(got).all()
            worst = min(worst, float(_cosine(got[ALONE], alone).min()))
    assert worst >= BAR[dtype], f"{recipe} {prompt} {dtype}: worst cosine {worst:.7f}"


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_mixed_batches_agree_in_fp32(tiny_tokenizer, recipe):
    """Every text, not only the ones embedded alone, on a second family (qwen3: q/k norms, GQA): batch
    sizes and padding sides agree with each other."""
    model = build_tiny_model("qwen3", len(tiny_tokenizer), head=False)
    enc = Encoder(model, tiny_tokenizer, recipe=recipe, layers="all")
    reference = enc.encode(TEXTS, batch_size=64)  # right padding
    tiny_tokenizer.padding_side = "left"
    for batch_size in (7, 64):
        got = enc.encode(TEXTS, batch_size=batch_size)
        assert _cosine(got, reference).min() >= BAR[torch.float32]
