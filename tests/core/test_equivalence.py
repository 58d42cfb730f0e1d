"""Every recipe on every architecture against the independent eager reference (fp32, max |diff| <= 1e-4)."""

from __future__ import annotations

import numpy as np
import pytest

from reference import reference_embeddings
from tiny_models import CORPUS
from valuelens import RECIPES, Encoder

TEXTS = [CORPUS[0], "Cats.", CORPUS[4] + " " + CORPUS[5], CORPUS[2]]


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_recipe_matches_eager_reference(tiny_model, tiny_tokenizer, recipe):
    layers = [1, 3]
    enc = Encoder(tiny_model, tiny_tokenizer, recipe=recipe, layers=layers)
    got = enc.encode(TEXTS, batch_size=3)
    want = reference_embeddings(tiny_model, tiny_tokenizer, TEXTS, recipe, layers)
    assert got.shape == (len(TEXTS), enc.dimension)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("recipe", ["va", "wva-lt", "aligned-wva", "wmp"])
@pytest.mark.parametrize("prompt", ["prompteol", "echo"])
def test_prompted_recipes_left_padding(tiny_model, tiny_tokenizer, recipe, prompt):
    tiny_tokenizer.padding_side = "left"
    enc = Encoder(tiny_model, tiny_tokenizer, recipe=recipe, layers="all", prompt=prompt)
    got = enc.encode(TEXTS, batch_size=4)
    want = reference_embeddings(
        tiny_model, tiny_tokenizer, TEXTS, recipe, "all", prompt=prompt, padding_side="left"
    )
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
