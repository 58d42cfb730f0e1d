"""Token idf from English word frequencies: the lexical part's default idf, with no corpus to count on.

Usage::

    idf = word_idf(tokenizer, rows=len(tokenizer))  # [rows] float64; NaN where no English word reaches

A token's probability is the frequency-weighted count of its occurrences in the tokenizations of
`wordfreq <https://github.com/rspeer/wordfreq>`_'s English word list (321k words from Wikipedia,
subtitles, news, books, the web and social media; its data is CC BY-SA 4.0), each word read in the
forms :data:`FORMS` takes. Its idf is the one a corpus of :data:`TEXTS` texts of :data:`TEXT_TOKENS`
tokens drawn from those frequencies would count: ``df = N·(1 − exp(−L·p))``, through the formula of a
counted idf (:func:`valuelens.lexical.counted_idf`).
Measured on the dev splits of three models in ``research/rounds/word_idf.md``.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import numpy as np
import torch

from valuelens.lexical import counted_idf

__all__ = ["FORMS", "LANGUAGE", "TEXTS", "TEXT_TOKENS", "source", "token_probabilities", "word_idf"]

#: The word list's language.
LANGUAGE = "en"
#: How a word is read, with the share of its frequency each form gets: mid-sentence, capitalised
#: mid-sentence (a name, a title), and capitalised at the start of a text.
FORMS: tuple[tuple[str, float], ...] = (("{space}{word}", 0.85), ("{space}{Word}", 0.1), ("{Word}", 0.05))
#: The texts' length L in tokens and their number N in the idf formula (L chosen on the dev splits:
#: research/rounds/word_idf.md).
TEXT_TOKENS = 200
TEXTS = 1_000_000


def source() -> str:
    """What the idf is computed from, for a state's fingerprint and log lines."""
    return f"wordfreq {version('wordfreq')} {LANGUAGE} word frequencies"


_MEMO: dict[tuple[str, int], np.ndarray] = {}


def _encoder(tokenizer: Any) -> tuple[Callable[[list[str]], list[list[int]]], str | None]:
    """A batch tokenizer without special tokens, padding or truncation, and a digest of the tokenizer
    (``None`` for a slow tokenizer: not memoized)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a slow (pure Python) tokenizer
        return lambda texts: tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"], None
    from tokenizers import Tokenizer

    text = backend.to_str()
    plain = Tokenizer.from_str(text)  # a copy: the host's padding and truncation settings stay as they are
    plain.no_padding()
    plain.no_truncation()

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in plain.encode_batch(texts, add_special_tokens=False)]

    return encode, hashlib.sha256(text.encode()).hexdigest()


def token_probabilities(tokenizer: Any, rows: int) -> np.ndarray:
    """``[rows]`` float64: each token row's share of the tokens of English text (zero where no word
    reaches). Seconds per tokenizer; memoized per tokenizer in the process."""
    encode, digest = _encoder(tokenizer)
    if digest is not None and (digest, rows) in _MEMO:
        return _MEMO[digest, rows]
    from wordfreq import get_frequency_dict

    frequencies = get_frequency_dict(LANGUAGE, wordlist="large")
    words = list(frequencies)
    weights = np.fromiter(frequencies.values(), dtype=np.float64, count=len(words))
    total = np.zeros(rows, dtype=np.float64)
    for form, share in FORMS:
        ids = encode([form.format(space=" ", word=w, Word=w[:1].upper() + w[1:]) for w in words])
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        counts = np.bincount(np.minimum(flat, rows - 1), np.repeat(weights * share, lengths), minlength=rows)
        total += counts[:rows]
    total /= total.sum()
    if digest is not None:
        _MEMO[digest, rows] = total
    return total


def word_idf(tokenizer: Any, rows: int, *, text_tokens: int = TEXT_TOKENS) -> np.ndarray:
    """``[rows]`` float64 idf from the word frequencies; NaN for a token no English word reaches
    (punctuation, digits, other scripts: the caller counts those on a corpus). ``text_tokens``: L."""
    p = token_probabilities(tokenizer, rows)
    df = TEXTS * -np.expm1(-text_tokens * p)
    idf = counted_idf(torch.from_numpy(df), TEXTS).numpy()
    return np.where(p > 0, idf, np.nan)
