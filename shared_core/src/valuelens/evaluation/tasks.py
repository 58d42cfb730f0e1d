"""Benchmark tasks: discovery, format detection and loading of the offline evaluation data.

Usage: ``task = load_task("stsb"); data = task.load("test", limit=500)``

Known names resolve to ``<data folder>/<set>`` (:func:`find_set`): the ``data_dir`` argument if given, else
``$VALUELENS_DATA_DIR`` if set, else ``shared/data`` beside a valuelens checkout (``../shared/data`` seen from
the checkout). The sets are never part of the repository or of a distribution: docs/data.md says where to get
them. Any other folder in one of the formats below also works; its kind is detected from its files and its
name is the folder name.

Formats (``*.jsonl`` may also be stored as ``*.jsonl.gz``):

- STS: ``{split}.jsonl`` with ``{"sentence1","sentence2","score"}``.
- Document STS (Lee): ``docs.jsonl`` ``{"id","text"}`` plus ``{split}.jsonl`` pairs ``{"id1","id2","score"}``;
  the pair texts are looked up in ``docs.jsonl`` (so 50 documents are encoded for 1225 pairs).
- Classification: ``train.jsonl`` and evaluation splits ``{split}.jsonl`` with ``{"text","label"}``.
- Retrieval (BEIR): ``corpus.jsonl`` ``{"id"|"_id","title","text"}``, ``queries.jsonl`` ``{"id"|"_id","text"}``,
  ``qrels.tsv`` (split ``test``) or ``qrels/{split}.tsv`` with header ``query-id corpus-id score``, or
  ``qrels/{split}.jsonl`` records with those three keys (the hub's MTEB layout); any of these files may be
  gzipped (``.gz``).

Derived tasks (documented in ``docs/data.md``):

- ``<set>-clustering`` (``banking77-clustering``, ``emotion-clustering``): the split's texts clustered by
  their classification labels (V-measure).
- ``scifact-reranking``: per query, its relevant documents plus ``RERANKING_NEGATIVES`` documents drawn
  uniformly without replacement from the rest of the corpus with a generator seeded by
  ``(SEED, crc32(query id))`` (so a query keeps its candidates whatever ``limit`` is). MAP.
- ``stsb-pairs``: STS-B pairs relabelled 1 if score >= 4, 0 if score <= 1; pairs in between are dropped. AP.

Carved dev split: SciFact ships judged queries for one split only (its 300 test queries), so ``scifact`` and
``scifact-reranking`` get a ``dev`` split of :data:`CARVED_DEV_QUERIES` queries drawn with a generator seeded
by ``SEED`` (``carved_dev_ids``), and their ``test`` split is the other 200: tune on ``dev``, report on
``test``, never the other way.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, TypeAlias

import numpy as np

from valuelens.errors import DataNotFoundError

__all__ = [
    "CARVED_DEV_QUERIES",
    "DATA_DIR_ENV",
    "KNOWN_TASKS",
    "PAIR_NEGATIVE_MAX",
    "PAIR_POSITIVE_MIN",
    "RERANKING_NEGATIVES",
    "RETRIEVAL_DOCS_PER_QUERY",
    "SEED",
    "TASK_KINDS",
    "ClassificationData",
    "LabelledTexts",
    "PairData",
    "RetrievalData",
    "Task",
    "TaskData",
    "TaskKind",
    "carved_dev_ids",
    "data_dir_candidates",
    "default_data_dir",
    "find_set",
    "load_task",
    "parse_task_spec",
    "read_jsonl",
]

TaskKind = Literal["sts", "classification", "clustering", "retrieval", "reranking", "pair_classification"]
TASK_KINDS: tuple[TaskKind, ...] = (
    "sts",
    "classification",
    "clustering",
    "retrieval",
    "reranking",
    "pair_classification",
)

DATA_DIR_ENV = "VALUELENS_DATA_DIR"
SEED = 42  # MTEB's default task seed; used for every seeded choice in this package
RERANKING_NEGATIVES = 20  # sampled negatives per query in scifact-reranking
RETRIEVAL_DOCS_PER_QUERY = 10  # under a limit, a retrieval corpus keeps limit * this many documents
PAIR_POSITIVE_MIN = 4.0  # stsb-pairs: score >= 4 -> label 1
PAIR_NEGATIVE_MAX = 1.0  # stsb-pairs: score <= 1 -> label 0
CARVED_DEV_QUERIES = 100  # scifact: seeded dev queries carved from its only judged split (the rest is test)

# MTEB main-score names per kind (scores are kept on MTEB's 0-1 scale).
MAIN_METRICS: dict[TaskKind, str] = {
    "sts": "cosine_spearman",
    "classification": "accuracy",
    "clustering": "v_measure",
    "retrieval": "ndcg_at_10",
    "reranking": "map_at_1000",
    "pair_classification": "cosine_ap",
}


@dataclass(frozen=True)
class _KnownTask:
    folder: str
    kind: TaskKind
    description: str
    carve_dev: bool = False
    """The folder's only judged split is ``test``: carve a seeded ``dev`` split from its queries."""


