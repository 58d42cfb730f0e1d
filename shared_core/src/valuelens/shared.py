"""Several encoders over one model, sharing forward passes.

Usage::

    va, hs = encode_many([Encoder(m, t, recipe="va"), Encoder(m, t, recipe="hs")], texts)  # one pass a batch
    shared = SharedEncoding([Encoder(m, t, recipe="va"), Encoder(m, t, recipe="hs")])
    evaluate(shared.view(0), "stsb"); evaluate(shared.view(1), "stsb")   # one forward pass per batch

Encoders over the same model, tokenizer, prompt and ``max_length`` tokenize once and run one forward
per batch for all their recipes (:meth:`valuelens.Encoder.run` with several readouts); e.g. VA, HS
and WVA(LT) of an evaluation cost one pass. A :class:`SharedEncoding` view behaves like an encoder
(``encode(texts, *, batch_size, show_progress)``): the first view asked for a text computes it for
every encoder at once and later views read the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from valuelens.encoder import Encoder, warn_truncated
from valuelens.inputs import check_batch_size, check_texts, check_token_budget, token_budget

__all__ = ["SharedEncoding", "encode_many"]


def _group_key(encoder: Encoder) -> tuple:
    """Encoders with equal keys run the same forward passes (same inputs, same edits of the forward)."""
    prompt, config = encoder.prompt, encoder.config
    return (
        id(encoder.parts.backbone),
        id(encoder.tokenizer),
        prompt.templates if prompt else None,
        encoder.max_length,
        config.prepend_layers,
        (config.contrast_layer, config.contrast_scale, config.contrast_prompt)
        if config.contrast_layer is not None
        else None,
    )


def encode_many(
    encoders: Sequence[Encoder],
    texts: Sequence[str],
    *,
    batch_size: int = 32,
    normalize: bool = False,
    show_progress: bool = False,
    convert_to_tensor: bool = False,
    max_tokens_per_batch: int | Literal["auto"] | None = "auto",
) -> list[np.ndarray] | list[Tensor]:
    """Embed ``texts`` with several encoders, sharing forward passes where they can.

    Returns one ``[n, dimension]`` array (or tensor) per encoder, in order; each equals what the
    encoder's own :meth:`~valuelens.Encoder.encode` gives.
    """
    items, _ = check_texts(texts)
    check_batch_size(batch_size)
    check_token_budget(max_tokens_per_batch)
    outputs: list[Tensor | None] = [None] * len(encoders)
    groups: dict[tuple, list[int]] = {}
    for i, encoder in enumerate(encoders):
        groups.setdefault(_group_key(encoder), []).append(i)
    total_passes = sum(encoders[members[0]].passes for members in groups.values())
    n_truncated = 0
    with (
        tqdm(
            total=len(items) * total_passes,
            desc="valuelens",
            unit="text",
            disable=not show_progress or not items,
        ) as progress,
        torch.inference_mode(),
    ):
        for members in groups.values():
            leader = encoders[members[0]]
            readouts = [readout for i in members for readout in encoders[i].readouts]
            results, truncated = leader.run(
                items,
                readouts,
                batch_size=batch_size,
                max_tokens_per_batch=token_budget(max_tokens_per_batch, leader.device.type),
                progress=progress,
            )
            n_truncated = max(n_truncated, truncated)
            start = 0
            for i in members:
                count = len(encoders[i].readouts)
                outputs[i] = encoders[i].combine(results[start : start + count])
                start += count
    if encoders:
        warn_truncated(n_truncated, len(items), encoders[0].max_length, stacklevel=2)
    tensors = [out for out in outputs if out is not None]
    if normalize:
        tensors = [torch.nn.functional.normalize(out, dim=-1) for out in tensors]
    return tensors if convert_to_tensor else [out.cpu().numpy() for out in tensors]


class SharedEncoding:
    """A text → vectors cache filled by :func:`encode_many` for several encoders at once."""

    def __init__(self, encoders: Sequence[Encoder]) -> None:
        self.encoders = list(encoders)
        self._cache: dict[str, list[np.ndarray]] = {}

    def compute(self, texts: Sequence[str], *, batch_size: int = 32, show_progress: bool = False) -> None:
        texts, _ = check_texts(texts, allow_single=False)
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if not missing:
            return
        results = encode_many(self.encoders, missing, batch_size=batch_size, show_progress=show_progress)
        arrays = [np.asarray(result) for result in results]
        for row, text in enumerate(missing):
            self._cache[text] = [array[row] for array in arrays]

    def view(self, index: int) -> _View:
        return _View(self, index)

    def clear(self) -> None:
        self._cache.clear()


class _View:
    def __init__(self, shared: SharedEncoding, index: int) -> None:
        self.shared = shared
        self.index = index
        self.encoder = shared.encoders[index]

    def encode(self, texts: list[str], *, batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        self.shared.compute(texts, batch_size=batch_size, show_progress=show_progress)
        if not texts:
            return np.zeros((0, self.encoder.dimension), dtype=np.float32)
        return np.stack([self.shared._cache[t][self.index] for t in texts])
