"""``tune --dev owner/name``: a labelled dev set named by its Hugging Face hub id, read in the hub's
layouts (MTEB retrieval: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.jsonl``; MTEB STS:
``<split>.jsonl.gz``) from the local hub cache, as ``snapshot_download`` leaves it. Offline here: the
cache is written by the test; an unreachable hub with nothing cached is one clear error naming the
offline alternative."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import constants

from valuelens import hub
from valuelens.errors import ConfigError
from valuelens.evaluation.tasks import load_task
from valuelens.tuning import tune
from valuelens.tuning.data import read_dev

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def _cached_dataset(cache: Path, repo_id: str) -> Path:
    """The folder ``snapshot_download(repo_id, repo_type="dataset")`` leaves in the hub cache."""
    repo = cache / f"datasets--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return repo / "snapshots" / COMMIT


@pytest.fixture
def hub_cache(unreachable, tiny_data_dir):
    """A hub cache holding ``mteb/tiny-retrieval`` and ``mteb/tiny-sts`` (the tiny data in the hub's
    layouts) behind an unreachable hub endpoint; the cache folder."""
    cache = Path(constants.HF_HUB_CACHE)
    retrieval = _cached_dataset(cache, "mteb/tiny-retrieval")
    source = tiny_data_dir / "scifact"
    corpus = [json.loads(line) for line in (source / "corpus.jsonl").read_text().splitlines()]
    _jsonl(
        retrieval / "corpus.jsonl.gz",
        [{"_id": r["id"], "title": r["title"], "text": r["text"]} for r in corpus],
    )
    queries = [json.loads(line) for line in (source / "queries.jsonl").read_text().splitlines()]
    _jsonl(retrieval / "queries.jsonl", [{"_id": r["id"], "text": r["text"]} for r in queries])
    qrels = [
        dict(zip(("query-id", "corpus-id", "score"), line.split("\t"), strict=True))
        for line in (source / "qrels.tsv").read_text().splitlines()[1:]
    ]
    _jsonl(retrieval / "qrels" / "test.jsonl", [{**r, "score": int(r["score"])} for r in qrels[:8]])
    _jsonl(retrieval / "qrels" / "dev.jsonl", [{**r, "score": int(r["score"])} for r in qrels[8:]])
    sts = _cached_dataset(cache, "mteb/tiny-sts")
    pairs = [json.loads(line) for line in (tiny_data_dir / "stsb" / "dev.jsonl").read_text().splitlines()]
    _jsonl(sts / "validation.jsonl.gz", pairs[:30])
    _jsonl(sts / "test.jsonl.gz", pairs[30:])
    return cache


def test_a_hub_dataset_is_read_from_the_cache_in_the_mteb_layouts(hub_cache):
    kind, data, name = read_dev("mteb/tiny-retrieval")  # the hub does not answer: the cached snapshot
    assert kind == "retrieval" and name == "mteb/tiny-retrieval (dev)"
    assert set(data.qrels) == {f"q{i}" for i in range(8, 12)} and len(data.corpus) == 30
    assert load_task(hub.dataset("mteb/tiny-retrieval")).splits == ("dev", "test")
    kind, data, name = read_dev("mteb/tiny-sts")
    assert kind == "sts" and name == "mteb/tiny-sts (validation)" and len(data.scores) == 30


def test_hub_offline_mode_reads_the_cache_without_asking(hub_cache, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "_reachable", lambda endpoint: pytest.fail("asked the hub while offline"))
    assert read_dev("mteb/tiny-sts")[0] == "sts"
    with pytest.raises(ConfigError, match=r"HF_HUB_OFFLINE=1 is set and it is not in the local cache"):
        read_dev("mteb/not-cached")


def test_an_unreachable_hub_names_the_offline_way(hub_cache):
    with pytest.raises(ConfigError) as caught:
        read_dev("mteb/not-cached")
    message = str(caught.value)
    assert "is no local file or folder; as a hub dataset" in message
    assert "cannot be reached" in message
    assert "hf download mteb/not-cached --repo-type dataset --local-dir DIR" in message


def test_tune_scores_on_hub_datasets(tiny_checkpoint, hub_cache, tmp_path, no_project_data):
    result = tune(
        tiny_checkpoint, tmp_path / "t", dev=["mteb/tiny-sts", "mteb/tiny-retrieval"], show_progress=False
    )
    assert not np.isnan(result.best.sts) and not np.isnan(result.best.retrieval)
    assert result.score_names == ("mteb/tiny-sts (validation)", "mteb/tiny-retrieval (dev) nDCG@10")


def test_gzipped_qrels_are_read_like_plain_ones(tiny_data_dir, tmp_path):
    folder = tmp_path / "beir"
    folder.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl"):
        (folder / name).write_bytes((tiny_data_dir / "scifact" / name).read_bytes())
    with gzip.open(folder / "qrels.tsv.gz", "wt", encoding="utf-8") as f:
        f.write((tiny_data_dir / "scifact" / "qrels.tsv").read_text())
    task = load_task(folder)
    plain = load_task(tiny_data_dir / "scifact")
    assert task.splits == plain.splits
    assert task.load(task.splits[-1]).qrels == plain.load(plain.splits[-1]).qrels
