"""The analysis tools (``valuelens.analysis``: lens, spectrum, segments; ``sweep --propose``) on tiny models,
each value checked against a direct computation written out here."""

from __future__ import annotations

import collections
import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tiny_models import CORPUS, build_tiny_model
from valuelens import Encoder
from valuelens.analysis import (
    delta_pi,
    layer_vectors,
    load_corpus,
    logit_lens,
    logit_spectroscopy,
    recall_at_k,
    segment_matching,
    split_texts,
    token_counts,
    top_tokens,
)
from valuelens.analysis.spectrum import Spectrum, average_token, log_frequencies
from valuelens.cli import app
from valuelens.errors import ConfigError
from valuelens.evaluation.sweep import LayerSweep

runner = CliRunner()
TEXTS = CORPUS[:4]


@pytest.fixture(scope="module")
def lm_head(tiny_checkpoint):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    return model.lm_head.weight.detach().clone(), model.model.norm.weight.detach().clone(), model.config


@pytest.fixture(scope="module")
def probe(tiny_checkpoint):
    return Encoder.from_pretrained(
        tiny_checkpoint, recipe="hs", layers="all", truncate_layers=False, device="cpu"
    )


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "texts.txt"
    path.write_text("\n".join(CORPUS * 3) + "\n", encoding="utf-8")
    return path


def _band_projector(w_u: torch.Tensor, tau: float) -> torch.Tensor:
    """P = V_b V_bᵀ of EmbedFilter's band, from a plain SVD (the reference for the Gram+eigh path)."""
    _, _, vh = torch.linalg.svd(w_u.double(), full_matrices=False)
    d = vh.shape[1]
    k = int(d // tau)
    start = (d - k) // 2
    band = vh[start : start + k]
    return band.T @ band


# ------------------------------------------------------------------------------------------- lens
def test_lens_matches_rmsnorm_and_unembedding_by_hand(tiny_checkpoint, lm_head):
    w_u, gain, config = lm_head
    enc = Encoder.from_pretrained(tiny_checkpoint, recipe="hs", layers="last", device="cpu")
    result = logit_lens(enc, TEXTS, tau=2, k=5)  # W_U read from the checkpoint (untied head)
    x = torch.as_tensor(enc.encode(TEXTS), dtype=torch.float64)
    z = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + config.rms_norm_eps) * gain.double()
    for rows, vectors in ((result.before, z), (result.after, z @ _band_projector(w_u, 2))):
        logits = vectors @ w_u.double().T
        values, ids = logits.topk(5, dim=-1)
        assert [[t for t, _ in row] for row in rows] == ids.tolist()
        np.testing.assert_allclose(
            [[v for _, v in row] for row in rows], values.numpy(), rtol=1e-4, atol=1e-4
        )
    assert result.band == (16, 48) and result.hidden_size == 64 and result.k == 5


def test_lens_gemma_norm_and_tied_head(tiny_tokenizer):
    """Gemma's norm scales by (1 + w), and its W_U is the tied input embedding."""
    model = build_tiny_model("gemma3_text", len(tiny_tokenizer))
    with torch.no_grad():
        model.model.norm.weight.normal_(0, 0.5)
    enc = Encoder(model, tiny_tokenizer, recipe="last-token")
    counts = token_counts(tiny_tokenizer, CORPUS, model.config.vocab_size)
    result = logit_lens(enc, TEXTS, tau=4, k=3, counts=counts, n_frequent=10, corpus="tiny")
    x = torch.as_tensor(enc.encode(TEXTS), dtype=torch.float64)
    eps, gain = model.config.rms_norm_eps, model.model.norm.weight.double()
    z = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + gain)
    w_u = model.get_input_embeddings().weight.detach()
    ids = ((z @ _band_projector(w_u, 4)) @ w_u.double().T).topk(3, dim=-1).indices
    assert [[t for t, _ in row] for row in result.after] == ids.tolist()
    frequent = set(top_tokens(counts, 10))
    assert result.frequent == frequent
    expected = [sum(t in frequent for t, _ in row) / 3 for row in result.before]
    assert result.frequent_share("before") == expected
    assert [b[:2] for b in result.rank_bins] == [(0, 10), (10, 100), (100, len(counts))]


