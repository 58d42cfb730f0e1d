"""Shared fixtures: an offline tokenizer and tiny randomly initialised decoders of ten families.

Every tiny model is built once per test run from a config (no download) and deep-copied per test,
so a test may mutate its copy freely.
"""

from __future__ import annotations

import copy
import json
import os
import socket

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tiny_models import ARCHITECTURES, CORPUS, build_tiny_model, build_tokenizer, save_tiny_model
from valuelens.errors import DataNotFoundError
from valuelens.evaluation.tasks import DATA_DIR_ENV, default_data_dir

#: why a test that reads a benchmark set is skipped (only when no data folder exists at all, outside CI)
NO_DATA = (
    f"no benchmark data folder: set ${DATA_DIR_ENV} or put the sets in ../shared/data beside the checkout "
    "(docs/data.md)"
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that fails because a benchmark set is missing is reported as skipped, with the reason,
    when no data folder exists at all and this is not CI (CI always has ../shared/data: there a missing
    set is a failure)."""
    report = yield
    excinfo = call.excinfo
    if (
        excinfo is not None
        and excinfo.errisinstance(DataNotFoundError)
        and not os.environ.get("CI")
        and default_data_dir() is None
    ):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {NO_DATA}")
    return report


@pytest.fixture(scope="session")
def tiny_tokenizer_session():
    return build_tokenizer()


@pytest.fixture
def tiny_tokenizer(tiny_tokenizer_session):
    return copy.deepcopy(tiny_tokenizer_session)


@pytest.fixture(params=ARCHITECTURES)
def arch(request) -> str:
    return request.param


@pytest.fixture
def tiny_model(arch, tiny_tokenizer_session):
    return build_tiny_model(arch, len(tiny_tokenizer_session))


@pytest.fixture
def tiny_llama(tiny_tokenizer_session):
    return build_tiny_model("llama", len(tiny_tokenizer_session))


@pytest.fixture(scope="session", autouse=True)
def fit_cache(tmp_path_factory):
    """States fitted at first use (``postprocess="fit:..."``, the untuned rule) go to a folder of this
    session, not the user's cache."""
    from valuelens.states import FIT_CACHE_ENV

    folder = tmp_path_factory.mktemp("fit-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FIT_CACHE_ENV, str(folder))
        yield folder


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> str:
    """A tiny random Llama and the tiny tokenizer saved once per session as a Hugging Face folder.

    Shared by every test that loads a checkpoint from disk: read it (or copy it), never write into it."""
    return str(save_tiny_model(tmp_path_factory.mktemp("tiny-checkpoint")))


def _write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory):
    """A tiny benchmark data folder in the real formats: ``stsb/`` (train, dev) and ``scifact/`` (30
    documents, 12 judged queries: a carved dev split of 4), for tuning runs on tiny models."""
    root = tmp_path_factory.mktemp("tiny-data")
    words = [w.strip(".,'") for text in CORPUS for w in text.lower().split()]
    rng = np.random.default_rng(0)

    def sentence(n: int) -> str:
        return " ".join(rng.choice(words, size=n)).capitalize() + "."

    (root / "stsb").mkdir()
    for split, n in (("train", 30), ("dev", 40)):
        rows = [
            {"sentence1": sentence(6), "sentence2": sentence(6), "score": float(rng.uniform(0, 5))}
            for _ in range(n)
        ]
        _write_jsonl(root / "stsb" / f"{split}.jsonl", rows)
    (root / "scifact").mkdir()
    docs = [{"id": f"d{j}", "title": sentence(3), "text": sentence(12)} for j in range(30)]
    _write_jsonl(root / "scifact" / "corpus.jsonl", docs)
    queries = [
        {"id": f"q{i}", "text": docs[i]["text"][:30]} for i in range(12)
    ]  # a query quotes its document
    _write_jsonl(root / "scifact" / "queries.jsonl", queries)
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(12))
    (root / "scifact" / "qrels.tsv").write_text(qrels, encoding="utf-8")
    return root


@pytest.fixture
def unreachable(monkeypatch, tmp_path):
    """The Hugging Face hub as a closed port on 127.0.0.1 (connections refused), online mode, an empty
    hub cache in ``tmp_path / "hub-cache"`` and no remembered probe."""
    from huggingface_hub import constants

    from valuelens import hub

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the socket goes: connections are refused
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(hub, "_probes", {})


@pytest.fixture
def no_project_data(monkeypatch):
    """The data folder an installed package would not have."""
    monkeypatch.setattr("valuelens.tuning.data.default_data_dir", lambda: None)


@pytest.fixture(scope="session")
def tuned_folder(tiny_checkpoint, tiny_data_dir, tmp_path_factory):
    """``valuelens tune`` run once per session on the tiny checkpoint and the tiny data (quick mode):
    a preset folder for ``preset=str(folder)`` on every surface. Read it, never write into it."""
    from valuelens.tuning import tune

    out = tmp_path_factory.mktemp("tuned") / "tiny"
    tune(tiny_checkpoint, out, data_dir=tiny_data_dir, show_progress=False)
    return out
