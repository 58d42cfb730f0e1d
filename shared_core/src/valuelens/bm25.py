"""The BM25 lexical part: a text's words (Unicode tokens, lower-cased, stop words out, Snowball-stemmed),
BM25 weights, and signed feature hashing into ``D`` coordinates, in vectors whose inner products are the
BM25 scores and which rank as the hybrid score in any cosine or inner-product store.

Usage::

    state = BM25State.fit(Analyzer("english"), my_documents)     # df, N, avgdl of your own texts
    lens = BM25Lens(state, dim=8192, k1=1.5, b=0.75)
    docs, queries = lens.documents(texts), lens.queries(["what causes rain?"])
    queries @ docs.T          # ≈ BM25(q, d) / BM25max(q) · δ … see below; exact up to hashing collisions

**Analysis** (:class:`Analyzer`): tokens ``(?u)\\b\\w\\w+\\b`` (words of two or more letters or digits, in
any script), lower-cased, Lucene's 33 English stop words dropped (English only), then the Snowball stemmer
of the language (``snowballstemmer``'s pure-Python algorithms, the same on every machine).

**Weights** (the Lucene variant, as bm25s and Lucene score): a document's term ``t`` weighs
``idf(t) · tf / (tf + k1 · (1 − b + b · dl / avgdl))`` with ``idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))``;
``N``, ``df`` and ``avgdl`` come from the texts the state was fitted on (:meth:`BM25State.fit`: the
user's ``lexical_corpus``), else from English word frequencies (:meth:`BM25State.from_word_frequencies`:
``df = N · (1 − exp(−L · p))`` for a stem's probability ``p``, :data:`AVERAGE_LENGTH` words a text). A query
term weighs its count in the query. BM25(q, d) is then the inner product of the two weight vectors.

**Hashing**: a stem's 64-bit key (blake2b) picks :data:`HASHES` coordinates among ``D``, each with a sign and
``1/√HASHES`` of the weight, so matching terms still multiply to the whole weight while a collision adds a
fraction of one, of either sign; measured per ``D`` in docs/lexical.md. :meth:`BM25Lens.sparse` gives the unhashed
weights (32-bit keys as indices) for hosts with native sparse vectors (Qdrant).

**One vector, any store**: a document's lexical block is its weights divided by :attr:`BM25Lens.bound`
(the largest norm any text's weights can reach: :func:`weight_bound`), followed by a padding
coordinate ``sqrt(1 − ‖block‖²)``, so every document's block has norm 1 and a cosine store ranks as an
inner-product one. A query's block is its weights divided by ``BM25max(q) = Σ qtf · idf`` (the most the
query can score), with a zero padding coordinate; :class:`BM25Part` joins the blocks to the model's part
(see its docstring for the weights).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor

from valuelens.config import LEXICAL_LANGUAGES, EncoderConfig
from valuelens.errors import ConfigError

__all__ = [
    "AVERAGE_LENGTH",
    "MAX_TERMS",
    "STOP_WORDS",
    "Analyzer",
    "BM25Lens",
    "BM25Part",
    "BM25State",
    "term_key",
    "weight_bound",
]

#: Lucene's English stop words (``EnglishAnalyzer``'s default set; bm25s uses the same).
STOP_WORDS: dict[str, frozenset[str]] = {
    "english": frozenset(
        [
            "a",
            "an",
            "and",
            "are",
            "as",
            "at",
            "be",
            "but",
            "by",
            "for",
            "if",
            "in",
            "into",
            "is",
            "it",
            "no",
            "not",
            "of",
            "on",
            "or",
            "such",
            "that",
            "the",
            "their",
            "then",
            "there",
            "these",
            "they",
            "this",
            "to",
            "was",
            "will",
            "with",
        ]
    )
}
#: The words of a text read at most (a lookup each, not a forward pass): longer texts are cut here.
MAX_TERMS = 8192
#: The average text length in words (after stop words) assumed when no corpus gives one.
AVERAGE_LENGTH = 100.0
#: The number of texts the word-frequency statistics stand for (as :mod:`valuelens.word_frequency`).
WORD_FREQUENCY_TEXTS = 1_000_000
#: Bump when the state's layout or formulas change: cached states of other versions are fitted again.
STATE_VERSION = 1
#: The coordinates each stem is hashed to (each carrying ``1/√HASHES`` of its weight): a collision then
#: adds an eighth of a weight, not a whole one. Chosen on SciFact's dev split (nDCG@10 of the part alone,
#: mean over D = 4096, 8192, 16384, English word frequencies: 1 hash 62.2, 2 66.0, 4 67.3, 8 67.5;
#: research/rounds/bm25_part.md).
HASHES = 8
_MASK64 = (1 << 64) - 1
_TOKEN = re.compile(r"(?u)\b\w\w+\b")


@functools.cache
def _stemmer(language: str) -> Any:
    module = importlib.import_module(f"snowballstemmer.{language}_stemmer")
    return getattr(module, f"{language.title()}Stemmer")()


@dataclass(frozen=True)
class Analyzer:
    """Text → stems (see the module docstring). Usage: ``Analyzer("english").terms("Cats are running")``
    → ``["cat", "run"]``."""

    language: str = "english"

    def __post_init__(self) -> None:
        if self.language not in LEXICAL_LANGUAGES:
            msg = f"lexical_language must be one of {', '.join(LEXICAL_LANGUAGES)} (a Snowball stemmer), got {self.language!r}"
            raise ConfigError(msg)

    @property
    def stop_words(self) -> frozenset[str]:
        return STOP_WORDS.get(self.language, frozenset())

    def terms(self, text: str) -> list[str]:
        """The stems of ``text``'s words in order (stop words out), at most :data:`MAX_TERMS`."""
        stop = self.stop_words
        stem = self._stem
        found = []
        for match in _TOKEN.finditer(text.lower()):
            word = match.group()
            if word not in stop:
                found.append(stem(word))
                if len(found) == MAX_TERMS:
                    break
        return found

    def _stem(self, word: str) -> str:
        return _stem_cached(self.language, word)


