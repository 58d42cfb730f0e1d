"""One dtype rule on every surface: a bf16 checkpoint runs in float32 on CPU unless a dtype is asked for."""

from __future__ import annotations

import pytest
import torch
from sentence_transformers.base.modules import Normalize, Transformer

from sentence_transformers import SentenceTransformer
from tiny_models import build_tiny_model, build_tokenizer
from valuelens_sentence_transformers import ValuePooling, ValueTransformer

TEXTS = ["A man is playing a guitar.", "Someone is making music.", "Stocks fell sharply."]


@pytest.fixture(scope="module")
def bf16_dir(tmp_path_factory):
    """A tiny random Llama saved in bfloat16 (as the bundled checkpoints are)."""
    tokenizer = build_tokenizer()
    path = tmp_path_factory.mktemp("st-bf16")
    build_tiny_model("llama", len(tokenizer)).to(torch.bfloat16).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("first", [Transformer, ValueTransformer])
def test_cpu_default_is_float32_with_unit_norms(bf16_dir, first):
    model = SentenceTransformer(modules=[first(bf16_dir), ValuePooling()], device="cpu")
    assert model[0].auto_model.dtype == torch.float32
    vectors = model.encode(TEXTS, convert_to_tensor=True, normalize_embeddings=True)
    assert vectors.dtype == torch.float32
    torch.testing.assert_close(vectors.norm(dim=1), torch.ones(len(TEXTS)), atol=1e-5, rtol=0)


def test_a_normalize_module_gives_unit_vectors(bf16_dir):
    model = SentenceTransformer(modules=[Transformer(bf16_dir), ValuePooling(), Normalize()], device="cpu")
    vectors = model.encode(TEXTS, convert_to_tensor=True)
    assert vectors.dtype == torch.float32
    torch.testing.assert_close(vectors.norm(dim=1), torch.ones(len(TEXTS)), atol=1e-5, rtol=0)


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])
def test_an_asked_dtype_is_kept(bf16_dir, key):
    asked = ValueTransformer(bf16_dir, model_kwargs={key: torch.bfloat16})
    model = SentenceTransformer(modules=[asked, ValuePooling()], device="cpu")
    assert model[0].auto_model.dtype == torch.bfloat16
    assert model.encode(TEXTS[:1], convert_to_tensor=True).dtype == torch.bfloat16
    # a plain Transformer keeps no record of its model_kwargs: a dtype other than the checkpoint's is kept
    plain = Transformer(bf16_dir, model_kwargs={key: torch.float16})
    assert (
        SentenceTransformer(modules=[plain, ValuePooling()], device="cpu")[0].auto_model.dtype
        == torch.float16
    )


def test_reload_follows_the_rule(bf16_dir, tmp_path):
    SentenceTransformer(modules=[Transformer(bf16_dir), ValuePooling()], device="cpu").save(str(tmp_path))
    again = SentenceTransformer(str(tmp_path), trust_remote_code=True, device="cpu")
    assert again[0].auto_model.dtype == torch.float32
    asked = SentenceTransformer(
        str(tmp_path), trust_remote_code=True, device="cpu", model_kwargs={"dtype": torch.bfloat16}
    )
    assert asked[0].auto_model.dtype == torch.bfloat16
