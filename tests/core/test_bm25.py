"""The BM25 lexical part (:mod:`valuelens.bm25`): its scores are BM25's (checked against bm25s on real
SciFact abstracts), hashing keeps the ranking, every document comes out unit length so cosine stores rank
by the hybrid score, and bad input gives a defined vector."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from valuelens import ConfigError, EncoderConfig
from valuelens.bm25 import MAX_TERMS, Analyzer, BM25Lens, BM25Part, BM25State, term_key
from valuelens.evaluation.tasks import default_data_dir

bm25s = pytest.importorskip("bm25s")


@pytest.fixture(scope="module")
def abstracts() -> list[str]:
    """The first 300 SciFact documents (title and abstract), read from the data folder."""
    lines = (default_data_dir() / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:300]
    return [f"{row['title']} {row['text']}".strip() for row in map(json.loads, lines)]


QUERIES = [
    "Microstructural development of white matter in newborns",
    "vitamin D deficiency and cardiovascular risk",
    "the the the",  # stop words only: scores nothing
    "cancer cells migrate through tissue",
]


def _exact(lens: BM25Lens, queries: list[str], docs: list[str]) -> np.ndarray:
    doc_weights = [lens.weights(d) for d in docs]
    out = np.zeros((len(queries), len(docs)))
    for i, query in enumerate(queries):
        counts, _ = lens.query_weights(query)
        for j, weights in enumerate(doc_weights):
            out[i, j] = sum(n * weights.get(k, 0.0) for k, n in counts.items())
    return out


def test_the_analysis_lowercases_drops_stop_words_and_stems():
    analyzer = Analyzer()
    assert analyzer.terms("The Cats are RUNNING to the 2026 Olympics!") == ["cat", "run", "2026", "olymp"]
    assert analyzer.terms("") == [] and analyzer.terms("a an the, of... !!") == []
    assert analyzer.terms("Über naïve café") == ["über", "naïv", "café"]  # Unicode words, stemmed
    assert Analyzer("german").terms("Die Häuser") == ["die", "haus"]  # no stop words outside English
    assert len(Analyzer().terms("word " * (MAX_TERMS + 10))) == MAX_TERMS
    with pytest.raises(ConfigError, match="lexical_language must be one of"):
        Analyzer("klingon")
    assert term_key("cat") == term_key("cat") != term_key("cats")


def _hashed(lens: BM25Lens, queries: list[str], docs: list[str]) -> np.ndarray:
    """The inner products of the hashed vectors, from their nonzero entries: BM25 up to collisions."""
    rows = [lens.hashed(lens.weights(d).items()) for d in docs]
    out = np.zeros((len(queries), len(docs)))
    for i, query in enumerate(queries):
        q = lens.hashed(lens.query_weights(query)[0].items())
        for j, row in enumerate(rows):
            out[i, j] = sum(v * row.get(slot, 0.0) for slot, v in q.items())
    return out


@pytest.mark.parametrize(("k1", "b"), [(1.2, 0.75), (1.5, 0.3), (0.9, 1.0)])
def test_scores_are_bm25s_scores_on_the_same_terms(abstracts, k1, b):
    """The part's weights, fitted on the corpus, score exactly as bm25s (Lucene variant) on the part's
    own terms; hashed into a large D they rank as BM25 does (Kendall's τ ≥ 0.99 per query)."""
    from scipy.stats import kendalltau

    analyzer = Analyzer()
    lens = BM25Lens(BM25State.fit(analyzer, abstracts), dim=1 << 20, k1=k1, b=b)
    retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
    retriever.index([analyzer.terms(d) for d in abstracts], show_progress=False)
    exact = _exact(lens, QUERIES, abstracts)
    for row, query in zip(exact, QUERIES, strict=True):
        terms = analyzer.terms(query)
        expected = retriever.get_scores(terms) if terms else np.zeros(len(abstracts))  # bm25s refuses []
        np.testing.assert_allclose(row, expected, rtol=2e-5, atol=2e-5)
    one = BM25Lens(lens.state, dim=1 << 20, k1=k1, b=b, hashes=1)  # at a large D collisions all but vanish
    for hashed, floor in (
        (_hashed(one, QUERIES, abstracts), 0.99),
        (_hashed(lens, QUERIES, abstracts), 0.98),
    ):
        for i in range(len(QUERIES)):
            scored = exact[i] > 0  # the documents BM25 ranks (the others tie at 0)
            if scored.any():
                assert kendalltau(hashed[i][scored], exact[i][scored]).statistic >= floor
            else:
                assert not hashed[i].any()


def test_fewer_dimensions_collide_more(abstracts):
    """Kendall's τ of the hashed ranking against BM25's grows with D (docs/lexical.md measures nDCG)."""
    from scipy.stats import kendalltau

    state = BM25State.fit(Analyzer(), abstracts)
    queries = QUERIES[:2]
    exact = _exact(BM25Lens(state), queries, abstracts)

    def tau(dim: int) -> float:
        scores = _hashed(BM25Lens(state, dim=dim), queries, abstracts)
        return float(
            np.mean([kendalltau(scores[i][exact[i] > 0], exact[i][exact[i] > 0]).statistic for i in range(2)])
        )

    small, default, large = tau(256), tau(4096), tau(1 << 20)
    assert small < default < large and large >= 0.99, (small, default, large)


def test_every_document_is_unit_length_and_the_join_scores_the_hybrid(abstracts):
    """Documents (any length) are unit vectors; the joined query · document is proportional to
    (1 − w)·cos + w·BM25/BM25max per query, so a cosine store ranks by that hybrid."""
    lens = BM25Lens(BM25State.fit(Analyzer(), abstracts[:50]), dim=1024)
    texts = [*abstracts[:50], "", "!!!", "🙂🙂", "猫が走る", "word " * 100_000]
    docs = lens.documents(texts)
    torch.testing.assert_close(docs.norm(dim=1), torch.ones(len(texts)))
    assert torch.isfinite(docs).all() and torch.isfinite(lens.queries(texts)).all()
    dense = torch.randn(len(texts), 8, generator=torch.Generator().manual_seed(0))
    d, w = 0.1, 0.7
    joined_docs = BM25Part(docs, False, d, w, lens.bound).join(dense)
    torch.testing.assert_close(joined_docs.norm(dim=1), torch.ones(len(texts)))
    queries = QUERIES[:2]
    q_dense = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))
    joined_q = BM25Part(lens.queries(queries), True, d, w, lens.bound).join(q_dense)
    unit = torch.nn.functional.normalize
    cos = unit(q_dense, dim=1) @ unit(dense, dim=1).T
    lexical = (lens.queries(queries) @ docs.T) * lens.bound  # BM25/BM25max as hashed (collisions included)
    hybrid = (1 - w) * cos + w * lexical
    got = joined_q @ joined_docs.T
    ratio = got / hybrid
    torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio), rtol=1e-3, atol=1e-4)