def test_lens_refuses_value_space_and_prebuilt_filter(tiny_llama, tiny_tokenizer):
    with pytest.raises(ConfigError, match="residual-stream"):
        logit_lens(Encoder(tiny_llama, tiny_tokenizer, recipe="va"), TEXTS)
    with pytest.raises(ConfigError, match="without embed_filter"):
        logit_lens(Encoder(tiny_llama, tiny_tokenizer, recipe="hs", embed_filter=2), TEXTS)


def test_token_counts_and_top_tokens(tiny_tokenizer):
    counts = token_counts(tiny_tokenizer, CORPUS, 400, batch_size=3)
    expected = collections.Counter(
        t for text in CORPUS for t in tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    )
    assert counts.sum() == sum(expected.values())
    assert all(counts[t] == n for t, n in expected.items())
    assert top_tokens(np.array([3, 5, 5, 0, 1]), 4) == [1, 2, 0, 4]  # ties: lower id first; zeros left out
    with pytest.raises(ConfigError, match="beyond"):
        token_counts(tiny_tokenizer, CORPUS, 10)


def test_load_corpus(corpus_file):
    assert load_corpus(corpus_file) == CORPUS * 3
    assert len(load_corpus("lee")) == 50  # the real Lee set (../shared/data)
    with pytest.raises(ConfigError, match="unknown corpus"):
        load_corpus("no-such-corpus")


# -------------------------------------------------------------------------------------- spectrum
def _synthetic(seed: int = 0, vocab: int = 300, d: int = 20) -> tuple[torch.Tensor, np.ndarray]:
    gen = torch.Generator().manual_seed(seed)
    w_u = torch.randn(vocab, d, generator=gen) * torch.linspace(3, 0.3, d)
    counts = np.random.default_rng(seed).zipf(1.5, size=vocab).clip(max=10**6)
    return w_u, counts


