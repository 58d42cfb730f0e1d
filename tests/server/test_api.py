"""One ``valuelens serve`` process (tiny random llama) driven by the official ``openai`` client, LangChain,
LlamaIndex and raw HTTP: vectors equal to in-process ``Encoder.encode``, usage, batching, every error."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import re

import numpy as np
import pytest

from server.serving import API_KEY, SPEC, get, post, spec_args, start
from tiny_models import CORPUS

MAX_INPUTS = 64
MAX_INPUT_TOKENS = 48
MAX_BODY = 64 * 1024
TEXTS = [*CORPUS, "A cat and a dog play in the rain.", "Inflation fears move the markets."]


@pytest.fixture(scope="module")
def server(tiny_dir, tmp_path_factory):
    args = [
        *spec_args(tiny_dir),
        "--served-name",
        "tiny",
        "--api-key",
        API_KEY,
        "--max-inputs",
        str(MAX_INPUTS),
        "--max-input-tokens",
        str(MAX_INPUT_TOKENS),
        "--max-body-bytes",
        str(MAX_BODY),
        "--max-wait-ms",
        "20",
    ]
    running = start(args, tmp_path_factory.mktemp("server"))
    yield running
    running.stop()


AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _expected(reference, texts):
    return reference.encode(list(texts), normalize=True)


def _tokens(reference, texts) -> int:
    return sum(len(reference.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)


def _assert_error(status, body, expected_status, *words):
    assert status == expected_status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    for word in words:
        assert word in body["error"]["message"], body


# ---------------------------------------------------------------------------------------- clients
def test_openai_client_float_and_base64_match_in_process_vectors(server, reference):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY)
    expected = _expected(reference, TEXTS)
    for fmt in ("float", "base64"):
        response = client.embeddings.create(model="tiny", input=TEXTS, encoding_format=fmt)
        rows = [d.embedding for d in response.data]
        if fmt == "base64":  # asked for explicitly, the client hands the strings over as they came
            rows = [np.frombuffer(base64.b64decode(row), dtype="<f4") for row in rows]
        got = np.array(rows, dtype=np.float32)
        assert got.shape == expected.shape
        assert _cosines(got, expected).min() >= 0.99999
        assert response.usage.prompt_tokens == response.usage.total_tokens == _tokens(reference, TEXTS)
    single = client.embeddings.create(model="tiny", input=TEXTS[0])
    assert len(single.data) == 1
    assert _cosines(single.data[0].embedding, expected[0]) >= 0.99999
    assert single.usage.prompt_tokens == _tokens(reference, TEXTS[:1])
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_langchain_openai_embeddings_match(server, reference):
    langchain_openai = pytest.importorskip("langchain_openai")
    embeddings = langchain_openai.OpenAIEmbeddings(
        model="tiny", base_url=server.url + "/v1", api_key=API_KEY, check_embedding_ctx_length=False
    )
    expected = _expected(reference, TEXTS)
    assert _cosines(embeddings.embed_documents(TEXTS), expected).min() >= 0.99999
    assert _cosines(embeddings.embed_query(TEXTS[2]), expected[2]) >= 0.99999


def test_llama_index_openai_like_embedding_matches(server, reference):
    openai_like = pytest.importorskip("llama_index.embeddings.openai_like")
    embedding = openai_like.OpenAILikeEmbedding(
        model_name="tiny", api_base=server.url + "/v1", api_key=API_KEY
    )
    expected = _expected(reference, TEXTS)
    assert _cosines(embedding.get_text_embedding_batch(TEXTS), expected).min() >= 0.99999
    assert _cosines(embedding.get_query_embedding(TEXTS[3]), expected[3]) >= 0.99999


def test_raw_base64_is_little_endian_float32(server, reference):
    status, body, _ = post(
        server.url + "/v1/embeddings",
        {"model": "tiny", "input": TEXTS[:2], "encoding_format": "base64"},
        AUTH,
    )
    assert status == 200, body
    rows = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in body["data"]]
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert _cosines(np.stack(rows), _expected(reference, TEXTS[:2])).min() >= 0.99999
    assert body["object"] == "list" and body["model"] == "tiny"


# ---------------------------------------------------------------------------------------- batching
def test_concurrent_requests_get_their_own_rows_and_are_batched_together(server, reference):
    pool = [f"{TEXTS[i % len(TEXTS)]} (variant {i})" for i in range(60)]
    requests = [pool[(3 * i) % 40 : (3 * i) % 40 + 1 + (i * 7) % 20] for i in range(16)]
    expected = {t: v for t, v in zip(pool, _expected(reference, pool), strict=True)}

    def one(texts):
        status, body, _ = post(server.url + "/v1/embeddings", {"model": "tiny", "input": texts}, AUTH)
        assert status == 200, body
        return texts, np.array([d["embedding"] for d in body["data"]])

    with concurrent.futures.ThreadPoolExecutor(16) as executor:
        for texts, rows in executor.map(one, requests):
            assert rows.shape[0] == len(texts)
            assert _cosines(rows, np.stack([expected[t] for t in texts])).min() >= 0.99999
    _, metrics, _ = get(server.url + "/metrics")
    text = metrics.decode()
    # at least one batch held texts of several requests
    counts = dict(re.findall(r'valuelens_batch_requests_bucket\{le="([^"]+)"\} (\S+)', text))
    assert float(counts["+Inf"]) > float(counts["1.0"]), text
    assert 'valuelens_requests_total{route="/v1/embeddings",status="200"}' in text
    for name in ("valuelens_queue_depth", "valuelens_request_seconds_bucket", "valuelens_batch_texts_bucket"):
        assert name in text


# ---------------------------------------------------------------------------------------- errors
def _post(server, body, headers=AUTH, **kw):
    return post(server.url + "/v1/embeddings", body, headers, **kw)


def test_token_ids_are_refused_with_the_langchain_hint(server):
    for tokens in ([1, 2, 3], [[1, 2], [3, 4]]):
        _assert_error(
            *_post(server, {"model": "tiny", "input": tokens})[:2], 400, "check_embedding_ctx_length=False"
        )


def test_wrong_model_is_404_model_not_found(server):
    status, body, _ = _post(server, {"model": "gpt-4", "input": "x"})
    _assert_error(status, body, 404, "gpt-4", "tiny")
    assert body["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": "tiny", "input": "x", "encoding_format": "int8"}, 400, ["encoding_format", "int8"]),
        ({"model": "tiny", "input": "x", "dimensions": 7}, 400, ["dimensions", "32"]),
        ({"model": "tiny", "input": ["ok", ""]}, 400, ["input[1]", "empty"]),
        ({"model": "tiny", "input": []}, 400, ["empty"]),
        ({"model": "tiny", "input": ["ok", 5, "x"]}, 400, ["input[1]"]),
        ({"model": "tiny", "input": ["x"] * (MAX_INPUTS + 1)}, 413, [str(MAX_INPUTS), "max-inputs"]),
        ({"model": "tiny", "input": ["ok", "word " * 200]}, 400, ["input[1]", str(MAX_INPUT_TOKENS)]),
        ({"model": "tiny"}, 400, ["input"]),
        ({"input": "x"}, 400, ["model"]),
    ],
)
def test_bad_requests_name_what_is_wrong(server, body, status, words):
    _assert_error(*_post(server, body)[:2], status, *words)


def test_matching_dimensions_and_user_are_accepted(server):
    status, body, _ = _post(server, {"model": "tiny", "input": "x", "dimensions": 32, "user": "someone"})
    assert status == 200, body
    assert len(body["data"][0]["embedding"]) == 32


def test_body_too_large_and_bad_json(server):
    _assert_error(
        *_post(server, None, raw=b'{"model": "tiny", "input": "' + b"a" * MAX_BODY + b'"}')[:2],
        413,
        "max-body-bytes",
    )
    _assert_error(*_post(server, None, raw=b"{not json")[:2], 400, "JSON")


def test_missing_or_wrong_api_key_is_401(server):
    _assert_error(*_post(server, {"model": "tiny", "input": "x"}, headers={})[:2], 401, "API key")
    _assert_error(
        *_post(server, {"model": "tiny", "input": "x"}, headers={"Authorization": "Bearer nope"})[:2],
        401,
        "API key",
    )
    status, body, _ = get(server.url + "/v1/models")
    assert status == 401 and "error" in json.loads(body)


def test_health_ready_models_and_unknown_routes(server):
    assert get(server.url + "/health")[0] == 200
    assert get(server.url + "/ready")[0] == 200
    status, body, _ = get(server.url + "/v1/models", AUTH)
    assert status == 200
    assert json.loads(body) == {
        "object": "list",
        "data": [
            {
                "id": "tiny",
                "object": "model",
                "created": json.loads(body)["data"][0]["created"],
                "owned_by": "valuelens",
            }
        ],
    }
    status, body, _ = get(server.url + "/nowhere")
    assert status == 404 and set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    status, body, _ = get(server.url + "/v1/embeddings", AUTH)
    assert status == 405 and "error" in json.loads(body)


def test_a_tuned_preset_folder_is_served(tiny_checkpoint, tuned_folder, tmp_path):
    """``valuelens serve --preset DIR``: the folder's spec (inputs without ``input_type`` are documents)."""
    from valuelens import Encoder

    server = start(
        ["--model", tiny_checkpoint, "--preset", str(tuned_folder), "--served-name", "m"], tmp_path
    )
    try:
        status, body, _ = post(server.url + "/v1/embeddings", {"input": CORPUS[:3], "model": "m"})
    finally:
        server.stop()
    assert status == 200, body
    served = np.array([row["embedding"] for row in body["data"]])
    reference = Encoder.from_pretrained(tiny_checkpoint, preset=str(tuned_folder))
    np.testing.assert_allclose(served, reference.encode(CORPUS[:3], normalize=True), atol=1e-5)


