"""``valuelens serve``: an OpenAI-compatible embeddings server (FastAPI + uvicorn, the ``serve`` extra).

Usage::

    valuelens serve --model smollm2-135m --preset best --port 8000

Modules: :mod:`~valuelens.server.limits` (the limits, a frozen dataclass), :mod:`~valuelens.server.batcher`
(cross-request batching on one worker thread), :mod:`~valuelens.server.app` (the routes),
:mod:`~valuelens.server.errors` (OpenAI error JSON), :mod:`~valuelens.server.metrics` (Prometheus) and
:mod:`~valuelens.server.command` (the typer command). Only ``command`` is imported by ``valuelens.cli``;
it imports FastAPI and uvicorn when the command runs, so the CLI works without the extra.
"""
