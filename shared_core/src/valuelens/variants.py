"""Compact names for recipe settings, used by the CLI to compare several recipes in one run.

Usage: ``parse_variant("aligned-wva@half:futureeol+ef2")`` →
``Variant(label=..., recipe="aligned-wva", layers="half", prompt="futureeol", embed_filter=2.0)``.

Syntax: ``RECIPE[@LAYERS][:PROMPT][+efTAU]``; ``@LAYERS`` is any layer spec (``all``, ``half``,
``20-27``, ``3,5``), ``:PROMPT`` a prompt name, ``+efTAU`` EmbedFilter with τ = TAU. The EmbedFilter
paper's ablation baselines are ``+truncTAU`` (keep the first d/τ coordinates, Matryoshka-style) and
``+randTAU`` (keep d/τ random coordinates). The papers' prompt-based methods have short names:

============  ==========================================================
``prompteol``  ``last-token:prompteol`` (PromptEOL)
``futureeol``  ``last-token:futureeol``
``echo``       ``hs@last:echo`` (Echo embeddings: mean over the second copy)
``metaeol``    ``last-token:metaeol`` (MetaEOL: eight prompts, eight passes)
``hs-final``   ``hs@last`` with ``final_norm=True``: the mean of ``last_hidden_state``, what plain
               mean pooling over a transformers model gives
============  ==========================================================

Whole specs: ``best`` (or ``sts``, ``generic``) is that preset for the model evaluated
(:mod:`valuelens.presets`), a preset folder written by ``valuelens tune`` that folder's spec, and a path ending in ``.json`` an ``EncoderConfig`` saved as JSON (every
field: Token Prepending, Contrastive Prompting, fusion, post-processing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from valuelens.config import EncoderConfig
from valuelens.errors import ConfigError
from valuelens.presets import PRESET_NAMES
from valuelens.presets.folder import is_preset_folder

SHORTHANDS: dict[str, str] = {
    "prompteol": "last-token:prompteol",
    "futureeol": "last-token:futureeol",
    "echo": "hs@last:echo",
    "metaeol": "last-token:metaeol",
    "hs-final": "hs@last",
}
_FINAL_NORM_SHORTHANDS = frozenset({"hs-final"})

_PATTERN = re.compile(
    r"^(?P<recipe>[a-z_-]+)(?:@(?P<layers>[^:+]+))?(?::(?P<prompt>[a-z]+))?(?:\+(?P<reduce>ef|trunc|rand)(?P<tau>[0-9.]+))?$"
)


@dataclass(frozen=True)
class Variant:
    """One recipe setting: what to pass to :class:`valuelens.Encoder`, and a label for tables."""

    label: str
    recipe: str
    layers: Any = "auto"
    prompt: str | None = None
    embed_filter: float | None = None
    reduction: str = "ef"  # ef (EmbedFilter), trunc or rand (its ablation baselines)
    final_norm: bool = False
    preset: str | None = None  # a whole spec: the model's preset of this name
    config: EncoderConfig | None = None  # a whole spec read from a JSON file

    def encoder_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "recipe": self.recipe,
            "layers": self.layers,
            "prompt": self.prompt,
            "embed_filter": self.embed_filter,
        }
        if self.final_norm:
            kwargs["final_norm"] = True
        return kwargs


def parse_variant(spec: str) -> Variant:
    """Parse ``RECIPE[@LAYERS][:PROMPT][+efTAU]`` or a preset name (see the module docstring)."""
    text = spec.strip()
    key = text.lower()
    if key in PRESET_NAMES:
        return Variant(label=text, recipe="", preset=key)
    if is_preset_folder(text):  # a folder written by `valuelens tune`
        from pathlib import Path

        return Variant(label=Path(text).name, recipe="", preset=str(Path(text).resolve()))
    if key.endswith(".json"):
        import json
        from pathlib import Path

        try:
            data = json.loads(Path(text).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            msg = f"cannot read the spec file {text!r}: {exc}"
            raise ConfigError(msg) from None
        config = EncoderConfig.from_dict(data)
        return Variant(label=Path(text).stem, recipe=config.recipe, config=config)
    base, _, suffix = key.partition("+")
    expanded = SHORTHANDS.get(base, base) + (f"+{suffix}" if suffix else "")
    match = _PATTERN.match(expanded)
    if match is None:
        msg = (
            f"cannot parse recipe variant {spec!r}: use RECIPE[@LAYERS][:PROMPT][+efTAU], e.g. 'va@half', "
            f"'aligned-wva:futureeol+ef2', or one of {', '.join(repr(p) for p in SHORTHANDS)}"
        )
        raise ConfigError(msg)
    layers: Any = match["layers"] or "auto"
    tau = float(match["tau"]) if match["tau"] else None
    variant = Variant(
        label=text,
        recipe=match["recipe"],
        layers=layers,
        prompt=match["prompt"],
        embed_filter=tau,
        reduction=match["reduce"] or "ef",
        final_norm=base in _FINAL_NORM_SHORTHANDS,
    )
    EncoderConfig(**variant.encoder_kwargs())  # validate now, before any model is loaded
    return variant


def parse_variants(specs: str | list[str]) -> list[Variant]:
    """Parse a comma-separated list (commas inside ``@layers`` ranges are kept: use ``;`` there)."""
    items = specs if isinstance(specs, list) else [s for s in re.split(r",(?![0-9])", specs) if s.strip()]
    return [parse_variant(item) for item in items]
