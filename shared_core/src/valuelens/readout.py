"""Recipe math: how each recipe turns captured signals into one vector per text.

Usage::

    readout = Readout.build(config, parts, embed_filter)      # what to capture, and how to finish
    weights, index = pooling_inputs(mask, span_start, span_end, {readout.plan.pool})
    ... capture with readout.plan ...                        # hooks call reduce_tokens / reduce_attention
    vectors = readout.finish(per_layer)                      # W_O, layer combine, EmbedFilter

Every recipe-specific step lives here, next to the pure functions of :mod:`valuelens.pooling`:
the token weights (mean over the pooled span, SGPT's position weights), the last-token gather, the
WVA-LT weights (the last token's attention probabilities, averaged over each GQA group), the W_O
projection of ``aligned-va``, the layer combination, EmbedFilter, and the averaging of several
prompt passes (MetaEOL). The capture (:mod:`valuelens.capture`) only decides *when* a signal is
seen and hands it to these functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from valuelens.architectures import ModelParts
from valuelens.config import EncoderConfig
from valuelens.embed_filter import EmbedFilter
from valuelens.errors import ConfigError
from valuelens.pooling import combine_layers, last_index, pool_heads, pool_tokens, token_weights
from valuelens.recipes import LAST_ATTENTION_RECIPES, Recipe, Signal, TokenPool, get_recipe

__all__ = [
    "CapturePlan",
    "Readout",
    "average_passes",
    "fuse",
    "last_token_attention",
    "last_token_heads",
    "pooling_inputs",
    "reduce_attention",
    "reduce_tokens",
    "through_out_proj",
]


_WEIGHTED_POOLS: tuple[Literal["mean", "position"], ...] = ("mean", "position")


@dataclass(frozen=True)
class CapturePlan:
    """What to capture: one signal, pooled one way, at some layers.

    ``final_norm`` applies the model's final norm to each token's hidden state before pooling
    (``hidden`` only).
    """

    signal: Signal
    pool: TokenPool
    layers: tuple[int, ...]
    final_norm: bool = False
    drop_prefix: bool = False
    """``last_attention`` / ``last_heads``: the last token attends only from the pooled text on (the
    keys before it are dropped and the probabilities renormalized over the rest)."""

    def __post_init__(self) -> None:
        if self.pool in ("last_attention", "last_heads") and self.signal != "value":
            msg = f"pool={self.pool!r} needs signal='value', got {self.signal!r}"
            raise ValueError(msg)
        if self.drop_prefix and self.pool not in ("last_attention", "last_heads"):
            msg = f"drop_prefix applies to pool='last_attention' or 'last_heads', got {self.pool!r}"
            raise ValueError(msg)
        if self.final_norm and self.signal != "hidden":
            msg = f"final_norm applies to signal='hidden' only, got {self.signal!r}"
            raise ValueError(msg)
        if not self.layers:
            msg = "a capture plan needs at least one layer"
            raise ValueError(msg)


# --------------------------------------------------------------------------------------------
# Token reduction (called inside the hooks: no [B, N, F] tensor outlives its layer)
# --------------------------------------------------------------------------------------------


def pooling_inputs(
    attention_mask: Tensor, span_start: Tensor, span_end: Tensor, pools: Iterable[str]
) -> tuple[dict[str, Tensor], Tensor]:
    """Token weights ``[B, N]`` for each weighted pool (``"mean"``, ``"position"``) among ``pools``,
    and each row's last real token ``[B]``."""
    wanted = set(pools)
    weights: dict[str, Tensor] = {
        pool: token_weights(attention_mask, span_start, span_end, pool)
        for pool in _WEIGHTED_POOLS
        if pool in wanted
    }
    return weights, last_index(attention_mask)


def reduce_tokens(pool: TokenPool, x: Tensor, *, weights: Tensor | None, index: Tensor | None) -> Tensor:
    """Pool token-major ``x`` ``[B, N, F]`` into ``[B, F]`` fp32: the last real token or weighted."""
    if pool == "last":
        return pool_tokens(x, index=index)
    return pool_tokens(x, weights=weights)


