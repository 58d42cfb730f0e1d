"""Offline evaluation of sentence embedders on MTEB-style tasks (STS, classification, clustering, retrieval,
reranking, pair classification) with MTEB's metrics and seeds.

Usage::

    from valuelens.evaluation import evaluate, results_to_markdown
    results = [evaluate(model, name, limit=1000) for name in ("stsb", "banking77", "scifact")]
    print(results_to_markdown({"my-recipe": results}))

``tasks``, ``metrics`` and ``runner`` take any model with ``encode``; what ``valuelens eval`` and ``sweep`` add
for valuelens encoders lives in ``compare`` (recipe variants over one loaded model, shared passes),
``report`` (the eval report), ``sweep`` (per-layer and band scores, plot) and ``reference``.
"""

from __future__ import annotations

from .metrics import (
    average_precision_at_k,
    classification_scores,
    clustering_scores,
    cosine_similarity_matrix,
    ndcg_at_k,
    pair_classification_scores,
    paired_cosine,
    rank_documents,
    recall_at_k,
    reciprocal_rank_at_k,
    retrieval_scores,
    sts_scores,
    undersample_indices,
)
from .runner import (
    Embedder,
    ResultsInput,
    TaskResult,
    evaluate,
    results_from_json,
    results_to_json,
    results_to_markdown,
)
from .tasks import (
    DATA_DIR_ENV,
    KNOWN_TASKS,
    TASK_KINDS,
    ClassificationData,
    LabelledTexts,
    PairData,
    RetrievalData,
    Task,
    TaskData,
    TaskKind,
    data_dir_candidates,
    default_data_dir,
    find_set,
    load_task,
    parse_task_spec,
)

__all__ = [
    "DATA_DIR_ENV",
    "KNOWN_TASKS",
    "TASK_KINDS",
    "ClassificationData",
    "Embedder",
    "LabelledTexts",
    "PairData",
    "ResultsInput",
    "RetrievalData",
    "Task",
    "TaskData",
    "TaskKind",
    "TaskResult",
    "average_precision_at_k",
    "classification_scores",
    "clustering_scores",
    "cosine_similarity_matrix",
    "data_dir_candidates",
    "default_data_dir",
    "evaluate",
    "find_set",
    "load_task",
    "ndcg_at_k",
    "pair_classification_scores",
    "paired_cosine",
    "parse_task_spec",
    "rank_documents",
    "recall_at_k",
    "reciprocal_rank_at_k",
    "results_from_json",
    "results_to_json",
    "results_to_markdown",
    "retrieval_scores",
    "sts_scores",
    "undersample_indices",
]
