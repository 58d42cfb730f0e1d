"""The spec of an embedding: everything that defines it besides the model, in one frozen object.

Usage::

    config = EncoderConfig(recipe="aligned-wva", prompt="futureeol", embed_filter=2)
    EncoderConfig.from_dict(config.to_dict()) == config         # JSON-safe round trip
    config.diff(EncoderConfig(recipe="va"))                     # ["recipe: 'aligned-wva' != 'va'", ...]

Device and dtype are load options (:func:`valuelens.loading.load_model`), not part of the spec: the
same spec gives the same embeddings on any device. Every adapter's settings are these fields, with
these names and defaults (:data:`FIELDS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from valuelens.embed_filter import band
from valuelens.errors import ConfigError, SpaceMismatchError
from valuelens.layers import NAMED_SPECS, LayerSpec, validate_spec
from valuelens.prompts import resolve_prompt
from valuelens.recipes import Recipe, get_recipe

__all__ = ["DEFAULT_MAX_LENGTH", "FIELDS", "Combine", "EncoderConfig", "space_message"]

#: Token limit per text (prompt included) when ``max_length`` is ``None``.
DEFAULT_MAX_LENGTH = 512
Combine = Literal["mean", "normalized-mean"]


def space_message(recipe: Recipe) -> str:
    """Why EmbedFilter cannot follow ``recipe``, and which recipes it can follow."""
    return (
        f"EmbedFilter projects residual-stream embeddings, but recipe {recipe.name!r} produces "
        f"{recipe.space}-space vectors. Use a residual-space recipe: 'aligned-va' maps the value "
        "vectors through W_O into the residual stream (VA + EmbedFilter), or 'aligned-wva', 'hs', "
        "'last-token', 'wmp'."
    )


@dataclass(frozen=True)
class EncoderConfig:
    """Everything that defines an embedding besides the model; validated once, at construction.

    Usage: ``EncoderConfig(recipe="aligned-wva", prompt="futureeol", embed_filter=2)``.

    Values are stored normalized: recipe aliases become canonical names, a prompt name its canonical
    spelling, a list of layers a tuple. ``layers="auto"`` stays symbolic until a model resolves it
    (:meth:`valuelens.Encoder.config` holds the resolved tuple).
    """

    recipe: str = "va"
    """The valuelens recipe (``"va"``, ``"aligned-wva"``, ``"hs"``, ... see ``valuelens.RECIPES``)."""
    layers: LayerSpec = "auto"
    """Decoder layers: ``"auto"``, ``"all"``, ``"half"``, ``"last"``, ``"band"``, an int, a list, ``"20-27"``."""
    prompt: str | None = None
    """``None``, a prompt name (``"prompteol"``, ``"futureeol"``, ``"echo"``, ``"metaeol"``) or a ``{text}`` template."""
    embed_filter: float | None = None
    """EmbedFilter ratio τ (``2`` keeps the middle half of W_U's spectrum); residual-space recipes only."""
    embed_filter_offset: int = 0
    """Shift of the EmbedFilter band (the paper shifted it for Mistral)."""
    max_length: int | None = None
    """Token limit per text, prompt included (longer texts are cut, the prompt kept); ``None``: 512."""
    combine: Combine = "mean"
    """How per-layer vectors are combined: plain ``"mean"``, or ``"normalized-mean"`` (each layer L2-normalized first)."""
    final_norm: bool = False
    """Apply the model's final norm to hidden states (``hs``, ``last-token``, ``wmp`` only)."""

    def __post_init__(self) -> None:
        recipe = get_recipe(self.recipe)
        object.__setattr__(self, "recipe", recipe.name)
        layers = self.layers
        if isinstance(layers, list):
            layers = tuple(layers)
        if isinstance(layers, str) and layers.strip().lower() in NAMED_SPECS:
            layers = layers.strip().lower()
        validate_spec(layers)
        object.__setattr__(self, "layers", layers)
        prompt = resolve_prompt(self.prompt)
        object.__setattr__(self, "prompt", None if prompt is None else prompt.spec)
        if self.embed_filter is not None:
            band(10**6, self.embed_filter, 0)  # τ's range; the band is checked against the model later
            if not recipe.residual:
                raise SpaceMismatchError(space_message(recipe))
            object.__setattr__(self, "embed_filter", float(self.embed_filter))
        if isinstance(self.embed_filter_offset, bool) or not isinstance(self.embed_filter_offset, int):
            msg = f"embed_filter_offset must be an int, got {self.embed_filter_offset!r}"
            raise ConfigError(msg)
        if self.max_length is not None and (
            isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 1
        ):
            msg = f"max_length must be a positive int or None, got {self.max_length!r}"
            raise ConfigError(msg)
        if self.combine not in get_args(Combine):
            msg = f"combine must be one of {', '.join(map(repr, get_args(Combine)))}, got {self.combine!r}"
            raise ConfigError(msg)
        if not isinstance(self.final_norm, bool):
            msg = f"final_norm must be a bool, got {self.final_norm!r}"
            raise ConfigError(msg)
        if self.final_norm and recipe.signal != "hidden":
            msg = (
                f"final_norm=True applies to hidden-state recipes (hs, last-token, wmp), not {recipe.name!r}"
            )
            raise ConfigError(msg)

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-safe values (a layer tuple becomes a list)."""
        data = dataclasses.asdict(self)
        if isinstance(self.layers, tuple):
            data["layers"] = list(self.layers)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EncoderConfig:
        """Build from :meth:`to_dict` output (or any subset of the fields); unknown keys raise."""
        if not isinstance(data, Mapping):
            msg = f"an EncoderConfig is built from a mapping of its fields, got {type(data).__name__}"
            raise ConfigError(msg)
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            msg = f"unknown EncoderConfig field(s) {', '.join(map(repr, unknown))}: choose from {', '.join(FIELDS)}"
            raise ConfigError(msg)
        return cls(**data)

    def replace(self, **changes: Any) -> EncoderConfig:
        """A copy with ``changes`` applied (validated again)."""
        return EncoderConfig.from_dict({**self.to_dict(), **changes})

    @property
    def effective_max_length(self) -> int:
        """``max_length`` with ``None`` read as the default (512)."""
        return DEFAULT_MAX_LENGTH if self.max_length is None else self.max_length

    def diff(self, other: EncoderConfig) -> list[str]:
        """The fields on which ``other`` differs, as ``"field: mine != theirs"`` strings.

        ``max_length=None`` equals the default it stands for. Usage: ``if a.diff(b): ...``.
        """
        found = []
        for name in FIELDS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if name == "max_length":
                same = self.effective_max_length == other.effective_max_length
            else:
                same = mine == theirs
            if not same:
                found.append(f"{name}: {mine!r} != {theirs!r}")
        return found


#: The spec's field names, in declaration order (what every adapter exposes).
FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(EncoderConfig))
