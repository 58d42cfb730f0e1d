"""The dev data ``valuelens tune`` scores candidates on, and the unlabeled text it fits post-processing on.

Usage::

    data = TuneData.build(corpus="my_docs/")                 # label-free: pseudo-queries from your documents
    data = TuneData.build(dev=["my_beir/", "pairs.tsv"])       # labelled data of yours
    data = TuneData.build(mode="quick")                        # this repository: STS-B dev, SciFact dev
    data.sts.texts, data.retrieval.queries, data.fit_texts

Where the dev data comes from (:func:`read_sources`, checked before any model loads):

- ``dev``: the user's labelled sets (:func:`read_dev`: a BEIR folder, STS pairs, a hub dataset id); the
  fitting text is ``corpus`` when given, else the dev sets' own texts;
- ``corpus`` alone: a retrieval dev set made from the documents (:mod:`valuelens.tuning.pseudo`), which
  also give the fitting text and the BM25 statistics; no STS pairs, so the objective is retrieval;
- neither: the project's data folder (``data_dir``, ``$VALUELENS_DATA_DIR`` or ``../shared/data``), dev splits
  only: STS-B ``dev`` (a seeded sample of pairs in quick mode) and SciFact's carved ``dev`` split
  (:data:`valuelens.evaluation.tasks.CARVED_DEV_QUERIES` seeded queries; its other 200 queries are the
  ``test`` split results are reported on). Quick mode ranks the dev queries' documents among the relevant
  documents of those queries plus a seeded sample of the others (the distractors: 200, or
  ``distractors=N``); full mode over the whole corpus. The ``sts`` objective reads every STS-B dev pair in
  either mode (:func:`sizes`). The fitting text: STS-B ``train`` sentences and SciFact documents outside
  the dev corpus (seeded);
- none of them (an installed package, no data folder): ``ConfigError`` naming ``--corpus`` and ``--dev``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from valuelens import hub
from valuelens.errors import ConfigError, HubUnreachableError
from valuelens.evaluation.tasks import (
    SEED,
    PairData,
    RetrievalData,
    default_data_dir,
    find_set,
    load_task,
    read_jsonl,
)
from valuelens.io import unlabeled_texts
from valuelens.tuning.pseudo import MIN_DOCUMENTS, PseudoDevSet, pseudo_dev_set

__all__ = [
    "DEV_SPLITS",
    "MODES",
    "OBJECTIVES",
    "OBJECTIVE_MEANING",
    "Mode",
    "Objective",
    "PairSet",
    "RetrievalSet",
    "Sources",
    "TuneData",
    "read_corpus",
    "read_dev",
    "read_sources",
    "sizes",
    "texts_of",
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

    Usage: ``sizes("quick", "sts")["sts_pairs"]`` (``None``: all). ``ConfigError`` for an unknown mode or
    objective, or a bad ``distractors``."""
    if mode not in MODES:
        msg = f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}"
        raise ConfigError(msg)
    if objective not in OBJECTIVES:
        msg = f"objective must be one of {', '.join(map(repr, OBJECTIVES))}, got {objective!r}"
        raise ConfigError(msg)
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


def texts_of(items: Iterable[Any], *, option: str = "corpus") -> list[str]:
    """The texts of ``items``: strings, LangChain ``Document``s (``page_content``) or LlamaIndex nodes and
    documents (``get_content()``), in order; ``ConfigError`` naming the first item that is none of them."""
    texts = []
    for n, item in enumerate(items):
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(getattr(item, "page_content", None), str):
            texts.append(item.page_content)
        elif callable(getattr(item, "get_content", None)):
            texts.append(str(item.get_content()))
        else:
            msg = f"{option}[{n}] is a {type(item).__name__}: give strings, LangChain Documents or LlamaIndex documents"
            raise ConfigError(msg)
    return texts


def read_corpus(
    corpus: str | os.PathLike[str] | Sequence[Any], limit: int | None = None, *, option: str = "--corpus"
) -> tuple[list[str], str]:
    """The user's documents and a name for them: a file (.txt, one per line; .jsonl / .csv / .parquet with
    a ``text`` field; gzipped), a folder of them (:func:`valuelens.io.unlabeled_texts`) or, from Python, a
    list (:func:`texts_of`). Blank texts skipped, duplicates kept once, a seeded sample of ``limit``;
    ``ConfigError`` (naming ``option``) when fewer than :data:`~valuelens.tuning.pseudo.MIN_DOCUMENTS`
    distinct texts remain."""
    if isinstance(corpus, (str, os.PathLike)):
        path = Path(corpus).expanduser()
        if not path.exists():
            msg = f"{option} {str(path)!r} does not exist (give a .txt with one text per line, a .jsonl / .csv / .parquet with a 'text' field, or a folder of them)"
            raise ConfigError(msg)
        texts, name = unlabeled_texts(path), path.name
    else:
        texts, name = texts_of(corpus, option=option), f"{len(corpus)} documents given"
    texts = list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))
    if len(texts) < MIN_DOCUMENTS:
        msg = f"{option} {name!r} holds {len(texts)} distinct non-empty texts: at least {MIN_DOCUMENTS} are needed"
        raise ConfigError(msg)
    return _sample(texts, limit), name


