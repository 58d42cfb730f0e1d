"""Evaluate several recipes over one model with shared forward passes.

Usage::

    shared = SharedEncoding([Encoder(m, t, recipe="va"), Encoder(m, t, recipe="hs")])
    evaluate(shared.view(0), "stsb"); evaluate(shared.view(1), "stsb")   # one forward pass per batch

Each view behaves like an encoder (``encode(texts, *, batch_size, show_progress)``); the first view
asked for a text computes it for every encoder at once (:func:`valuelens.encoder.encode_many`) and
later views read the cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from valuelens.encoder import Encoder, check_texts, encode_many


class SharedEncoding:
    """A text → vectors cache filled by :func:`encode_many` for several encoders at once."""

    def __init__(self, encoders: Sequence[Encoder]) -> None:
        self.encoders = list(encoders)
        self._cache: dict[str, list[np.ndarray]] = {}

    def compute(self, texts: Sequence[str], *, batch_size: int = 32, show_progress: bool = False) -> None:
        texts, _ = check_texts(texts, allow_single=False)
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if not missing:
            return
        results = encode_many(self.encoders, missing, batch_size=batch_size, show_progress=show_progress)
        for row, text in enumerate(missing):
            self._cache[text] = [result[row] for result in results]

    def view(self, index: int) -> _View:
        return _View(self, index)

    def clear(self) -> None:
        self._cache.clear()


class _View:
    def __init__(self, shared: SharedEncoding, index: int) -> None:
        self.shared = shared
        self.index = index
        self.encoder = shared.encoders[index]

    def encode(self, texts: list[str], *, batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        self.shared.compute(texts, batch_size=batch_size, show_progress=show_progress)
        if not texts:
            return np.zeros((0, self.encoder.dimension), dtype=np.float32)
        return np.stack([self.shared._cache[t][self.index] for t in texts])
