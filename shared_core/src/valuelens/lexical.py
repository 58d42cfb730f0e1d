"""The lexical part: a text's tokens read through the model's own input embeddings, with no forward pass.

Usage::

    enc = Encoder.from_pretrained("smollm2-135m", preset="best", lexical=0.6)
    enc = Encoder.from_pretrained("smollm2-135m", preset="best", lexical=0.05, lexical_query=0.97)

A text's lexical vector is the sum over its distinct tokens of ``(1 + log tf) · idf · code``, scaled to
unit length. The text is read alone: no prompt, no special tokens, up to :data:`MAX_TOKENS` tokens, so
``max_length`` does not cut it.

- **Codes.** A token's code is its input-embedding row, centred on the rows' mean and whitened.
  Eigenvalues are floored at :data:`FLOOR` times the largest. Distinct tokens come out near-orthogonal;
  the model's near-synonyms stay close.
- **idf.** ``idf = log((N + 1) / (df + 0.5))``. By default it comes from English word frequencies
  (:mod:`valuelens.word_frequency`: no corpus), counted on the package's corpus for the tokens no English
  word reaches. ``lexical_corpus`` counts it on N unlabeled texts of your own instead.
- **State.** The mean, the whitening and the idf make a :class:`LexicalState`. It is fitted once per
  model and corpus, in seconds, and cached like a first-use post-processing (:mod:`valuelens.states`).

The encoder's :class:`~valuelens.composition.Composition` joins it to the model's part after the
post-processing (:class:`LexicalPart`). Both parts
are unit length, weighted ``√(1−w)`` and ``√w``, so between two documents
``cosine = (1−w)·cos(model) + w·cos(lexical)``. A query embedded with weight ``q``
(``lexical_query``) against a document embedded with ``w`` scores
``√((1−q)(1−w))·cos(model) + √(q·w)·cos(lexical)``. A small ``w`` with a large ``q`` therefore gives
query–document ranking the lexical signal while keeping document–document similarity the model's.
The settings and their measured effect are in ``research/rounds/lexical_lens.md`` and ``docs/lexical.md``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor

from valuelens.errors import ConfigError

__all__ = [
    "FLOOR",
    "MAX_TOKENS",
    "LexicalLens",
    "LexicalPart",
    "LexicalState",
    "counted_idf",
    "token_ids",
]

logger = logging.getLogger(__name__)

#: The whitening floor, relative to the largest eigenvalue (chosen on SmolLM2's SciFact dev split).
FLOOR = 1e-3
#: Tokens of a text the lexical part reads (a lookup per token, not a forward pass).
MAX_TOKENS = 8192
#: Bump when the state's layout or formulas change: cached states of other versions are fitted again.
STATE_VERSION = 2
_ROWS_PER_STEP = 16384
#: ``lexical_corpus`` names a saved :class:`LexicalState` rather than texts when it ends so.
STATE_SUFFIX = ".safetensors"


@dataclass(frozen=True)
class LexicalState:
    """The fitted state of a lexical part: the embedding rows' ``mean`` ``[h]``, the ``whitening`` ``[h, h]``
    and the ``idf`` of every row ``[V]`` (float32, CPU). Usage: ``LexicalState.fit(emb, tok, texts)``."""

    mean: Tensor
    whitening: Tensor
    idf: Tensor

    @classmethod
    def fit(
        cls, embeddings: Tensor, tokenizer: Any, texts: Sequence[str], *, word_idf: Tensor | None = None
    ) -> LexicalState:
        """Whitening from the input-embedding matrix ``embeddings`` ``[V, h]``; idf counted on ``texts``, or
        taken from ``word_idf`` ``[V]`` (:func:`valuelens.word_frequency.word_idf`) where it is not NaN."""
        rows, hidden = embeddings.shape
        total = torch.zeros(hidden, dtype=torch.float64)
        gram = torch.zeros(hidden, hidden, dtype=torch.float64)
        with torch.no_grad():
            for step in embeddings.detach().split(_ROWS_PER_STEP):
                block = step.float()
                total += block.sum(0).double().cpu()
                gram += (block.T @ block).double().cpu()
        mean = total / rows
        values, vectors = torch.linalg.eigh(gram / rows - torch.outer(mean, mean))
        values = values.clamp(min=0.0)
        scale = (values + FLOOR * values.max()).rsqrt()
        whitening = (vectors * scale) @ vectors.T
        df = torch.zeros(rows, dtype=torch.float64)
        for ids in token_ids(tokenizer, texts):
            if ids:
                df[torch.tensor(sorted(set(ids)), dtype=torch.long).clamp(max=rows - 1)] += 1
        idf = counted_idf(df, len(texts))
        if word_idf is not None:
            words = word_idf.to(idf.dtype)
            idf = torch.where(words.isnan(), idf, words)
        return cls(mean.float(), whitening.float(), idf.float())

    def save(self, path: str | Path) -> None:
        save_file(
            {"mean": self.mean, "whitening": self.whitening, "idf": self.idf},
            str(path),
            metadata={"valuelens_lexical_version": str(STATE_VERSION)},
        )

    @classmethod
    def load(cls, path: str | Path) -> LexicalState:
        """A saved state; ``ConfigError`` when the file is unreadable or of another version."""
        try:
            with safe_open(str(path), framework="pt") as handle:
                version = (handle.metadata() or {}).get("valuelens_lexical_version")
            tensors = load_file(str(path))
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            msg = f"cannot read the lexical state {str(path)!r}: {exc}"
            raise ConfigError(msg) from None
        if version != str(STATE_VERSION) or set(tensors) != {"mean", "whitening", "idf"}:
            msg = f"{str(path)!r} is not a version-{STATE_VERSION} lexical state"
            raise ConfigError(msg)
        return cls(tensors["mean"], tensors["whitening"], tensors["idf"])


def counted_idf(df: Tensor, texts: int) -> Tensor:
    """``log((N + 1) / (df + 0.5))``: the idf of tokens found in ``df`` of ``texts`` (N) texts."""
    return torch.log((texts + 1) / (df + 0.5))


def token_ids(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids, read alone (no special tokens), at most :data:`MAX_TOKENS`."""
    if not texts:
        return []
    encoded = tokenizer(
        list(texts), add_special_tokens=False, truncation=True, max_length=MAX_TOKENS, verbose=False
    )
    return [list(ids) for ids in encoded["input_ids"]]


