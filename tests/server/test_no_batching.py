"""``Limits(batching=False)`` (``valuelens serve --no-batching``): every batch holds one request's texts."""

from __future__ import annotations

import threading
import time

import numpy as np

from valuelens.server.batcher import Batcher
from valuelens.server.limits import Limits


def _run(limits: Limits) -> list[list[str]]:
    gate = threading.Event()
    batches: list[list[str]] = []

    def encode(texts: list[str]) -> np.ndarray:
        assert gate.wait(30)
        batches.append(list(texts))
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    batcher = Batcher(encode, limits)
    batcher.start()
    try:
        blocker = batcher.submit(["warm"], [1])  # holds the worker while the others queue
        time.sleep(0.05)
        jobs = [batcher.submit([f"r{r}t{i}" for i in range(3)], [1] * 3) for r in range(4)]
        gate.set()
        for r, job in enumerate(jobs):
            rows = job.future.result(10)
            assert rows[:, 0].tolist() == [len(f"r{r}t{i}") for i in range(3)]
        assert blocker.future.result(10).shape == (1, 2)
    finally:
        batcher.close(10)
    assert batcher.depth == 0
    return batches


def test_no_batching_runs_one_request_per_batch():
    batches = _run(Limits(max_wait_ms=50, batching=False))
    assert batches[0] == ["warm"]
    assert batches[1:] == [[f"r{r}t{i}" for i in range(3)] for r in range(4)]


def test_batching_packs_the_queued_requests_together():
    batches = _run(Limits(max_wait_ms=0))
    assert len(batches) == 2 and len(batches[1]) == 12


def test_the_command_has_a_no_batching_flag():
    from typer.testing import CliRunner

    from valuelens.cli import app

    result = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "--no-batching" in result.output