KNOWN_TASKS: dict[str, _KnownTask] = {
    "stsb": _KnownTask("stsb", "sts", "STS Benchmark (MTEB STSBenchmark): Spearman of cosine vs gold"),
    "lee": _KnownTask("lee", "sts", "Lee et al. 2005 document similarity, 50 docs / 1225 pairs: Spearman"),
    "banking77": _KnownTask(
        "banking77", "classification", "Banking77 intents (MTEB Banking77Classification)"
    ),
    "emotion": _KnownTask(
        "emotion", "classification", "dair-ai Emotion, 6 labels (MTEB EmotionClassification)"
    ),
    "scifact": _KnownTask(
        "scifact",
        "retrieval",
        f"BEIR SciFact (MTEB SciFact): nDCG@10; test = the 200 queries outside the seeded "
        f"{CARVED_DEV_QUERIES}-query dev split",
        carve_dev=True,
    ),
    "banking77-clustering": _KnownTask(
        "banking77", "clustering", "derived: Banking77 split texts clustered by intent (V-measure)"
    ),
    "emotion-clustering": _KnownTask(
        "emotion", "clustering", "derived: Emotion split texts clustered by emotion label (V-measure)"
    ),
    "scifact-reranking": _KnownTask(
        "scifact",
        "reranking",
        f"derived: SciFact queries, relevant docs + {RERANKING_NEGATIVES} seeded random negatives (MAP)",
        carve_dev=True,
    ),
    "stsb-pairs": _KnownTask(
        "stsb",
        "pair_classification",
        f"derived: STS-B pairs, 1 if score >= {PAIR_POSITIVE_MIN:g}, 0 if <= {PAIR_NEGATIVE_MAX:g} (AP)",
    ),
}


# --------------------------------------------------------------------------- loaded data


@dataclass(frozen=True)
class PairData:
    """Text pairs with a gold value: STS score (kind ``sts``) or 0/1 label (kind ``pair_classification``)."""

    texts1: tuple[str, ...]
    texts2: tuple[str, ...]
    scores: tuple[float, ...]
    subsampled: bool = False

    @property
    def n_examples(self) -> int:
        return len(self.scores)


@dataclass(frozen=True)
class LabelledTexts:
    """Texts with one label each (a classification split, or a clustering set)."""

    texts: tuple[str, ...]
    labels: tuple[str, ...]
    subsampled: bool = False

    @property
    def n_examples(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class ClassificationData:
    """The classifier's training pool (``train.jsonl``) and the evaluated split."""

    train: LabelledTexts
    test: LabelledTexts

    @property
    def n_examples(self) -> int:
        return self.test.n_examples

    @property
    def subsampled(self) -> bool:
        return self.train.subsampled or self.test.subsampled


@dataclass(frozen=True)
class RetrievalData:
    """Queries, corpus (document text = ``(title + " " + text).strip()`` as MTEB) and graded qrels.

    ``candidates`` is ``None`` for full-corpus retrieval, else the per-query candidate lists (reranking).
    """

    queries: Mapping[str, str]
    corpus: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, int]]
    candidates: Mapping[str, tuple[str, ...]] | None = None
    subsampled: bool = False

    @property
    def n_examples(self) -> int:
        return len(self.queries)


