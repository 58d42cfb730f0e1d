"""A second ``valuelens serve`` process: token ids with --allow-token-ids, truncation, then startup
failures (port in use, bad --config: one line, non-zero) and SIGTERM with requests in flight (exit 0)."""

from __future__ import annotations

import concurrent.futures
import re
import signal
import subprocess
import time

import numpy as np
import pytest

from server.serving import get, post, server_env, spec_args, start, valuelens_command


@pytest.fixture(scope="module")
def server(tiny_dir, tmp_path_factory):
    args = [*spec_args(tiny_dir), "--allow-token-ids", "--truncate", "--max-input-tokens", "8"]
    running = start(args, tmp_path_factory.mktemp("lifecycle"))
    yield running
    running.stop()


def test_token_ids_are_decoded_and_embedded_when_allowed(server, reference, tiny_dir):
    text = "The cat sits on the mat."
    ids = reference.tokenizer(text, add_special_tokens=False)["input_ids"]
    model = str(tiny_dir)
    status, body, _ = post(server.url + "/v1/embeddings", {"model": model, "input": [ids, ids[:3]]})
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] == len(ids) + 3
    status, by_text, _ = post(server.url + "/v1/embeddings", {"model": model, "input": text})
    assert np.allclose(body["data"][0]["embedding"], by_text["data"][0]["embedding"], atol=1e-5)
    status, bad, _ = post(server.url + "/v1/embeddings", {"model": model, "input": [10**9]})
    assert status == 400 and "vocabulary" in bad["error"]["message"]


def test_long_inputs_are_truncated_with_a_header(server, tiny_dir):
    long = "Dogs run in the park after the rain. " * 5
    status, body, headers = post(
        server.url + "/v1/embeddings", {"model": str(tiny_dir), "input": [long, "cat"]}
    )
    assert status == 200, body
    assert headers["x-truncated-inputs"] == "1"
    assert body["usage"]["prompt_tokens"] <= 8 + 8


def _run_failing(args, tmp_path):
    done = subprocess.run(
        [*valuelens_command(), "serve", *args], capture_output=True, text=True, env=server_env(), timeout=120
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return done.returncode, lines


def test_port_in_use_is_one_line_and_nonzero(server, tiny_dir, tmp_path):
    code, lines = _run_failing([*spec_args(tiny_dir), "--port", str(server.port)], tmp_path)
    assert code != 0
    assert len(lines) == 1 and lines[0].startswith("error:") and str(server.port) in lines[0], lines


def test_bad_config_file_is_one_line_and_nonzero(tiny_dir, tmp_path):
    bad = tmp_path / "spec.json"
    bad.write_text("{not json")
    code, lines = _run_failing(["--model", str(tiny_dir), "--config", str(bad), "--port", "0"], tmp_path)
    assert code != 0
    assert len(lines) == 1 and lines[0].startswith("error:") and "spec.json" in lines[0], lines
    bad.write_text('{"recipe": "no-such-recipe"}')
    code, lines = _run_failing(["--model", str(tiny_dir), "--config", str(bad), "--port", "0"], tmp_path)
    assert code != 0 and len(lines) == 1 and "no-such-recipe" in lines[0], lines


def _queue_depth(server) -> int:
    _, text, _ = get(server.url + "/metrics")
    match = re.search(r"^valuelens_queue_depth (\S+)$", text.decode(), re.M)
    assert match, text
    return int(float(match.group(1)))


def test_unknown_model_is_one_line_and_nonzero(tmp_path):
    code, lines = _run_failing(["--model", str(tmp_path / "no-such-model"), "--port", "0"], tmp_path)
    assert code != 0
    assert len(lines) == 1 and lines[0].startswith("error:") and "no-such-model" in lines[0], lines


def test_sigterm_finishes_requests_in_flight_and_exits_0(server, tiny_dir):
    texts = [f"Scientists found water ice near the moon's south pole, take {i}." for i in range(256)]

    def one(_):
        return post(server.url + "/v1/embeddings", {"model": str(tiny_dir), "input": texts})

    with concurrent.futures.ThreadPoolExecutor(6) as executor:
        futures = [executor.submit(one, i) for i in range(6)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # every request accepted: queued, running or done
            done = sum(future.done() for future in futures)
            if _queue_depth(server) + done >= len(futures):
                break
            time.sleep(0.02)
        server.process.send_signal(signal.SIGTERM)
        results = [future.result(60) for future in futures]
    assert [status for status, _, _ in results] == [200] * 6
    assert all(len(body["data"]) == len(texts) for _, body, _ in results)
    assert server.process.wait(timeout=60) == 0, server.stderr()
    with pytest.raises(OSError):
        get(server.url + "/health")