def test_input_type_query_embeds_under_the_specs_query_side(tiny_dir, tmp_path):
    """``input_type="query"`` (``extra_body`` of the OpenAI client) takes the spec's query side: here its
    own prompt and lexical weight; documents (no input_type) keep theirs, in one space."""
    from valuelens import Encoder

    fields = {
        **SPEC,
        "prompt": "prompteol",
        "query_template": 'Find the passage for this query: "{text}" in one word:"',
        "lexical": 0.1,
        "lexical_query": 0.9,
    }
    (tmp_path / "spec.json").write_text(json.dumps(fields), encoding="utf-8")
    reference = Encoder.from_pretrained(str(tiny_dir), **fields)
    server = start(
        ["--model", str(tiny_dir), "--config", str(tmp_path / "spec.json"), "--served-name", "m"], tmp_path
    )
    try:
        openai = pytest.importorskip("openai")
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
        queries = client.embeddings.create(model="m", input=TEXTS[:3], extra_body={"input_type": "query"})
        docs = client.embeddings.create(model="m", input=TEXTS[:3])
        passages = client.embeddings.create(model="m", input=TEXTS[:3], extra_body={"input_type": "passage"})
        status, body, _ = post(
            server.url + "/v1/embeddings", {"input": "a", "model": "m", "input_type": "qry"}
        )
    finally:
        server.stop()
    got_q = np.array([d.embedding for d in queries.data])
    got_d = np.array([d.embedding for d in docs.data])
    np.testing.assert_allclose(got_q, reference.encode_query(TEXTS[:3], normalize=True), atol=1e-5)
    np.testing.assert_allclose(got_d, reference.encode(TEXTS[:3], normalize=True), atol=1e-5)
    np.testing.assert_allclose(np.array([d.embedding for d in passages.data]), got_d, atol=1e-6)
    assert not np.allclose(got_q, got_d, atol=1e-3)
    _assert_error(status, body, 400, "input_type must be one of", "'query'")
