"""Fixtures of the server tests: a tiny random llama saved to a folder and the in-process reference
encoder with the servers' spec (the process helpers are in ``server.serving``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.serving import SPEC
from tiny_models import save_tiny_model

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def reference(tiny_dir):
    """The in-process encoder with the servers' spec (``reference.encode(texts, normalize=True)``)."""
    from valuelens import Encoder

    return Encoder.from_pretrained(str(tiny_dir), device="cpu", recipe=SPEC["recipe"], layers=SPEC["layers"])
