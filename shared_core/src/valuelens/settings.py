"""The spec as pydantic fields, shared by the LangChain and LlamaIndex adapters.

Usage (an adapter)::

    class MyEmbeddings(EncoderSettings, HostBase):
        def __init__(self, model=None, **fields):
            if isinstance(model, Encoder):                       # share a loaded encoder
                fields, _ = prepare_fields(type(self), fields, encoder=model)
                super().__init__(**fields)
                self._encoder = model
            else:                                                # load by name, folder or hub id
                fields, config = prepare_fields(type(self), fields, model=model)
                super().__init__(**fields)
                self._encoder = load_encoder(model, config, device=self.device, dtype=self.dtype)

:class:`EncoderSettings` declares the fields of :class:`valuelens.EncoderConfig` (same names, same
defaults, frozen: they define the embedding) plus the load options ``device`` and ``dtype``.
:func:`prepare_fields` builds the spec once, before the host validates or anything loads: from the
fields, or by adopting an existing :class:`valuelens.Encoder` (explicit fields must agree with it;
the fields then describe what the encoder computes).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from pydantic import BaseModel, Field, StrictInt, field_validator

from valuelens.config import FIELDS, Combine, EncoderConfig
from valuelens.encoder import Encoder
from valuelens.loading import resolve_config, resolve_device, resolve_dtype
from valuelens.presets.resolution import resolve

__all__ = ["EncoderSettings", "load_encoder", "prepare_fields"]


class EncoderSettings(BaseModel):
    """Pydantic fields for :class:`valuelens.EncoderConfig` and the load options (see the module docstring)."""

    recipe: str = Field(
        default="va",
        frozen=True,
        description="The valuelens recipe: 'va', 'aligned-va', 'wva', 'wva-lt', 'aligned-wva', 'hs', "
        "'last-token', 'wmp', ... (valuelens.RECIPES).",
    )
    layers: str | StrictInt | list[StrictInt] = Field(
        default="auto",
        frozen=True,
        description="Decoder layers to read: 'auto', 'all', 'half', 'last', 'band', an int, a list of ints "
        "or ranges such as '20-27'.",
    )
    prompt: str | None = Field(
        default=None,
        frozen=True,
        description="None, a prompt name ('prompteol', 'futureeol', 'echo', 'metaeol') or a custom template "
        "containing '{text}'.",
    )
    embed_filter: float | None = Field(
        default=None,
        frozen=True,
        description="EmbedFilter ratio tau (2 keeps the middle half of the unembedding spectrum); "
        "residual-space recipes only.",
    )
    embed_filter_offset: StrictInt = Field(
        default=0, frozen=True, description="Shift of the EmbedFilter band."
    )
    max_length: StrictInt | None = Field(
        default=None,
        frozen=True,
        description="Token limit per text, prompt included (longer texts are truncated with a warning); "
        "None: 512.",
    )
    combine: Combine = Field(
        default="mean",
        frozen=True,
        description="How per-layer vectors are combined: 'mean', or 'normalized-mean' (each layer "
        "L2-normalized first).",
    )
    final_norm: bool = Field(
        default=False,
        frozen=True,
        description="Apply the model's final norm (hidden-state recipes 'hs', 'last-token', 'wmp' only).",
    )
    prepend_layers: str | StrictInt | list[StrictInt] | None = Field(
        default=None,
        frozen=True,
        description="Token Prepending: layers at whose input a placeholder before the text takes the last "
        "token's state ('1-4', 'auto'); None: off.",
    )
    contrast_layer: StrictInt | None = Field(
        default=None,
        frozen=True,
        description="Contrastive Prompting: the layer where the last token's heads become "
        "contrast_scale * (z - z_aux); None: off.",
    )
    contrast_scale: float = Field(
        default=0.5, frozen=True, description="Contrastive Prompting's coefficient."
    )
    contrast_prompt: str = Field(
        default="irrelevant",
        frozen=True,
        description="Contrastive Prompting's auxiliary prompt (a name or a '{text}' template).",
    )
    fusion: list[dict[str, Any]] = Field(
        default_factory=list,
        frozen=True,
        description="More recipes read in the same forward, concatenated after L2 normalization: "
        "[{'recipe': 'va', 'layers': 'auto', 'weight': 0.5}].",
    )
    postprocess: str | None = Field(
        default=None,
        frozen=True,
        description="A fitted valuelens.Postprocess state (.safetensors path or 'builtin:NAME') applied last.",
    )
    drop_prefix: bool = Field(
        default=False,
        frozen=True,
        description="Last-token attention recipes ('wva', 'aligned-wva', 'wva-lt'): drop the keys before the "
        "text (BOS, the prompt's head) and renormalize the last token's attention over the rest.",
    )
    preset: str | None = Field(
        default=None,
        frozen=True,
        description="Start from a named spec for the model ('best', 'sts', 'generic': valuelens.presets); fields given "
        "explicitly override it (None and default values included; a preset's drop_prefix or postprocess that an "
        "override invalidates is dropped with a log line), and the fields then record the whole spec.",
    )
    device: str | None = Field(
        default=None,
        frozen=True,
        description="Where the model runs ('cpu', 'cuda', 'cuda:1', ...); None: CUDA when available, else CPU.",
    )
    dtype: str | None = Field(
        default=None,
        frozen=True,
        description="'auto', 'float32', 'bfloat16', 'float16' (or 'fp32', 'bf16', 'fp16'); None: float32 on "
        "CPU, the checkpoint's dtype elsewhere.",
    )

    @field_validator("device", "dtype", mode="before")
    @classmethod
    def _torch_objects_as_strings(cls, value: Any) -> Any:
        """``torch.device`` / ``torch.dtype`` objects are kept as their names (the fields stay portable)."""
        if isinstance(value, torch.device):
            return str(value)
        if isinstance(value, torch.dtype):
            return str(value).removeprefix("torch.")
        return value

    def encoder_config(self) -> EncoderConfig:
        """The spec these fields describe."""
        return EncoderConfig.from_dict({name: getattr(self, name) for name in FIELDS})


def prepare_fields(
    host: type[BaseModel],
    fields: Mapping[str, Any],
    *,
    encoder: Encoder | None = None,
    model: str | os.PathLike[str] | None = None,
) -> tuple[dict[str, Any], EncoderConfig]:
    """Build the spec from the keyword fields of ``host`` (an adapter class), before anything loads.

    Without ``encoder`` the spec fields are validated (``ConfigError`` names a bad value; device and
    dtype are checked too), then the host's own field checks run, and only then is ``layers``
    resolved for ``model`` from its config alone (no weights), so that the fields record what
    ``"auto"`` meant and a saved adapter re-creates exactly this embedding. With ``encoder`` the
    explicitly given fields must agree with it (:meth:`valuelens.Encoder.adopt`; with ``preset``, the
    preset's spec for the encoder's model with the given fields applied must).  A preset and the fields
    given are merged by :func:`valuelens.presets.resolution.resolve`. Returns the fields
    to pass to the host's ``__init__`` (they describe the embedding) and the resolved spec.
    """
    given = {name: fields[name] for name in FIELDS if name in fields}
    device, dtype = fields.get("device"), fields.get("dtype")
    preset = fields.get("preset")
    if encoder is not None:
        if preset is not None:  # the preset's spec for the encoder's model, checked against the encoder
            key = encoder.parts.model_key
            given = resolve(preset, key, given).resolved(*key).to_dict()
        config = encoder.adopt(given, device=device, dtype=dtype)
        return {**fields, **config.to_dict()}, config
    config = resolve(preset, model, given)
    resolve_device(device)
    resolve_dtype(dtype)
    # the host's field checks (types, bounds, unknown names) come before the model's config is read
    scratch = host.__new__(host)  # validated into a throwaway instance: the host's __init__ is not run
    host.__pydantic_validator__.validate_python({**fields, **config.to_dict()}, self_instance=scratch)
    config = resolve_config(model, config)
    return {**fields, **config.to_dict()}, config


def load_encoder(
    model: str | os.PathLike[str] | None, config: EncoderConfig, *, device: Any = None, dtype: Any = None
) -> Encoder:
    """Load ``model`` (a bundled name, a folder, a hub id; ``None``: the default) for ``config``."""
    return Encoder.from_pretrained(model, config, device=device, dtype=dtype)
