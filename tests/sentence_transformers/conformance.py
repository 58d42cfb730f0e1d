"""A reusable conformance suite for sentence-transformers modules, ported from the checks of
sentence-transformers' own module tests (save/load round trip, padding side, prompts, empty input,
truncation, the encode options) and adapted to a module that must equal a reference encoder.

Subclass :class:`SentenceTransformerModuleConformance` and provide two fixtures:
``st_model`` (a ``SentenceTransformer``) and ``reference`` (a callable ``list[str] -> np.ndarray``
giving the embeddings the model must reproduce).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sentence_transformers import SentenceTransformer

TEXTS = [
    "A man is playing a guitar.",
    "Someone plays music on a stage.",
    "The cat sits on the mat.",
    "Stocks fell sharply today amid fears of inflation.",
    "Dogs run.",
]


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return (a * b).sum(-1)


class SentenceTransformerModuleConformance:
    min_cos = 0.99999

    def assert_same(self, got, want) -> None:
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        assert got.shape == want.shape
        assert _cos(got, want).min() >= self.min_cos

    def test_encode_matches_reference(self, st_model, reference):
        self.assert_same(st_model.encode(TEXTS), reference(TEXTS))

    def test_batch_size_and_order(self, st_model, reference):
        want = reference(TEXTS)
        for batch_size in (1, 2, 64):
            self.assert_same(st_model.encode(TEXTS, batch_size=batch_size), want)

    def test_single_string_and_tensor_output(self, st_model, reference):
        single = st_model.encode(TEXTS[0])
        assert single.ndim == 1
        self.assert_same(single[None], reference(TEXTS[:1]))
        tensor = st_model.encode(TEXTS, convert_to_tensor=True)
        assert isinstance(tensor, torch.Tensor) and tensor.shape == (
            len(TEXTS),
            st_model.get_embedding_dimension(),
        )

    def test_normalize_embeddings(self, st_model):
        out = st_model.encode(TEXTS, normalize_embeddings=True)
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)

    def test_dimension(self, st_model):
        assert st_model.encode(TEXTS).shape[1] == st_model.get_embedding_dimension()

    def test_truncate_dim(self, st_model):
        full = st_model.encode(TEXTS)
        st_model.truncate_dim = 8
        try:
            short = st_model.encode(TEXTS)
            assert st_model.get_embedding_dimension() == 8
        finally:
            st_model.truncate_dim = None
        np.testing.assert_allclose(short, full[:, :8], atol=1e-6)

    def test_prompts_prepend_an_instruction(self, st_model, reference):
        st_model.prompts = {"query": "query: ", "document": "passage: "}
        try:
            self.assert_same(st_model.encode_query(TEXTS), reference(["query: " + t for t in TEXTS]))
            self.assert_same(st_model.encode_document(TEXTS), reference(["passage: " + t for t in TEXTS]))
            self.assert_same(
                st_model.encode(TEXTS, prompt_name="query"), reference(["query: " + t for t in TEXTS])
            )
            self.assert_same(st_model.encode(TEXTS, prompt="Q: "), reference(["Q: " + t for t in TEXTS]))
        finally:
            st_model.prompts = {}

    def test_similarity(self, st_model):
        emb = st_model.encode(TEXTS)
        sim = st_model.similarity(emb, emb)
        assert sim.shape == (len(TEXTS), len(TEXTS))
        torch.testing.assert_close(torch.diagonal(sim), torch.ones(len(TEXTS)), atol=1e-5, rtol=0)

    def test_empty_input(self, st_model):
        out = st_model.encode([])
        assert len(out) == 0

    def test_padding_side(self, st_model, reference):
        tokenizer = st_model.tokenizer
        before = tokenizer.padding_side
        tokenizer.padding_side = "left" if before == "right" else "right"
        try:
            np.testing.assert_allclose(st_model.encode(TEXTS), reference(TEXTS), atol=1e-4)
        finally:
            tokenizer.padding_side = before

    def test_truncation_to_max_seq_length(self, st_model):
        long = " ".join(TEXTS * 20)
        before = st_model.max_seq_length
        st_model.max_seq_length = 64
        try:
            a = st_model.encode([long])
            b = st_model.encode([long + " and even more words at the end that must be cut off"])
        finally:
            st_model.max_seq_length = before
        np.testing.assert_allclose(a, b, atol=1e-5)

    def test_save_load_round_trip(self, st_model, tmp_path):
        want = st_model.encode(TEXTS)
        st_model.save(str(tmp_path / "saved"))
        reloaded = SentenceTransformer(str(tmp_path / "saved"), trust_remote_code=True, device="cpu")
        np.testing.assert_allclose(reloaded.encode(TEXTS), want, atol=1e-6)
        assert reloaded.get_embedding_dimension() == st_model.get_embedding_dimension()

    def test_show_progress_bar(self, st_model, capsys):
        st_model.encode(TEXTS, show_progress_bar=True)
        assert "Batches" in capsys.readouterr().err


__all__ = ["TEXTS", "SentenceTransformerModuleConformance", "pytest"]
