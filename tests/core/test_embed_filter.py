"""EmbedFilter against a direct SVD, its band, persistence, and its use inside the encoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tiny_models import CORPUS, build_tiny_model
from valuelens import EmbedFilter, Encoder
from valuelens.embed_filter import band, load_unembedding, right_singular_vectors
from valuelens.errors import ConfigError
from valuelens.settings import adopt


def _band_projector(vh: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    rows = vh[start:stop].double()
    return rows.T @ rows  # sign-invariant: the orthogonal projector onto the band


def test_gram_eigh_matches_direct_svd():
    torch.manual_seed(0)
    # a spectrum with distinct singular values, as real unembedding matrices have
    w = torch.randn(3000, 48) @ torch.diag(torch.linspace(3.0, 0.1, 48))
    vh_gram, s_gram = right_singular_vectors(w, chunk=512)
    _, s_svd, vh_svd = torch.linalg.svd(w, full_matrices=False)
    torch.testing.assert_close(s_gram, s_svd, atol=1e-3, rtol=1e-4)
    start, stop = band(48, 2)
    torch.testing.assert_close(
        _band_projector(vh_gram, start, stop), _band_projector(vh_svd, start, stop), atol=1e-5, rtol=0
    )


@pytest.mark.parametrize(
    ("d", "tau", "offset", "want"),
    [(576, 2, 0, (144, 432)), (576, 4, 0, (216, 360)), (4096, 2, 128, (1152, 3200)), (10, 3, 0, (3, 6))],
)
def test_band_follows_the_official_code(d, tau, offset, want):
    # official: k = d // tau; keep Vh[(d-k)//2 : (d-k)//2 + k] (+ an offset, as for Mistral)
    assert band(d, tau, offset) == want


@pytest.mark.parametrize(("tau", "offset"), [(0.5, 0), (True, 0), ("2", 0), (2, 300), (2, -300), (10**9, 0)])
def test_bad_band_settings(tau, offset):
    with pytest.raises(ConfigError):
        band(576, tau, offset)


def test_from_model_equals_direct_svd_projection(tiny_tokenizer):
    model = build_tiny_model("llama", len(tiny_tokenizer))
    ef = EmbedFilter.from_model(model, tau=2)
    w = model.lm_head.weight.detach()
    _, _, vh = torch.linalg.svd(w.double(), full_matrices=False)
    start, stop = band(64, 2)
    torch.testing.assert_close(
        _band_projector(ef.projection, 0, ef.dimension), _band_projector(vh, start, stop), atol=1e-5, rtol=0
    )
    x = torch.randn(5, 64)
    # distances after the kept band equal distances after the full projector V_band V_band^T
    full = x.double() @ _band_projector(vh, start, stop)
    got = ef.transform(x).double()
    torch.testing.assert_close(torch.cdist(got, got), torch.cdist(full, full), atol=1e-4, rtol=0)
    assert ef.dimension == 32 and ef.transform(x.numpy()).shape == (5, 32)


def test_from_path_loads_only_the_head(tmp_path, tiny_tokenizer):
    model = build_tiny_model("qwen2", len(tiny_tokenizer))
    model.save_pretrained(tmp_path)
    w = load_unembedding(tmp_path)
    torch.testing.assert_close(w, model.get_output_embeddings().weight.detach())
    a = EmbedFilter.from_model(tmp_path, tau=4)
    b = EmbedFilter.from_model(model, tau=4)
    torch.testing.assert_close(
        _band_projector(a.projection, 0, 16), _band_projector(b.projection, 0, 16), atol=1e-5, rtol=0
    )


def test_tied_base_model_uses_embeddings_and_untied_base_model_needs_a_path(tiny_tokenizer):
    from transformers import AutoModel, LlamaConfig

    def base_model(tied: bool):
        config = LlamaConfig(
            vocab_size=300,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            tie_word_embeddings=tied,
        )
        return AutoModel.from_config(config)

    assert EmbedFilter.from_model(base_model(tied=True), tau=2).dimension == 16
    untied = base_model(tied=False)
    with pytest.raises(ConfigError, match="pass the model's path"):
        EmbedFilter.from_model(untied, tau=2)


def test_save_load_round_trip(tmp_path, tiny_tokenizer):
    ef = EmbedFilter.from_model(build_tiny_model("gemma2", len(tiny_tokenizer)), tau=2, offset=3)
    ef.save(tmp_path / "ef")
    again = EmbedFilter.load(tmp_path / "ef")
    assert (again.tau, again.offset, again.hidden_size, again.dimension) == (2.0, 3, 64, 32)
    assert torch.equal(again.projection, ef.projection)
    assert "band=[19, 51)" in repr(again)
    with pytest.raises(ConfigError, match="no saved EmbedFilter"):
        EmbedFilter.load(tmp_path / "missing")


@pytest.mark.parametrize(
    "ablation",
    [EmbedFilter.truncation(64, 4), EmbedFilter.random_subset(64, 2, seed=500)],
    ids=["trunc", "rand"],
)
def test_ablation_filters_keep_their_kind_through_save_load(tmp_path, tiny_tokenizer, ablation):
    ablation.save(tmp_path / "ef")
    again = EmbedFilter.load(tmp_path / "ef")
    assert (again.kind, again.seed, again.tau) == (ablation.kind, ablation.seed, ablation.tau)
    assert torch.equal(again.projection, ablation.projection) and repr(again) == repr(ablation)
    with pytest.raises(ConfigError, match="not a spectral band"):
        _ = again.band
    encoder = Encoder(
        build_tiny_model("llama", len(tiny_tokenizer)), tiny_tokenizer, recipe="hs", embed_filter=again
    )
    with pytest.raises(ConfigError, match="ablation baseline"):
        adopt(encoder, {})


def test_spectrum_of_an_inference_tensor(tiny_tokenizer):
    with torch.inference_mode():
        model = build_tiny_model("llama", len(tiny_tokenizer))
        weight = model.lm_head.weight.clone()
    assert weight.is_inference()
    ef = EmbedFilter.from_weight(weight, tau=2)
    assert torch.equal(ef.projection, EmbedFilter.from_weight(weight.clone(), tau=2).projection)


def test_transform_rejects_other_spaces(tiny_tokenizer):
    ef = EmbedFilter.from_model(build_tiny_model("llama", len(tiny_tokenizer)), tau=2)
    with pytest.raises(ConfigError, match="aligned-va"):
        ef.transform(torch.randn(2, 32))
    with pytest.raises(TypeError):
        ef.transform([[1.0] * 64])


@pytest.mark.parametrize("recipe", ["hs", "last-token", "wmp", "aligned-wva", "aligned-va"])
def test_encoder_applies_filter_after_pooling(tiny_tokenizer, recipe):
    model = build_tiny_model("llama", len(tiny_tokenizer))
    plain = Encoder(model, tiny_tokenizer, recipe=recipe, layers="all", prompt="prompteol")
    filtered = Encoder(model, tiny_tokenizer, recipe=recipe, layers="all", prompt="prompteol", embed_filter=2)
    assert filtered.dimension == plain.dimension // 2
    manual = EmbedFilter.from_model(model, tau=2).transform(plain.encode(CORPUS))
    np.testing.assert_allclose(filtered.encode(CORPUS), manual, atol=1e-5)