def test_average_token_is_the_pseudo_inverse():
    w_u, counts = _synthetic()
    logp = log_frequencies(counts)
    assert torch.allclose(logp.exp().sum(), torch.tensor(1.0, dtype=torch.float64))
    pinv = torch.linalg.pinv(w_u.double())
    torch.testing.assert_close(average_token(w_u, counts, center=False), pinv @ logp, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(average_token(w_u, counts), pinv @ (logp - logp.mean()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("center", [True, False])
def test_delta_pi_of_one_direction_by_hand(center):
    w_u, counts = _synthetic(1)
    d_logprob, d_logit, _, h = delta_pi(w_u, counts, n_top=20, center=center, chunk=7)
    w = w_u.double()
    _, _, vh = torch.linalg.svd(w, full_matrices=False)
    top = torch.tensor(top_tokens(counts, 20))
    logp = log_frequencies(counts)
    h_ref = torch.linalg.pinv(w) @ (logp - logp.mean() if center else logp)
    torch.testing.assert_close(h, h_ref, rtol=1e-5, atol=1e-6 * float(h_ref.abs().max()))
    for i in (0, 7, 19):
        v = vh[i]
        removed = h_ref - (v @ h_ref) * v  # the sign of v cancels

        def pi(vector):
            return torch.log_softmax(w @ vector, dim=0)[top].mean()

        assert float(d_logprob[i]) == pytest.approx(float(pi(h_ref) - pi(removed)), rel=1e-4, abs=1e-7)
        expected_logit = float((w @ h_ref)[top].mean() - (w @ removed)[top].mean())
        assert float(d_logit[i]) == pytest.approx(expected_logit, rel=1e-4, abs=1e-7)


def test_spectroscopy_finds_frequent_tokens_written_by_both_edges():
    """W_U whose largest and smallest singular directions write log p̂: Δπ peaks there, the band is flat."""
    vocab, d = 400, 16
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(vocab, d, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    sigma = torch.linspace(10, 1, d, dtype=torch.float64)
    w_u = (u * sigma) @ v.T
    profile = 4 * (u[:, 0] + u[:, -1]) * math.sqrt(vocab)  # log-frequencies made of the two edge directions
    counts = np.round(np.exp(profile.numpy() - profile.numpy().min()) * 50).astype(np.int64)
    spec = logit_spectroscopy(w_u.float(), counts, tau=2, n_top=20, model="synthetic", corpus="made up")
    assert {i for i, _ in spec.top_directions(2)} == {0, d - 1}
    stats = spec.regions()
    assert spec.edges_carry_frequent
    assert stats["head"]["mean"] > 10 * abs(stats["band"]["mean"])
    assert stats["tail"]["mean"] > 10 * abs(stats["band"]["mean"])
    assert spec.band == (4, 12) and spec.region_bounds()["head"] == (0, 2)
    assert spec.fit > 0.9
    flat = Spectrum(**{**spec.__dict__, "delta_logprob": (0.0,) * d})
    assert not flat.edges_carry_frequent


# -------------------------------------------------------------------------------------- segments
def test_recall_at_k_by_hand():
    x = torch.randn(12, 8, generator=torch.Generator().manual_seed(0))
    assert recall_at_k(x, x.clone(), ks=(1, 5, 10)) == {1: 1.0, 5: 1.0, 10: 1.0}
    keys = torch.eye(4)
    queries = torch.eye(4)[[0, 1, 3, 2]] + 0.1 * torch.eye(4)  # two right; two swapped, own key second
    queries[0, 1] = 0.5  # a right one, but key 1 scores 0.5 against its own 1.1: still first
    assert recall_at_k(queries, keys, ks=(1, 2, 4)) == {1: 0.5, 2: 1.0, 4: 1.0}
    queries[2, 0] = 0.2  # now keys 3 and 0 both beat key 2's 0.1: third
    assert recall_at_k(queries, keys, ks=(1, 2, 3)) == {1: 0.5, 2: 0.75, 3: 1.0}
    tied = torch.ones(3, 2)  # every key ties with the right one: counted as found
    assert recall_at_k(tied, tied, ks=(1,)) == {1: 1.0}


def test_split_texts_is_seeded_and_cuts_in_the_middle_half(tiny_tokenizer):
    chosen, prefixes, suffixes = split_texts(tiny_tokenizer, CORPUS, seed=3, limit=5, min_tokens=4)
    assert len(chosen) == 5 and chosen == sorted(chosen)
    assert split_texts(tiny_tokenizer, CORPUS, seed=3, limit=5, min_tokens=4) == (chosen, prefixes, suffixes)
    for i, prefix, suffix in zip(chosen, prefixes, suffixes, strict=True):
        n = len(tiny_tokenizer(CORPUS[i], add_special_tokens=False)["input_ids"])
        cut = len(tiny_tokenizer(prefix, add_special_tokens=False)["input_ids"])
        assert math.ceil(n / 4) <= cut <= math.floor(3 * n / 4)
        assert (prefix + suffix).replace(" ", "") == CORPUS[i].replace(" ", "")  # byte-level BPE is lossless
    with pytest.raises(ConfigError, match="at least 2 texts"):
        split_texts(tiny_tokenizer, CORPUS, min_tokens=1000)


def test_per_layer_vectors_equal_single_layer_encoders(probe):
    layers = (0, 1, 2, 3)
    vectors = layer_vectors(probe, TEXTS, ["va", "hs", "aligned-va"], layers, batch_size=3)
    for recipe, per_layer in vectors.items():
        assert per_layer.shape[:2] == (4, len(TEXTS))
        for j, layer in enumerate(layers):
            single = Encoder(probe.model, probe.tokenizer, recipe=recipe, layers=(layer,)).encode(TEXTS)
            np.testing.assert_allclose(per_layer[j].numpy(), single, rtol=1e-5, atol=1e-5)


def test_segment_matching_scores_the_captured_vectors(probe):
    result = segment_matching(probe, CORPUS, limit=None, seed=1, min_tokens=4, layers="1-3", ks=(1, 3))
    _, prefixes, suffixes = split_texts(probe.tokenizer, CORPUS, seed=1, min_tokens=4)
    vectors = layer_vectors(probe, prefixes + suffixes, ["va", "hs"], (1, 2, 3), max_length=256 + 16)
    n = len(prefixes)
    assert result.layers == (1, 2, 3) and result.n_texts == n == len(CORPUS)
    for recipe in ("va", "hs"):
        for j in range(3):
            expected = recall_at_k(vectors[recipe][j, :n], vectors[recipe][j, n:], ks=(1, 3))
            assert result.recall[recipe][1][j] == expected[1] and result.recall[recipe][3][j] == expected[3]
    summary = result.summary()
    assert summary["va"]["best_recall"] == max(result.recall["va"][1])
    assert "VA beats HS at R@1 on" in result.to_markdown("cmd")


# ------------------------------------------------------------------------------------------ sweep
def test_sweep_proposal_is_a_layers_value_and_an_auto_entry():
    sweep = LayerSweep(
        model="m",
        recipe="va",
        prompt=None,
        task="t",
        split="dev",
        metric="cosine_spearman",
        per_layer=[0.1, 0.2, 0.3, 0.4],
        bands={(0, 2): 0.5, (1, 3): 0.7},
        min_width=3,
        model_key=("llama", 4, 64),
        propose=True,
    )
    assert sweep.proposed_layers == "1-3"
    entry = sweep.auto_entry()
    assert eval("{" + entry + "}") == {("llama", 4, 64): {"va": (1, 2, 3)}}
    assert sweep.to_dict("cmd")["proposed_layers"] == "1-3" and entry in sweep.to_markdown("cmd")
    plain = LayerSweep(**{**sweep.__dict__, "propose": False})
    assert "proposed_layers" not in plain.to_dict("cmd") and "AUTO_LAYERS" not in plain.to_markdown("cmd")


# -------------------------------------------------------------------------------------------- CLI
def _written(stem):
    for ext in (".md", ".json", ".png"):
        assert stem.with_name(stem.name + ext).stat().st_size > (1000 if ext == ".png" else 10)
    return json.loads(stem.with_name(stem.name + ".json").read_text())


def test_cli_lens(tiny_checkpoint, corpus_file, tmp_path):
    stem = tmp_path / "lens"
    args = ["lens", *TEXTS[:2], "--model", tiny_checkpoint, "--recipe", "hs", "--layers", "last", "-k", "4"]
    result = runner.invoke(
        app, [*args, "--corpus", str(corpus_file), "--n-frequent", "20", "--out", str(stem)]
    )
    assert result.exit_code == 0, result.output
    data = _written(stem)
    assert data["k"] == 4 and data["band"] == [16, 48] and len(data["texts"]) == 2
    assert data["texts"][0]["text"] == TEXTS[0] and len(data["texts"][0]["after"]) == 4
    assert "top-4 before EmbedFilter" in result.output
    bad = runner.invoke(
        app, ["lens", "x", "--model", tiny_checkpoint, "--recipe", "va", "--corpus", str(corpus_file)]
    )
    assert bad.exit_code == 2 and "residual-stream" in bad.output


def test_cli_spectrum(tiny_checkpoint, corpus_file, tmp_path):
    stem = tmp_path / "spectrum"
    args = ["spectrum", "--model", tiny_checkpoint, "--corpus", str(corpus_file), "--top", "20", "--tau", "4"]
    result = runner.invoke(app, [*args, "--out", str(stem)])
    assert result.exit_code == 0, result.output
    data = _written(stem)
    assert len(data["delta_logprob"]) == 64 and data["band"] == [24, 40] and data["center"] is True
    assert set(data["region_stats"]) == {"head", "middle", "tail", "band"}
    assert "Both edges carry frequent tokens" in result.output


def test_cli_segments(tiny_checkpoint, corpus_file, tmp_path):
    stem = tmp_path / "segments"
    args = ["segments", str(corpus_file), "--model", tiny_checkpoint, "--limit", "10", "--min-tokens", "4"]
    result = runner.invoke(app, [*args, "--layers", "all", "--out", str(stem)])
    assert result.exit_code == 0, result.output
    data = _written(stem)
    assert data["n_texts"] == 10 and data["layers"] == [0, 1, 2, 3]
    assert set(data["recall"]) == {"va", "hs"} and all(
        0 <= r <= 1 for by_k in data["recall"].values() for rs in by_k.values() for r in rs
    )


def test_cli_sweep_propose(tiny_checkpoint, tmp_path):
    task = tmp_path / "tiny-sts"
    task.mkdir()
    rows = [
        {"sentence1": a, "sentence2": b, "score": float(i % 5)}
        for i, (a, b) in enumerate(zip(CORPUS, CORPUS[1:] + CORPUS[:1], strict=True))
    ]
    (task / "dev.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    stem = tmp_path / "sweep"
    args = [
        "sweep",
        str(task),
        "--model",
        tiny_checkpoint,
        "--min-width",
        "2",
        "--propose",
        "--out",
        str(stem),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "sweep.json").read_text())
    a, b = data["best_band"]
    assert data["proposed_layers"] == f"{a}-{b}" and data["model_key"] == ["llama", 4, 64]
    assert f"proposed layers for {tiny_checkpoint} (va): {a}-{b}" in result.output
    assert f"tuple(range({a}, {b + 1}))" in (tmp_path / "sweep.md").read_text()
