"""valuelens for sentence-transformers: the ``ValuePooling`` module and its ``ValueTransformer`` input.

Usage::

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from valuelens_sentence_transformers import ValuePooling

    model = SentenceTransformer(modules=[Transformer(path), ValuePooling(recipe="va")])
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from valuelens_sentence_transformers.pooling import ValuePooling
from valuelens_sentence_transformers.transformer import ValueTransformer

try:
    __version__ = version("valuelens-sentence-transformers")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "0.0.0"

__all__ = ["ValuePooling", "ValueTransformer", "__version__"]