def test_a_state_saves_and_loads_and_word_frequencies_give_a_default(tmp_path, abstracts):
    state = BM25State.fit(Analyzer(), abstracts[:20])
    state.save(tmp_path / "bm25.safetensors")
    again = BM25State.load(tmp_path / "bm25.safetensors")
    torch.testing.assert_close(again.idf, state.idf)
    assert (again.n_texts, again.average_length, again.unknown_idf) == (
        state.n_texts,
        state.average_length,
        state.unknown_idf,
    )
    (tmp_path / "bad.safetensors").write_bytes(b"not a state")
    with pytest.raises(ConfigError, match="cannot read the BM25 state"):
        BM25State.load(tmp_path / "bad.safetensors")
    one = BM25State.fit(Analyzer(), ["a single document"])
    assert one.n_texts == 1 and math.isfinite(one.unknown_idf)
    none = BM25State.fit(Analyzer(), ["", "the"])
    assert none.average_length > 0 and torch.isfinite(BM25Lens(none).documents(["the"])).all()


def test_the_spec_checks_the_bm25_fields():
    assert EncoderConfig(lexical=0.1).lexical_kind == "bm25"
    with pytest.raises(ConfigError, match="lexical_dim must be"):
        EncoderConfig(lexical=0.1, lexical_dim=4)
    with pytest.raises(ConfigError, match="lexical_b from 0 to 1"):
        EncoderConfig(lexical=0.1, lexical_b=1.5)
    with pytest.raises(ConfigError, match="lexical_language must be one of"):
        EncoderConfig(lexical=0.1, lexical_language="elvish")
    with pytest.raises(ConfigError, match="lexical_kind must be one of"):
        EncoderConfig(lexical=0.1, lexical_kind="tfidf")