#: A Hugging Face hub id (``owner/name``): what ``--dev`` names when it is no local file or folder.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
#: Split names a labelled ``--dev`` folder is read from, in order of preference.
DEV_SPLITS = ("dev", "validation", "train", "test")


@dataclass(frozen=True)
class Sources:
    """What a run reads, checked before any model loads (:func:`read_sources`): the user's ``corpus``
    (documents, or ``None``) and labelled ``dev`` sets; ``kind`` says where the dev data comes from
    (``project``: this repository's STS-B and SciFact; ``labelled``: ``--dev``; ``corpus``: pseudo-queries
    made from the corpus)."""

    kind: Literal["project", "labelled", "corpus"]
    corpus: tuple[str, ...] | None
    corpus_name: str
    sts: tuple[PairData, str] | None
    retrieval: tuple[RetrievalData, str] | None


def read_dev(
    path: str | os.PathLike[str],
) -> tuple[Literal["sts", "retrieval"], PairData | RetrievalData, str]:
    """A labelled dev set of the user's: a BEIR / MTEB folder (``corpus.jsonl``, ``queries.jsonl``,
    ``qrels/<split>.tsv`` or ``qrels.tsv``), a folder of STS pairs (``<split>.jsonl`` with ``sentence1``,
    ``sentence2``, ``score``), one file of STS pairs (that ``.jsonl``, or a ``.tsv`` / ``.csv`` of
    sentence1, sentence2, score, a header row optional), or the id of a Hugging Face hub dataset in one of
    those layouts (``mteb/scifact``, ``mteb/stsbenchmark-sts``: :func:`valuelens.hub.dataset`). A folder is
    read at its first split of :data:`DEV_SPLITS`. Returns the kind, the data and a name for reports."""
    file = Path(path).expanduser()
    name = file.name
    if file.is_file():
        return "sts", _read_pair_file(file), f"pairs of {file.name}"
    if not file.is_dir():
        if not _HUB_ID.fullmatch(str(path)):
            msg = (
                f"--dev {str(file)!r} is neither a file nor a folder: give a BEIR folder (corpus.jsonl, "
                "queries.jsonl, qrels/dev.tsv), STS pairs (.jsonl with sentence1/sentence2/score, or .tsv) "
                "or a hub dataset id (owner/name, e.g. mteb/scifact)"
            )
            raise ConfigError(msg)
        try:
            file, name = hub.dataset(str(path)), str(path)
        except HubUnreachableError as exc:
            raise ConfigError(
                f"--dev {str(path)!r} is no local file or folder; as a hub dataset, {exc}"
            ) from None
    try:
        task = load_task(file)
    except ValueError as exc:
        raise ConfigError(f"--dev {name!r}: {exc}") from None
    if task.kind not in ("sts", "retrieval"):
        msg = f"--dev {name!r} holds {task.kind} data: give retrieval (BEIR) or STS pairs"
        raise ConfigError(msg)
    split = next((s for s in DEV_SPLITS if s in task.splits), task.splits[0])
    data = task.load(split)
    assert isinstance(data, (PairData, RetrievalData))
    return task.kind, data, f"{name} ({split})"


def _read_pair_file(file: Path) -> PairData:
    rows: list[tuple[str, str, float]] = []
    if file.name.endswith((".jsonl", ".jsonl.gz")):
        for n, record in enumerate(read_jsonl(file)):
            try:
                rows.append((str(record["sentence1"]), str(record["sentence2"]), float(record["score"])))
            except (KeyError, TypeError, ValueError):
                msg = f"--dev {str(file)!r} line {n + 1}: expected sentence1, sentence2 and a numeric score"
                raise ConfigError(msg) from None
    else:
        delimiter = "," if file.suffix == ".csv" else "\t"
        with open(file, encoding="utf-8", errors="replace", newline="") as handle:
            for n, row in enumerate(csv.reader(handle, delimiter=delimiter)):
                if not row:
                    continue
                try:
                    rows.append((row[0], row[1], float(row[2])))
                except (IndexError, ValueError):
                    if n == 0:
                        continue  # a header row
                    msg = f"--dev {str(file)!r} row {n + 1}: expected sentence1, sentence2, score"
                    raise ConfigError(msg) from None
    if len(rows) < 3:
        msg = f"--dev {str(file)!r} holds {len(rows)} scored pairs: at least 3 are needed for a Spearman correlation"
        raise ConfigError(msg)
    return PairData(
        tuple(r[0] for r in rows), tuple(r[1] for r in rows), tuple(r[2] for r in rows), subsampled=False
    )


