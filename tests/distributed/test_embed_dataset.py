"""valuelens.distributed on a local 2-CPU Ray: equal to single-process encoding, row by row, with ids
complete and unique, also when an actor dies mid-run; inputs checked before any actor starts."""

from __future__ import annotations

import os
import time

import numpy as np
import psutil
import pyarrow as pa
import pytest
import ray

from tiny_models import CORPUS
from valuelens import ConfigError, Encoder, EncoderConfig
from valuelens.distributed import EMBEDDING_COLUMN, EmbedBatches, embed_dataset

RAY_PROCESSES = ("raylet", "gcs_server", "ray::", "default_worker", "plasma_store", "log_monitor")


def _ray_children() -> list[str]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            line = " ".join(child.cmdline()) or child.name()
        except psutil.Error:  # exited while we looked
            continue
        if any(name in line for name in RAY_PROCESSES):
            found.append(f"{child.pid}: {line[:120]}")
    return found


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, address="local")
    try:
        yield
    finally:
        ray.shutdown()
        deadline = time.monotonic() + 20
        while _ray_children() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _ray_children(), "Ray left processes behind"


def _texts(n: int) -> list[str]:
    return [
        f"{CORPUS[i % len(CORPUS)]} {CORPUS[(i * 7 + 3) % len(CORPUS)][: 5 + i % 40]} #{i}" for i in range(n)
    ]


def _dataset(texts: list[str], blocks: int = 8) -> ray.data.Dataset:
    """An in-memory dataset of ``blocks`` blocks: no Ray task needed to read it (on 2 CPUs held by 2
    actors, a read or repartition task could never be scheduled)."""
    n = len(texts)
    table = pa.table({"id": list(range(n)), "text": texts, "extra": [f"x{i}" for i in range(n)]})
    step = -(-n // blocks)
    return ray.data.from_arrow([table.slice(i, step) for i in range(0, n, step)])


def _collect(ds: ray.data.Dataset, n: int) -> np.ndarray:
    """The embeddings in id order, after checking every id appears exactly once and columns survive."""
    table = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    assert table.column_names == ["id", "text", "extra", EMBEDDING_COLUMN]
    assert pa.types.is_fixed_size_list(table.schema.field(EMBEDDING_COLUMN).type)
    ids = table.column("id").to_pylist()
    assert len(ids) == n and sorted(ids) == list(range(n)), "ids must be complete and unique"
    assert table.column("extra").to_pylist() == [f"x{i}" for i in ids]
    vectors = np.asarray(table.column(EMBEDDING_COLUMN).combine_chunks().flatten(), dtype=np.float32)
    assert vectors.dtype == np.float32
    out = np.empty((n, vectors.size // n), dtype=np.float32)
    out[ids] = vectors.reshape(n, -1)
    return out


def _assert_rows_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cos.min() >= 0.99999, f"row {int(cos.argmin())}: cosine {cos.min()}"


def test_tiny_model_on_two_workers_equals_single_process(tiny_checkpoint):
    texts = _texts(2000)
    config = EncoderConfig(recipe="aligned-wva", prompt="futureeol")
    got = _collect(
        embed_dataset(_dataset(texts), model=tiny_checkpoint, config=config, batch_size=64, concurrency=2),
        2000,
    )
    want = Encoder.from_pretrained(tiny_checkpoint, config, device="cpu").encode(texts, batch_size=64)
    _assert_rows_equal(got, np.asarray(want))


def test_queries_go_through_the_query_side(tiny_checkpoint):
    texts = _texts(40)
    config = EncoderConfig(recipe="aligned-wva", prompt="futureeol", query_template="prompteol")
    got = _collect(
        embed_dataset(_dataset(texts, blocks=2), model=tiny_checkpoint, config=config, query=True), 40
    )
    want = Encoder.from_pretrained(tiny_checkpoint, config, device="cpu").encode_query(texts)
    _assert_rows_equal(got, np.asarray(want))


def test_actor_killed_mid_run_loses_and_duplicates_no_row(tiny_checkpoint, tmp_path):
    marker = str(tmp_path / "died")

    class DiesOnce(EmbedBatches):  # local class: Ray pickles it by value for the actors
        calls = 0

        def __call__(self, batch):
            self.calls += 1
            if self.calls == 3:
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL))  # the first actor there, once
                except FileExistsError:
                    pass
                else:
                    os._exit(1)
            return super().__call__(batch)

    texts = _texts(600)
    ds = embed_dataset(
        _dataset(texts),
        model=tiny_checkpoint,
        config={"recipe": "va"},
        batch_size=32,
        concurrency=2,
        worker=DiesOnce,
    )
    got = _collect(ds, 600)
    assert os.path.exists(marker), "no actor died: the test did not test anything"
    want = Encoder.from_pretrained(tiny_checkpoint, EncoderConfig(recipe="va"), device="cpu").encode(
        texts, batch_size=32
    )
    _assert_rows_equal(got, np.asarray(want))


@pytest.mark.slow
def test_default_model_on_two_workers_equals_single_process():
    texts = _texts(300)
    got = _collect(
        embed_dataset(_dataset(texts), config={"recipe": "va"}, concurrency=2, normalize=True), 300
    )
    want = Encoder.from_pretrained(recipe="va", device="cpu").encode(texts, normalize=True)
    _assert_rows_equal(got, np.asarray(want))


def test_workers_use_their_cpu_share(tiny_checkpoint):
    """An actor holding 1 CPU runs torch on 1 thread, not on every core of the node."""

    class ReportsThreads(EmbedBatches):
        def __call__(self, batch):
            import torch

            out = super().__call__(batch)
            return out.append_column("threads", pa.array([torch.get_num_threads()] * out.num_rows))

    ds = embed_dataset(
        _dataset(_texts(40)), model=tiny_checkpoint, concurrency=1, num_cpus=1, worker=ReportsThreads
    )
    table = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    assert set(table.column("threads").to_pylist()) == {1}


def test_bad_inputs_fail_before_any_actor_starts(tiny_checkpoint):
    ds = _dataset(_texts(10))
    with pytest.raises(ValueError, match=r"no column 'body'.*\['id', 'text', 'extra'\]"):
        embed_dataset(ds, "body", model=tiny_checkpoint)
    with pytest.raises(TypeError, match="column 'id' holds int64 values"):
        embed_dataset(ds, "id", model=tiny_checkpoint)
    with pytest.raises(ConfigError, match="recipe"):
        embed_dataset(ds, config={"recipe": "no-such-recipe"})
    with pytest.raises(ConfigError, match="unknown EncoderConfig field"):
        embed_dataset(ds, config={"recipes": "va"})
    with pytest.raises(ValueError, match="neither a registered model"):
        embed_dataset(ds, model="not-a-model")
    with pytest.raises(ValueError, match="concurrency"):
        embed_dataset(ds, model=tiny_checkpoint, concurrency=0)
    with pytest.raises(ValueError, match="batch_size"):
        embed_dataset(ds, model=tiny_checkpoint, batch_size=0)
    with pytest.raises(TypeError, match="query must be True or False"):
        embed_dataset(ds, model=tiny_checkpoint, query="yes")


def test_a_missing_text_names_its_row(tiny_checkpoint):
    table = pa.table({"id": ["a", "b", "c"], "text": ["one", None, "three"]})
    ds = embed_dataset(ray.data.from_arrow(table), model=tiny_checkpoint)
    # raised in the actor; Ray Data wraps it (RayTaskError(UserCodeException)) unless its
    # DataContext.raise_original_map_exception is set
    with pytest.raises(Exception, match=r"TypeError: the row with id='b': column 'text' is None"):
        ds.materialize()
