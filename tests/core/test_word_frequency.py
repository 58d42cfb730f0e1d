"""The lexical part's default idf from English word frequencies (:mod:`valuelens.word_frequency`)."""

from __future__ import annotations

import math

import numpy as np
import torch

from tiny_models import CORPUS
from valuelens import word_frequency
from valuelens.lexical import LexicalState, counted_idf


def _id(tokenizer, text: str) -> int:
    (token,) = tokenizer(text, add_special_tokens=False)["input_ids"]
    return token


def test_common_words_weigh_less_than_rare_ones(tiny_tokenizer):
    rows = len(tiny_tokenizer)
    p = word_frequency.token_probabilities(tiny_tokenizer, rows)
    assert p.shape == (rows,) and np.isclose(p.sum(), 1.0) and (p >= 0).all()
    idf = word_frequency.word_idf(tiny_tokenizer, rows)
    the, cat = _id(tiny_tokenizer, " the"), _id(tiny_tokenizer, " cat")
    assert p[the] > 100 * p[cat]  # "the" is among the most frequent English words, "cat" is not
    assert 0 <= idf[the] < idf[cat]
    # the capitalised form at the start of a text is read too
    assert np.isfinite(idf[_id(tiny_tokenizer, "The")])


def test_tokens_no_word_reaches_are_counted_on_the_corpus(tiny_tokenizer):
    rows = len(tiny_tokenizer)
    idf = word_frequency.word_idf(tiny_tokenizer, rows)
    special = tiny_tokenizer.all_special_ids
    assert np.isnan(idf[special]).all()  # no English word tokenizes to <unk>, <pad> or <eos>
    embeddings = torch.randn(rows, 16, generator=torch.Generator().manual_seed(0))
    state = LexicalState.fit(embeddings, tiny_tokenizer, CORPUS, word_idf=torch.from_numpy(idf))
    counted = LexicalState.fit(embeddings, tiny_tokenizer, CORPUS)
    assert torch.isfinite(state.idf).all()
    torch.testing.assert_close(state.idf[special], counted.idf[special])
    reached = torch.from_numpy(~np.isnan(idf))
    torch.testing.assert_close(state.idf[reached], torch.from_numpy(idf[reached.numpy()]).float())
    torch.testing.assert_close(state.whitening, counted.whitening)  # the idf is all that changes


def test_the_hosts_tokenizer_settings_are_left_alone(tiny_tokenizer):
    """Counting reads a copy of the tokenizer: padding or truncation the host left on it neither pads the
    words nor is reset."""
    rows = len(tiny_tokenizer)
    clean = word_frequency.token_probabilities(tiny_tokenizer, rows)
    tiny_tokenizer(["a cat", "the cat sat on the mat"], padding="max_length", truncation=True, max_length=4)
    backend = tiny_tokenizer.backend_tokenizer
    assert backend.padding is not None and backend.truncation is not None
    np.testing.assert_allclose(word_frequency.token_probabilities(tiny_tokenizer, rows), clean, rtol=1e-9)
    assert backend.padding is not None and backend.truncation is not None


def test_word_idf_is_the_counted_idf_of_the_expected_document_frequency(tiny_tokenizer):
    """One formula for both idfs: a token's word idf is the counted idf of ``N·(1 − exp(−L·p))``."""
    rows = len(tiny_tokenizer)
    p = word_frequency.token_probabilities(tiny_tokenizer, rows)
    idf = word_frequency.word_idf(tiny_tokenizer, rows)
    reached = p > 0
    df = word_frequency.TEXTS * -np.expm1(-word_frequency.TEXT_TOKENS * p[reached])
    np.testing.assert_allclose(idf[reached], np.log((word_frequency.TEXTS + 1) / (df + 0.5)), rtol=1e-9)
    # a token in every text weighs almost nothing, one in none weighs log(2N + 2)
    counted = counted_idf(torch.tensor([0.0, 10.0]), 10)
    torch.testing.assert_close(counted, torch.tensor([math.log(22.0), math.log(11 / 10.5)]))
