"""A hub id fails fast when the hub cannot be reached, naming the way out; a reachable hub is left alone.

Before :mod:`valuelens.hub`, ``Encoder.from_pretrained("Qwen/Qwen3-0.6B")`` with no network printed
25 s of retry messages (51 s through sentence-transformers) and then a bare transformers ``OSError``.
The hub is simulated on 127.0.0.1: a closed port (unreachable) or a local HTTP server (reachable).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from huggingface_hub import constants

from valuelens import hub, models
from valuelens.errors import HubUnreachableError

REPO = "Qwen/Qwen3-0.6B"


@pytest.fixture
def reachable(monkeypatch, tmp_path):
    """A local HTTP server that answers 404 to everything, as the hub for this test."""

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(hub, "_probes", {})
    yield server
    server.shutdown()
    server.server_close()


def _cache_entry(cache: str, repo_id: str) -> None:
    """What huggingface_hub leaves in its cache after downloading ``repo_id``'s config.json."""
    root = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    snapshot = root / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("0" * 40)


def _names_the_ways_out(message: str) -> None:
    assert REPO in message
    for name in models.available():
        assert name in message
    assert "local folder" in message and "HF_HUB_OFFLINE=1" in message


def test_an_unreachable_hub_fails_with_the_ways_out(unreachable):
    with pytest.raises(HubUnreachableError) as info:
        models.path(REPO)
    _names_the_ways_out(str(info.value))
    assert isinstance(info.value, OSError)  # as transformers' own error: existing handlers still catch it


def test_an_unreachable_hub_with_the_model_cached_loads_from_the_cache(unreachable):
    _cache_entry(constants.HF_HUB_CACHE, REPO)
    assert models.path(REPO) == REPO


def test_offline_mode_looks_only_at_the_cache(unreachable, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "_reachable", lambda endpoint: pytest.fail("offline mode sent a request"))
    with pytest.raises(HubUnreachableError, match="HF_HUB_OFFLINE=1 forbids downloading"):
        models.path(REPO)
    _cache_entry(constants.HF_HUB_CACHE, REPO)
    assert models.path(REPO) == REPO


def test_a_reachable_hub_keeps_hub_ids_working_as_in_transformers(reachable):
    """The probe passes; what follows is transformers' own loading (here: its error for a missing repo)."""
    assert models.path(REPO) == REPO
    from valuelens.loading import load_config

    with pytest.raises(OSError) as info:
        load_config(REPO)
    assert not isinstance(info.value, HubUnreachableError)


def test_bundled_names_and_folders_never_ask_the_hub(unreachable, tmp_path, monkeypatch):
    monkeypatch.setattr(hub, "check", lambda *a, **k: pytest.fail("the hub was asked"))
    assert models.path(str(tmp_path)) == str(tmp_path)


SURFACES = textwrap.dedent(
    """
    import json, sys, time
    from valuelens import Encoder
    from langchain_valuelens import ValueLensEmbeddings
    from llama_index.embeddings.valuelens import ValueLensEmbedding

    calls = {
        "Encoder": lambda: Encoder.from_pretrained(sys.argv[1]),
        "LangChain": lambda: ValueLensEmbeddings(model=sys.argv[1]),
        "LlamaIndex": lambda: ValueLensEmbedding(model_name=sys.argv[1]),
    }
    results = {}
    for surface, call in calls.items():
        start = time.monotonic()
        try:
            call()
            results[surface] = {"error": None}
        except Exception as exc:  # what the user sees
            results[surface] = {"error": type(exc).__name__, "message": str(exc)}
        results[surface]["seconds"] = time.monotonic() - start
    print(json.dumps(results))
    """
)


@pytest.mark.slow
def test_every_surface_fails_within_seconds_with_a_blocked_network(unreachable, tmp_path):
    """In a fresh process whose hub endpoint is a closed port: the Encoder, both adapters and the CLI."""
    env = {**os.environ, "HF_ENDPOINT": constants.ENDPOINT, "HF_HUB_CACHE": constants.HF_HUB_CACHE}
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run(
        [sys.executable, "-c", SURFACES, REPO], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for surface, result in results.items():
        assert result["error"] == "HubUnreachableError", (surface, result)
        _names_the_ways_out(result["message"])
        assert result["seconds"] < 5, (surface, result)  # transformers' retries took 25 s
    source = tmp_path / "in.txt"
    source.write_text("a cat\n")
    cli = Path(sys.executable).with_name("valuelens")
    done = subprocess.run(
        [str(cli), "embed", str(source), "-o", str(tmp_path / "out.npy"), "-m", REPO],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    _names_the_ways_out(lines[0])
