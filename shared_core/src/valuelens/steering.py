"""Edits of the forward pass: Token Prepending and Contrastive Prompting, as pure tensor functions.

Usage::

    edit = Prepend(layers=frozenset({1, 2, 3}), marker=marker, source=last)   # [B] positions
    hidden = edit.apply(hidden)            # at the input of layers 1-3: placeholder := last token
    edit = Contrast(layer=4, aux=z_aux, index=last, scale=0.5)                 # z_aux [B, H*D]
    z = edit.apply(z)                      # the input of layer 4's W_O: last token := 0.5 (z - z_aux)

The capture (:mod:`valuelens.capture`) applies them from its hooks while a capture that carries them
is active: :class:`Prepend` from a pre-hook on each decoder layer, :class:`Contrast` from the pre-hook
on the output projection (before that layer's ``head`` signal is recorded, so ``wva`` reads the
edited heads). Both leave every other position and row untouched and never write in place.

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

import torch
from torch import Tensor

__all__ = ["Contrast", "Prepend"]


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
