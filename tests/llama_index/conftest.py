"""Fixtures for the LlamaIndex adapter: a tiny offline model saved to a folder (usable by path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_models import build_tiny_model, build_tokenizer


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama and its tokenizer, saved once per run: ``ValueLensEmbedding(str(folder))``."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = build_tokenizer()
    build_tiny_model("llama", len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Run these tests' forwards on one intra-op thread, then restore the setting.

    On the 2-core CI/dev machines, a second intra-op thread made the tiny model 20-50x and SmolLM2
    3x slower whenever anything else was running (oversubscription); one thread is predictable.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
