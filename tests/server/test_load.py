"""Load, bad input and SIGTERM under load against real ``valuelens serve`` processes (tiny random llama).

64 concurrent clients × 20 mixed requests must each get their own rows (equal to in-process
``Encoder.encode``), with the server's RSS flat after warm-up; every malformed request gets its documented
4xx in OpenAI's error JSON and the server keeps serving; SIGTERM under load finishes or cleanly refuses
every request and exits 0. Nothing here asserts on timings."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import random
import re
import signal
import time

import numpy as np
import pytest

from server.serving import API_KEY, get, post, spec_args, start
from tiny_models import CORPUS

NAME = "tiny"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
MAX_INPUT_TOKENS = 128
CLIENTS = 64
REQUESTS = 20
#: RSS growth allowed over the load run, after warm-up (generous: allocator noise, not a leak)
RSS_GROWTH_MIB = 200

SHORT = [f"{CORPUS[i % len(CORPUS)]} (note {i})" for i in range(48)]
LONG = [" ".join(random.Random(i).sample(CORPUS, len(CORPUS))) + f" (essay {i})" for i in range(16)]
POOL = SHORT + LONG


@pytest.fixture(scope="module")
def server(tiny_dir, tmp_path_factory):
    args = [
        *spec_args(tiny_dir),
        "--served-name",
        NAME,
        "--api-key",
        API_KEY,
        "--max-input-tokens",
        str(MAX_INPUT_TOKENS),
    ]
    running = start(args, tmp_path_factory.mktemp("load"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def expected(reference) -> dict[str, np.ndarray]:
    return dict(zip(POOL, reference.encode(POOL, normalize=True), strict=True))


def _cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        match = re.search(r"^VmRSS:\s+(\d+) kB", handle.read(), re.M)
    assert match
    return int(match.group(1))


def _counter(server, name: str) -> float:
    _, text, _ = get(server.url + "/metrics")
    match = re.search(rf"^{name} (\S+)$", text.decode(), re.M)
    return float(match.group(1)) if match else 0.0


def _request_texts(client: int, number: int) -> list[str]:
    rng = random.Random(client * 1000 + number)
    return rng.sample(POOL, rng.randint(1, 8))


def _check(texts, status, body, expected) -> None:
    assert status == 200, body
    assert [d["index"] for d in body["data"]] == list(range(len(texts))), body
    rows = np.array([d["embedding"] for d in body["data"]])
    assert _cosines(rows, np.stack([expected[t] for t in texts])).min() >= 0.9999


def _embed(server, texts):
    return post(server.url + "/v1/embeddings", {"model": NAME, "input": texts}, AUTH)


# ---------------------------------------------------------------------------------------- load
def test_64_clients_get_their_own_rows_and_memory_stays_flat(server, expected):
    def client(c: int, rounds: int) -> list[tuple[int, int, list[str], int, dict]]:
        out = []
        for r in range(rounds):
            texts = _request_texts(c, r)
            status, body, _ = _embed(server, texts)
            out.append((c, r, texts, status, body))
        return out

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as executor:  # warm-up: 2 rounds of every client
        list(executor.map(lambda c: client(c + CLIENTS, 2), range(CLIENTS)))
        before = _rss_kib(server.process.pid)
        texts_before = _counter(server, "valuelens_texts_total")
        results = [
            row for rows in executor.map(lambda c: client(c, REQUESTS), range(CLIENTS)) for row in rows
        ]
    after = _rss_kib(server.process.pid)
    texts_after = _counter(server, "valuelens_texts_total")
    print(
        f"\nserver RSS before {before / 1024:.1f} MiB, after {after / 1024:.1f} MiB ({len(results)} requests)"
    )
    assert sorted((c, r) for c, r, *_ in results) == [(c, r) for c in range(CLIENTS) for r in range(REQUESTS)]
    assert not [status for *_, status, _ in results if status >= 500]
    for _, _, texts, status, body in results:
        _check(texts, status, body, expected)
    # every text embedded exactly once (no request lost or run twice); the metrics scrapes embed nothing
    assert texts_after - texts_before == sum(len(texts) for _, _, texts, _, _ in results)
    assert (after - before) / 1024 < RSS_GROWTH_MIB, (before, after)


# ---------------------------------------------------------------------------------------- bad input
def _raw(payload: object) -> bytes:
    return json.dumps(payload).encode()


BAD = [
    ("empty list", _raw({"model": NAME, "input": []}), None, 400, "invalid_input", ["empty list"]),
    ("empty string", _raw({"model": NAME, "input": ""}), None, 400, "invalid_input", ["input[0]", "empty"]),
    ("float", _raw({"model": NAME, "input": [1.5]}), None, 400, "invalid_input", ["input[0]", "float"]),
    ("null", _raw({"model": NAME, "input": [None]}), None, 400, "invalid_input", ["input[0]", "NoneType"]),
    ("object", _raw({"model": NAME, "input": [{}]}), None, 400, "invalid_input", ["input[0]", "dict"]),
    ("bool", _raw({"model": NAME, "input": [True]}), None, 400, "invalid_input", ["input[0]", "bool"]),
    ("mixed", _raw({"model": NAME, "input": ["ok", ["x"]]}), None, 400, "invalid_input", ["input[1]"]),
    (
        "nested strings",
        _raw({"model": NAME, "input": [["a", "b"]]}),
        None,
        400,
        "invalid_input",
        ["input[0]"],
    ),
    ("input a number", _raw({"model": NAME, "input": 3.0}), None, 400, "invalid_input", ["string"]),
    (
        "huge string",
        _raw({"model": NAME, "input": ["ok", "word " * 50_000]}),
        None,
        400,
        "context_length_exceeded",
        ["input[1]", str(MAX_INPUT_TOKENS), "--truncate"],
    ),
    (
        "lone surrogate",
        b'{"model": "tiny", "input": ["ok", "bad \\ud800 text"]}',
        None,
        400,
        "invalid_input",
        ["input[1]", "Unicode"],
    ),
    ("invalid JSON", b'{"model": "tiny", "input": ', None, 400, "invalid_json", ["JSON"]),
    ("invalid UTF-8", b'{"model": "tiny", "input": "\xff\xfe"}', None, 400, "invalid_json", ["JSON"]),
    ("deep nesting", b"[" * 200_000 + b"]" * 200_000, None, 400, "invalid_json", ["nested"]),
    ("not an object", _raw(["x"]), None, 400, "invalid_request", ["JSON object"]),
    (
        "text/plain",
        _raw({"model": NAME, "input": "x"}),
        {"Content-Type": "text/plain"},
        415,
        "unsupported_media_type",
        ["application/json", "text/plain"],
    ),
    (
        "form",
        _raw({"model": NAME, "input": "x"}),
        {"Content-Type": "application/x-www-form-urlencoded"},
        415,
        "unsupported_media_type",
        ["application/json"],
    ),
    ("unknown model", _raw({"model": "gpt-4", "input": "x"}), None, 404, "model_not_found", ["gpt-4", NAME]),
    ("surrogate model", b'{"model": "\\udfff", "input": "x"}', None, 404, "model_not_found", [NAME]),
    (
        "missing key",
        _raw({"model": NAME, "input": "x"}),
        {"Authorization": ""},
        401,
        "invalid_api_key",
        ["API key"],
    ),
    (
        "wrong key",
        _raw({"model": NAME, "input": "x"}),
        {"Authorization": "Bearer wrong"},
        401,
        "invalid_api_key",
        ["incorrect API key"],
    ),
    (
        "wrong scheme",
        _raw({"model": NAME, "input": "x"}),
        {"Authorization": f"Basic {API_KEY}"},
        401,
        "invalid_api_key",
        ["API key"],
    ),
]


@pytest.mark.parametrize(
    ("raw", "headers", "status", "code", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_input_is_a_clear_4xx_and_the_server_keeps_serving(
    server, expected, raw, headers, status, code, words
):
    sent = {**AUTH, **(headers or {})}
    if not sent.get("Authorization"):
        sent.pop("Authorization", None)
    got, body, _ = post(server.url + "/v1/embeddings", None, sent, raw=raw)
    assert got == status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["code"] == code and body["error"]["type"] == "invalid_request_error", body
    for word in words:
        assert word in body["error"]["message"], body
    texts = [SHORT[0], LONG[0]]
    _check(texts, *_embed(server, texts)[:2], expected)


# ---------------------------------------------------------------------------------------- SIGTERM
def test_sigterm_under_load_finishes_or_refuses_every_request_and_exits_0(tiny_dir, tmp_path, expected):
    timeout = 60
    running = start([*spec_args(tiny_dir), "--request-timeout", str(timeout)], tmp_path)
    try:
        model = str(tiny_dir)

        def one(i: int):
            texts = [POOL[(i * 7 + j) % len(POOL)] for j in range(48)]
            try:
                status, body, _ = post(running.url + "/v1/embeddings", {"model": model, "input": texts})
            except (OSError, http.client.HTTPException) as exc:  # a closed or refused connection
                return texts, None, repr(exc)
            return texts, status, body

        with concurrent.futures.ThreadPoolExecutor(40) as executor:
            futures = [executor.submit(one, i) for i in range(32)]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(f.done() for f in futures):
                time.sleep(0.01)
            running.process.send_signal(signal.SIGTERM)
            time.sleep(0.2)  # a second wave while it drains: refused (503) or connection refused
            futures += [executor.submit(one, i) for i in range(32, 40)]
            results = [f.result(timeout + 30) for f in futures]
        code = running.process.wait(timeout=timeout + 30)  # accepted requests end within request-timeout
        assert code == 0, running.stderr()
        ok = 0
        for texts, status, body in results:
            if status == 200:
                assert len(body["data"]) == len(texts)
                _check(texts, status, body, expected)
                ok += 1
            elif status is not None:
                assert status in (400, 401, 404, 413, 503), (status, body)
                assert set(body) == {"error"}, body
        assert ok >= 1
        refused = sum(status is not None and status != 200 for _, status, _ in results)
        print(f"\nSIGTERM: {ok} of {len(results)} requests 200, {refused} refused, the rest closed")
    finally:
        running.stop()