@dataclass(frozen=True)
class LexicalPart:
    """Texts' lexical vectors ``[n, h]`` (unit rows, zero for a text without tokens) and the weight of the
    side they were read for; :meth:`join` puts them after the model's vectors."""

    vectors: Tensor
    weight: float

    def join(self, dense: Tensor) -> Tensor:
        """``[√(1−w)·unit(dense), √w·lexical]``: cosine between joined vectors mixes the two parts' cosines."""
        if dense.shape[0] != self.vectors.shape[0]:
            msg = f"{dense.shape[0]} model vectors but {self.vectors.shape[0]} lexical ones"
            raise ValueError(msg)
        dense = torch.nn.functional.normalize(dense.float(), dim=-1)
        lexical = self.vectors.to(device=dense.device, dtype=dense.dtype)
        return torch.cat([math.sqrt(1 - self.weight) * dense, math.sqrt(self.weight) * lexical], dim=-1)


class LexicalLens:
    """The lexical vectors of texts under a model's input embeddings and a fitted :class:`LexicalState`.

    Usage: ``LexicalLens(model.get_input_embeddings().weight, tokenizer, state).encode(["a text"])``.
    """

    def __init__(self, embeddings: Tensor, tokenizer: Any, state: LexicalState) -> None:
        if state.idf.shape[0] != embeddings.shape[0] or state.mean.shape[0] != embeddings.shape[1]:
            msg = (
                f"the lexical state was fitted for a {state.idf.shape[0]} x {state.mean.shape[0]} embedding "
                f"matrix, this model's is {embeddings.shape[0]} x {embeddings.shape[1]}"
            )
            raise ConfigError(msg)
        self.embeddings = embeddings
        self.tokenizer = tokenizer
        self.state = state
        device = embeddings.device
        self.mean = state.mean.to(device)
        self.whitening = state.whitening.to(device)
        self.idf = state.idf.to(device)

    @property
    def dimension(self) -> int:
        return int(self.mean.shape[0])

    def part(self, vectors: Tensor, side: str, document_weight: float, query_weight: float) -> LexicalPart:
        """The :class:`LexicalPart` of :meth:`encode`'s ``vectors`` for ``side`` (documents or queries)."""
        return LexicalPart(vectors, query_weight if side == "query" else document_weight)

    def encode(self, texts: Sequence[str], side: str = "document") -> Tensor:
        """``[n, h]`` float32 unit rows on the embeddings' device (a text without tokens gives zeros); both
        sides read a text alike."""
        rows, device = self.embeddings.shape[0], self.embeddings.device
        if self.idf.device != device:  # the model moved (e.g. a sentence-transformers model.to("cuda"))
            self.mean, self.whitening, self.idf = (
                t.to(device) for t in (self.mean, self.whitening, self.idf)
            )
        out = torch.zeros(len(texts), self.dimension, device=device)
        with torch.no_grad():
            for i, ids in enumerate(token_ids(self.tokenizer, texts)):
                if not ids:
                    continue
                tokens, counts = (
                    torch.tensor(ids, device=out.device).clamp(max=rows - 1).unique(return_counts=True)
                )
                weights = (1 + counts.float().log()) * self.idf[tokens]
                out[i] = weights @ self.embeddings[tokens].float() - weights.sum() * self.mean
            out = out @ self.whitening
        return torch.nn.functional.normalize(out, dim=-1)
