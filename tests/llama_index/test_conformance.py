"""The BaseEmbedding conformance suite on a tiny offline model, for two recipes.

The real-model run of the same suite lives in test_end_to_end.py (marked slow).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from tests.llama_index.conformance import BaseEmbeddingConformance

from llama_index.embeddings.valuelens import ValueLensEmbedding


class _TinyModel(BaseEmbeddingConformance):
    #: encoder settings of the embedding under test
    settings: ClassVar[dict[str, Any]] = {}

    @pytest.fixture
    def embedding_factory(self, tiny_model_dir: Path):
        shared = ValueLensEmbedding(str(tiny_model_dir), **self.settings)  # loaded by path once per test

        def make(**fields: Any) -> ValueLensEmbedding:
            return ValueLensEmbedding(encoder=shared.encoder, model_name=shared.model_name, **fields)

        return make


class TestTinyVA(_TinyModel):
    settings: ClassVar[dict[str, Any]] = {"recipe": "va"}


class TestTinyAlignedWVAFutureEOL(_TinyModel):
    settings: ClassVar[dict[str, Any]] = {"recipe": "aligned-wva", "prompt": "futureeol"}
