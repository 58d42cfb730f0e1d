"""The batcher and the app in process, with a fake slow encoder: round-robin packing, queue full (503 with
Retry-After), timeouts (504), encoder failures, readiness before the warm-up."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tiny_models import build_tokenizer
from valuelens.server.batcher import Batcher, QueueFull
from valuelens.server.limits import Limits

DIM = 4


class FakeEncoder:
    """Row i of a batch is ``[len(text), 1, 0, 0]``; ``gate`` holds every encode until it is set."""

    def __init__(self) -> None:
        self.tokenizer = build_tokenizer()
        self.dimension = DIM
        self.max_length = 64
        self.gate = threading.Event()
        self.gate.set()
        self.batches: list[list[str]] = []
        self.fail = False

    def encode(self, texts, batch_size=32, normalize=False, **kwargs):
        assert self.gate.wait(30)
        if self.fail:
            raise RuntimeError("boom")
        self.batches.append(list(texts))
        return np.array([[len(t), 1.0, 0.0, 0.0] for t in texts], dtype=np.float32)


def test_round_robin_slices_do_not_starve_a_small_request():
    fake = FakeEncoder()
    fake.gate.clear()
    limits = Limits(max_batch_tokens=16, max_wait_ms=0, slice_size=4)
    batcher = Batcher(lambda texts: fake.encode(texts), limits)
    batcher.start()
    try:
        blocker = batcher.submit(["warm"], [1])  # holds the worker while the others queue
        time.sleep(0.05)
        big = batcher.submit([f"b{i}" for i in range(40)], [1] * 40)
        small = batcher.submit(["s0", "s1"], [1, 1])
        fake.gate.set()
        assert small.future.result(10).shape == (2, DIM)
        rows = big.future.result(10)
        assert blocker.future.result(10).shape == (1, DIM)
    finally:
        batcher.close(10)
    assert rows[:, 0].tolist() == [len(f"b{i}") for i in range(40)]
    second = fake.batches[1]
    assert second[:4] == ["b0", "b1", "b2", "b3"] and "s0" in second  # the small one rode in the first batch
    assert max(len(b) for b in fake.batches) <= 16
    assert batcher.depth == 0


def test_queue_full_is_refused_and_close_drains():
    fake = FakeEncoder()
    fake.gate.clear()
    batcher = Batcher(lambda texts: fake.encode(texts), Limits(max_queue=2, max_wait_ms=0))
    batcher.start()
    first, second = batcher.submit(["a"], [1]), batcher.submit(["b"], [1])
    with pytest.raises(QueueFull, match="2 requests"):
        batcher.submit(["c"], [1])
    fake.gate.set()
    batcher.close(10)
    assert first.future.result(1)[0, 0] == 1 and second.future.done()


def test_an_encoder_error_reaches_every_request_of_the_batch():
    fake = FakeEncoder()
    fake.fail = True
    batcher = Batcher(lambda texts: fake.encode(texts), Limits(max_wait_ms=0))
    batcher.start()
    try:
        job = batcher.submit(["a", "b"], [1, 1])
        with pytest.raises(RuntimeError, match="boom"):
            job.future.result(10)
    finally:
        batcher.close(10)
    assert batcher.depth == 0


# ---------------------------------------------------------------------------------------- the app
@pytest.fixture
def client_for():
    from fastapi.testclient import TestClient

    from valuelens.server.app import create_app

    opened = []

    def make(fake, *, cors_origins=(), api_key=None, **limits):
        app = create_app(
            fake, served_name="fake", limits=Limits(**limits), cors_origins=cors_origins, api_key=api_key
        )
        client = TestClient(app)
        client.__enter__()
        opened.append((client, fake))
        return client

    yield make
    for client, fake in opened:
        fake.gate.set()
        client.__exit__(None, None, None)


def _shape(response):
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def test_queue_full_is_503_with_retry_after(client_for):
    fake = FakeEncoder()
    fake.gate.clear()
    client = client_for(fake, max_queue=1)  # the warm-up holds the only place
    assert client.get("/ready").status_code == 503
    assert client.get("/health").status_code == 200
    response = client.post("/v1/embeddings", json={"model": "fake", "input": "hello"})
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert "queue is full" in _shape(response)["message"]
    fake.gate.set()
    for _ in range(100):
        if client.get("/ready").status_code == 200:
            break
        time.sleep(0.05)
    assert client.post("/v1/embeddings", json={"model": "fake", "input": "hello"}).status_code == 200


def test_a_slow_request_is_504(client_for):
    fake = FakeEncoder()
    fake.gate.clear()
    client = client_for(fake, request_timeout=0.3)
    response = client.post("/v1/embeddings", json={"model": "fake", "input": ["a", "b"]})
    assert response.status_code == 504
    assert "request-timeout" in _shape(response)["message"]


def test_encoder_failure_is_500_in_openai_shape(client_for):
    fake = FakeEncoder()
    client = client_for(fake)
    fake.fail = True
    response = client.post("/v1/embeddings", json={"model": "fake", "input": "x"})
    assert response.status_code == 500
    assert "boom" in _shape(response)["message"]


def test_truncate_cuts_long_inputs_and_says_so(client_for):
    fake = FakeEncoder()
    client = client_for(fake, max_input_tokens=4, truncate=True)
    long = "The cat sits on the mat. " * 10
    response = client.post("/v1/embeddings", json={"model": "fake", "input": [long, "cat", long]})
    assert response.status_code == 200, response.text
    assert response.headers["X-Truncated-Inputs"] == "2"
    assert response.json()["usage"]["prompt_tokens"] <= 4 + 4 + len(fake.tokenizer("cat")["input_ids"])
    assert fake.batches[-1][0] != long and len(fake.batches[-1][0]) < len(long)


def test_cors_is_off_unless_an_origin_is_given(client_for):
    preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
    closed = client_for(FakeEncoder())
    assert "access-control-allow-origin" not in closed.options("/v1/embeddings", headers=preflight).headers
    opened = client_for(FakeEncoder(), cors_origins=["http://app.example"])
    response = opened.options("/v1/embeddings", headers=preflight)
    assert response.headers["access-control-allow-origin"] == "http://app.example"


def test_the_api_key_guards_v1_routes_only(client_for):
    client = client_for(FakeEncoder(), api_key="s3cret")
    assert client.get("/v1/models").status_code == 401
    assert client.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/v1/models", headers={"Authorization": "Basic s3cret"}).status_code == 401
    assert client.get("/health").status_code == 200


def test_limits_are_checked():
    with pytest.raises(ValueError, match="max_queue"):
        Limits(max_queue=0)
    with pytest.raises(ValueError, match="request_timeout"):
        Limits(request_timeout=0)


def test_a_batch_holds_one_side_and_goes_to_its_encoder():
    calls: list[tuple[str, list[str]]] = []

    def encoder(side):
        def encode(texts):
            calls.append((side, list(texts)))
            return np.full((len(texts), 2), 1.0 if side == "query" else 0.0, dtype=np.float32)

        return encode

    batcher = Batcher(encoder("document"), Limits(max_wait_ms=50), encode_query=encoder("query"))
    batcher.start()
    try:
        docs = batcher.submit(["d0", "d1"], [1, 1])
        queries = batcher.submit(["q0"], [1], "query")
        more = batcher.submit(["d2"], [1], "document")
        assert (docs.future.result(10) == 0).all() and (more.future.result(10) == 0).all()
        assert (queries.future.result(10) == 1).all()
    finally:
        batcher.close(10)
    assert all(all(t[0] == side[0] for t in texts) for side, texts in calls), calls
    assert sorted(t for _, texts in calls for t in texts) == ["d0", "d1", "d2", "q0"]


def test_the_warm_up_encodes_the_texts_given_before_ready(tmp_path):
    """``serve --warm-up FILE`` reads texts as ``valuelens embed`` does (valuelens.io) and the warm-up
    encodes them before /ready; a file that cannot be read is refused in one line before anything loads."""
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from valuelens.cli import app as cli_app
    from valuelens.io import unlabeled_texts
    from valuelens.server.app import create_app

    texts = tmp_path / "warm.txt"
    texts.write_text("first text\n\n  second text  \nfirst text\n", encoding="utf-8")
    fake = FakeEncoder()
    with TestClient(create_app(fake, served_name="fake", warm_up=unlabeled_texts(texts))) as client:
        for _ in range(100):
            if client.get("/ready").status_code == 200:
                break
            time.sleep(0.05)
        assert client.get("/ready").status_code == 200
    assert fake.batches[0] == ["first text", "second text"]
    result = CliRunner().invoke(cli_app, ["serve", "--warm-up", str(tmp_path / "missing.txt"), "--port", "0"])
    assert result.exit_code == 2 and "missing.txt" in result.output and "Traceback" not in result.output


def test_batches_are_cut_by_padded_size_and_never_mix_short_with_long_texts():
    """Real token counts (the tiny BPE tokenizer) of real texts: STS-B sentences and SciFact abstracts,
    queued in mixed order by many requests; every batch pads within the budget, no text pads to more
    than MAX_PADDING times its length, and every row goes back to its own request and place."""
    from valuelens.evaluation.tasks import load_task
    from valuelens.server.batcher import MAX_PADDING

    sts = load_task("stsb").load("dev", limit=60)
    abstracts = list(load_task("scifact").load("dev").corpus.values())[:30]
    texts = [*sts.texts1[:60], *abstracts]
    rng = np.random.default_rng(0)
    rng.shuffle(texts)
    fake = FakeEncoder()
    tokens = {t: len(fake.tokenizer(t)["input_ids"]) for t in texts}
    assert max(tokens.values()) > 8 * min(tokens.values())  # short and long side by side
    fake.gate.clear()
    budget = 2048
    batcher = Batcher(
        lambda batch: fake.encode(batch), Limits(max_batch_tokens=budget, max_wait_ms=0, slice_size=8)
    )
    batcher.start()
    try:
        blocker = batcher.submit(["warm"], [1])
        time.sleep(0.05)
        jobs = [
            batcher.submit(texts[k : k + 9], [tokens[t] for t in texts[k : k + 9]]) for k in range(0, 90, 9)
        ]
        fake.gate.set()
        for k, job in zip(range(0, 90, 9), jobs, strict=True):
            assert job.future.result(10)[:, 0].tolist() == [len(t) for t in texts[k : k + 9]]
        blocker.future.result(10)
    finally:
        batcher.close(10)
    for batch in fake.batches[1:]:
        counts = [tokens[t] for t in batch]
        assert len(batch) == 1 or len(batch) * max(counts) <= budget
        assert max(counts) <= MAX_PADDING * min(counts), counts
    assert sum(len(b) for b in fake.batches[1:]) == 90 and len(fake.batches) < 60  # batched, not one by one


def test_a_lone_request_does_not_wait_for_the_window():
    fake = FakeEncoder()
    batcher = Batcher(lambda batch: fake.encode(batch), Limits(max_wait_ms=5000))
    batcher.start()
    try:
        began = time.monotonic()
        batcher.submit(["alone"], [2]).future.result(10)
        assert time.monotonic() - began < 2.5  # the window is 5 s: it did not wait for company
    finally:
        batcher.close(10)