TaskData: TypeAlias = PairData | ClassificationData | LabelledTexts | RetrievalData


# --------------------------------------------------------------------------- task


@dataclass(frozen=True)
class Task:
    """One evaluation task: a data folder read as a task kind.

    Usage: ``data = load_task("emotion").load("validation")``
    """

    name: str
    kind: TaskKind
    path: Path
    splits: tuple[str, ...]
    main_metric: str
    description: str = ""
    carve_dev: bool = False

    def check_split(self, split: str) -> None:
        """Raise ``ValueError`` naming the valid splits unless the task has ``split``."""
        if split not in self.splits:
            msg = f"task {self.name!r} has no split {split!r}; valid splits: {list(self.splits)}"
            raise ValueError(msg)

    def load(self, split: str = "test", *, limit: int | None = None) -> TaskData:
        """Read ``split``; ``limit`` caps its size with a sample seeded by ``SEED`` (see ``_subsample``).

        Limits: STS/pairs and clustering keep ``limit`` examples; classification keeps ``limit`` evaluation
        examples and a training pool of ``limit`` rows; retrieval keeps ``limit`` queries and a corpus of the
        kept queries' relevant documents topped up with random others to ``limit * RETRIEVAL_DOCS_PER_QUERY``
        documents; reranking keeps ``limit`` queries (with their unchanged candidates).
        """
        self.check_split(split)
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            msg = f"limit must be a positive int or None, got {limit!r}"
            raise ValueError(msg)
        if self.kind == "sts":
            return _load_sts(self.path, split, limit)
        if self.kind == "pair_classification":
            return _load_pairs(self.path, split, limit)
        if self.kind == "classification":
            return ClassificationData(
                train=_load_labelled(self.path, "train", limit),
                test=_load_labelled(self.path, split, limit),
            )
        if self.kind == "clustering":
            return _load_labelled(self.path, split, limit)
        carve = self.carve_dev and split in ("dev", "test")
        if self.kind == "retrieval":
            return _load_retrieval(self.path, split, limit, carve)
        return _load_reranking(self.path, split, limit, carve)


def _checkout_roots() -> list[Path]:
    """valuelens checkouts (folders holding ``shared_core/pyproject.toml``) above this file or the cwd."""
    roots: list[Path] = []
    for start in (Path(__file__).resolve(), Path.cwd().resolve()):
        for parent in (start, *start.parents):
            if (parent / "shared_core" / "pyproject.toml").is_file() and parent not in roots:
                roots.append(parent)
    return roots


