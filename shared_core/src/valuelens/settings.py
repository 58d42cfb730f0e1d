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

import dataclasses
import difflib
import os
from collections.abc import Mapping
from typing import Any

import torch
from pydantic import BaseModel, Field, StrictInt, field_validator, model_validator

from valuelens.config import FIELDS, Combine, EncoderConfig, LexicalKind, LongText, field_descriptions
from valuelens.encoder import Encoder
from valuelens.errors import ConfigError
from valuelens.layers import resolve_layers
from valuelens.loading import check_load_options, resolve_config, resolve_device, resolve_dtype
from valuelens.presets.resolution import resolve

__all__ = [
    "SPELLINGS",
    "EncoderSettings",
    "adopt",
    "load_encoder",
    "prepare_fields",
    "spelling_hint",
]


_DESCRIPTIONS = field_descriptions()
_CONFIG_FIELDS = {field.name: field for field in dataclasses.fields(EncoderConfig)}


def _pydantic_field(name: str) -> Any:
    """The pydantic field of spec field ``name``: the config's default and description, frozen."""
    field = _CONFIG_FIELDS[name]
    description = _DESCRIPTIONS.get(name)
    if name == "fusion":  # a tuple of FusionPart in the config, a list of mappings here
        return Field(default_factory=list, frozen=True, description=description)
    return Field(default=field.default, frozen=True, description=description)


#: Other spellings of the adapters' fields (the other valuelens adapter's, the hosts' HuggingFace
#: integrations', sentence-transformers'), each with the fields it may mean, in order of preference.
SPELLINGS: dict[str, tuple[str, ...]] = {
    "model": ("model_name",),
    "model_name": ("model",),
    "model_id": ("model", "model_name"),
    "model_name_or_path": ("model", "model_name"),
    "model_path": ("model", "model_name"),
    "encoder": ("model",),
    "query_instruction": ("query_prompt",),
    "text_instruction": ("document_prompt",),
    "embed_instruction": ("document_prompt", "text_instruction"),
    "document_instruction": ("document_prompt", "text_instruction"),
    "query_prompt": ("query_instruction",),
    "document_prompt": ("text_instruction",),
    "text_prompt": ("text_instruction", "document_prompt"),
    "prompts": ("query_prompt", "query_instruction"),
    "normalize_embeddings": ("normalize",),
    "embed_batch_size": ("batch_size",),
    "show_progress_bar": ("show_progress",),
    "torch_dtype": ("dtype",),
    "max_seq_length": ("max_length",),
    "pooling": ("recipe",),
    "pooling_mode": ("recipe",),
    "layer": ("layers",),
    "layer_ids": ("layers",),
    "tau": ("embed_filter",),
}
#: Option dicts of the hosts' HuggingFace integrations whose keys are plain fields here.
_OPTION_DICTS = ("encode_kwargs", "model_kwargs", "config_kwargs")


def spelling_hint(key: str, host: type[BaseModel]) -> str | None:
    """A sentence naming the field of ``host`` (an adapter class) that ``key`` most likely means, or None.

    Usage: ``spelling_hint("model_name", ValueLensEmbeddings)`` → ``"... did you mean 'model'? ..."``.
    """
    fields = host.model_fields
    name = host.__name__
    if key in _OPTION_DICTS:
        return (
            f"{name} takes no {key!r}: its options are fields of their own, given directly "
            f"(e.g. {name}(normalize=True, batch_size=16, device='cpu', dtype='float32')); see docs/fields.md"
        )
    choices = [field for field in SPELLINGS.get(key, ()) if field in fields]
    choices = choices or difflib.get_close_matches(key, list(fields), n=1, cutoff=0.75)
    if not choices:
        return None
    return (
        f"{name} has no field {key!r}: did you mean {choices[0]!r}? (each valuelens adapter follows its "
        "host's spelling; every field is listed in docs/fields.md)"
    )


