"""Fixtures for the reliability suite (helpers in ``support.py``, imported as ``reliability.support``)."""

from __future__ import annotations

import pytest
import torch

from reliability.support import SURFACES, Surface, build_surface
from tiny_models import build_tiny_model
from valuelens import Encoder


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, tiny_tokenizer_session) -> str:
    """A tiny random Llama and its tokenizer, saved once per run (the sentence-transformers path)."""
    folder = tmp_path_factory.mktemp("reliability-llama")
    build_tiny_model("llama", len(tiny_tokenizer_session), head=False).save_pretrained(folder)
    tiny_tokenizer_session.save_pretrained(folder)
    return str(folder)


@pytest.fixture
def encoder(tiny_tokenizer) -> Encoder:
    model = build_tiny_model("llama", len(tiny_tokenizer), head=False)
    return Encoder(model, tiny_tokenizer, recipe="va", layers="all")


@pytest.fixture(params=SURFACES)
def surface(request, encoder, model_dir) -> Surface:
    return build_surface(request.param, encoder, model_dir)


@pytest.fixture(params=["langchain", "llama-index"])
def async_surface(request, encoder, model_dir) -> Surface:
    """The adapters with async methods (LangChain ``aembed_*``, LlamaIndex ``aget_*``)."""
    return build_surface(request.param, encoder, model_dir)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One intra-op thread (predictable on the 2-core CI machines; the threads here are the caller's)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
