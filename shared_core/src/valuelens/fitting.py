"""Fitting a :class:`~valuelens.Postprocess` on the embeddings an encoder gives for unlabeled texts.

Usage::

    texts = unlabeled_texts("../shared/data/stsb/train.jsonl", ("sentence1", "sentence2"))
    state = fit_texts(encoder, texts, kind="abtt", k=1)   # embeds (un-normalized), then fits
    state.save("abtt.safetensors")                         # then postprocess="abtt.safetensors"

One layer above :mod:`valuelens.postprocess` (which knows nothing of encoders) and below the command
line (``valuelens fit``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

from valuelens.errors import ConfigError
from valuelens.inputs import check_texts
from valuelens.postprocess import DEFAULT_EPS, Postprocess, PostprocessKind, check_count, check_settings

if TYPE_CHECKING:
    from valuelens.encoder import Encoder

__all__ = ["fit_texts"]


def fit_texts(
    encoder: Encoder,
    texts: Sequence[str],
    kind: PostprocessKind = "abtt",
    k: int = 1,
    dim: int | None = None,
    batch_size: int = 32,
    *,
    eps: float = DEFAULT_EPS,
    fitted_on: str | None = None,
    show_progress: bool = False,
) -> Postprocess:
    """Embed ``texts`` with ``encoder`` (un-normalized) and :meth:`Postprocess.fit` on them.

    The count is checked before any forward pass; the state records the encoder's model and
    config. Usage: ``fit_texts(encoder, train_sentences, kind="whiten", dim=128)``.
    """
    if getattr(encoder, "postprocess", None) is not None:
        msg = (
            "this encoder already applies a post-processing; fit on the raw embeddings of an "
            "encoder built without one"
        )
        raise ConfigError(msg)
    if getattr(encoder, "lexical", None) is not None:  # the lexical part is joined after the post-processing
        encoder = copy.copy(encoder)
        encoder.lexical = None
    items, _ = check_texts(texts, allow_single=False)
    d = encoder.dimension
    check_settings(kind, k, dim, eps, d)
    check_count(kind, k, dim, d, len(items), "texts")
    embeddings = encoder.encode(
        items, batch_size=batch_size, convert_to_tensor=True, show_progress=show_progress
    )
    return Postprocess.fit(
        embeddings,
        kind,
        k,
        dim,
        eps=eps,
        fitted_on=fitted_on if fitted_on is not None else f"{len(items)} texts",
        model=encoder.name_or_path,
        encoder_config=encoder.config.to_dict(),
    )