@functools.lru_cache(maxsize=1 << 20)
def _stem_cached(language: str, word: str) -> str:
    return str(_stemmer(language).stemWord(word))


def term_key(term: str) -> int:
    """A stem's stable 63-bit key (blake2b): the same on every machine and run."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest(), "little") >> 1


def _mix(value: int) -> int:
    """splitmix64: a stem key (+ the hash's number) → 64 well-mixed bits."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def weight_bound(state: BM25State, k1: float, b: float) -> float:
    """The largest norm a text's BM25 weights can reach. Each weight is ``idf · tf / (tf + K)`` with
    ``K = k1 · (1 − b + b · dl / avgdl)``, and ``(tf / (tf + K))² ≤ tf / (4K)``, so the squared norm is
    at most ``idf_max² · dl / (4K)``, which grows with ``dl`` towards ``idf_max² · avgdl / (4 · k1 · b)``;
    ``dl`` is at most :data:`MAX_TERMS`. With ``k1 = 0`` each weight is its idf: ``idf_max² · MAX_TERMS``."""
    top = max(float(state.idf.max()) if state.idf.numel() else 0.0, state.unknown_idf)
    if k1 == 0:
        return top * math.sqrt(MAX_TERMS) or 1.0
    k = k1 * (1 - b + b * MAX_TERMS / state.average_length)
    return top * math.sqrt(MAX_TERMS / (4 * k)) or 1.0


def _idf(df: np.ndarray, n: float) -> np.ndarray:
    return np.log1p((n - df + 0.5) / (df + 0.5))


@dataclass(frozen=True, eq=False)
class BM25State:
    """The corpus statistics of a BM25 part: each known stem's key and idf, the idf of an unknown stem,
    the number of texts and their average length in terms. Usage: ``BM25State.fit(analyzer, texts)``."""

    keys: Tensor  # int64 [T], sorted
    idf: Tensor  # float32 [T]
    unknown_idf: float
    n_texts: float
    average_length: float
    language: str
    _table: dict[int, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._table.update(zip(self.keys.tolist(), self.idf.tolist(), strict=True))

    @classmethod
    def fit(cls, analyzer: Analyzer, texts: Sequence[str]) -> BM25State:
        """Counted on ``texts``: ``df`` per stem, ``N``, ``avgdl``."""
        df: Counter[str] = Counter()
        total = 0
        for text in texts:
            terms = analyzer.terms(text)
            total += len(terms)
            df.update(set(terms))
        n = max(len(texts), 1)
        average = total / n if total else AVERAGE_LENGTH
        return cls._from_counts(df, float(n), average, analyzer.language)

    @classmethod
    def from_word_frequencies(cls, analyzer: Analyzer) -> BM25State:
        """English word frequencies (wordfreq) through the analyzer: each stem's probability ``p`` gives
        ``df = N · (1 − exp(−L · p))`` over ``N`` texts of ``L`` = :data:`AVERAGE_LENGTH` terms."""
        from wordfreq import get_frequency_dict

        frequencies = get_frequency_dict("en", wordlist="large")
        mass: dict[str, float] = {}
        stop = analyzer.stop_words
        for word, p in frequencies.items():
            for token in _TOKEN.findall(word.lower()):
                if token not in stop:
                    stem = analyzer._stem(token)
                    mass[stem] = mass.get(stem, 0.0) + p
        total = sum(mass.values())
        n = float(WORD_FREQUENCY_TEXTS)
        df = {stem: n * -math.expm1(-AVERAGE_LENGTH * p / total) for stem, p in mass.items()}
        return cls._from_counts(df, n, AVERAGE_LENGTH, analyzer.language)

    @classmethod
    def _from_counts(cls, df: Mapping[str, float], n: float, average: float, language: str) -> BM25State:
        keys = np.fromiter((term_key(t) for t in df), dtype=np.int64, count=len(df))
        counts = np.fromiter(df.values(), dtype=np.float64, count=len(df))
        order = np.argsort(keys)
        idf = _idf(counts[order], n).astype(np.float32)
        unknown = float(_idf(np.zeros(1), n)[0])
        return cls(torch.from_numpy(keys[order]), torch.from_numpy(idf), unknown, n, average, language)

    def idf_of(self, key: int) -> float:
        return self._table.get(key, self.unknown_idf)

    def save(self, path: str | Path) -> None:
        save_file(
            {"keys": self.keys, "idf": self.idf},
            str(path),
            metadata={
                "valuelens_bm25_version": str(STATE_VERSION),
                "unknown_idf": repr(self.unknown_idf),
                "n_texts": repr(self.n_texts),
                "average_length": repr(self.average_length),
                "language": self.language,
            },
        )

    @classmethod
    def load(cls, path: str | Path) -> BM25State:
        """A saved state; ``ConfigError`` when the file is unreadable or of another version."""
        try:
            with safe_open(str(path), framework="pt") as handle:
                meta = handle.metadata() or {}
            tensors = load_file(str(path))
            if meta.get("valuelens_bm25_version") != str(STATE_VERSION) or set(tensors) != {"keys", "idf"}:
                raise ValueError(f"not a version-{STATE_VERSION} BM25 state")
            return cls(
                tensors["keys"],
                tensors["idf"],
                float(meta["unknown_idf"]),
                float(meta["n_texts"]),
                float(meta["average_length"]),
                meta["language"],
            )
        except (SafetensorError, OSError, ValueError, KeyError, RuntimeError) as exc:
            msg = f"cannot read the BM25 state {str(path)!r}: {exc}"
            raise ConfigError(msg) from None


class BM25Lens:
    """BM25 vectors of texts under a fitted :class:`BM25State` (see the module docstring).

    Usage: ``BM25Lens(state, dim=8192).documents(["a text"])`` → ``[1, 8193]``; ``.queries([...])``.
    """

    def __init__(
        self,
        state: BM25State,
        *,
        dim: int = EncoderConfig.lexical_dim,
        k1: float = EncoderConfig.lexical_k1,
        b: float = EncoderConfig.lexical_b,
        hashes: int = HASHES,
    ) -> None:
        self.state = state
        self.hashes = hashes
        self.analyzer = Analyzer(state.language)
        self.dim = dim
        self.k1 = k1
        self.b = b
        self.bound = weight_bound(state, k1, b)
        """The largest norm a text's weights can reach (:func:`weight_bound`)."""

    @property
    def dimension(self) -> int:
        """``D`` hashed coordinates and the padding coordinate."""
        return self.dim + 1

    def _slots(self, key: int) -> list[tuple[int, float]]:
        """The :attr:`hashes` coordinates and signs of a stem's key."""
        found = []
        for j in range(self.hashes):
            mixed = _mix(key + j)
            found.append(((mixed >> 1) % self.dim, 1.0 if mixed & 1 else -1.0))
        return found

    def weights(self, text: str) -> dict[int, float]:
        """A document's BM25 weights: ``{stem key: idf · saturated, length-normalized tf}``."""
        terms = self.analyzer.terms(text)
        counts = Counter(term_key(t) for t in terms)
        norm = self.k1 * (1 - self.b + self.b * len(terms) / self.state.average_length)
        return {key: self.state.idf_of(key) * tf / (tf + norm) for key, tf in counts.items()}

    def query_weights(self, text: str) -> tuple[dict[int, float], float]:
        """A query's term counts and the most it can score, ``Σ qtf · idf``."""
        counts = Counter(term_key(t) for t in self.analyzer.terms(text))
        top = sum(tf * self.state.idf_of(key) for key, tf in counts.items())
        return {key: float(tf) for key, tf in counts.items()}, top

    def hashed(self, weights: Iterable[tuple[int, float]]) -> dict[int, float]:
        """Weights by stem key → the signed sums per coordinate (the vector's nonzero entries)."""
        row: dict[int, float] = {}
        share = 1 / math.sqrt(self.hashes)
        for key, value in weights:
            for slot, sign in self._slots(key):
                row[slot] = row.get(slot, 0.0) + sign * value * share
        return row

    def documents(self, texts: Sequence[str]) -> Tensor:
        """``[n, D + 1]`` float32 unit rows: the hashed weights over :attr:`bound`, then the padding
        coordinate (a text with no indexable word: all padding). A text whose hashed weights reach past
        the bound (collisions only) is scaled back to it."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            row = self.hashed(self.weights(text).items())
            norm = math.sqrt(sum(v * v for v in row.values())) / self.bound
            scale = 1 / (self.bound * max(norm, 1.0))
            if row:
                out[i, list(row)] = np.fromiter(row.values(), dtype=np.float64, count=len(row)) * scale
            out[i, self.dim] = math.sqrt(max(0.0, 1.0 - min(norm, 1.0) ** 2))
        return torch.from_numpy(out)

    def queries(self, texts: Sequence[str]) -> Tensor:
        """``[n, D + 1]`` float32: the hashed term counts over ``BM25max(q)`` (zero padding; a query with no
        indexable word: all zeros). ``queries @ documents.T`` is ``BM25(q, d) / (BM25max(q) · bound)``."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            weights, top = self.query_weights(text)
            if top > 0:
                row = self.hashed((k, v / top) for k, v in weights.items())
                out[i, list(row)] = np.fromiter(row.values(), dtype=np.float64, count=len(row))
        return torch.from_numpy(out)

    def encode(self, texts: Sequence[str], side: str = "document") -> Tensor:
        """:meth:`documents` or (``side="query"``) :meth:`queries`."""
        return self.queries(texts) if side == "query" else self.documents(texts)

    def part(self, vectors: Tensor, side: str, document_weight: float, query_weight: float) -> BM25Part:
        """The :class:`BM25Part` of :meth:`encode`'s ``vectors`` for ``side``."""
        return BM25Part(vectors, side == "query", document_weight, query_weight, self.bound)

    def sparse(self, texts: Sequence[str], *, query: bool = False) -> list[tuple[list[int], list[float]]]:
        """Unhashed weights for hosts with native sparse vectors: per text, 32-bit term indices and their
        weights (documents: BM25 weights; queries: term counts), so that their dot product is BM25."""
        found = []
        for text in texts:
            weights = self.query_weights(text)[0] if query else self.weights(text)
            merged: dict[int, float] = {}
            for key, value in weights.items():
                index = key & 0xFFFFFFFF
                merged[index] = merged.get(index, 0.0) + value
            found.append((list(merged), list(merged.values())))
        return found


@dataclass(frozen=True)
class BM25Part:
    """Texts' BM25 blocks (:meth:`BM25Lens.documents` or :meth:`BM25Lens.queries`), the side they were read
    for, and the two weights: documents' ``δ²`` (``lexical``) and the queries' ``w`` (``lexical_query``).

    A document joins as ``[√(1−δ²)·unit(dense), δ·block]`` (unit length: the block is); a query as the unit
    vector along ``[(1−w)/√(1−δ²)·unit(dense), (w/δ)·bound·block]``. Their inner product is then, up to the
    query's own scale, ``(1−w)·cos(dense) + w·BM25(q, d)/BM25max(q)``: the hybrid score, in a cosine store
    too. Between two documents the blocks add ``δ²·(1 − ε)`` with ``ε`` below ``(‖weights‖/bound)²``: a
    near-constant, so document–document similarity stays the model's.
    """

    vectors: Tensor
    query: bool
    document_weight: float
    query_weight: float
    bound: float

    def join(self, dense: Tensor) -> Tensor:
        if dense.shape[0] != self.vectors.shape[0]:
            msg = f"{dense.shape[0]} model vectors but {self.vectors.shape[0]} lexical ones"
            raise ValueError(msg)
        dense = torch.nn.functional.normalize(dense.float(), dim=-1)
        block = self.vectors.to(device=dense.device, dtype=dense.dtype)
        d, w = self.document_weight, self.query_weight
        if not self.query:
            return torch.cat([math.sqrt(1 - d) * dense, math.sqrt(d) * block], dim=-1)
        joined = torch.cat(
            [(1 - w) / math.sqrt(1 - d) * dense, (w / math.sqrt(d)) * self.bound * block], dim=-1
        )
        return torch.nn.functional.normalize(joined, dim=-1)