def data_dir_candidates(data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The data folders searched for a set, in order: ``data_dir``, else ``$VALUELENS_DATA_DIR``, else
    ``shared/data`` beside each valuelens checkout above this file or the working directory.

    An explicit ``data_dir`` or a set ``$VALUELENS_DATA_DIR`` is the only place searched: a folder chosen on
    purpose that lacks a set is an error, not a reason to read another copy.

    Usage: ``data_dir_candidates()`` is ``[Path("/work/shared/data")]`` in a checkout at ``/work/main``.
    """
    if data_dir is not None:
        return [Path(data_dir)]
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return [Path(env)]
    return [root.parent / "shared" / "data" for root in _checkout_roots()]


def _holds_a_set(folder: Path) -> bool:
    return folder.is_dir() and any((folder / t.folder).is_dir() for t in KNOWN_TASKS.values())


def default_data_dir() -> Path | None:
    """The first of :func:`data_dir_candidates` that holds at least one known set, else None."""
    return next((folder for folder in data_dir_candidates() if _holds_a_set(folder)), None)


def find_set(folder: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder of benchmark set ``folder`` (``"stsb"``, ``"scifact"``, ...) in the first data folder
    that holds it; :class:`~valuelens.errors.DataNotFoundError` naming the set, every place searched and
    ``$VALUELENS_DATA_DIR`` when none does.

    Usage: ``find_set("stsb") / "dev.jsonl"``
    """
    places = data_dir_candidates(data_dir)
    for place in places:
        if (place / folder).is_dir():
            return place / folder
    if places:
        looked = "looked in " + ", ".join(repr(str(place / folder)) for place in places)
    else:
        looked = f"${DATA_DIR_ENV} is unset and no valuelens checkout with ../shared/data is above here"
    msg = (
        f"benchmark set {folder!r} not found ({looked}): set ${DATA_DIR_ENV} to a folder holding {folder}/ "
        "(docs/data.md says where each set comes from) or pass data_dir="
    )
    raise DataNotFoundError(msg)


def load_task(name_or_path: str | os.PathLike[str], data_dir: str | os.PathLike[str] | None = None) -> Task:
    """Resolve a known task name (see ``KNOWN_TASKS``) or a data folder into a ``Task``.

    Usage: ``load_task("banking77-clustering")`` or ``load_task("/data/my_sts")``
    """
    key = str(name_or_path)
    if key in KNOWN_TASKS:
        known = KNOWN_TASKS[key]
        folder = find_set(known.folder, data_dir)
        base_kind, splits = _detect(folder)
        if _DERIVED_FROM[known.kind] != base_kind:
            msg = f"folder {str(folder)!r} holds {base_kind!r} data, task {key!r} needs {_DERIVED_FROM[known.kind]!r}"
            raise ValueError(msg)
        carve = known.carve_dev and splits == ("test",)
        return Task(
            key,
            known.kind,
            folder,
            ("dev", "test") if carve else _splits_for(known.kind, splits),
            MAIN_METRICS[known.kind],
            known.description,
            carve_dev=carve,
        )
    folder = Path(name_or_path)
    if not folder.is_dir():
        msg = f"unknown task {key!r}: not a folder and not one of {sorted(KNOWN_TASKS)}"
        raise ValueError(msg)
    kind, splits = _detect(folder)
    return Task(
        folder.name, kind, folder, _splits_for(kind, splits), MAIN_METRICS[kind], f"{kind} data in {folder}"
    )


def parse_task_spec(spec: str, limit: int | None = None) -> tuple[str, int | None]:
    """The task and subsample size of a ``TASK[:N]`` argument (``limit`` without ``:N``).

    Usage: ``parse_task_spec("scifact:20")`` is ``("scifact", 20)``; ``parse_task_spec("stsb", 500)`` is
    ``("stsb", 500)``. A colon not followed by digits belongs to the name (``C:\\data\\sts``).
    """
    name, _, tail = spec.rpartition(":")
    if not (name and tail.isdecimal()):
        return spec, limit
    if int(tail) < 1:
        msg = f"task {spec!r}: the subsample size N of TASK:N must be at least 1"
        raise ValueError(msg)
    return name, int(tail)


# --------------------------------------------------------------------------- detection

_DERIVED_FROM: dict[TaskKind, TaskKind] = {
    "sts": "sts",
    "pair_classification": "sts",
    "classification": "classification",
    "clustering": "classification",
    "retrieval": "retrieval",
    "reranking": "retrieval",
}
_NOT_SPLITS = {"docs", "corpus", "queries"}


def _splits_for(kind: TaskKind, splits: tuple[str, ...]) -> tuple[str, ...]:
    # the classifier trains on "train", so it is not an evaluation split of a classification task
    if kind == "classification":
        return tuple(s for s in splits if s != "train")
    return splits


def _jsonl_split_names(folder: Path) -> list[str]:
    names = set()
    for p in folder.iterdir():
        for suffix in (".jsonl", ".jsonl.gz"):
            if p.is_file() and p.name.endswith(suffix):
                names.add(p.name[: -len(suffix)])
    return sorted(names - _NOT_SPLITS, key=_split_order)


def _split_order(split: str) -> tuple[int, str]:
    order = {"train": 0, "dev": 1, "validation": 1, "test": 2}
    return (order.get(split, 3), split)


def _detect(folder: Path) -> tuple[TaskKind, tuple[str, ...]]:
    """Kind and splits of a data folder, from its file names and first record."""
    if _find(folder, "corpus.jsonl") and _find(folder, "queries.jsonl"):
        splits = []
        if _find(folder, "qrels.tsv"):
            splits.append("test")
        if (folder / "qrels").is_dir():
            for p in sorted((folder / "qrels").iterdir()):
                name = p.name.removesuffix(".gz")
                split = name.removesuffix(".tsv").removesuffix(".jsonl")
                if p.is_file() and name != split and split not in splits:
                    splits.append(split)
        if not splits:
            msg = f"retrieval folder {str(folder)!r} has no qrels.tsv or qrels/<split>.tsv (or .jsonl)"
            raise ValueError(msg)
        return "retrieval", tuple(sorted(splits, key=_split_order))
    splits = _jsonl_split_names(folder)
    if not splits:
        msg = (
            f"cannot detect the task format of {str(folder)!r}: expected {{split}}.jsonl (STS or classification) "
            "or corpus.jsonl + queries.jsonl + qrels.tsv (retrieval)"
        )
        raise ValueError(msg)
    first = next(read_jsonl(folder / f"{splits[0]}.jsonl"), {})
    if {"text", "label"} <= first.keys():
        if "train" not in splits:
            msg = f"classification folder {str(folder)!r} has no train.jsonl (splits: {splits})"
            raise ValueError(msg)
        return "classification", tuple(splits)
    if "score" in first and ({"sentence1", "sentence2"} <= first.keys() or {"id1", "id2"} <= first.keys()):
        return "sts", tuple(splits)
    msg = (
        f"cannot detect the task format of {str(folder)!r} from {splits[0]}.jsonl keys {sorted(first)}: "
        "expected sentence1/sentence2/score, id1/id2/score (with docs.jsonl) or text/label"
    )
    raise ValueError(msg)


# --------------------------------------------------------------------------- reading


def _find(folder: Path, name: str) -> Path | None:
    """``folder/name`` or its gzip ``folder/name.gz``, whichever exists."""
    for p in (folder / name, folder / f"{name}.gz"):
        if p.is_file():
            return p
    return None


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    found = _find(path.parent, path.name)
    if found is None:
        msg = f"missing data file {str(path)!r} (or {str(path)!r}.gz)"
        raise FileNotFoundError(msg)
    opener = gzip.open if found.name.endswith(".gz") else open
    with opener(found, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _open_text(path: Path) -> IO[str]:
    """``path`` opened for reading text, gunzipped when it ends in ``.gz``."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _subsample(n: int, limit: int | None) -> np.ndarray:
    """Indices kept under ``limit``: a uniform sample seeded by ``SEED``, in file order."""
    if limit is None or limit >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(SEED).choice(n, size=limit, replace=False))


def _read_pairs(folder: Path, split: str) -> list[tuple[str, str, float]]:
    records = list(read_jsonl(folder / f"{split}.jsonl"))
    docs_path = _find(folder, "docs.jsonl")
    if docs_path is None:
        return [(r["sentence1"], r["sentence2"], float(r["score"])) for r in records]
    docs = {str(d["id"]): d["text"] for d in read_jsonl(folder / "docs.jsonl")}
    pairs = []
    for r in records:
        id1, id2 = str(r["id1"]), str(r["id2"])
        for doc_id in (id1, id2):
            if doc_id not in docs:
                msg = f"pair in {split}.jsonl names document {doc_id!r}, absent from docs.jsonl of {str(folder)!r}"
                raise ValueError(msg)
        pairs.append((docs[id1], docs[id2], float(r["score"])))
    return pairs


def _load_sts(folder: Path, split: str, limit: int | None) -> PairData:
    pairs = _read_pairs(folder, split)
    keep = _subsample(len(pairs), limit)
    kept = [pairs[i] for i in keep]
    return PairData(
        texts1=tuple(p[0] for p in kept),
        texts2=tuple(p[1] for p in kept),
        scores=tuple(p[2] for p in kept),
        subsampled=len(kept) < len(pairs),
    )


def _load_pairs(folder: Path, split: str, limit: int | None) -> PairData:
    pairs = []
    for s1, s2, score in _read_pairs(folder, split):
        if score >= PAIR_POSITIVE_MIN:
            pairs.append((s1, s2, 1.0))
        elif score <= PAIR_NEGATIVE_MAX:
            pairs.append((s1, s2, 0.0))
    keep = _subsample(len(pairs), limit)
    kept = [pairs[i] for i in keep]
    return PairData(
        texts1=tuple(p[0] for p in kept),
        texts2=tuple(p[1] for p in kept),
        scores=tuple(p[2] for p in kept),
        subsampled=len(kept) < len(pairs),
    )


def _load_labelled(folder: Path, split: str, limit: int | None) -> LabelledTexts:
    records = list(read_jsonl(folder / f"{split}.jsonl"))
    keep = _subsample(len(records), limit)
    return LabelledTexts(
        texts=tuple(records[i]["text"] for i in keep),
        labels=tuple(str(records[i]["label"]) for i in keep),
        subsampled=len(keep) < len(records),
    )


def _doc_text(record: Mapping[str, Any]) -> str:
    # MTEB's _corpus_to_dict: title and text joined by a space, stripped
    title = record.get("title") or ""
    text = record.get("text") or ""
    return (title + " " + text).strip() if title else text.strip()


def _record_id(record: Mapping[str, Any]) -> str:
    return str(record["id"] if "id" in record else record["_id"])


def carved_dev_ids(query_ids: Sequence[str]) -> set[str]:
    """The ids of the carved ``dev`` split: :data:`CARVED_DEV_QUERIES` of ``query_ids`` (the judged
    queries in file order; at most a third of them) drawn with a generator seeded by ``SEED``; the
    rest are ``test``."""
    ids = list(query_ids)
    size = min(CARVED_DEV_QUERIES, len(ids) // 3)
    picked = np.random.default_rng(SEED).choice(len(ids), size=size, replace=False)
    return {ids[i] for i in picked}


def _read_retrieval(
    folder: Path, split: str, carve: bool = False
) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """Queries, corpus and qrels of ``split``; with ``carve`` (a folder judged for ``test`` alone),
    ``dev`` and ``test`` are the carved split and the rest (:func:`carved_dev_ids`)."""
    if carve:
        judged, whole, all_qrels = _read_retrieval(folder, "test")
        dev = carved_dev_ids(list(judged))
        keep = [q for q in judged if (q in dev) == (split == "dev")]
        return {q: judged[q] for q in keep}, whole, {q: all_qrels[q] for q in keep}
    corpus = {_record_id(r): _doc_text(r) for r in read_jsonl(folder / "corpus.jsonl")}
    all_queries = {_record_id(r): r["text"] for r in read_jsonl(folder / "queries.jsonl")}
    qrels_path = _find(folder, "qrels.tsv") if split == "test" else None
    qrels_path = (
        qrels_path
        or _find(folder / "qrels", f"{split}.tsv")
        or _find(folder / "qrels", f"{split}.jsonl")
        or folder / "qrels" / f"{split}.tsv"  # absent: open() names it
    )
    qrels: dict[str, dict[str, int]] = {}
    if qrels_path.name.removesuffix(".gz").endswith(".jsonl"):
        for n, record in enumerate(read_jsonl(qrels_path)):
            try:
                qid, did, score = str(record["query-id"]), str(record["corpus-id"]), record["score"]
                qrels.setdefault(qid, {})[did] = int(float(score))
            except (KeyError, TypeError, ValueError):
                msg = f"{str(qrels_path)!r} line {n + 1}: expected query-id, corpus-id and a numeric score"
                raise ValueError(msg) from None
    else:
        with _open_text(qrels_path) as f:
            rows = csv.reader(f, delimiter="\t")
            header = next(rows)
            if [h.strip() for h in header[:3]] != ["query-id", "corpus-id", "score"]:
                msg = f"{str(qrels_path)!r} header is {header!r}; expected ['query-id', 'corpus-id', 'score']"
                raise ValueError(msg)
            for row in rows:
                if row:
                    qrels.setdefault(row[0], {})[row[1]] = int(float(row[2]))
    # evaluated queries: those with at least one judgement, in queries.jsonl order (as pytrec_eval)
    queries = {qid: text for qid, text in all_queries.items() if qid in qrels}
    missing = sorted(set(qrels) - set(all_queries))
    if missing:
        msg = f"qrels of {str(folder)!r} name queries absent from queries.jsonl: {missing[:5]!r}"
        raise ValueError(msg)
    return queries, corpus, qrels


def _load_retrieval(folder: Path, split: str, limit: int | None, carve: bool = False) -> RetrievalData:
    queries, corpus, qrels = _read_retrieval(folder, split, carve)
    qids = list(queries)
    kept_q = [qids[i] for i in _subsample(len(qids), limit)]
    subsampled = len(kept_q) < len(qids)
    max_docs = None if limit is None else limit * RETRIEVAL_DOCS_PER_QUERY
    if max_docs is not None and max_docs < len(corpus):
        relevant = {d for q in kept_q for d, rel in qrels[q].items() if rel > 0 and d in corpus}
        others = [d for d in corpus if d not in relevant]
        n_fill = max(0, max_docs - len(relevant))
        fill = {others[i] for i in _subsample(len(others), n_fill)} if n_fill else set()
        corpus = {d: t for d, t in corpus.items() if d in relevant or d in fill}
        subsampled = True
    return RetrievalData(
        queries={q: queries[q] for q in kept_q},
        corpus=corpus,
        qrels={q: qrels[q] for q in kept_q},
        subsampled=subsampled,
    )


def _load_reranking(folder: Path, split: str, limit: int | None, carve: bool = False) -> RetrievalData:
    queries, corpus, qrels = _read_retrieval(folder, split, carve)
    doc_ids = list(corpus)
    position = {d: i for i, d in enumerate(doc_ids)}
    candidates: dict[str, tuple[str, ...]] = {}
    for qid in queries:
        relevant = [d for d, rel in qrels[qid].items() if rel > 0 and d in position]
        rel_pos = {position[d] for d in relevant}
        # per-query generator: the same negatives whatever other queries are kept
        rng = np.random.default_rng([SEED, zlib.crc32(qid.encode("utf-8"))])
        size = min(len(doc_ids), RERANKING_NEGATIVES + len(rel_pos))
        drawn = rng.choice(len(doc_ids), size=size, replace=False)
        negatives = [doc_ids[i] for i in drawn if i not in rel_pos][:RERANKING_NEGATIVES]
        candidates[qid] = tuple(relevant + negatives)
    qids = list(queries)
    kept_q = [qids[i] for i in _subsample(len(qids), limit)]
    needed = {d for q in kept_q for d in candidates[q]}
    return RetrievalData(
        queries={q: queries[q] for q in kept_q},
        corpus={d: t for d, t in corpus.items() if d in needed},
        qrels={q: qrels[q] for q in kept_q},
        candidates={q: candidates[q] for q in kept_q},
        subsampled=len(kept_q) < len(qids),
    )
