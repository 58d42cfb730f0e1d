"""Pure pooling functions: token weights from masks and spans, reductions in fp32, layer combination.

Usage: ``w = token_weights(mask, start, end, "mean")``; ``pool_tokens(x, w)`` → ``[B, F]`` fp32.

Nothing here mutates its inputs; padded positions are removed with ``torch.where`` (never by
multiplication), so a NaN or inf in a padded row cannot leak into a sentence vector.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor


def last_index(attention_mask: Tensor) -> Tensor:
    """Index of the last real token of each row, for left or right padding: ``[B]`` long."""
    n = attention_mask.shape[1]
    return (n - 1) - attention_mask.flip(1).to(torch.long).argmax(1)


def token_weights(
    attention_mask: Tensor,
    span_start: Tensor,
    span_end: Tensor,
    pool: Literal["mean", "position"],
) -> Tensor:
    """Per-token weights ``[B, N]`` (fp32, rows sum to 1) over the pooled span of each row.

    ``span_start``/``span_end`` are token positions ``[B]`` (end exclusive) in padded coordinates.
    ``"mean"`` weighs each pooled token equally; ``"position"`` weighs the i-th pooled token by i
    (1-based), as SGPT's weighted mean pooling does.
    """
    n = attention_mask.shape[1]
    positions = torch.arange(n, device=attention_mask.device).unsqueeze(0)
    inside = (
        (positions >= span_start.unsqueeze(1)) & (positions < span_end.unsqueeze(1)) & attention_mask.bool()
    )
    if pool == "mean":
        raw = inside.to(torch.float32)
    else:
        rank = torch.cumsum(inside.to(torch.float32), dim=1)
        raw = torch.where(inside, rank, torch.zeros_like(rank))
    total = raw.sum(dim=1, keepdim=True)
    return raw / total.clamp_min(torch.finfo(torch.float32).tiny)


def pool_tokens(x: Tensor, weights: Tensor | None = None, index: Tensor | None = None) -> Tensor:
    """Pool ``x`` of shape ``[B, N, F]`` over tokens into ``[B, F]`` fp32.

    With ``index`` (``[B]``) the row's token at that position is taken; otherwise the ``weights``
    (``[B, N]``) sum is used, in fp32, with positions of weight 0 removed by ``torch.where``.
    """
    if index is not None:
        rows = torch.arange(x.shape[0], device=x.device)
        return x[rows, index.to(x.device)].to(torch.float32)
    if weights is None:
        msg = "pool_tokens needs weights or an index"
        raise ValueError(msg)
    w = weights.to(x.device)
    keep = (w > 0).unsqueeze(-1)
    xf = torch.where(keep, x.to(torch.float32), torch.zeros((), dtype=torch.float32, device=x.device))
    return torch.einsum("bn,bnf->bf", w, xf)


def pool_heads(x: Tensor, weights: Tensor) -> Tensor:
    """Pool head-major ``x`` of shape ``[B, H, N, D]`` with token weights ``[B, N]`` (or per-head
    weights ``[B, H, N]``) into the concatenation of heads ``[B, H*D]`` fp32."""
    w = weights.to(x.device)
    if w.dim() == 2:
        w = w.unsqueeze(1).expand(-1, x.shape[1], -1)
    keep = (w > 0).unsqueeze(-1)
    xf = torch.where(keep, x.to(torch.float32), torch.zeros((), dtype=torch.float32, device=x.device))
    pooled = torch.einsum("bhn,bhnd->bhd", w, xf)
    return pooled.reshape(x.shape[0], -1)


def combine_layers(per_layer: list[Tensor], how: Literal["mean", "normalized-mean"] = "mean") -> Tensor:
    """Average per-layer sentence vectors (``"normalized-mean"`` L2-normalizes each layer first, so
    that a few high-norm layers cannot dominate the set)."""
    if not per_layer:
        msg = "no layer was captured"
        raise ValueError(msg)
    stacked = torch.stack([t.to(per_layer[0].device) for t in per_layer], dim=0)
    if how == "normalized-mean":
        stacked = torch.nn.functional.normalize(stacked, dim=-1)
    return stacked.mean(dim=0)
