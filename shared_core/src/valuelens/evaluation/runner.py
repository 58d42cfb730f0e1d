"""Run a model on a task and tabulate results.

Usage::

    result = evaluate(model, "stsb", limit=500)
    print(results_to_markdown({"wva-L12": [result]}))

``model`` is duck-typed (``Embedder``): ``encode(texts, *, batch_size=32, show_progress=False)`` returning a
float ``[n, d]`` array; optional ``encode_query`` / ``encode_document`` (same signature) are used for the
queries / documents of retrieval and reranking tasks.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, TypeAlias

import numpy as np

from .metrics import (
    classification_scores,
    clustering_scores,
    cosine_similarity_matrix,
    pair_classification_scores,
    paired_cosine,
    rank_documents,
    retrieval_scores,
    sts_scores,
    undersample_indices,
)
from .tasks import (
    ClassificationData,
    LabelledTexts,
    PairData,
    RetrievalData,
    Task,
    TaskKind,
    load_task,
)

__all__ = [
    "Embedder",
    "ResultsInput",
    "TaskResult",
    "evaluate",
    "results_from_json",
    "results_to_json",
    "results_to_markdown",
]

RETRIEVAL_TOP_K = 1000  # mteb keeps the top max(k_values) = 1000 documents per query


class Embedder(Protocol):
    """What ``evaluate`` needs from a model (``encode_query`` / ``encode_document`` are optional)."""

    def encode(
        self, texts: list[str], *, batch_size: int = 32, show_progress: bool = False
    ) -> np.ndarray: ...


@dataclass(frozen=True)
class TaskResult:
    """Scores of one model on one task split (MTEB 0-1 scale; tables show ×100).

    Usage: ``result.main_score``, ``result.scores["cosine_pearson"]``, ``result.to_dict()``
    """

    task: str
    kind: TaskKind
    split: str
    main_metric: str
    main_score: float
    scores: Mapping[str, float]
    n_examples: int
    encode_seconds: float
    embedding_dim: int
    n_encoded: int = 0
    limit: int | None = None
    subsampled: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN scores become ``None``)."""
        d = asdict(self)
        d["scores"] = {k: _finite_or_none(v) for k, v in self.scores.items()}
        d["main_score"] = _finite_or_none(self.main_score)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskResult:
        """Inverse of ``to_dict``."""
        d = dict(d)
        d["scores"] = {k: math.nan if v is None else float(v) for k, v in d["scores"].items()}
        d["main_score"] = math.nan if d["main_score"] is None else float(d["main_score"])
        return cls(**d)


