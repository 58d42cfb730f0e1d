"""Metrics of valuelens.evaluation against hand-computed values."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from sklearn.metrics import v_measure_score
from threadpoolctl import threadpool_limits

from valuelens.evaluation import (
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


@pytest.fixture(autouse=True)
def _single_thread() -> Iterator[None]:
    # scikit-learn's OpenMP k-means oversubscribes a busy CI box (seconds instead of ~0.3 s per clustering)
    with threadpool_limits(limits=1):
        yield


# ----------------------------------------------------------------- similarities


def test_paired_cosine_and_matrix() -> None:
    a = np.array([[1.0, 0.0], [1.0, 1.0], [3.0, 4.0]])
    b = np.array([[0.0, 2.0], [2.0, 2.0], [4.0, 3.0]])
    # cos = 0, 1, (12 + 12) / (5 * 5) = 0.96
    np.testing.assert_allclose(paired_cosine(a, b), [0.0, 1.0, 0.96], atol=1e-12)
    m = cosine_similarity_matrix(a, b)
    assert m.shape == (3, 3)
    np.testing.assert_allclose(np.diag(m), [0.0, 1.0, 0.96], atol=1e-12)
    # row 0 vs b[2]: (1*4 + 0*3) / (1 * 5) = 0.8
    assert m[0, 2] == pytest.approx(0.8)


def test_paired_cosine_keeps_float32() -> None:
    a = np.ones((2, 3), dtype=np.float32)
    assert paired_cosine(a, a).dtype == np.float32


# ----------------------------------------------------------------- STS


def test_spearman_with_ties() -> None:
    # gold x = [1, 2, 2, 3] -> average ranks [1, 2.5, 2.5, 4]; sims y = [1, 3, 2, 4] -> ranks [1, 3, 2, 4]
    # centred (mean 2.5): dx = [-1.5, 0, 0, 1.5], dy = [-1.5, 0.5, -0.5, 1.5]
    # cov = 2.25 + 0 + 0 + 2.25 = 4.5; var_x = 4.5; var_y = 2.25 + 0.25 + 0.25 + 2.25 = 5
    # rho = 4.5 / sqrt(4.5 * 5) = 0.948683
    scores = sts_scores([1.0, 3.0, 2.0, 4.0], [1.0, 2.0, 2.0, 3.0])
    assert scores["cosine_spearman"] == pytest.approx(4.5 / math.sqrt(22.5))
    # Pearson on the raw values: x mean 2, y mean 2.5; dx = [-1, 0, 0, 1], dy = [-1.5, .5, -.5, 1.5]
    # cov = 1.5 + 1.5 = 3; var_x = 2; var_y = 5 -> r = 3 / sqrt(10) = 0.948683
    assert scores["cosine_pearson"] == pytest.approx(3 / math.sqrt(10))


def test_sts_perfect_and_constant() -> None:
    assert sts_scores([0.1, 0.5, 0.9], [0.0, 2.5, 5.0])["cosine_spearman"] == pytest.approx(1.0)
    assert sts_scores([0.9, 0.5, 0.1], [0.0, 2.5, 5.0])["cosine_spearman"] == pytest.approx(-1.0)
    # a constant similarity has no rank correlation: nan, without scipy's ConstantInputWarning
    assert math.isnan(sts_scores([0.5, 0.5, 0.5], [0.0, 2.5, 5.0])["cosine_spearman"])
    with pytest.raises(ValueError, match="shape"):
        sts_scores([0.1, 0.2], [1.0, 2.0, 3.0])


# ----------------------------------------------------------------- pair classification


def test_pair_classification_ap_accuracy_f1() -> None:
    # sorted by similarity: 0.9 (1), 0.8 (0), 0.7 (1), 0.6 (0)
    # AP = sum over positives of precision at their rank / n_pos = (1/1 + 2/3) / 2 = 0.833333
    # best accuracy: threshold between 0.9 and 0.8 -> [1, 0, 0, 0] correct 3/4; between 0.7 and 0.6 -> 3/4
    # best F1: cut after 0.9: P=1, R=.5, F1=2/3; cut after 0.7: P=2/3, R=1, F1=0.8
    s = pair_classification_scores([0.9, 0.8, 0.7, 0.6], [1, 0, 1, 0])
    assert s["cosine_ap"] == pytest.approx(5 / 6)
    assert s["cosine_accuracy"] == pytest.approx(0.75)
    assert s["cosine_f1"] == pytest.approx(0.8)
    perfect = pair_classification_scores([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0])
    assert perfect == {"cosine_ap": 1.0, "cosine_accuracy": 1.0, "cosine_f1": 1.0}


def test_pair_classification_rejects_one_class() -> None:
    with pytest.raises(ValueError, match="both labels"):
        pair_classification_scores([0.1, 0.2], [1, 1])
    with pytest.raises(ValueError, match="0/1"):
        pair_classification_scores([0.1, 0.2], [1, 2])


# ----------------------------------------------------------------- retrieval


def test_ndcg_at_10_three_docs() -> None:
    # ranking d1, d2, d3 with d2 and d3 relevant (grade 1)
    # DCG = 0/log2(2) + 1/log2(3) + 1/log2(4) = 0.630930 + 0.5 = 1.130930
    # IDCG = 1/log2(2) + 1/log2(3) = 1.630930  ->  nDCG = 0.693426
    expected = (1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(["d1", "d2", "d3"], {"d2": 1, "d3": 1}, 10) == pytest.approx(expected)
    assert expected == pytest.approx(0.693426, abs=1e-6)
    # graded (trec_eval: gain = grade): d1=2, d3=1 ranked d3, d1 -> DCG = 1 + 2/log2(3) = 2.261860
    # IDCG = 2 + 1/log2(3) = 2.630930 -> 0.859724
    assert ndcg_at_k(["d3", "d1"], {"d1": 2, "d3": 1}, 10) == pytest.approx(
        (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
    )
    # cut-off: the only relevant doc at rank 2 is outside the top 1
    assert ndcg_at_k(["d1", "d2"], {"d2": 1}, 1) == 0.0
    # judged non-relevant (grade 0) docs do not count
    assert ndcg_at_k(["d1"], {"d1": 0}, 10) == 0.0


def test_recall_and_mrr() -> None:
    ranking = ["a", "b", "c", "d"]
    rel = {"b": 1, "d": 1, "z": 1}  # z never retrieved
    assert recall_at_k(ranking, rel, 2) == pytest.approx(1 / 3)  # only b in the top 2
    assert recall_at_k(ranking, rel, 100) == pytest.approx(2 / 3)  # b, d of {b, d, z}
    assert reciprocal_rank_at_k(ranking, rel, 10) == pytest.approx(1 / 2)  # first hit b at rank 2
    assert reciprocal_rank_at_k(ranking, rel, 1) == 0.0


def test_map_two_queries() -> None:
    # q1: ranking a, b, c with a, c relevant: AP = (1/1 + 2/3) / 2 = 0.833333
    # q2: ranking x, y, z with y relevant:    AP = (1/2) / 1 = 0.5
    # MAP = (0.833333 + 0.5) / 2 = 0.666667
    rankings = {"q1": ["a", "b", "c"], "q2": ["x", "y", "z"]}
    qrels = {"q1": {"a": 1, "c": 1}, "q2": {"y": 1}}
    assert average_precision_at_k(rankings["q1"], qrels["q1"]) == pytest.approx(5 / 6)
    assert average_precision_at_k(rankings["q2"], qrels["q2"]) == pytest.approx(0.5)
    scores = retrieval_scores(rankings, qrels)
    assert scores["map_at_1000"] == pytest.approx(2 / 3)
    # trec_eval map_cut divides by all relevant docs: q1 at k=1 -> (1/1) / 2 = 0.5; q2 -> 0
    assert average_precision_at_k(rankings["q1"], qrels["q1"], 1) == pytest.approx(0.5)
    # MRR@10 = (1 + 1/2) / 2 ; recall@10 = 1
    assert scores["mrr_at_10"] == pytest.approx(0.75)
    assert scores["recall_at_10"] == pytest.approx(1.0)


def test_retrieval_scores_skip_unjudged_queries() -> None:
    scores = retrieval_scores({"q1": ["a"], "q9": ["a"]}, {"q1": {"a": 1}})
    assert scores["ndcg_at_10"] == 1.0
    with pytest.raises(ValueError, match="no ranked query"):
        retrieval_scores({"q9": ["a"]}, {"q1": {"a": 1}})


def test_rank_documents_ties_by_descending_id() -> None:
    # trec_eval order: score descending, ties broken by doc id descending
    scores = np.array([[0.5, 0.9, 0.5, 0.1], [0.0, 0.0, 0.0, 0.0]])
    ids = ["d1", "d2", "d3", "d0"]
    assert rank_documents(scores, ids) == [["d2", "d3", "d1", "d0"], ["d3", "d2", "d1", "d0"]]
    assert rank_documents(scores, ids, top_k=2) == [["d2", "d3"], ["d3", "d2"]]
    with pytest.raises(ValueError, match="columns"):
        rank_documents(scores, ids[:3])


# ----------------------------------------------------------------- classification


def test_undersample_indices_protocol() -> None:
    labels = ["a", "b"] * 20
    experiments = undersample_indices(labels)
    assert len(experiments) == 10
    for rows in experiments:
        assert len(rows) == 16  # 8 per label
        assert sorted(labels[i] for i in rows) == ["a"] * 8 + ["b"] * 8
    # experiment 0: the first 8 rows per label in the order of one RandomState(42) shuffle (as mteb)
    order = list(range(40))
    np.random.RandomState(42).shuffle(order)
    first = [i for i in order if labels[i] == "a"][:8] + [i for i in order if labels[i] == "b"][:8]
    assert sorted(experiments[0]) == sorted(first)
    assert experiments[1] != experiments[0]  # the list is shuffled again before each experiment
    assert undersample_indices(labels) == experiments  # deterministic


def test_classification_separable_2d() -> None:
    rng = np.random.default_rng(0)
    # class "a" around (-5, 0), class "b" around (+5, 0): every classifier separates them
    train_x = np.vstack([rng.normal((-5, 0), 0.5, (20, 2)), rng.normal((5, 0), 0.5, (20, 2))])
    train_y = ["a"] * 20 + ["b"] * 20
    test_x = np.array([[-4.0, 0.0], [-6.0, 1.0], [5.0, 0.0], [6.0, -1.0]])
    assert classification_scores(train_x, train_y, test_x, ["a", "a", "b", "b"])["accuracy"] == 1.0
    # one gold label flipped: every experiment predicts a, a, b, b -> accuracy 3/4, std 0
    scores = classification_scores(train_x, train_y, test_x, ["a", "a", "b", "a"])
    assert scores["accuracy"] == pytest.approx(0.75)
    assert scores["accuracy_std"] == pytest.approx(0.0)
    # macro F1: a -> P=2/3, R=1, F1=0.8; b -> P=1, R=1/2, F1=2/3; mean = 0.733333
    assert scores["f1"] == pytest.approx((0.8 + 2 / 3) / 2)


def test_classification_length_mismatch() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        classification_scores(np.zeros((3, 2)), ["a", "b"], np.zeros((1, 2)), ["a"])


# ----------------------------------------------------------------- clustering


def test_v_measure_tiny_labelling() -> None:
    # gold [0, 0, 1, 1], predicted [0, 0, 0, 1] (natural logs; the base cancels)
    # H(C) = ln 2 = 0.693147; H(K) = -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.562335
    # H(C|K) = 3/4 * H(2/3, 1/3) = 3/4 * 0.636514 = 0.477386 -> homogeneity h = 1 - 0.477386/0.693147 = 0.311278
    # H(K|C) = 1/2 * H(1/2, 1/2) = 0.346574 -> completeness c = 1 - 0.346574/0.562335 = 0.383689
    # V = 2hc / (h + c) = 0.343712
    h_c = 0.75 * -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    h = 1 - h_c / math.log(2)
    c = 1 - 0.5 * math.log(2) / -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert v_measure_score([0, 0, 1, 1], [0, 0, 0, 1]) == pytest.approx(2 * h * c / (h + c))
    assert 2 * h * c / (h + c) == pytest.approx(0.343712, abs=1e-6)


def test_clustering_scores_separable_and_uninformative() -> None:
    labels = ["a"] * 6 + ["b"] * 6 + ["c"] * 6
    centers = {"a": (0.0, 0.0), "b": (10.0, 0.0), "c": (0.0, 10.0)}
    x = np.array([centers[y] for y in labels]) + np.random.default_rng(1).normal(0, 0.1, (18, 2))
    kw = {"n_bootstrap": 3, "bootstrap_size": 256}
    perfect = clustering_scores(x, labels, **kw)
    assert perfect["v_measure"] == pytest.approx(1.0)
    assert perfect["v_measure_std"] == pytest.approx(0.0)
    # identical embeddings: one cluster for everything -> homogeneity 0 -> V-measure 0
    assert clustering_scores(np.ones((18, 2)), labels, **kw)["v_measure"] == pytest.approx(0.0)
    # default protocol (10 bootstraps of 16384 rows) gives the same on the separable set
    assert clustering_scores(x, labels)["v_measure"] == pytest.approx(1.0)
