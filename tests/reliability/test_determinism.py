"""Determinism: the same text gives the same fp32 vector, run after run and process after process.

Runs on one path (same model, same code, same thread count) are compared bit for bit; runs on
different paths (the core against each adapter) with a tolerance, so the suite passes on any CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from reliability.support import SURFACES, build_surface
from tiny_models import CORPUS
from valuelens import Encoder

TEXTS = [*CORPUS, "", "猫 🐈 القطة", "short", "a longer text about the weather and the markets " * 4]
RECIPES = ["va", "aligned-wva", "wva-lt", "hs"]

_CHILD = textwrap.dedent(
    """
    import json
    import sys

    import numpy as np
    import torch

    from valuelens import Encoder

    torch.set_num_threads(1)
    model_dir, out, *recipes = sys.argv[1:]
    with open(out + ".json", encoding="utf-8") as f:
        texts = json.load(f)
    vectors = {
        recipe: Encoder.from_pretrained(model_dir, recipe=recipe, layers="all", device="cpu").encode(
            texts, batch_size=4
        )
        for recipe in recipes
    }
    np.savez(out, **vectors)
    """
)


def _encode_all(model_dir: str) -> dict[str, np.ndarray]:
    return {
        recipe: Encoder.from_pretrained(model_dir, recipe=recipe, layers="all", device="cpu").encode(
            TEXTS, batch_size=4
        )
        for recipe in RECIPES
    }


def test_two_runs_in_one_process_are_identical(encoder):
    first = encoder.encode(TEXTS, batch_size=4)
    for _ in range(2):
        assert np.array_equal(encoder.encode(TEXTS, batch_size=4), first)


def test_two_processes_are_identical(model_dir, tmp_path):
    """A fresh interpreter (one intra-op thread, as here) gives the same bits for every recipe."""
    out = tmp_path / "child"
    (tmp_path / "child.json").write_text(json.dumps(TEXTS), encoding="utf-8")
    subprocess.run(
        [sys.executable, "-c", _CHILD, model_dir, str(out), *RECIPES],
        check=True,
        timeout=300,
    )
    child = np.load(str(out) + ".npz")
    here = _encode_all(model_dir)
    for recipe in RECIPES:
        assert np.array_equal(child[recipe], here[recipe]), recipe


@pytest.mark.parametrize("name", [s for s in SURFACES if s != "core"])
def test_adapters_agree_with_the_core(name, encoder, model_dir):
    """Different code paths (the host's batching and tokenizer call): equal within a tolerance."""
    want = encoder.encode(TEXTS, batch_size=4)
    surface = build_surface(name, encoder, model_dir, batch_size=3)
    np.testing.assert_allclose(surface.embed(TEXTS), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(surface.embed_one(TEXTS[2]), want[2], rtol=1e-4, atol=1e-5)
