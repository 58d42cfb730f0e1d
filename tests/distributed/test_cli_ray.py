"""`valuelens embed --ray` on a folder of parquet shards: starts a local Ray, writes every row once
keyed by id, equal to single-process encoding, and shuts Ray down (the command exits)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tiny_models import CORPUS
from valuelens import Encoder, EncoderConfig

CLI = [sys.executable, "-c", "from valuelens.cli import app; app()"]


@pytest.mark.slow
def test_embed_ray_numbers_rows_of_sharded_parquet(tiny_checkpoint, tmp_path):
    texts = [f"{CORPUS[i % len(CORPUS)]} ({i})" for i in range(300)]
    shards = tmp_path / "corpus"
    shards.mkdir()
    for k in range(3):  # no id column: rows are numbered over the shards in sorted order
        part = texts[k * 100 : (k + 1) * 100]
        pq.write_table(pa.table({"body": part}), shards / f"part-{k}.parquet", row_group_size=40)
    out = tmp_path / "vectors"
    args = [
        str(shards),
        "-o",
        str(out),
        "--ray",
        "--workers",
        "2",
        "--model",
        tiny_checkpoint,
        "--field",
        "body",
    ]
    done = subprocess.run(
        [*CLI, "embed", *args, "--recipe", "va"], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "300 texts ->" in done.stdout
    table = pq.read_table(out)
    ids = table.column("id").to_pylist()
    assert sorted(ids) == list(range(300)), "ids must be complete and unique"
    assert [texts[i] for i in ids] == table.column("body").to_pylist()
    got = np.empty((300, 32), dtype=np.float32)
    got[ids] = np.asarray(table.column("embedding").combine_chunks().flatten()).reshape(300, -1)
    want = Encoder.from_pretrained(tiny_checkpoint, EncoderConfig(recipe="va"), device="cpu").encode(
        texts, normalize=True
    )
    assert float((got * want).sum(1).min()) >= 0.99999


def test_embed_ray_refuses_an_existing_output(tiny_checkpoint, tmp_path):
    (tmp_path / "in.txt").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.parquet").write_bytes(b"")
    args = [str(tmp_path / "in.txt"), "-o", str(tmp_path / "out"), "--ray", "--model", tiny_checkpoint]
    done = subprocess.run([*CLI, "embed", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "already exists" in done.stderr
