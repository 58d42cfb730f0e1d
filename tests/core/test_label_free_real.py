"""Label-free tuning with the real default model (SmolLM2-135M-Instruct) on real documents (SciFact
abstracts from the data folder; their queries and judgements are never read)."""

from __future__ import annotations

import numpy as np
import pytest

from valuelens import models
from valuelens.evaluation.tasks import load_task
from valuelens.loading import load_model
from valuelens.tuning.pseudo import make_generator, pseudo_dev_set, words

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def abstracts() -> list[str]:
    """120 SciFact abstracts (seeded), as a user's documents."""
    corpus = list(load_task("scifact").load("test").corpus.values())
    picked = np.random.default_rng(11).choice(len(corpus), size=120, replace=False)
    return [corpus[i] for i in sorted(picked)]


def test_the_model_writes_queries_that_are_not_its_passages(abstracts):
    path = models.path("smollm2-135m")
    _, tokenizer = load_model(path)
    made = pseudo_dev_set(
        abstracts[:12],
        method="generate",
        queries=12,
        distractors=0,
        tokenizer=tokenizer,
        generator=make_generator(path, tokenizer),
    )
    assert made.method == "generate", made.report()
    # SmolLM2-135M writes a usable question for about half the passages (the rest copy an example or
    # loop), and copies none from its passage
    assert len(made.queries) >= 4 and "copied from its passage" not in made.dropped, made.report()
    for query, doc_id in zip(made.queries, made.qrels.values(), strict=True):
        passage = made.docs[made.doc_ids.index(next(iter(doc_id)))]
        assert query.strip() and " ".join(words(query)) not in " ".join(words(passage))