class EncoderSettings(BaseModel):
    """Pydantic fields for :class:`valuelens.EncoderConfig` and the load options (see the module docstring)."""

    recipe: str = _pydantic_field("recipe")
    layers: str | StrictInt | list[StrictInt] = _pydantic_field("layers")
    prompt: str | None = _pydantic_field("prompt")
    query_template: str | None = _pydantic_field("query_template")
    embed_filter: float | None = _pydantic_field("embed_filter")
    embed_filter_offset: StrictInt = _pydantic_field("embed_filter_offset")
    max_length: StrictInt | None = _pydantic_field("max_length")
    long_text: LongText = _pydantic_field("long_text")
    combine: Combine = _pydantic_field("combine")
    final_norm: bool = _pydantic_field("final_norm")
    prepend_layers: str | StrictInt | list[StrictInt] | None = _pydantic_field("prepend_layers")
    contrast_layer: StrictInt | None = _pydantic_field("contrast_layer")
    contrast_scale: float = _pydantic_field("contrast_scale")
    contrast_prompt: str = _pydantic_field("contrast_prompt")
    fusion: list[dict[str, Any]] = _pydantic_field("fusion")
    postprocess: str | None = _pydantic_field("postprocess")
    drop_prefix: bool = _pydantic_field("drop_prefix")
    lexical: float | None = _pydantic_field("lexical")
    lexical_query: float | None = _pydantic_field("lexical_query")
    lexical_corpus: str | None = _pydantic_field("lexical_corpus")
    lexical_kind: LexicalKind = _pydantic_field("lexical_kind")
    lexical_dim: StrictInt = _pydantic_field("lexical_dim")
    lexical_k1: float = _pydantic_field("lexical_k1")
    lexical_b: float = _pydantic_field("lexical_b")
    lexical_language: str = _pydantic_field("lexical_language")
    preset: str | None = Field(
        default=None,
        frozen=True,
        description='Start from a named spec for the model (`"best"`, `"sts"`, `"untuned"`, `"generic"`: '
        "`valuelens.presets`), or a folder written by `valuelens tune` (docs/tuning.md); fields given explicitly override it (`None` and default values included; a "
        "preset's `drop_prefix` or `postprocess` that an override invalidates is dropped with a log line), "
        "and the fields then record the whole spec.",
    )
    device: str | None = Field(
        default=None,
        frozen=True,
        description='Load option: where the model runs (`"cpu"`, `"cuda"`, `"cuda:1"`, ...); `None`: CUDA '
        "when available, else CPU.",
    )
    dtype: str | None = Field(
        default=None,
        frozen=True,
        description='Load option: `"auto"`, `"float32"`, `"bfloat16"`, `"float16"` (or `"fp32"`, '
        '`"bf16"`, `"fp16"`); `None`: float32 on CPU, the checkpoint\'s dtype elsewhere '
        "(`valuelens.loading.default_dtype`).",
    )

    @model_validator(mode="before")
    @classmethod
    def _did_you_mean(cls, data: Any) -> Any:
        """An unknown keyword that is another adapter's (or host's) spelling of a field names this one's."""
        if isinstance(data, Mapping):
            for key in data:
                if isinstance(key, str) and key not in cls.model_fields:
                    hint = spelling_hint(key, cls)
                    if hint:
                        raise ValueError(hint)
        return data

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
    explicitly given fields must agree with it (:func:`adopt`; with ``preset``, the
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
        config = adopt(encoder, given, device=device, dtype=dtype)
        return {**fields, **config.to_dict()}, config
    config = resolve(preset, model, given)
    resolve_device(device)
    resolve_dtype(dtype)
    # the host's field checks (types, bounds, unknown names) come before the model's config is read
    scratch = host.__new__(host)  # validated into a throwaway instance: the host's __init__ is not run
    host.__pydantic_validator__.validate_python({**fields, **config.to_dict()}, self_instance=scratch)
    config = resolve_config(model, config)
    return {**fields, **config.to_dict()}, config


def adopt(
    encoder: Encoder, given: Mapping[str, Any], *, device: Any = None, dtype: Any = None
) -> EncoderConfig:
    """Check settings a caller asked for against ``encoder``; return its (resolved) config.

    ``given`` holds spec fields set explicitly (``layers="auto"`` agrees with any layers), plus the
    load options ``device`` / ``dtype``. Raises :class:`ConfigError` naming every conflict.
    Usage: ``config = adopt(encoder, {"recipe": "va"}, device="cpu")``.
    """
    if encoder.embed_filter is not None and encoder.embed_filter.kind != "spectral":
        msg = (
            f"this Encoder uses {encoder.embed_filter!r}, an ablation baseline that no EncoderConfig "
            "describes (embed_filter=τ means EmbedFilter's spectral band)"
        )
        raise ConfigError(msg)
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        msg = f"unknown setting(s) {', '.join(map(repr, unknown))}: choose from {', '.join(FIELDS)}"
        raise ConfigError(msg)
    wanted = {k: v for k, v in given.items() if not (k == "layers" and _is_auto(v))}
    try:
        candidate = encoder.config.replace(**wanted)
        if "layers" in wanted:
            candidate = candidate.replace(layers=resolve_layers(candidate.layers, encoder.parts.full_depth))
        differing = [item.split(":")[0] for item in candidate.diff(encoder.config)]
    except ConfigError:  # the given values do not even form a spec together with the encoder's
        differing = [k for k, v in wanted.items() if v != getattr(encoder.config, k, None)]
    conflicts = [f"{k}={wanted[k]!r} (the encoder has {getattr(encoder.config, k)!r})" for k in differing]
    conflicts += check_load_options(encoder.model, device=device, dtype=dtype)
    if conflicts:
        msg = (
            "these settings disagree with the valuelens.Encoder given: "
            + "; ".join(conflicts)
            + ". An Encoder's settings are fixed when it is built: leave them unset to use the "
            "Encoder's, or build a new Encoder with the settings you want."
        )
        raise ConfigError(msg)
    return encoder.config


def _is_auto(layers: Any) -> bool:
    return isinstance(layers, str) and layers.strip().lower() == "auto"


def load_encoder(
    model: str | os.PathLike[str] | None, config: EncoderConfig, *, device: Any = None, dtype: Any = None
) -> Encoder:
    """Load ``model`` (a bundled name, a folder, a hub id; ``None``: the default) for ``config``."""
    return Encoder.from_pretrained(model, config, device=device, dtype=dtype)
