"""Fixtures for the sentence-transformers adapter: tiny decoders saved to disk once per run."""

from __future__ import annotations

import pytest

from tiny_models import build_tiny_model, build_tokenizer


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """``{arch: path}`` of tiny random decoders (with tokenizer) saved as Hugging Face folders."""
    tokenizer = build_tokenizer()
    paths = {}
    for arch in ("llama", "qwen3", "gpt2"):
        path = tmp_path_factory.mktemp(f"st-{arch}")
        build_tiny_model(arch, len(tokenizer)).save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths[arch] = str(path)
    return paths