def _finite_or_none(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


# --------------------------------------------------------------------------- encoding


@dataclass
class _EncodeClock:
    seconds: float = 0.0
    n_encoded: int = 0
    dim: int = 0


def _encode_unique(
    model: Embedder,
    texts: Sequence[str],
    *,
    role: Literal["query", "document"] | None,
    batch_size: int,
    show_progress: bool,
    clock: _EncodeClock,
) -> np.ndarray:
    """Embeddings ``[len(texts), d]``, encoding each distinct text once (first-seen order)."""
    position: dict[str, int] = {}
    unique: list[str] = []
    for t in texts:
        if t not in position:
            position[t] = len(unique)
            unique.append(t)
    method_name = f"encode_{role}" if role else "encode"
    method: Callable[..., Any] | None = getattr(model, method_name, None)
    if not callable(method):
        method = getattr(model, "encode", None)
        method_name = "encode"
    if not callable(method):
        msg = f"model {type(model).__name__!r} has no callable encode(texts, *, batch_size, show_progress)"
        raise TypeError(msg)
    start = time.perf_counter()
    emb = np.asarray(method(unique, batch_size=batch_size, show_progress=show_progress))
    clock.seconds += time.perf_counter() - start
    if emb.ndim != 2 or emb.shape[0] != len(unique):
        msg = f"{method_name} returned shape {emb.shape!r} for {len(unique)!r} texts; expected (n_texts, dim)"
        raise ValueError(msg)
    if not np.isfinite(emb).all():
        msg = f"{method_name} returned non-finite values for {int((~np.isfinite(emb)).any(axis=1).sum())!r} texts"
        raise ValueError(msg)
    if clock.dim and emb.shape[1] != clock.dim:
        msg = f"{method_name} returned dim {emb.shape[1]!r}, but earlier embeddings have dim {clock.dim!r}"
        raise ValueError(msg)
    clock.dim = emb.shape[1]
    clock.n_encoded += len(unique)
    return emb[[position[t] for t in texts]]


# --------------------------------------------------------------------------- per kind


def _eval_pairs(model: Embedder, data: PairData, kind: TaskKind, kw: dict[str, Any]) -> dict[str, float]:
    n = len(data.texts1)
    emb = _encode_unique(model, list(data.texts1) + list(data.texts2), role=None, **kw)
    sim = paired_cosine(emb[:n], emb[n:])
    if kind == "sts":
        return sts_scores(sim, data.scores)
    return pair_classification_scores(sim, np.asarray(data.scores, dtype=np.int64))


def classification_inputs(data: ClassificationData) -> tuple[list[str], list[Any], list[list[int]]]:
    """What a classification task embeds: the training rows some experiment uses (their union, as mteb
    does) then the test texts; with those rows' labels and the experiments as rows into them.

    Usage: ``texts, train_labels, experiments = classification_inputs(data)``; the first
    ``len(train_labels)`` embeddings are the training rows."""
    experiments = undersample_indices(data.train.labels)
    union = sorted(set().union(*experiments))
    pos = {row: i for i, row in enumerate(union)}
    texts = [data.train.texts[i] for i in union] + list(data.test.texts)
    return texts, [data.train.labels[i] for i in union], [[pos[i] for i in rows] for rows in experiments]


def _eval_classification(model: Embedder, data: ClassificationData, kw: dict[str, Any]) -> dict[str, float]:
    texts, train_labels, experiments = classification_inputs(data)
    emb = _encode_unique(model, texts, role=None, **kw)
    n = len(train_labels)
    return classification_scores(emb[:n], train_labels, emb[n:], data.test.labels, experiments=experiments)


def _eval_clustering(model: Embedder, data: LabelledTexts, kw: dict[str, Any]) -> dict[str, float]:
    emb = _encode_unique(model, data.texts, role=None, **kw)
    return clustering_scores(emb, data.labels)


def _eval_retrieval(model: Embedder, data: RetrievalData, kw: dict[str, Any]) -> dict[str, float]:
    qids, doc_ids = list(data.queries), list(data.corpus)
    q_emb = _encode_unique(model, [data.queries[q] for q in qids], role="query", **kw)
    d_emb = _encode_unique(model, [data.corpus[d] for d in doc_ids], role="document", **kw)
    rankings: dict[str, list[str]] = {}
    if data.candidates is None:
        for start in range(0, len(qids), 256):  # bound the score matrix to 256 queries at a time
            chunk = qids[start : start + 256]
            scores = cosine_similarity_matrix(q_emb[start : start + 256], d_emb)
            rankings.update(zip(chunk, rank_documents(scores, doc_ids, top_k=RETRIEVAL_TOP_K), strict=True))
    else:
        row_of = {d: i for i, d in enumerate(doc_ids)}
        for qi, qid in enumerate(qids):
            cands = list(data.candidates[qid])
            scores = cosine_similarity_matrix(q_emb[qi : qi + 1], d_emb[[row_of[d] for d in cands]])
            rankings[qid] = rank_documents(scores, cands, top_k=RETRIEVAL_TOP_K)[0]
    return retrieval_scores(rankings, data.qrels)


def evaluate(
    model: Embedder,
    task: Task | str | os.PathLike[str],
    *,
    split: str = "test",
    batch_size: int = 32,
    show_progress: bool = False,
    limit: int | None = None,
) -> TaskResult:
    """Encode a task split with ``model`` and score it with the task's MTEB protocol.

    Usage: ``evaluate(model, "banking77", limit=1000).main_score``.
    ``task`` is a ``Task`` or anything ``load_task`` accepts. Texts are de-duplicated before encoding;
    ``encode_seconds`` sums the wall time of the encode calls only.
    """
    if not isinstance(task, Task):
        task = load_task(task)
    data = task.load(split, limit=limit)
    clock = _EncodeClock()
    kw: dict[str, Any] = {"batch_size": batch_size, "show_progress": show_progress, "clock": clock}
    if isinstance(data, PairData):
        scores = _eval_pairs(model, data, task.kind, kw)
    elif isinstance(data, ClassificationData):
        scores = _eval_classification(model, data, kw)
    elif isinstance(data, LabelledTexts):
        scores = _eval_clustering(model, data, kw)
    else:
        scores = _eval_retrieval(model, data, kw)
    return TaskResult(
        task=task.name,
        kind=task.kind,
        split=split,
        main_metric=task.main_metric,
        main_score=scores[task.main_metric],
        scores=scores,
        n_examples=data.n_examples,
        encode_seconds=clock.seconds,
        embedding_dim=clock.dim,
        n_encoded=clock.n_encoded,
        limit=limit,
        subsampled=data.subsampled,
    )


# --------------------------------------------------------------------------- reporting

ResultsInput: TypeAlias = (
    Mapping[str, Sequence[TaskResult]] | Sequence[tuple[str, TaskResult]] | Sequence[TaskResult]
)


def _group(results: ResultsInput, label: str) -> dict[str, list[TaskResult]]:
    """``{label: [TaskResult, ...]}`` from a mapping, ``(label, result)`` pairs, or bare results."""
    if isinstance(results, Mapping):
        return {str(k): list(v) for k, v in results.items()}
    grouped: dict[str, list[TaskResult]] = {}
    for item in results:
        if isinstance(item, TaskResult):
            grouped.setdefault(label, []).append(item)
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], TaskResult):
            grouped.setdefault(str(item[0]), []).append(item[1])
        else:
            msg = f"expected TaskResult or (label, TaskResult), got {type(item).__name__!r}"
            raise TypeError(msg)
    return grouped