def last_token_attention(
    query: Tensor,
    key: Tensor,
    attention_mask: Tensor | None,
    index: Tensor,
    *,
    scaling: float | None = None,
    softcap: float | None = None,
    key_start: Tensor | None = None,
    per_head: bool = False,
) -> Tensor:
    """Attention probabilities of each row's last real token, averaged over each GQA group (WVA-LT).

    ``query`` ``[B, H, N, D]``, ``key`` ``[B, Hkv, N, D]``, ``attention_mask`` as given to the attention
    function (bool "may attend", additive float, or ``None`` for plain causal). Returns ``[B, Hkv, N]``
    fp32, or ``[B, Hkv, H/Hkv, N]`` (every query head of each group) with ``per_head``; only the one
    query row per sentence is computed (no ``N x N`` matrix). With ``key_start`` (``[B]`` positions) the
    keys before it are dropped and the probabilities renormalized over the rest (the last token itself
    always stays, so a row is never empty).
    """
    batch, n_heads, _, head_dim = query.shape
    n_kv = key.shape[1]
    group = n_heads // n_kv
    rows = torch.arange(batch, device=query.device)
    idx = index.to(query.device)
    q = query[rows, :, idx].to(torch.float32).reshape(batch, n_kv, group, head_dim)
    scale = head_dim**-0.5 if scaling is None else scaling
    scores = torch.einsum("bkgd,bknd->bkgn", q, key.to(torch.float32)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    n_keys = key.shape[2]
    positions = torch.arange(n_keys, device=query.device)
    if attention_mask is None:
        allowed = (positions.unsqueeze(0) <= idx.unsqueeze(1)).view(batch, 1, 1, n_keys)
        scores = torch.where(allowed, scores, float("-inf"))
    else:
        row = attention_mask[rows, :, idx.to(attention_mask.device)].to(query.device)  # [B, Hm, K]
        row = row[..., -n_keys:]
        row = row.view(batch, 1, 1, n_keys) if row.shape[1] == 1 else row.view(batch, n_kv, group, n_keys)
        if row.dtype == torch.bool:
            scores = torch.where(row, scores, float("-inf"))
        else:
            scores = scores + row.to(torch.float32)
    if key_start is not None:
        start = key_start.to(query.device).unsqueeze(1)
        kept = (positions.unsqueeze(0) >= start) | (positions.unsqueeze(0) == idx.unsqueeze(1))
        scores = torch.where(kept.view(batch, 1, 1, n_keys), scores, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return probs if per_head else probs.mean(dim=2)


def last_token_heads(value: Tensor, probs: Tensor) -> Tensor:
    """The last token's per-head attention outputs ``z`` ``[B, H*D]`` fp32 (the input of W_O) from its
    per-head probabilities ``[B, Hkv, H/Hkv, N]`` (:func:`last_token_attention` with ``per_head``)
    and the values ``[B, Hkv, N, D]``: with every key kept, what the attention itself computes."""
    v = torch.where(
        (probs > 0).any(dim=2).unsqueeze(-1),
        value.to(torch.float32),
        torch.zeros((), dtype=torch.float32, device=value.device),
    )
    z = torch.einsum("bkgn,bknd->bkgd", probs.to(value.device), v)
    return z.reshape(value.shape[0], -1)


def reduce_attention(
    plan: CapturePlan,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    *,
    weights: Tensor | None,
    index: Tensor | None,
    attention_kwargs: Mapping[str, Any],
    key_start: Tensor | None = None,
) -> Tensor:
    """Reduce head-major q/k/v ``[B, H, N, D]`` seen by the attention function to ``[B, H*D]`` fp32.

    ``key_start`` (``[B]``): where the pooled text starts, for plans with ``drop_prefix``."""
    if plan.pool in ("last_attention", "last_heads"):
        assert index is not None
        if plan.drop_prefix and key_start is None:
            msg = "a plan with drop_prefix needs the pooled span's start (key_start)"
            raise ValueError(msg)
        probs = last_token_attention(
            query,
            key,
            attention_mask,
            index,
            scaling=attention_kwargs.get("scaling"),
            softcap=attention_kwargs.get("softcap"),
            key_start=key_start if plan.drop_prefix else None,
            per_head=plan.pool == "last_heads",
        )
        if plan.pool == "last_heads":
            return last_token_heads(value, probs)
        return pool_heads(value, probs)
    tensor = {"value": value, "query": query, "key": key}[plan.signal]
    if plan.pool == "last":
        assert index is not None
        rows = torch.arange(tensor.shape[0], device=tensor.device)
        return tensor[rows, :, index.to(tensor.device)].to(torch.float32).reshape(tensor.shape[0], -1)
    assert weights is not None
    return pool_heads(tensor, weights)


# --------------------------------------------------------------------------------------------
# After the forward: per-layer vectors -> one embedding
# --------------------------------------------------------------------------------------------


def through_out_proj(parts: ModelParts, layer: int, values: Tensor) -> Tensor:
    """Map pooled value vectors ``[B, Hkv*D]`` (GQA heads expanded) or per-head outputs ``[B, H*D]``
    through layer ``layer``'s W_O."""
    batch = values.shape[0]
    z = values
    if values.shape[-1] != parts.head_output_dim:
        expanded = values.view(batch, parts.n_kv_heads, 1, parts.head_dim).expand(
            -1, -1, parts.group_size, -1
        )
        z = expanded.reshape(batch, parts.head_output_dim)
    out_proj = parts.out_projs[layer]
    weight = next(out_proj.parameters())
    return out_proj(z.to(device=weight.device, dtype=weight.dtype)).to(torch.float32)


def average_passes(passes: Sequence[Tensor]) -> Tensor:
    """Combine the embeddings of several prompt passes (MetaEOL): the mean of L2-normalized vectors;
    one pass is returned unchanged."""
    if len(passes) == 1:
        return passes[0]
    return torch.stack([torch.nn.functional.normalize(p, dim=-1) for p in passes]).mean(dim=0)


def fuse(vectors: Sequence[Tensor], weights: Sequence[float]) -> Tensor:
    """Score fusion of several recipes: their L2-normalized vectors scaled by ``weights`` and
    concatenated, so a cosine of fused vectors is the ``weight²``-weighted mean of the recipes'
    cosines; one vector is returned unchanged.

    The result is multiplied by ``sqrt(d / Σ weight²)`` (``d`` its dimension), one number for every
    text, so its coordinates have unit root-mean-square: cosines are unchanged, and a linear classifier
    with its usual regularisation does not see features 30× smaller than a single recipe's."""
    if len(vectors) == 1:
        return vectors[0]
    fused = torch.cat(
        [torch.nn.functional.normalize(v, dim=-1) * w for v, w in zip(vectors, weights, strict=True)], dim=-1
    )
    return fused * math.sqrt(fused.shape[-1] / sum(w * w for w in weights))


def raw_dimension(recipe: Recipe, parts: ModelParts) -> int:
    """Size of ``recipe``'s vectors on the model of ``parts``, before EmbedFilter."""
    space = recipe.space
    if space in ("value", "key"):
        return parts.value_dim
    if space in ("head", "query"):
        return parts.head_output_dim
    if space == "mlp":
        if parts.intermediate_size is None:
            msg = f"cannot tell the MLP width of {parts.model_type!r} from its config"
            raise ConfigError(msg)
        return parts.intermediate_size
    return parts.hidden_size


@dataclass(frozen=True, eq=False)
class Readout:
    """One resolved spec on one model: the capture plan, and the steps after the forward.

    Usage: ``Readout.build(config, parts)``; ``readout.finish(per_layer)`` → ``[B, dimension]`` fp32.
    """

    config: EncoderConfig  # layers resolved to a tuple
    recipe: Recipe
    plan: CapturePlan
    embed_filter: EmbedFilter | None
    dimension: int
    project_out: bool = False  # map each layer's pooled vector through W_O

    @classmethod
    def build(
        cls, config: EncoderConfig, parts: ModelParts, embed_filter: EmbedFilter | None = None
    ) -> Readout:
        """Check ``config`` (layers already resolved) against the model and plan its capture."""
        recipe = get_recipe(config.recipe)
        if not isinstance(config.layers, tuple):
            msg = f"Readout needs resolved layers (a tuple), got layers={config.layers!r}"
            raise ConfigError(msg)
        if config.final_norm and parts.final_norm is None:
            msg = f"final_norm=True but {parts.model_type!r} has no final norm module"
            raise ConfigError(msg)
        if embed_filter is not None and embed_filter.hidden_size != parts.hidden_size:
            msg = (
                f"the EmbedFilter was built for {embed_filter.hidden_size}-dim models, "
                f"this one has {parts.hidden_size}"
            )
            raise ConfigError(msg)
        project_out = recipe.project_out
        if config.drop_prefix and recipe.reads_last_heads:
            # the last token's heads recomputed from its attention without the prompt's head
            if config.contrast_layer is not None and config.contrast_layer in config.layers:
                msg = (
                    f"drop_prefix recomputes the heads that Contrastive Prompting edits at layer "
                    f"{config.contrast_layer}: read layers after contrast_layer, or drop one of the two"
                )
                raise ConfigError(msg)
            plan = CapturePlan(signal="value", pool="last_heads", layers=config.layers, drop_prefix=True)
            project_out = recipe.signal == "attn_out"  # aligned-wva: the recomputed heads through W_O
        else:
            plan = CapturePlan(
                signal=recipe.signal,
                pool=recipe.pool,
                layers=config.layers,
                final_norm=config.final_norm,
                drop_prefix=config.drop_prefix and recipe.pool == "last_attention",
            )
        dimension = embed_filter.dimension if embed_filter is not None else raw_dimension(recipe, parts)
        return cls(config, recipe, plan, embed_filter, dimension, project_out)

    def finish(self, per_layer: Sequence[Tensor], parts: ModelParts) -> Tensor:
        """Per-layer pooled vectors → one embedding per row: W_O (aligned-va), layers, EmbedFilter."""
        vectors = list(per_layer)
        if self.project_out:
            vectors = [
                through_out_proj(parts, layer, v) for layer, v in zip(self.plan.layers, vectors, strict=True)
            ]
        emb = combine_layers(vectors, self.config.combine)
        if self.embed_filter is not None:
            emb = self.embed_filter.transform(emb)
        return emb


def build_readouts(
    config: EncoderConfig,
    parts: ModelParts,
    main_filter: EmbedFilter | None,
    make_filter: Callable[[float], EmbedFilter],
) -> list[Readout]:
    """A resolved spec's readouts: the main one, then one per fusion part (:func:`fusion_readouts`)."""
    return [
        Readout.build(config, parts, main_filter),
        *fusion_readouts(config, parts, main_filter, make_filter),
    ]


def fusion_readouts(
    config: EncoderConfig,
    parts: ModelParts,
    main_filter: EmbedFilter | None,
    make_filter: Callable[[float], EmbedFilter],
) -> list[Readout]:
    """One readout per fusion part of a resolved spec (its own recipe, layers and EmbedFilter; the main
    layer combine), all captured in the main forward. A part's filter is the main one when τ agrees,
    else ``make_filter(tau)``. Usage: ``fusion_readouts(config, parts, ef, lambda t: build_embed_filter(m, t))``."""
    readouts = []
    for part in config.fusion:
        ef = None
        if part.embed_filter is not None:
            same = main_filter is not None and main_filter.tau == part.embed_filter
            ef = main_filter if same else make_filter(part.embed_filter)
        spec = EncoderConfig(
            recipe=part.recipe,
            layers=part.layers,
            embed_filter=part.embed_filter,
            embed_filter_offset=config.embed_filter_offset,
            combine=config.combine,
            drop_prefix=config.drop_prefix and part.recipe in LAST_ATTENTION_RECIPES,
        )
        readouts.append(Readout.build(spec, parts, ef))
    return readouts
