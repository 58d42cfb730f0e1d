"""``valuelens serve --workers 2``: two processes share the port, each with its own model; their answers
equal the in-process encoder's, and a SIGTERM drains both and exits 0."""

from __future__ import annotations

import concurrent.futures
import os
import signal

import numpy as np
import pytest

from server.serving import get, post, spec_args, start

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="--workers forks (Linux, macOS)")

TEXTS = [f"Dogs run in the park after rain number {i}." for i in range(24)]


def _workers_of(pid: int) -> set[int]:
    """The child processes of ``pid`` (read from /proc where there is one)."""
    children = f"/proc/{pid}/task/{pid}/children"
    if not os.path.exists(children):
        return set()
    with open(children, encoding="ascii") as handle:
        return {int(x) for x in handle.read().split()}


def test_two_workers_answer_as_one_and_a_sigterm_drains_both(tiny_dir, reference, tmp_path):
    server = start([*spec_args(tiny_dir), "--workers", "2"], tmp_path)
    try:
        expected = np.asarray(reference.encode(TEXTS, normalize=True))

        def one(i: int) -> tuple[int, dict]:
            status, body, _ = post(
                server.url + "/v1/embeddings", {"model": str(tiny_dir), "input": TEXTS[i % 24 :][:6]}
            )
            return status, body

        with concurrent.futures.ThreadPoolExecutor(8) as executor:
            results = list(executor.map(one, range(32)))  # new connections: the kernel spreads them
        for i, (status, body) in enumerate(results):
            assert status == 200, body
            rows = np.array([d["embedding"] for d in body["data"]])
            want = expected[i % 24 :][:6]
            assert (np.sum(rows * want, axis=1) >= 0.99999).all()
        if os.path.exists(f"/proc/{server.process.pid}"):
            assert len(_workers_of(server.process.pid)) == 2
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=60) == 0, server.stderr()
        with pytest.raises(OSError):
            get(server.url + "/health")
        assert server.stderr().count("valuelens serve:") == 2  # each worker loaded its own model
    finally:
        server.stop()