def read_sources(
    *,
    objective: Objective,
    corpus: str | os.PathLike[str] | Sequence[Any] | None,
    dev: Sequence[str | os.PathLike[str]],
    data_dir: str | os.PathLike[str] | None,
) -> Sources:
    """Check and read what a run will tune on (see :class:`Sources`); ``ConfigError`` with what to give
    when there is nothing to tune on, or when the objective asks for data the run lacks."""
    texts, name = (None, "") if corpus is None else read_corpus(corpus)
    sts: tuple[PairData, str] | None = None
    retrieval: tuple[RetrievalData, str] | None = None
    for path in dev:
        _, data, label = read_dev(path)
        if isinstance(data, PairData):
            if sts is not None:
                raise ConfigError(f"--dev: two sets of STS pairs ({sts[1]}, {label}): give one")
            sts = (data, label)
        else:
            if retrieval is not None:
                raise ConfigError(f"--dev: two retrieval sets ({retrieval[1]}, {label}): give one")
            retrieval = (data, label)
    kind: Literal["project", "labelled", "corpus"]
    if dev:
        kind = "labelled"
    elif texts is not None:
        kind = "corpus"
    elif default_data_dir() is not None or data_dir is not None:
        kind = "project"
    else:
        msg = (
            "nothing to tune on: give your documents with --corpus DOCS (no labels needed: tune makes "
            "pseudo-queries from them) and/or labelled data with --dev (a BEIR folder or STS pairs)"
        )
        raise ConfigError(msg)
    has_sts = kind == "project" or sts is not None
    has_retrieval = kind in ("project", "corpus") or retrieval is not None
    if objective == "sts" and not has_sts:
        msg = "objective 'sts' needs scored sentence pairs: give them with --dev PAIRS.jsonl (sentence1, sentence2, score)"
        raise ConfigError(msg)
    if objective == "retrieval" and not has_retrieval:
        msg = "objective 'retrieval' needs queries and documents: give --corpus DOCS or a BEIR folder with --dev"
        raise ConfigError(msg)
    return Sources(kind, None if texts is None else tuple(texts), name, sts, retrieval)


def _retrieval_set(ret: RetrievalData, other_docs: int | None) -> RetrievalSet:
    """The queries over their relevant documents plus ``other_docs`` seeded others (``None``: all)."""
    relevant = sorted({d for q in ret.qrels.values() for d, r in q.items() if r > 0 and d in ret.corpus})
    others = [d for d in ret.corpus if d not in set(relevant)]
    kept = set(relevant) | set(_sample(others, other_docs))
    doc_ids = [d for d in ret.corpus if d in kept]
    return RetrievalSet(
        tuple(ret.queries),
        tuple(ret.queries.values()),
        tuple(doc_ids),
        tuple(ret.corpus[d] for d in doc_ids),
        {q: dict(r) for q, r in ret.qrels.items()},
    )