def _column(r: TaskResult) -> str:
    return r.task if r.split == "test" else f"{r.task} ({r.split})"


def results_to_markdown(
    results: ResultsInput, *, label: str = "model", digits: int = 1, show_time: bool = True
) -> str:
    """Markdown table: a row per label, a column per task (main score ×100), then dims and encode time.

    Usage: ``results_to_markdown({"mean-pool": [r1, r2], "wva": [r3, r4]})``.
    A ``†`` marks scores computed on a ``limit`` subsample; a legend names each column's metric.
    ``show_time=False`` leaves the encode-time column out (e.g. when recipes shared forward passes).
    """
    grouped = _group(results, label)
    columns: dict[str, TaskResult] = {}
    for rs in grouped.values():
        for r in rs:
            columns.setdefault(_column(r), r)
    header = ["model", *columns, "dim", *(["encode s"] if show_time else [])]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    any_limited = False
    for name, rs in grouped.items():
        by_col = {_column(r): r for r in rs}
        cells = [name]
        for col in columns:
            cell = by_col.get(col)
            if cell is None:
                cells.append("–")
                continue
            text = "nan" if math.isnan(cell.main_score) else f"{100 * cell.main_score:.{digits}f}"
            if cell.subsampled:
                text += "†"
                any_limited = True
            cells.append(text)
        dims = sorted({r.embedding_dim for r in rs})
        cells.append("/".join(str(d) for d in dims) or "–")
        if show_time:
            cells.append(f"{sum(r.encode_seconds for r in rs):.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    legend = ", ".join(f"{col}: {r.main_metric}" for col, r in columns.items())
    lines.append("")
    timing = " encode s: total encode wall time over the row's tasks." if show_time else ""
    lines.append(f"Scores ×100 ({legend}).{timing}")
    if any_limited:
        lines.append("† computed on a seeded subsample (`limit`), not comparable with full-split scores.")
    return "\n".join(lines) + "\n"


def results_to_json(results: ResultsInput, *, label: str = "model", indent: int | None = 2) -> str:
    """JSON ``{label: [TaskResult.to_dict(), ...]}`` (NaN as ``null``); ``results_from_json`` reads it back.

    Usage: ``Path("results.json").write_text(results_to_json({"wva": [r1, r2]}))``
    """
    grouped = _group(results, label)
    return json.dumps({k: [r.to_dict() for r in rs] for k, rs in grouped.items()}, indent=indent)


def results_from_json(text: str) -> dict[str, list[TaskResult]]:
    """Parse ``results_to_json`` output back into ``{label: [TaskResult, ...]}``.

    Usage: ``results = results_from_json(Path("results.json").read_text())``
    """
    raw = json.loads(text)
    return {k: [TaskResult.from_dict(d) for d in rs] for k, rs in raw.items()}
