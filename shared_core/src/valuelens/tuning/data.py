"""The dev data ``valuelens tune`` scores candidates on, and the unlabeled text it fits post-processing on.

Usage::

    data = TuneData.build(mode="quick")            # STS-B dev sample, SciFact dev split, fitting text
    data.sts.texts, data.retrieval.queries, data.fit_texts

Dev splits only: STS-B ``dev`` (a seeded sample of pairs in quick mode), and SciFact's carved ``dev``
split (:data:`valuelens.evaluation.tasks.CARVED_DEV_QUERIES` seeded queries; its other 200 queries are
the ``test`` split results are reported on). Quick mode ranks the dev queries' documents among the
relevant documents of those queries plus a seeded sample of the others (the distractors: 200, or
``distractors=N``); full mode over the whole corpus.
The ``sts`` objective reads every STS-B dev pair in either mode (:func:`sizes`).
The fitting text is unlabeled: STS-B ``train`` sentences and SciFact documents outside the dev corpus
(seeded), or the user's own corpus.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from valuelens.errors import ConfigError
from valuelens.evaluation.tasks import SEED, PairData, RetrievalData, find_set, load_task, read_jsonl

__all__ = [
    "MODES",
    "OBJECTIVES",
    "OBJECTIVE_MEANING",
    "Mode",
    "Objective",
    "PairSet",
    "RetrievalSet",
    "TuneData",
    "read_corpus",
    "sizes",
]

Mode = Literal["quick", "full"]
MODES: tuple[Mode, ...] = ("quick", "full")
Objective = Literal["balanced", "sts", "retrieval"]
#: What each objective maximizes (the report and ``--objective``'s help say it in these words).
OBJECTIVE_MEANING: dict[Objective, str] = {
    "balanced": "the mean of STS-B dev Spearman and SciFact dev nDCG@10",
    "sts": "STS-B dev Spearman",
    "retrieval": "SciFact dev nDCG@10",
}
OBJECTIVES: tuple[Objective, ...] = tuple(OBJECTIVE_MEANING)

#: Per mode: STS-B dev pairs (None: all 1500), other SciFact documents beside the dev queries' relevant
#: ones (None: the whole corpus), unlabeled STS-B train sentences and SciFact documents to fit on.
SIZES: dict[Mode, dict[str, int | None]] = {
    "quick": {"sts_pairs": 600, "other_docs": 200, "fit_sentences": 300, "fit_docs": 50},
    "full": {"sts_pairs": None, "other_docs": None, "fit_sentences": 2000, "fit_docs": 400},
}


def sizes(
    mode: Mode, objective: Objective = "balanced", distractors: int | None = None
) -> dict[str, int | None]:
    """How much of each set a run reads (:data:`SIZES`), except that the ``sts`` objective reads every
    STS-B dev pair in either mode: the pairs are its only signal, and short sentences cost little beside
    the documents (a quick run's 600 pairs were a thin base for a sentence-only preset). ``distractors``,
    when given, replaces the mode's count of other SciFact documents (``--distractors``).

    Usage: ``sizes("quick", "sts")["sts_pairs"]`` (``None``: all)."""
    chosen = dict(SIZES[mode])
    if objective == "sts":
        chosen["sts_pairs"] = None
    if distractors is not None:
        if isinstance(distractors, bool) or not isinstance(distractors, int) or distractors < 0:
            msg = f"distractors must be a whole number of documents >= 0, got {distractors!r}"
            raise ConfigError(msg)
        chosen["other_docs"] = distractors
    return chosen


@dataclass(frozen=True)
class PairSet:
    """Scored pairs as distinct texts plus each pair's two indices and gold score."""

    texts: tuple[str, ...]
    a: tuple[int, ...]
    b: tuple[int, ...]
    gold: tuple[float, ...]

    @classmethod
    def from_pairs(cls, data: PairData) -> PairSet:
        texts = list(dict.fromkeys([*data.texts1, *data.texts2]))
        index = {t: i for i, t in enumerate(texts)}
        return cls(
            tuple(texts),
            tuple(index[t] for t in data.texts1),
            tuple(index[t] for t in data.texts2),
            tuple(data.scores),
        )


@dataclass(frozen=True)
class RetrievalSet:
    """Queries and documents (as texts, in a fixed order) with each query's relevant documents."""

    query_ids: tuple[str, ...]
    queries: tuple[str, ...]
    doc_ids: tuple[str, ...]
    docs: tuple[str, ...]
    qrels: dict[str, dict[str, int]]


def _sample(items: Sequence[str], n: int | None, seed: int = SEED) -> list[str]:
    if n is None or n >= len(items):
        return list(items)
    keep = np.sort(np.random.default_rng(seed).choice(len(items), size=n, replace=False))
    return [items[i] for i in keep]


def read_corpus(path: str | os.PathLike[str], limit: int | None, *, option: str = "--corpus") -> list[str]:
    """Unlabeled texts of the user's own: a ``.jsonl`` file (the ``text`` field of each line) or a text
    file (one per line); blank lines skipped, duplicates kept once, a seeded sample of ``limit``.
    ``option`` names where the path came from in an error."""
    file = Path(path)
    if not file.is_file():
        msg = f"{option} {str(file)!r} is not a file (give a .txt with one text per line, or a .jsonl with a 'text' field)"
        raise ConfigError(msg)
    if file.suffix in (".jsonl", ".gz"):
        texts = [str(r.get("text", "")) for r in read_jsonl(file)]
    else:
        texts = file.read_text(encoding="utf-8").splitlines()
    texts = list(dict.fromkeys(t.strip() for t in texts if t.strip()))
    if len(texts) < 10:
        msg = f"{option} {str(file)!r} holds {len(texts)} distinct non-empty texts: at least 10 are needed to fit on"
        raise ConfigError(msg)
    return _sample(texts, limit)


@dataclass(frozen=True)
class TuneData:
    """Everything a tuning run reads (see the module docstring)."""

    mode: Mode
    sts: PairSet
    retrieval: RetrievalSet
    fit_texts: tuple[str, ...]
    fit_source: str

    @classmethod
    def build(
        cls,
        mode: Mode = "quick",
        *,
        objective: Objective = "balanced",
        corpus: str | os.PathLike[str] | None = None,
        distractors: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
    ) -> TuneData:
        """Read the dev sets from the data folder (``data_dir``, ``$VALUELENS_DATA_DIR`` or ``../shared/data``)
        for a run of ``mode`` and ``objective``; ``distractors``: how many SciFact documents beside the
        dev queries' relevant ones the dev corpus holds (default: the mode's; :func:`sizes`)."""
        if mode not in MODES:
            msg = f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}"
            raise ConfigError(msg)
        if objective not in OBJECTIVES:
            msg = f"objective must be one of {', '.join(map(repr, OBJECTIVES))}, got {objective!r}"
            raise ConfigError(msg)
        read = sizes(mode, objective, distractors)
        sts_data = load_task("stsb", data_dir).load("dev", limit=read["sts_pairs"])
        assert isinstance(sts_data, PairData)
        ret = load_task("scifact", data_dir).load("dev")
        assert isinstance(ret, RetrievalData)
        relevant = sorted({d for q in ret.qrels.values() for d, r in q.items() if r > 0 and d in ret.corpus})
        others = [d for d in ret.corpus if d not in set(relevant)]
        kept_others = _sample(others, read["other_docs"])
        doc_ids = [d for d in ret.corpus if d in set(relevant) | set(kept_others)]
        retrieval = RetrievalSet(
            tuple(ret.queries),
            tuple(ret.queries.values()),
            tuple(doc_ids),
            tuple(ret.corpus[d] for d in doc_ids),
            {q: dict(r) for q, r in ret.qrels.items()},
        )
        if corpus is not None:
            n_fit = (read["fit_sentences"] or 0) + (read["fit_docs"] or 0)
            fit = read_corpus(corpus, n_fit)
            source = f"{len(fit)} texts of {Path(corpus).name}"
        else:
            fit, source = _default_fit_texts(read, ret.corpus, set(doc_ids), data_dir)
        return cls(mode, PairSet.from_pairs(sts_data), retrieval, tuple(fit), source)

    def fingerprints(self) -> dict[str, str]:
        """A short hash of each embedded set's texts (:meth:`sets`): a cached set is reused only for the
        same texts."""
        return {
            name: hashlib.sha256(json.dumps(texts).encode("utf-8")).hexdigest()[:16]
            for name, texts in self.sets().items()
        }

    def sets(self) -> dict[str, tuple[str, ...]]:
        """The text sets embedded: ``sts``, ``queries``, ``docs``, ``fit``."""
        return {
            "sts": self.sts.texts,
            "queries": self.retrieval.queries,
            "docs": self.retrieval.docs,
            "fit": self.fit_texts,
        }


def _default_fit_texts(
    read: dict[str, int | None],
    corpus: dict[str, str] | Any,
    dev_docs: set[str],
    data_dir: str | os.PathLike[str] | None,
) -> tuple[list[str], str]:
    """Seeded STS-B train sentences and SciFact documents outside the dev corpus (unlabeled; from the
    whole corpus when the dev corpus is all of it, as in full mode)."""
    rows = list(read_jsonl(find_set("stsb", data_dir) / "train.jsonl"))
    pool = list(dict.fromkeys(t for r in rows for t in (r["sentence1"], r["sentence2"])))
    sentences = _sample(pool, read["fit_sentences"])
    outside = [text for doc_id, text in corpus.items() if doc_id not in dev_docs and text]
    wanted = read["fit_docs"] or 0
    where = "outside the dev corpus"
    if len(outside) < wanted:
        outside, where = [text for text in corpus.values() if text], "of the corpus"
    docs = _sample(outside, wanted)
    source = f"{len(sentences)} STS-B train sentences + {len(docs)} SciFact documents {where}"
    return [*sentences, *docs], source
