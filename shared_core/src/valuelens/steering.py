"""Edits of the forward pass: Token Prepending, Contrastive Prompting and prefix dropping, as one object.

Usage::

    plan = EditPlan.from_config(config)    # once per encoder: which edits the spec makes
    edits = plan.for_batch(index=last, span_start=start, marker=marker, aux_heads=z_aux)   # once per batch
    with capturing(parts, plans, attention_mask=mask, index=last, edits=edits): model(...)

    edit = Prepend(layers=frozenset({1, 2, 3}), marker=marker, source=last)   # [B] positions
    hidden = edit.apply(hidden)            # at the input of layers 1-3: placeholder := last token
    edit = Contrast(layer=4, aux=z_aux, index=last, scale=0.5)                 # z_aux [B, H*D]
    z = edit.apply(z)                      # the input of layer 4's W_O: last token := 0.5 (z - z_aux)

A :class:`ForwardEdits` is what one batch's capture receives, as one argument; the capture
(:mod:`valuelens.capture`) applies its parts from its hooks while a capture that carries them
is active: :class:`Prepend` from a pre-hook on each decoder layer, :class:`Contrast` from the pre-hook
on the output projection (before that layer's ``head`` signal is recorded, so ``wva`` reads the
edited heads); ``key_start`` tells plans with ``drop_prefix`` where each row's text starts. The
edits leave every other position and row untouched and never write in place. A new edit is a field of
:class:`EditPlan` (from the spec) and of :class:`ForwardEdits` (its tensors), plus the hook that applies it.

- **Token Prepending** (Fu et al., ACL 2025, code ``fuyuchenIfyw/token_prepending``): a placeholder
  token sits before the text; at the input of each prepend layer its state is replaced by the last
  token's state from the layer before, so the text's early tokens can attend to a summary of the
  whole sentence despite causal attention.
- **Contrastive Prompting** (Cheng et al., ACL 2025, code ``zifengcheng/CP``, its ``scaled`` plan):
  an auxiliary prompt ("The irrelevant information of this sentence ...") is run up to layer ℓ; there
  the last token's per-head attention outputs ``z`` (input of W_O) of the normal prompt become
  ``scale * (z - z_aux)``, steering the embedding away from what the auxiliary prompt encodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from valuelens.config import EncoderConfig

__all__ = ["NO_EDITS", "Contrast", "EditPlan", "ForwardEdits", "Prepend"]


def _rows(x: Tensor) -> Tensor:
    return torch.arange(x.shape[0], device=x.device)


@dataclass(frozen=True, eq=False)
class Prepend:
    """Token Prepending: at the input of ``layers``, position ``marker`` takes position ``source``'s state."""

    layers: frozenset[int]
    marker: Tensor  # [B] the placeholder's position per row
    source: Tensor  # [B] the last real token's position per row

    def apply(self, hidden: Tensor) -> Tensor:
        """``hidden`` ``[B, N, d]`` with each row's placeholder state replaced (a new tensor)."""
        rows = _rows(hidden)
        out = hidden.clone()
        out[rows, self.marker.to(hidden.device)] = hidden[rows, self.source.to(hidden.device)]
        return out


@dataclass(frozen=True, eq=False)
class Contrast:
    """Contrastive Prompting at layer ``layer``: the last token's heads become ``scale * (z - aux)``."""

    layer: int
    aux: Tensor  # [B, H*D] the auxiliary prompt's last-token head outputs at ``layer``
    index: Tensor  # [B] the last real token's position per row
    scale: float

    def apply(self, z: Tensor) -> Tensor:
        """``z`` ``[B, N, H*D]`` (or flattened ``[B*N, H*D]``) with each row's last token edited (a new tensor)."""
        batch = self.aux.shape[0]
        shaped = z.view(batch, -1, z.shape[-1]) if z.dim() == 2 else z
        rows = _rows(shaped)
        index = self.index.to(z.device)
        out = shaped.clone()
        last = shaped[rows, index]
        out[rows, index] = (self.scale * (last.to(torch.float32) - self.aux.to(z.device))).to(z.dtype)
        return out.view_as(z)


@dataclass(frozen=True, eq=False)
class ForwardEdits:
    """The edits of one batch's forward, as the capture takes them (all optional).

    ``key_start`` ``[B]``: where each row's pooled text starts, read by plans with ``drop_prefix``."""

    prepend: Prepend | None = None
    contrast: Contrast | None = None
    key_start: Tensor | None = None


NO_EDITS = ForwardEdits()


@dataclass(frozen=True)
class EditPlan:
    """Which edits a spec makes to the forward, decided once per encoder (hashable: encoders with equal
    plans, prompts and inputs share forward passes). Usage: ``EditPlan.from_config(encoder.config)``."""

    prepend_layers: frozenset[int] | None = None
    contrast_layer: int | None = None
    contrast_scale: float = 0.5
    contrast_prompt: str | None = None

    @classmethod
    def from_config(cls, config: EncoderConfig) -> EditPlan:
        """The plan of a resolved spec (its ``prepend_layers`` already a tuple of layer indices)."""
        prepend = config.prepend_layers
        contrast = config.contrast_layer
        return cls(
            prepend_layers=frozenset(prepend) if isinstance(prepend, tuple) else None,
            contrast_layer=contrast,
            contrast_scale=config.contrast_scale if contrast is not None else 0.5,
            contrast_prompt=config.contrast_prompt if contrast is not None else None,
        )

    def for_batch(
        self,
        *,
        index: Tensor,
        span_start: Tensor,
        marker: Tensor | None = None,
        aux_heads: Tensor | None = None,
    ) -> ForwardEdits:
        """One batch's edits: ``index`` each row's last real token, ``span_start`` where its pooled span
        starts, ``marker`` the placeholder's position (Token Prepending), ``aux_heads`` the auxiliary
        prompt's last-token heads (Contrastive Prompting). Raises ``ValueError`` naming a missing input."""
        prepend = contrast = None
        if self.prepend_layers is not None:
            if marker is None:
                msg = "this spec uses Token Prepending (prepend_layers): tokenize with Encoder.tokenize"
                raise ValueError(msg)
            prepend = Prepend(self.prepend_layers, marker.to(index.device), index)
        if self.contrast_layer is not None:
            if aux_heads is None:
                msg = "this spec uses Contrastive Prompting (contrast_layer): the auxiliary prompt's heads are missing"
                raise ValueError(msg)
            contrast = Contrast(self.contrast_layer, aux_heads, index, self.contrast_scale)
        key_start = (marker if marker is not None else span_start).to(
            index.device
        )  # the text starts at the placeholder
        return ForwardEdits(prepend=prepend, contrast=contrast, key_start=key_start)

    def prepend_only(self, *, index: Tensor, marker: Tensor | None) -> ForwardEdits:
        """The edits of Contrastive Prompting's auxiliary pass: Token Prepending only (when the spec has it)."""
        if self.prepend_layers is None or marker is None:
            return NO_EDITS
        return ForwardEdits(prepend=Prepend(self.prepend_layers, marker.to(index.device), index))
