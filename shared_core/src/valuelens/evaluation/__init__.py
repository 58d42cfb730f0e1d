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

from typing import TYPE_CHECKING

from valuelens.lazy import lazy_exports

#: Each public name and the module that defines it (loaded on first use: :mod:`valuelens.lazy`).
_EXPORTS: dict[str, str] = {
    "ClassificationData": "valuelens.evaluation.tasks",
    "DATA_DIR_ENV": "valuelens.evaluation.tasks",
    "Embedder": "valuelens.evaluation.runner",
    "KNOWN_TASKS": "valuelens.evaluation.tasks",
    "LabelledTexts": "valuelens.evaluation.tasks",
    "PairData": "valuelens.evaluation.tasks",
    "ResultsInput": "valuelens.evaluation.runner",
    "RetrievalData": "valuelens.evaluation.tasks",
    "TASK_KINDS": "valuelens.evaluation.tasks",
    "Task": "valuelens.evaluation.tasks",
    "TaskData": "valuelens.evaluation.tasks",
    "TaskKind": "valuelens.evaluation.tasks",
    "TaskResult": "valuelens.evaluation.runner",
    "average_precision_at_k": "valuelens.evaluation.metrics",
    "classification_scores": "valuelens.evaluation.metrics",
    "clustering_scores": "valuelens.evaluation.metrics",
    "cosine_similarity_matrix": "valuelens.evaluation.metrics",
    "data_dir_candidates": "valuelens.evaluation.tasks",
    "default_data_dir": "valuelens.evaluation.tasks",
    "evaluate": "valuelens.evaluation.runner",
    "find_set": "valuelens.evaluation.tasks",
    "load_task": "valuelens.evaluation.tasks",
    "ndcg_at_k": "valuelens.evaluation.metrics",
    "pair_classification_scores": "valuelens.evaluation.metrics",
    "paired_cosine": "valuelens.evaluation.metrics",
    "parse_task_spec": "valuelens.evaluation.tasks",
    "rank_documents": "valuelens.evaluation.metrics",
    "recall_at_k": "valuelens.evaluation.metrics",
    "reciprocal_rank_at_k": "valuelens.evaluation.metrics",
    "results_from_json": "valuelens.evaluation.runner",
    "results_to_json": "valuelens.evaluation.runner",
    "results_to_markdown": "valuelens.evaluation.runner",
    "retrieval_scores": "valuelens.evaluation.metrics",
    "sts_scores": "valuelens.evaluation.metrics",
    "undersample_indices": "valuelens.evaluation.metrics",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers see: the same names, imported eagerly
    from valuelens.evaluation.metrics import (
        average_precision_at_k as average_precision_at_k,
        classification_scores as classification_scores,
        clustering_scores as clustering_scores,
        cosine_similarity_matrix as cosine_similarity_matrix,
        ndcg_at_k as ndcg_at_k,
        pair_classification_scores as pair_classification_scores,
        paired_cosine as paired_cosine,
        rank_documents as rank_documents,
        recall_at_k as recall_at_k,
        reciprocal_rank_at_k as reciprocal_rank_at_k,
        retrieval_scores as retrieval_scores,
        sts_scores as sts_scores,
        undersample_indices as undersample_indices,
    )
    from valuelens.evaluation.runner import (
        Embedder as Embedder,
        ResultsInput as ResultsInput,
        TaskResult as TaskResult,
        evaluate as evaluate,
        results_from_json as results_from_json,
        results_to_json as results_to_json,
        results_to_markdown as results_to_markdown,
    )
    from valuelens.evaluation.tasks import (
        DATA_DIR_ENV as DATA_DIR_ENV,
        KNOWN_TASKS as KNOWN_TASKS,
        TASK_KINDS as TASK_KINDS,
        ClassificationData as ClassificationData,
        LabelledTexts as LabelledTexts,
        PairData as PairData,
        RetrievalData as RetrievalData,
        Task as Task,
        TaskData as TaskData,
        TaskKind as TaskKind,
        data_dir_candidates as data_dir_candidates,
        default_data_dir as default_data_dir,
        find_set as find_set,
        load_task as load_task,
        parse_task_spec as parse_task_spec,
    )
