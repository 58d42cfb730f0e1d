"""Metrics and MTEB evaluation protocols on precomputed embeddings (numpy / scipy / scikit-learn only).

Usage: ``sts_scores(paired_cosine(e1, e2), gold)["cosine_spearman"]``

Every function follows the matching mteb 2 code path (noted in each docstring) and keeps MTEB's 0-1 scale.
"""

from __future__ import annotations

import math
import random
import warnings
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.cluster import MiniBatchKMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import (
    accuracy_score,
    adjusted_mutual_info_score,
    average_precision_score,
    f1_score,
    v_measure_score,
)
from sklearn.metrics.pairwise import paired_cosine_distances

from .tasks import SEED

__all__ = [
    "average_precision_at_k",
    "classification_scores",
    "clustering_scores",
    "cosine_similarity_matrix",
    "ndcg_at_k",
    "pair_classification_scores",
    "paired_cosine",
    "rank_documents",
    "recall_at_k",
    "reciprocal_rank_at_k",
    "retrieval_scores",
    "sts_scores",
    "undersample_indices",
]

# ------------------------------------------------------------------ similarities


def _as_float(x: np.ndarray) -> np.ndarray:
    # keep the model's float dtype (mteb feeds float32 embeddings to scikit-learn as they come; k-means and
    # logistic regression results depend on it); only non-float input is converted
    x = np.asarray(x)
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64)


