"""Offline text for the analysis tools: named corpora from the benchmark sets (or a file) and token frequencies.

Usage::

    texts = load_corpus("lee")                             # the 50 Lee documents
    texts = load_corpus("all")                             # every named corpus below, in that order
    counts = token_counts(tokenizer, texts, vocab_size=49152)   # np.int64 [vocab], no special tokens

Named corpora (each read from the data folder :func:`valuelens.evaluation.tasks.find_set` finds):
``stsb`` (the unique train sentences), ``lee`` (the documents), ``scifact`` (the corpus, title + abstract),
``banking77`` and ``emotion`` (the train texts); ``all`` is all five. Any other value is a file read
with :func:`valuelens.io.read_texts` (``.txt`` one text per line, ``.jsonl``/``.csv``/``.parquet`` with a
``text`` field).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from valuelens.errors import ConfigError

__all__ = ["CORPORA", "load_corpus", "token_counts"]


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of ``path`` or of ``path.gz``, whichever exists."""
    found = next((p for p in (path, path.with_name(path.name + ".gz")) if p.is_file()), None)
    if found is None:
        msg = f"missing data file {str(path)!r} (or {str(path)!r}.gz): see docs/data.md"
        raise ConfigError(msg)
    opener: Callable[..., Any] = gzip.open if found.suffix == ".gz" else open
    with opener(found, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _stsb(root: Path) -> list[str]:
    rows = list(_jsonl(root / "stsb" / "train.jsonl"))
    return list(dict.fromkeys(s for r in rows for s in (r["sentence1"], r["sentence2"])))


def _lee(root: Path) -> list[str]:
    return [r["text"] for r in _jsonl(root / "lee" / "docs.jsonl")]


def _scifact(root: Path) -> list[str]:
    return [
        ((r.get("title") or "") + " " + (r.get("text") or "")).strip()
        for r in _jsonl(root / "scifact" / "corpus.jsonl")
    ]


def _labelled(folder: str) -> Callable[[Path], list[str]]:
    def read(root: Path) -> list[str]:
        return [r["text"] for r in _jsonl(root / folder / "train.jsonl")]

    return read


#: name -> reader of its texts from the data folder
CORPORA: dict[str, Callable[[Path], list[str]]] = {
    "stsb": _stsb,
    "lee": _lee,
    "scifact": _scifact,
    "banking77": _labelled("banking77"),
    "emotion": _labelled("emotion"),
}


def load_corpus(
    name_or_path: str | os.PathLike[str], data_dir: str | os.PathLike[str] | None = None
) -> list[str]:
    """The texts of a named corpus (see the module docstring), of ``"all"`` of them, or of a file."""
    from valuelens.evaluation.tasks import find_set

    key = str(name_or_path).strip().lower()
    if key in CORPORA or key == "all":
        names = list(CORPORA) if key == "all" else [key]
        # each corpus is named after its set's folder; its reader takes the data folder holding it
        return [t for name in names for t in CORPORA[name](find_set(name, data_dir).parent) if t.strip()]
    path = Path(name_or_path)
    if not path.is_file():
        choices = ", ".join(repr(n) for n in [*CORPORA, "all"])
        msg = f"unknown corpus {str(name_or_path)!r}: use one of {choices} or a text file (one text per line)"
        raise ConfigError(msg)
    from valuelens.io import read_texts

    texts, _ = read_texts(path)
    return texts


def token_counts(
    tokenizer: Any,
    texts: Sequence[str],
    vocab_size: int,
    *,
    batch_size: int = 512,
    progress: bool = False,
) -> np.ndarray:
    """How often each token id occurs when ``texts`` are tokenized (no special tokens): ``int64 [vocab_size]``.

    Ids at or beyond ``vocab_size`` (none for a model's own tokenizer) are an error.
    """
    from tqdm.auto import tqdm

    counts = np.zeros(vocab_size, dtype=np.int64)
    starts = range(0, len(texts), batch_size)
    for start in tqdm(starts, desc="counting tokens", unit="batch", disable=not progress):
        encoded = tokenizer(list(texts[start : start + batch_size]), add_special_tokens=False)["input_ids"]
        ids = np.fromiter((i for row in encoded for i in row), dtype=np.int64)
        if ids.size and int(ids.max()) >= vocab_size:
            msg = f"the tokenizer produced id {int(ids.max())}, beyond the {vocab_size} rows of W_U"
            raise ConfigError(msg)
        counts += np.bincount(ids, minlength=vocab_size)
    return counts
