"""The pooling recipes of the two papers: which signal each reads, how it pools tokens, its space.

Usage: ``RECIPES["va"].signal`` → ``"value"``; ``get_recipe("aligned-wva").space`` → ``"residual"``.

Signals (captured per selected decoder layer *i*):

- ``value``: the value vectors attention really uses in layer *i* (all key/value heads, concatenated);
- ``query`` / ``key``: the queries / keys attention uses (after q/k norms and RoPE);
- ``head``: the per-head attention outputs *z* before the output projection (input of W_O);
- ``attn_out``: the attention output *a* after W_O (what the layer adds to the residual stream);
- ``hidden``: the residual stream after layer *i*;
- ``mlp``: the MLP's intermediate activation (input of its down projection).

Token pooling: ``mean`` over the pooled tokens, ``last`` (last real token), ``position`` (SGPT's
position-weighted mean), ``last_attention`` (weighted by the last token's attention probabilities,
averaged over the query heads of each GQA group), ``last_heads`` (the last token's per-head attention
outputs recomputed from its probabilities: how ``wva`` / ``aligned-wva`` read ``drop_prefix``). Layers
are then averaged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from valuelens.errors import ConfigError

Signal = Literal["value", "query", "key", "head", "attn_out", "hidden", "mlp"]
TokenPool = Literal["mean", "last", "position", "last_attention", "last_heads"]
Space = Literal["value", "residual", "head", "query", "key", "mlp"]
RecipeName = Literal[
    "va",
    "aligned-va",
    "hs",
    "last-token",
    "wmp",
    "wva-lt",
    "wva",
    "aligned-wva",
    "query",
    "key",
    "activation",
]

#: Signals delivered by the attention function (the others come from module hooks).
ATTENTION_SIGNALS: frozenset[str] = frozenset({"value", "query", "key"})


@dataclass(frozen=True)
class Recipe:
    """What a recipe captures and how it turns tokens and layers into one vector."""

    name: str
    signal: Signal
    pool: TokenPool
    space: Space
    auto_layers: Literal["band", "last"]
    summary: str
    source: str
    project_out: bool = False  # map the pooled values through W_O into the residual stream

    @property
    def residual(self) -> bool:
        """True when the embedding lives in the residual stream (so EmbedFilter applies)."""
        return self.space == "residual"

    @property
    def reads_last_heads(self) -> bool:
        """True when the recipe reads the last token's attention heads (``wva``: their outputs z,
        ``aligned-wva``: z through W_O): ``drop_prefix`` recomputes them from its attention (``last_heads``)."""
        return self.pool == "last" and self.signal in ("head", "attn_out")

    @property
    def reads_last_attention(self) -> bool:
        """True when the recipe depends on the last token's attention (what ``drop_prefix`` changes)."""
        return self.pool == "last_attention" or self.reads_last_heads


_VA_PAPER = "Value Aggregation paper"
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            name="va",
            signal="value",
            pool="mean",
            space="value",
            auto_layers="band",
            summary="mean value vectors over tokens and layers",
            source=f"{_VA_PAPER}, §3 (VA)",
        ),
        Recipe(
            name="aligned-va",
            signal="value",
            pool="mean",
            space="residual",
            auto_layers="band",
            summary="mean value vectors mapped through W_O (GQA groups expanded) into the residual stream",
            source="valuelens (in neither paper): makes EmbedFilter applicable to VA",
            project_out=True,
        ),
        Recipe(
            name="hs",
            signal="hidden",
            pool="mean",
            space="residual",
            auto_layers="band",
            summary="mean hidden states over tokens and layers",
            source=f"{_VA_PAPER}, baseline",
        ),
        Recipe(
            name="last-token",
            signal="hidden",
            pool="last",
            space="residual",
            auto_layers="last",
            summary="hidden state of the last real token",
            source=f"{_VA_PAPER}, baseline (LT)",
        ),
        Recipe(
            name="wmp",
            signal="hidden",
            pool="position",
            space="residual",
            auto_layers="last",
            summary="position-weighted mean of hidden states (SGPT)",
            source=f"{_VA_PAPER}, baseline (WMP)",
        ),
        Recipe(
            name="wva-lt",
            signal="value",
            pool="last_attention",
            space="value",
            auto_layers="band",
            summary="value vectors weighted by the last token's attention, averaged over each GQA group",
            source=f"{_VA_PAPER}, §3 (WVA)",
        ),
        Recipe(
            name="wva",
            signal="head",
            pool="last",
            space="head",
            auto_layers="band",
            summary="last token's per-head attention output z (before W_O)",
            source=f"{_VA_PAPER}, §4 (WVA with prompt)",
        ),
        Recipe(
            name="aligned-wva",
            signal="attn_out",
            pool="last",
            space="residual",
            auto_layers="band",
            summary="last token's attention output after W_O, in the residual stream",
            source=f"{_VA_PAPER}, §4 (AlignedWVA)",
        ),
        Recipe(
            name="query",
            signal="query",
            pool="mean",
            space="query",
            auto_layers="band",
            summary="mean query vectors (ablation)",
            source=f"{_VA_PAPER}, Table 8 ablation",
        ),
        Recipe(
            name="key",
            signal="key",
            pool="mean",
            space="key",
            auto_layers="band",
            summary="mean key vectors (ablation)",
            source=f"{_VA_PAPER}, Table 8 ablation",
        ),
        Recipe(
            name="activation",
            signal="mlp",
            pool="mean",
            space="mlp",
            auto_layers="band",
            summary="mean MLP intermediate activations (ablation)",
            source=f"{_VA_PAPER}, Table 8 ablation",
        ),
    )
}


#: Recipes that read the last token's attention (what ``EncoderConfig.drop_prefix`` changes).
LAST_ATTENTION_RECIPES: frozenset[str] = frozenset(r.name for r in RECIPES.values() if r.reads_last_attention)


def get_recipe(name: str | Recipe) -> Recipe:
    """Look a recipe up by name (case-insensitive; ``_`` and ``-`` are interchangeable)."""
    if isinstance(name, Recipe):
        return name
    if not isinstance(name, str):
        msg = f"recipe must be a string, got {type(name).__name__}"
        raise ConfigError(msg)
    key = name.strip().lower().replace("_", "-")
    try:
        return RECIPES[key]
    except KeyError:
        choices = ", ".join(repr(r) for r in RECIPES)
        msg = f"unknown recipe {name!r}: choose one of {choices}"
        raise ConfigError(msg) from None