def paired_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine ``1 - paired_cosine_distances(a, b)``, exactly as mteb's STS / pair evaluators.

    Usage: ``sim = paired_cosine(emb1, emb2)``  (zero rows follow scikit-learn: cos(0, 0) = 1, cos(0, x) = 0.5)
    """
    return 1.0 - paired_cosine_distances(_as_float(a), _as_float(b))


def cosine_similarity_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """All-pairs cosine ``[len(a), len(b)]`` (mteb's default ``similarity``); zero rows give 0.

    Usage: ``scores = cosine_similarity_matrix(query_emb, doc_emb)``
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    na = np.linalg.norm(a, axis=1, keepdims=True)
    nb = np.linalg.norm(b, axis=1, keepdims=True)
    return (a / np.where(na == 0, 1.0, na)) @ (b / np.where(nb == 0, 1.0, nb)).T


# ------------------------------------------------------------------ STS


def _correlation(fn: object, x: np.ndarray, y: np.ndarray) -> float:
    # a constant input has no correlation; return nan quietly (scipy would warn and return nan)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(fn(x, y)[0])  # type: ignore[operator]


def sts_scores(
    similarities: Sequence[float] | np.ndarray, gold: Sequence[float] | np.ndarray
) -> dict[str, float]:
    """Spearman and Pearson of model similarities vs gold scores (mteb ``AbsTaskSTS._calculate_scores``).

    Usage: ``sts_scores(paired_cosine(e1, e2), gold)`` -> ``{"cosine_spearman", "cosine_pearson"}``.
    Spearman uses average ranks for ties (scipy). MTEB's min-max normalisation of gold is a no-op here.
    """
    x = np.asarray(gold, dtype=np.float64)
    y = np.asarray(similarities, dtype=np.float64)
    if x.shape != y.shape:
        msg = f"similarities and gold differ in shape: {y.shape!r} vs {x.shape!r}"
        raise ValueError(msg)
    return {"cosine_spearman": _correlation(spearmanr, x, y), "cosine_pearson": _correlation(pearsonr, x, y)}


# ------------------------------------------------------------------ pair classification


def _best_accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
    # port of mteb AbsTaskPairClassification._find_best_acc_and_threshold (high score = similar)
    order = np.argsort(-scores, kind="stable")
    rows = list(zip(scores[order].tolist(), labels[order].tolist(), strict=True))
    best, positives, remaining_negatives = 0.0, 0, int((labels == 0).sum())
    for i in range(len(rows) - 1):
        if rows[i][1] == 1:
            positives += 1
        else:
            remaining_negatives -= 1
        if rows[i][0] == rows[i + 1][0]:  # a threshold cannot split tied scores
            continue
        best = max(best, (positives + remaining_negatives) / len(rows))
    return best


def _best_f1(scores: np.ndarray, labels: np.ndarray) -> float:
    # port of mteb AbsTaskPairClassification._find_best_f1_and_threshold (high score = similar)
    order = np.argsort(-scores, kind="stable")
    rows = list(zip(scores[order].tolist(), labels[order].tolist(), strict=True))
    best, correct, total = 0.0, 0, int(labels.sum())
    for i, (score, label) in enumerate(rows[:-1]):
        correct += int(label == 1)
        if score == rows[i + 1][0] or correct == 0:
            continue
        precision, recall = correct / (i + 1), correct / total
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def pair_classification_scores(
    similarities: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray
) -> dict[str, float]:
    """AP, best-threshold accuracy and F1 of cosine similarities for 0/1 pair labels (mteb pair classification).

    Usage: ``pair_classification_scores(paired_cosine(e1, e2), labels)["cosine_ap"]``.
    AP is ``sklearn.metrics.average_precision_score(labels, similarities)``; cosine only (no max over
    similarity functions).
    """
    s = np.asarray(similarities, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if s.shape != y.shape or not np.isin(y, (0, 1)).all():
        msg = f"need one 0/1 label per similarity; got shapes {s.shape!r} / {y.shape!r}, labels {np.unique(y)!r}"
        raise ValueError(msg)
    if y.min() == y.max():
        msg = f"pair classification needs both labels 0 and 1, got only {int(y[0])!r}"
        raise ValueError(msg)
    return {
        "cosine_ap": float(average_precision_score(y, s)),
        "cosine_accuracy": _best_accuracy(s, y),
        "cosine_f1": _best_f1(s, y),
    }


# ------------------------------------------------------------------ classification


def undersample_indices(
    labels: Sequence[Hashable], *, samples_per_label: int = 8, n_experiments: int = 10, seed: int = SEED
) -> list[list[int]]:
    """Training rows of each experiment: mteb ``AbsTaskClassification._undersample_data``, verbatim.

    Usage: ``experiments = undersample_indices(train_labels)``.
    One index list is shuffled in place by a fresh ``np.random.RandomState(seed)`` before every experiment
    (so experiment ``i`` sees the order after ``i + 1`` shuffles); each experiment keeps the first
    ``samples_per_label`` rows of every label in that order.
    """
    idxs = list(range(len(labels)))
    experiments = []
    for _ in range(n_experiments):
        np.random.RandomState(seed).shuffle(idxs)
        counter: dict[Hashable, int] = defaultdict(int)
        selected = []
        for i in idxs:
            if counter[labels[i]] < samples_per_label:
                selected.append(i)
                counter[labels[i]] += 1
        experiments.append(selected)
    return experiments


def classification_scores(
    train_embeddings: np.ndarray,
    train_labels: Sequence[Hashable],
    test_embeddings: np.ndarray,
    test_labels: Sequence[Hashable],
    *,
    experiments: Sequence[Sequence[int]] | None = None,
    max_iter: int = 100,
    seed: int = SEED,
) -> dict[str, float]:
    """Mean accuracy / F1 of logistic regressions over undersampled experiments (mteb classification).

    Usage: ``classification_scores(train_emb, train_y, test_emb, test_y)["accuracy"]``.
    ``experiments`` are row lists into ``train_embeddings`` (default ``undersample_indices(train_labels)``:
    8 per label, 10 experiments, seed 42). Each fits ``LogisticRegression(max_iter=100, random_state=42)``;
    its ``ConvergenceWarning`` (expected at 100 iterations) is silenced.
    """
    train_x = _as_float(train_embeddings)
    test_x = _as_float(test_embeddings)
    if len(train_x) != len(train_labels) or len(test_x) != len(test_labels):
        msg = (
            f"embeddings and labels differ in length: train {len(train_x)!r} vs {len(train_labels)!r}, "
            f"test {len(test_x)!r} vs {len(test_labels)!r}"
        )
        raise ValueError(msg)
    if experiments is None:
        experiments = undersample_indices(train_labels, seed=seed)
    train_y = np.asarray(train_labels)
    test_y = np.asarray(test_labels)
    runs: dict[str, list[float]] = defaultdict(list)
    for rows in experiments:
        model = LogisticRegression(max_iter=max_iter, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(train_x[list(rows)], train_y[list(rows)])
        pred = model.predict(test_x)
        runs["accuracy"].append(float(accuracy_score(test_y, pred)))
        runs["f1"].append(float(f1_score(test_y, pred, average="macro")))
        runs["f1_weighted"].append(float(f1_score(test_y, pred, average="weighted")))
    scores = {k: float(np.mean(v)) for k, v in runs.items()}
    scores["accuracy_std"] = float(np.std(runs["accuracy"]))
    return scores


# ------------------------------------------------------------------ clustering


def clustering_scores(
    embeddings: np.ndarray,
    labels: Sequence[Hashable],
    *,
    n_bootstrap: int = 10,
    bootstrap_size: int = 16_384,
    kmeans_batch_size: int = 512,
    seed: int = SEED,
) -> dict[str, float]:
    """Mean V-measure (and AMI) of MiniBatchKMeans over bootstrap samples (mteb ``AbsTaskClustering``).

    Usage: ``clustering_scores(emb, labels)["v_measure"]``.
    As ``_evaluate_clustering_bootstrapped``: ``random.Random(seed).choices`` draws ``bootstrap_size`` rows
    *with replacement* ``n_bootstrap`` times; each is clustered by ``MiniBatchKMeans(n_clusters=#labels,
    batch_size=512, init="k-means++", n_init=1, random_state=seed)`` and scored against the gold labels.
    """
    x = _as_float(embeddings)
    y = np.asarray(labels)
    if len(x) != len(y) or len(y) == 0:
        msg = f"need one label per embedding row; got {len(x)!r} rows and {len(y)!r} labels"
        raise ValueError(msg)
    rng = random.Random(seed)
    model = MiniBatchKMeans(
        n_clusters=np.unique(y).size,
        batch_size=kmeans_batch_size,
        init="k-means++",
        n_init=1,
        random_state=seed,
    )
    v_measures, amis = [], []
    for _ in range(n_bootstrap):
        rows = rng.choices(range(len(x)), k=bootstrap_size)
        with warnings.catch_warnings():
            # fewer distinct points than clusters (duplicates in a bootstrap sample) only warns
            warnings.simplefilter("ignore", ConvergenceWarning)
            assignment = model.fit_predict(x[rows])
        v_measures.append(float(v_measure_score(y[rows], assignment)))
        amis.append(float(adjusted_mutual_info_score(y[rows], assignment)))
    return {
        "v_measure": float(np.mean(v_measures)),
        "v_measure_std": float(np.std(v_measures)),
        "ami": float(np.mean(amis)),
    }


# ------------------------------------------------------------------ retrieval / reranking


def rank_documents(
    scores: np.ndarray, doc_ids: Sequence[str], *, top_k: int | None = None
) -> list[list[str]]:
    """Per row of ``scores`` ``[n_queries, n_docs]``, doc ids by descending score, ties by descending id.

    Usage: ``rankings = rank_documents(cosine_similarity_matrix(q, d), doc_ids, top_k=1000)``.
    The tie-break is trec_eval's (pytrec_eval, used by mteb): equal scores are ordered by doc id, descending.
    """
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    if scores.shape[1] != len(doc_ids):
        msg = f"scores have {scores.shape[1]!r} columns for {len(doc_ids)!r} doc ids"
        raise ValueError(msg)
    ids = np.asarray(doc_ids, dtype=object)
    id_rank = np.empty(len(ids), dtype=np.int64)
    id_rank[np.argsort(np.asarray(doc_ids, dtype=str), kind="stable")] = np.arange(len(ids))
    out = []
    for row in scores:
        order = np.lexsort((-id_rank, -row))  # last key first: score desc, then id desc
        out.append(ids[order[:top_k]].tolist())
    return out


def _relevant(relevance: Mapping[str, int]) -> dict[str, int]:
    return {d: r for d, r in relevance.items() if r > 0}


def ndcg_at_k(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """trec_eval ``ndcg_cut.k``: sum(rel_i / log2(i + 1)) over the top k, over the ideal ordering's sum.

    Usage: ``ndcg_at_k(["d1", "d2", "d3"], {"d2": 1}, 10)``  (gain = graded relevance, linear)
    """
    rel = _relevant(relevance)
    dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranking[:k]))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """trec_eval ``recall.k``: relevant docs in the top k over all relevant docs of the query.

    Usage: ``recall_at_k(ranking, {"d2": 1, "d9": 1}, 100)``
    """
    rel = _relevant(relevance)
    return sum(d in rel for d in ranking[:k]) / len(rel) if rel else 0.0


def reciprocal_rank_at_k(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant doc within the top k, else 0 (mteb ``retrieval_metrics.mrr``).

    Usage: ``reciprocal_rank_at_k(ranking, qrels[qid], 10)``
    """
    rel = _relevant(relevance)
    return next((1.0 / (i + 1) for i, d in enumerate(ranking[:k]) if d in rel), 0.0)


def average_precision_at_k(
    ranking: Sequence[str], relevance: Mapping[str, int], k: int | None = None
) -> float:
    """trec_eval ``map_cut.k``: sum of precision@i at relevant ranks i <= k, over all relevant docs.

    Usage: ``average_precision_at_k(["a", "b", "c"], {"a": 1, "c": 1})``  # (1/1 + 2/3) / 2
    """
    rel = _relevant(relevance)
    hits, total = 0, 0.0
    for i, d in enumerate(ranking[:k]):
        if d in rel:
            hits += 1
            total += hits / (i + 1)
    return total / len(rel) if rel else 0.0


def retrieval_scores(
    rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, float]:
    """Query-averaged nDCG@10, MAP@10/@1000, recall@10/@100, MRR@10 (mteb ``calculate_retrieval_scores``).

    Usage: ``retrieval_scores({"q1": ["d3", "d1"]}, {"q1": {"d1": 1}})["ndcg_at_10"]``.
    Averages over the ranked queries that have judgements (pytrec_eval skips the others).
    """
    per_query: dict[str, list[float]] = defaultdict(list)
    for qid, ranking in rankings.items():
        if qid not in qrels:
            continue
        rel = qrels[qid]
        per_query["ndcg_at_10"].append(ndcg_at_k(ranking, rel, 10))
        per_query["map_at_10"].append(average_precision_at_k(ranking, rel, 10))
        per_query["map_at_1000"].append(average_precision_at_k(ranking, rel, 1000))
        per_query["recall_at_10"].append(recall_at_k(ranking, rel, 10))
        per_query["recall_at_100"].append(recall_at_k(ranking, rel, 100))
        per_query["mrr_at_10"].append(reciprocal_rank_at_k(ranking, rel, 10))
    if not per_query:
        msg = f"no ranked query has qrels; ranked {sorted(rankings)[:5]!r}, judged {sorted(qrels)[:5]!r}"
        raise ValueError(msg)
    return {name: float(np.mean(values)) for name, values in per_query.items()}
