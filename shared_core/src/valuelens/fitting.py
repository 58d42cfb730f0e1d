"""Fitting a :class:`~valuelens.Postprocess` on the raw vectors an encoder gives for unlabeled texts.

Usage::

    texts = unlabeled_texts("../shared/data/stsb/train.jsonl", ("sentence1", "sentence2"))
    state = fit_texts(encoder, texts, kind="abtt", k=1)   # embeds (raw: no post-processing, no lexical part)
    state.save("abtt.safetensors")                         # then postprocess="abtt.safetensors"

One layer above :mod:`valuelens.postprocess` (which knows nothing of encoders) and below the command
line (``valuelens fit``); it takes anything that gives raw vectors (:class:`RawVectors`): an
:class:`~valuelens.Encoder`, or the builder's :class:`~valuelens.states.RawEncoder` at first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from torch import Tensor

from valuelens.errors import ConfigError
from valuelens.inputs import check_texts
from valuelens.postprocess import DEFAULT_EPS, Postprocess, PostprocessKind, check_count, check_settings

__all__ = ["RawVectors", "fit_texts"]


class RawVectors(Protocol):
    """What :func:`fit_texts` needs: raw vectors (the readouts fused; no post-processing, no lexical part),
    their size, and the model name and spec the fitted state records."""

    @property
    def raw_dimension(self) -> int: ...

    @property
    def name_or_path(self) -> str: ...

    @property
    def config(self) -> Any: ...

    def encode_raw(
        self, texts: Sequence[str], *, batch_size: int = 32, show_progress: bool = False
    ) -> Tensor: ...


def fit_texts(
    encoder: RawVectors,
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
    """Embed ``texts`` raw with ``encoder`` and :meth:`Postprocess.fit` on them.

    The count is checked before any forward pass; the state records the encoder's model and
    config. Usage: ``fit_texts(encoder, train_sentences, kind="whiten", dim=128)``.
    """
    if getattr(encoder, "postprocess", None) is not None:
        msg = (
            "this encoder already applies a post-processing; fit on the raw embeddings of an "
            "encoder built without one"
        )
        raise ConfigError(msg)
    items, _ = check_texts(texts, allow_single=False)
    d = encoder.raw_dimension
    check_settings(kind, k, dim, eps, d)
    check_count(kind, k, dim, d, len(items), "texts")
    embeddings = encoder.encode_raw(items, batch_size=batch_size, show_progress=show_progress)
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