@dataclass(frozen=True)
class TuneData:
    """Everything a tuning run reads (see the module docstring); ``sts_name`` and ``retrieval_name`` say
    what the two dev sets are in reports (an empty set scores ``nan`` and counts for nothing)."""

    mode: Mode
    sts: PairSet
    retrieval: RetrievalSet
    fit_texts: tuple[str, ...]
    fit_source: str
    sts_name: str = "STS-B dev"
    retrieval_name: str = "SciFact dev"
    dev_source: str = ""
    """How the dev data was made (the pseudo-queries' report line for a label-free run)."""
    lexical_texts: tuple[str, ...] = ()
    """The user's documents, when the BM25 statistics are counted on them."""

    @classmethod
    def build(
        cls,
        mode: Mode = "quick",
        *,
        objective: Objective = "balanced",
        corpus: str | os.PathLike[str] | Sequence[Any] | None = None,
        dev: Sequence[str | os.PathLike[str]] = (),
        distractors: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        sources: Sources | None = None,
        pseudo: Callable[[Sequence[str], int], PseudoDevSet] | None = None,
    ) -> TuneData:
        """The dev sets and fitting text of a run of ``mode`` and ``objective``:

        - ``dev`` given: those labelled sets (:func:`read_dev`), the fitting text from ``corpus`` or else
          their own texts;
        - else ``corpus`` given: pseudo-queries made from it by ``pseudo(texts, distractors)``
          (:func:`valuelens.tuning.pseudo.pseudo_dev_set`; inverse cloze when ``None``), the fitting text and
          BM25 statistics from it too;
        - else the project's data folder (``data_dir``, ``$VALUELENS_DATA_DIR`` or ``../shared/data``): STS-B
          dev and SciFact's carved dev split.

        ``distractors``: documents beside the dev queries' relevant ones in the dev corpus (default: the
        mode's, :func:`sizes`; all of a labelled folder's). ``sources``: :func:`read_sources`'s result when
        the caller already checked them."""
        read = sizes(mode, objective, distractors)
        if sources is None:
            sources = read_sources(objective=objective, corpus=corpus, dev=dev, data_dir=data_dir)
        n_fit = (read["fit_sentences"] or 0) + (read["fit_docs"] or 0)
        if sources.kind == "project":
            return cls._project(mode, read, sources, n_fit, data_dir)
        if sources.kind == "labelled":
            sts = PairSet.from_pairs(sources.sts[0]) if sources.sts else EMPTY_PAIRS
            retrieval = (
                _retrieval_set(sources.retrieval[0], distractors) if sources.retrieval else EMPTY_RETRIEVAL
            )
            if sources.corpus is not None:
                fit = _sample(list(sources.corpus), n_fit)
                source = f"{len(fit)} texts of {sources.corpus_name}"
            else:
                fit = _sample(list(dict.fromkeys([*sts.texts, *retrieval.docs])), n_fit)
                source = f"{len(fit)} texts of the dev sets"
            return cls(
                mode,
                sts,
                retrieval,
                tuple(fit),
                source,
                sts_name=sources.sts[1] if sources.sts else "no STS pairs",
                retrieval_name=sources.retrieval[1] if sources.retrieval else "no retrieval set",
                dev_source="labelled: " + ", ".join(s[1] for s in (sources.sts, sources.retrieval) if s),
                lexical_texts=sources.corpus or (),
            )
        assert sources.corpus is not None
        texts = list(sources.corpus)
        other = read["other_docs"]  # ``distractors`` when given (:func:`sizes`); 200 in full mode too
        other = 200 if other is None else other
        made = pseudo(texts, other) if pseudo else pseudo_dev_set(texts, method="cloze", distractors=other)
        retrieval = RetrievalSet(made.query_ids, made.queries, made.doc_ids, made.docs, made.qrels)
        fit = _sample(texts, n_fit)
        return cls(
            mode,
            EMPTY_PAIRS,
            retrieval,
            tuple(fit),
            f"{len(fit)} texts of {sources.corpus_name}",
            sts_name="no STS pairs",
            retrieval_name=f"pseudo-queries ({made.method}) of {sources.corpus_name}",
            dev_source=made.report(),
            lexical_texts=tuple(texts),
        )

    @classmethod
    def _project(
        cls,
        mode: Mode,
        read: dict[str, int | None],
        sources: Sources,
        n_fit: int,
        data_dir: str | os.PathLike[str] | None,
    ) -> TuneData:
        """STS-B dev and SciFact's carved dev split from the project's data folder."""
        sts_data = load_task("stsb", data_dir).load("dev", limit=read["sts_pairs"])
        assert isinstance(sts_data, PairData)
        ret = load_task("scifact", data_dir).load("dev")
        assert isinstance(ret, RetrievalData)
        retrieval = _retrieval_set(ret, read["other_docs"])
        fit, source = _default_fit_texts(read, ret.corpus, set(retrieval.doc_ids), data_dir)
        return cls(mode, PairSet.from_pairs(sts_data), retrieval, tuple(fit), source, dev_source="project")

    def fingerprints(self) -> dict[str, str]:
        """A short hash of each embedded set's texts (:meth:`sets`): a cached set is reused only for the
        same texts."""
        return {
            name: hashlib.sha256(json.dumps(texts).encode("utf-8")).hexdigest()[:16]
            for name, texts in self.sets().items()
        }

    def sets(self) -> dict[str, tuple[str, ...]]:
        """The text sets embedded: ``sts``, ``queries``, ``docs``, ``fit`` (the empty ones left out)."""
        sets = {
            "sts": self.sts.texts,
            "queries": self.retrieval.queries,
            "docs": self.retrieval.docs,
            "fit": self.fit_texts,
        }
        return {name: texts for name, texts in sets.items() if texts}


EMPTY_PAIRS = PairSet((), (), (), ())
EMPTY_RETRIEVAL = RetrievalSet((), (), (), (), {})


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
