"""The benchmark texts: a seeded length mix of STS-B sentences and SciFact abstracts from the benchmark sets
(found by :func:`valuelens.evaluation.tasks.find_set`: ``$VALUELENS_DATA_DIR`` or ``../shared/data``).

Usage: ``texts = length_mix(96)`` → 82 STS-B test sentences (~12 tokens) and 14 SciFact abstracts
(~300 tokens), shuffled with ``seed``. ``source="stsb"`` / ``"scifact"`` takes one kind only.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Literal

from valuelens.evaluation.tasks import find_set, read_jsonl

#: the repository root (the bench child processes run there)
ROOT = Path(__file__).resolve().parents[1]

#: one abstract per this many texts in the mix (the STS-B : SciFact ratio of a retrieval corpus
#: indexed next to its short queries)
ABSTRACT_EVERY = 7

Source = Literal["mix", "stsb", "scifact"]


def stsb_sentences() -> list[str]:
    """The distinct STS-B test sentences, in file order."""
    found: dict[str, None] = {}
    with (find_set("stsb") / "test.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            found.setdefault(row["sentence1"])
            found.setdefault(row["sentence2"])
    return list(found)


def scifact_abstracts() -> list[str]:
    """The non-empty SciFact corpus abstracts, in file order."""
    rows = read_jsonl(find_set("scifact") / "corpus.jsonl")  # or corpus.jsonl.gz
    return [text for row in rows if (text := row["text"]).strip()]


def length_mix(n: int, *, seed: int = 0, source: Source = "mix") -> list[str]:
    """``n`` texts sampled with ``seed``: the mix holds one SciFact abstract per
    :data:`ABSTRACT_EVERY` texts (at least one when ``n >= 2``), the rest STS-B sentences."""
    if n < 1:
        msg = f"n must be >= 1, got {n!r}"
        raise ValueError(msg)
    rng = random.Random(seed)
    if source == "stsb":
        return rng.sample(stsb_sentences(), n)
    if source == "scifact":
        return rng.sample(scifact_abstracts(), n)
    n_abstracts = max(1 if n >= 2 else 0, round(n / ABSTRACT_EVERY))
    texts = rng.sample(stsb_sentences(), n - n_abstracts) + rng.sample(scifact_abstracts(), n_abstracts)
    rng.shuffle(texts)
    return texts
