"""Task loading (the real benchmark sets and custom folders) and end-to-end evaluation on tiny tasks."""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from valuelens.errors import DataNotFoundError
from valuelens.evaluation import (
    DATA_DIR_ENV,
    KNOWN_TASKS,
    ClassificationData,
    LabelledTexts,
    PairData,
    RetrievalData,
    TaskResult,
    data_dir_candidates,
    default_data_dir,
    evaluate,
    find_set,
    load_task,
    parse_task_spec,
    results_from_json,
    results_to_json,
    results_to_markdown,
)
from valuelens.evaluation.tasks import (
    CARVED_DEV_QUERIES,
    RERANKING_NEGATIVES,
    RETRIEVAL_DOCS_PER_QUERY,
    carved_dev_ids,
)


@pytest.fixture(autouse=True)
def _single_thread() -> Iterator[None]:
    # scikit-learn's OpenMP k-means oversubscribes a busy CI box (seconds instead of ~0.3 s per clustering)
    with threadpool_limits(limits=1):
        yield


# ----------------------------------------------------------------- encoders


class HashEncoder:
    """Deterministic bag-of-words hashing encoder (numpy only)."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls: list[list[str]] = []

    def encode(self, texts: list[str], *, batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        out[:, 0] += 0.01  # no zero vectors
        return out


class LookupEncoder:
    """Maps each text to a fixed vector (a 'perfect' encoder built from the gold data)."""

    def __init__(self, table: dict[str, Sequence[float]]) -> None:
        self.table = table

    def encode(self, texts: list[str], *, batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return np.array([self.table[t] for t in texts], dtype=np.float32)


def one_hot(i: int, dim: int) -> list[float]:
    v = [0.0] * dim
    v[i] = 1.0
    return v


# ----------------------------------------------------------------- tiny data on disk


def write_jsonl(path: Path, rows: Sequence[dict], *, gz: bool = False) -> None:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path.with_name(path.name + ".gz"), "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


STS_SCORES = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.5, 4.5]
ANCHOR = "the quick brown fox jumps over the lazy dog"


def sts_text(split: str, k: int) -> str:
    # variant k shares its first k anchor words, so the hashing encoder's cosines vary
    return f"{split} variant {k} " + " ".join(ANCHOR.split()[:k])


def make_sts(folder: Path) -> Path:
    """Pairs (anchor, t_k) with gold score s_k; a perfect encoder puts t_k at angle (5 - s_k)/5 * 90° from anchor."""
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        rows = [
            {"sentence1": ANCHOR, "sentence2": sts_text(split, k), "score": s}
            for k, s in enumerate(STS_SCORES)
        ]
        write_jsonl(folder / f"{split}.jsonl", rows)
    return folder


def sts_perfect_encoder() -> LookupEncoder:
    table: dict[str, Sequence[float]] = {ANCHOR: [1.0, 0.0]}
    for split in ("train", "test"):
        for k, s in enumerate(STS_SCORES):
            theta = (5.0 - s) / 5.0 * math.pi / 2
            table[sts_text(split, k)] = [math.cos(theta), math.sin(theta)]
    return LookupEncoder(table)


LABELS = ("sports", "cooking", "travel")


def make_classification(folder: Path) -> Path:
    folder.mkdir(parents=True)
    write_jsonl(
        folder / "train.jsonl",
        [{"text": f"{lab} story number {i}", "label": lab} for lab in LABELS for i in range(12)],
    )
    write_jsonl(
        folder / "test.jsonl",
        [{"text": f"a {lab} note {i}", "label": lab} for lab in LABELS for i in range(5)],
    )
    return folder


def classification_perfect_encoder(folder: Path) -> LookupEncoder:
    table: dict[str, Sequence[float]] = {}
    for split in ("train", "test"):
        for line in (folder / f"{split}.jsonl").read_text().splitlines():
            r = json.loads(line)
            table[r["text"]] = one_hot(LABELS.index(r["label"]), len(LABELS))
    return LookupEncoder(table)


N_QUERIES, N_DOCS = 4, 30


def make_retrieval(folder: Path, *, gz: bool = False) -> Path:
    """Query q{i} is relevant to docs d{i} and d{i+10}; 30 docs in all."""
    folder.mkdir(parents=True)
    write_jsonl(
        folder / "corpus.jsonl",
        [{"id": f"d{j}", "title": f"title {j}", "text": f"body of document {j}"} for j in range(N_DOCS)],
        gz=gz,
    )
    write_jsonl(
        folder / "queries.jsonl", [{"id": f"q{i}", "text": f"question {i}"} for i in range(N_QUERIES)]
    )
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"q{i}\td{j}\t1" for i in range(N_QUERIES) for j in (i, i + 10)]
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n")
    return folder


def retrieval_perfect_encoder() -> LookupEncoder:
    dim = N_QUERIES + N_DOCS
    table: dict[str, Sequence[float]] = {f"question {i}": one_hot(i, dim) for i in range(N_QUERIES)}
    for j in range(N_DOCS):
        owner = j % 10 if j % 10 < N_QUERIES and j < 20 else N_QUERIES + j
        table[f"title {j} body of document {j}"] = one_hot(owner, dim)
    return LookupEncoder(table)


# ----------------------------------------------------------------- real data


@pytest.fixture(scope="module")
def data_dir() -> Path:
    found = find_set("stsb").parent  # skipped (tests/conftest.py) only when no data folder exists at all
    assert default_data_dir() == found
    return found


def test_known_names_resolve(data_dir: Path) -> None:
    assert set(KNOWN_TASKS) == {
        "stsb",
        "lee",
        "banking77",
        "emotion",
        "scifact",
        "banking77-clustering",
        "emotion-clustering",
        "scifact-reranking",
        "stsb-pairs",
    }
    kinds = {name: load_task(name).kind for name in KNOWN_TASKS}
    assert kinds["stsb"] == kinds["lee"] == "sts"
    assert kinds["banking77-clustering"] == "clustering"
    assert kinds["scifact-reranking"] == "reranking"
    assert kinds["stsb-pairs"] == "pair_classification"
    assert load_task("stsb").path == data_dir / "stsb"


def test_stsb_counts() -> None:
    task = load_task("stsb")
    assert task.splits == ("train", "dev", "test")
    counts = {s: task.load(s).n_examples for s in task.splits}
    assert counts == {"train": 5749, "dev": 1500, "test": 1379}  # SOURCE.md
    test = task.load("test")
    assert isinstance(test, PairData) and min(test.scores) >= 0.0 and max(test.scores) <= 5.0


def test_lee_counts() -> None:
    data = load_task("lee").load("test")
    assert isinstance(data, PairData)
    assert data.n_examples == 1225  # all i < j pairs of 50 docs
    assert len(set(data.texts1) | set(data.texts2)) == 50


def test_classification_counts() -> None:
    banking = load_task("banking77")
    assert banking.splits == ("test",)
    data = banking.load("test")
    assert isinstance(data, ClassificationData)
    assert (data.train.n_examples, data.test.n_examples) == (10003, 3080)
    assert len(set(data.train.labels)) == len(set(data.test.labels)) == 77
    emotion = load_task("emotion")
    assert emotion.splits == ("validation", "test")
    val, test = emotion.load("validation"), emotion.load("test")
    assert isinstance(val, ClassificationData) and isinstance(test, ClassificationData)
    assert (test.train.n_examples, val.test.n_examples, test.test.n_examples) == (16000, 2000, 2000)
    hist = Counter(test.test.labels)
    assert hist["joy"] == 695 and hist["sadness"] == 581 and hist["surprise"] == 66  # SOURCE.md


def test_scifact_counts() -> None:
    task = load_task("scifact")
    assert task.splits == ("dev", "test")  # dev carved from the only judged split
    data = task.load("test")  # reads corpus.jsonl.gz
    dev = task.load("dev")
    assert isinstance(data, RetrievalData) and isinstance(dev, RetrievalData) and data.candidates is None
    assert (len(data.corpus), len(data.queries), len(dev.queries)) == (5183, 200, CARVED_DEV_QUERIES)
    assert not set(data.queries) & set(dev.queries)  # disjoint, and together the 300 judged queries
    assert sum(len(v) for v in data.qrels.values()) + sum(len(v) for v in dev.qrels.values()) == 339
    assert task.load("dev") == dev  # seeded: the same split every time


def test_carved_dev_split_is_seeded_and_disjoint(tmp_path: Path) -> None:
    ids = [f"q{i}" for i in range(300)]
    dev = carved_dev_ids(ids)
    assert len(dev) == CARVED_DEV_QUERIES and dev <= set(ids) and carved_dev_ids(ids) == dev
    assert len(carved_dev_ids(ids[:10])) == 3  # a small set: a third of its queries, the rest stay test
    make_retrieval(tmp_path / "mine")  # a folder of one's own keeps its splits as they are
    assert load_task(tmp_path / "mine").splits == ("test",)


def test_derived_counts() -> None:
    clus = load_task("banking77-clustering").load("test")
    assert isinstance(clus, LabelledTexts) and clus.n_examples == 3080 and len(set(clus.labels)) == 77
    pairs = load_task("stsb-pairs").load("test")
    assert isinstance(pairs, PairData)
    assert Counter(pairs.scores) == {1.0: 338, 0.0: 308}  # score >= 4 / score <= 1 of the 1379 test pairs
    rr = load_task("scifact-reranking").load("test")
    assert isinstance(rr, RetrievalData) and rr.candidates is not None and len(rr.queries) == 200
    for qid, cands in rr.candidates.items():
        relevant = {d for d, r in rr.qrels[qid].items() if r > 0}
        assert relevant <= set(cands)
        assert len(cands) == len(relevant) + RERANKING_NEGATIVES == len(set(cands))
    # a query keeps its negatives whatever the limit
    small = load_task("scifact-reranking").load("test", limit=7)
    assert small.subsampled and len(small.queries) == 7
    assert all(small.candidates[q] == rr.candidates[q] for q in small.queries)


# ----------------------------------------------------------------- resolution, detection, errors


def test_env_and_argument_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_sts(tmp_path / "env" / "stsb")
    make_sts(tmp_path / "arg" / "stsb")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "env"))
    assert load_task("stsb").path == tmp_path / "env" / "stsb"
    assert load_task("stsb", data_dir=tmp_path / "arg").path == tmp_path / "arg" / "stsb"
    assert load_task("stsb").load("test").n_examples == len(STS_SCORES)
    with pytest.raises(DataNotFoundError, match="lee"):
        load_task("lee")  # a set $VALUELENS_DATA_DIR lacks is an error, not a reason to read another copy


def test_a_missing_set_names_the_set_the_places_and_the_variable(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "empty"))
    with pytest.raises(DataNotFoundError) as raised:
        load_task("scifact-reranking")
    message = str(raised.value)
    assert "'scifact'" in message and str(tmp_path / "empty" / "scifact") in message
    assert DATA_DIR_ENV in message and "docs/data.md" in message
    monkeypatch.delenv(DATA_DIR_ENV)
    monkeypatch.chdir(tmp_path)  # a cwd outside any checkout; the package's own checkout is still searched
    assert all(place.name == "data" and place.parent.name == "shared" for place in data_dir_candidates())


def test_shared_data_beside_a_checkout_is_found_from_the_working_directory(tmp_path, monkeypatch) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "shared_core").mkdir(parents=True)
    (checkout / "shared_core" / "pyproject.toml").write_text("[project]\n")
    make_sts(tmp_path / "shared" / "data" / "stsb")
    (checkout / "tests").mkdir()
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.chdir(checkout / "tests")
    assert tmp_path / "shared" / "data" in data_dir_candidates()
    assert find_set("stsb", data_dir=None).parent in data_dir_candidates()  # the package's or this one


def test_the_sets_are_not_in_the_repository() -> None:
    root = Path(__file__).resolve().parents[2]
    for folder in ("stsb", "lee", "banking77", "emotion", "scifact"):
        assert not (root / "data" / folder).exists(), f"data/{folder} is back in the repository"


def test_detect_custom_folders(tmp_path: Path) -> None:
    sts = load_task(make_sts(tmp_path / "my_sts"))
    assert (sts.name, sts.kind, sts.splits, sts.main_metric) == (
        "my_sts",
        "sts",
        ("train", "test"),
        "cosine_spearman",
    )
    cls = load_task(str(make_classification(tmp_path / "my_cls")))
    assert (cls.kind, cls.splits, cls.main_metric) == ("classification", ("test",), "accuracy")
    ret = load_task(make_retrieval(tmp_path / "my_ret", gz=True))
    assert (ret.kind, ret.splits, ret.main_metric) == ("retrieval", ("test",), "ndcg_at_10")
    data = ret.load()
    assert isinstance(data, RetrievalData)
    assert data.corpus["d3"] == "title 3 body of document 3"  # MTEB: (title + " " + text).strip()


def test_detect_lee_style_docs(tmp_path: Path) -> None:
    folder = tmp_path / "docsim"
    folder.mkdir()
    write_jsonl(folder / "docs.jsonl", [{"id": i, "text": f"document {i}"} for i in range(3)])
    write_jsonl(
        folder / "test.jsonl", [{"id1": 0, "id2": 1, "score": 0.2}, {"id1": 1, "id2": 2, "score": 0.9}]
    )
    task = load_task(folder)
    assert (task.kind, task.splits) == ("sts", ("test",))
    data = task.load()
    assert isinstance(data, PairData) and data.texts2 == ("document 1", "document 2")
    write_jsonl(folder / "test.jsonl", [{"id1": 0, "id2": 7, "score": 0.2}])
    with pytest.raises(ValueError, match="'7'"):
        task.load()


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown task 'nope'.*banking77.*stsb"):
        load_task("nope")
    with pytest.raises(ValueError, match=r"no split 'dev'.*\['test'\]"):
        load_task("banking77").load("dev")
    with pytest.raises(ValueError, match="no split 'train'"):
        load_task("emotion").load("train")  # the classifier's training pool is not an evaluation split
    with pytest.raises(ValueError, match="limit must be a positive int"):
        load_task("stsb").load("test", limit=0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="cannot detect"):
        load_task(tmp_path / "empty")
    odd = tmp_path / "odd"
    odd.mkdir()
    write_jsonl(odd / "test.jsonl", [{"question": "x"}])
    with pytest.raises(ValueError, match=r"cannot detect.*question"):
        load_task(odd)
    no_train = tmp_path / "no_train"
    no_train.mkdir()
    write_jsonl(no_train / "test.jsonl", [{"text": "x", "label": "a"}])
    with pytest.raises(ValueError, match=r"no train\.jsonl"):
        load_task(no_train)


def test_task_spec_names_a_subsample() -> None:
    assert parse_task_spec("scifact:20") == ("scifact", 20)
    assert parse_task_spec("scifact:20", 5) == ("scifact", 20)  # TASK:N wins over --limit
    assert parse_task_spec("stsb", 500) == ("stsb", 500)
    assert parse_task_spec("/data/a:b:7") == ("/data/a:b", 7)
    assert parse_task_spec("C:\\data\\sts") == ("C:\\data\\sts", None)  # a colon in a path stays
    assert parse_task_spec(":7") == (":7", None)
    with pytest.raises(ValueError, match="at least 1"):
        parse_task_spec("stsb:0")


def test_limit_is_seeded(tmp_path: Path) -> None:
    task = load_task("stsb")
    a, b = task.load("test", limit=100), task.load("test", limit=100)
    assert a == b and a.n_examples == 100 and a.subsampled
    assert not task.load("test", limit=10**6).subsampled
    ret = load_task("scifact").load("test", limit=20)
    assert isinstance(ret, RetrievalData) and len(ret.queries) == 20
    assert len(ret.corpus) == 20 * RETRIEVAL_DOCS_PER_QUERY
    assert all(d in ret.corpus for q in ret.queries for d in ret.qrels[q])  # relevant docs are kept


# ----------------------------------------------------------------- evaluate end to end


def _tiny_tasks(tmp_path: Path) -> dict[str, tuple[str, str | Path, Callable[[], LookupEncoder]]]:
    """name -> (kind, load_task argument, perfect encoder factory), all on tmp_path data."""
    root = tmp_path / "data"
    make_sts(root / "stsb")
    cls_dir = make_classification(root / "banking77")
    make_retrieval(root / "scifact")
    return {
        "sts": ("sts", root / "stsb", sts_perfect_encoder),
        "classification": (
            "classification",
            root / "banking77",
            lambda: classification_perfect_encoder(cls_dir),
        ),
        "clustering": ("clustering", "banking77-clustering", lambda: classification_perfect_encoder(cls_dir)),
        "retrieval": ("retrieval", root / "scifact", retrieval_perfect_encoder),
        "reranking": ("reranking", "scifact-reranking", retrieval_perfect_encoder),
        "pairs": ("pair_classification", "stsb-pairs", sts_perfect_encoder),
    }


@pytest.mark.parametrize("which", ["sts", "classification", "clustering", "retrieval", "reranking", "pairs"])
def test_evaluate_tiny(which: str, tmp_path: Path) -> None:
    kind, target, perfect = _tiny_tasks(tmp_path)[which]
    task = load_task(target, data_dir=tmp_path / "data")
    assert task.kind == kind
    hashed = evaluate(HashEncoder(), task)
    assert hashed.kind == kind and hashed.split == "test" and hashed.main_metric == task.main_metric
    assert hashed.main_score == hashed.scores[hashed.main_metric]
    lo = -1.0 if kind == "sts" else 0.0
    assert all(lo <= v <= 1.0 for v in hashed.scores.values()), hashed.scores
    assert hashed.embedding_dim == 64 and hashed.encode_seconds >= 0.0 and hashed.n_examples > 0
    assert hashed.limit is None and not hashed.subsampled
    best = evaluate(perfect(), task)
    assert best.main_score == pytest.approx(1.0)


def test_evaluate_dedups_and_uses_query_document_encoders(tmp_path: Path) -> None:
    sts = load_task(make_sts(tmp_path / "sts"))
    enc = HashEncoder()
    result = evaluate(enc, sts)
    # 8 pairs share one anchor: 1 + 8 unique texts, one encode call
    assert len(enc.calls) == 1 and len(enc.calls[0]) == len(set(enc.calls[0])) == 9
    assert result.n_encoded == 9 and result.n_examples == 8

    class Asymmetric(HashEncoder):
        def __init__(self) -> None:
            super().__init__()
            self.roles: list[str] = []

        def encode_query(self, texts: list[str], **kw: object) -> np.ndarray:
            self.roles.append("query")
            return self.encode(texts)

        def encode_document(self, texts: list[str], **kw: object) -> np.ndarray:
            self.roles.append("document")
            return self.encode(texts)

    asym = Asymmetric()
    evaluate(asym, load_task(make_retrieval(tmp_path / "ret")))
    assert asym.roles == ["query", "document"]


def test_evaluate_limit_and_bad_model(tmp_path: Path) -> None:
    task = load_task(make_classification(tmp_path / "cls"))
    result = evaluate(HashEncoder(), task, limit=6)
    assert result.limit == 6 and result.subsampled and result.n_examples == 6

    class Broken:
        def encode(self, texts: list[str], **kw: object) -> np.ndarray:
            return np.zeros((len(texts) + 1, 4), dtype=np.float32)

    with pytest.raises(ValueError, match="returned shape"):
        evaluate(Broken(), task)
    with pytest.raises(TypeError, match="no callable encode"):
        evaluate(object(), task)  # type: ignore[arg-type]


def test_results_markdown_and_json(tmp_path: Path) -> None:
    sts = load_task(make_sts(tmp_path / "stsb"))
    cls = load_task(make_classification(tmp_path / "cls"))
    a = [evaluate(HashEncoder(), sts), evaluate(HashEncoder(), cls, limit=6)]
    b = [evaluate(sts_perfect_encoder(), sts)]
    md = results_to_markdown({"hash": a, "perfect": b})
    lines = md.splitlines()
    assert lines[0] == "| model | stsb | cls | dim | encode s |"
    assert lines[3].startswith("| perfect | 100.0 | – | 2 |")
    assert "†" in lines[2] and "cosine_spearman" in md
    assert f"{100 * a[0].main_score:.1f}" in lines[2]
    # (label, result) pairs and bare results group the same way
    assert results_to_markdown([("hash", a[0]), ("hash", a[1]), ("perfect", b[0])]) == md
    assert results_to_markdown(b, label="perfect").splitlines()[2].startswith("| perfect | 100.0 |")
    back = results_from_json(results_to_json({"hash": a, "perfect": b}))
    assert back == {"hash": a, "perfect": b}
    assert isinstance(back["hash"][0], TaskResult)
