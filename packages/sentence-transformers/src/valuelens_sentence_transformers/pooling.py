"""``ValuePooling``: a sentence-transformers module that embeds with a valuelens recipe.

Usage::

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from valuelens_sentence_transformers import ValuePooling

    model = SentenceTransformer(modules=[Transformer(path), ValuePooling(recipe="va", layers="auto")])
    vectors = model.encode(["A man plays a guitar.", "Someone makes music."])

How it fits into sentence-transformers (all work is done by the valuelens core):

- ``ValuePooling``'s settings are the fields of :class:`valuelens.EncoderConfig` (``config_keys``),
  validated once at construction.
- ``on_model_ready`` builds a :class:`valuelens.Encoder` over the backbone and tokenizer of the module
  in front of it (nothing is copied or saved twice). A plain ``Transformer`` there is replaced by a
  :class:`ValueTransformer` over the same backbone, tokenizer and settings: its ``preprocess`` applies
  the valuelens prompt template and its ``forward`` runs inside the core's capture. The backbone's
  layers after the deepest selected one are removed (the core's early exit, made permanent); the
  resolved layer list is saved, so a reload selects the same layers.
- ``forward`` reads the per-layer vectors the ValueTransformer put in ``features`` and combines them
  (the recipe's readout: W_O, layer combination, EmbedFilter) into ``sentence_embedding``.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from sentence_transformers.base.modules import Module, Transformer

from valuelens.architectures import model_key
from valuelens.composition import STATE_FILES
from valuelens.config import FIELDS, EncoderConfig
from valuelens.embed_filter import EmbedFilter
from valuelens.encoder import Encoder
from valuelens.errors import ConfigError, UnsupportedModelError
from valuelens.layers import LayerSpec
from valuelens.loading import prune_layers
from valuelens.presets.resolution import check_preset_name, resolve
from valuelens.prompts import resolve_prompt
from valuelens_sentence_transformers.precision import default_cast
from valuelens_sentence_transformers.transformer import LAYER_VECTORS_KEY, LEXICAL_KEY, ValueTransformer

__all__ = ["ValuePooling"]

WEIGHTS_NAME = "model.safetensors"


def _records_given(init: Callable[..., None]) -> Callable[..., None]:
    """Wrap ``__init__`` so that it receives the names of the spec fields the caller passed (by key,
    whatever their values), as ``_given``; the signature shown stays ``init``'s."""
    signature = inspect.signature(init)
    names = [name for name in signature.parameters if name != "self"]

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        given = {*names[: len(args)], *kwargs} & set(FIELDS)
        init(self, *args, _given=frozenset(given), **kwargs)

    shown = [p for name, p in signature.parameters.items() if name != "_given"]
    wrapper.__signature__ = signature.replace(parameters=shown)  # type: ignore[attr-defined]
    return wrapper


class ValuePooling(Module):
    """Pool a decoder LLM's attention values (or another valuelens signal) into sentence embeddings.

    Args are the fields of :class:`valuelens.EncoderConfig`: ``recipe`` (``"va"``, ``"aligned-wva"``,
    ...), ``layers`` (``"auto"``, ``"all"``, ``"half"``, a list, ``"20-27"``), ``prompt``
    (``"prompteol"``, ``"futureeol"``, ``"echo"`` or a ``{text}`` template; ``"metaeol"``'s eight passes
    need :class:`valuelens.Encoder`), ``embed_filter`` (τ, e.g. 2), ``embed_filter_offset``,
    ``max_length`` (``None``: the Transformer's ``max_seq_length``, sentence-transformers' rule),
    ``combine``, ``final_norm``, Token Prepending (``prepend_layers``), Contrastive Prompting
    (``contrast_layer``, ``contrast_scale``, ``contrast_prompt``), ``fusion``, ``postprocess``,
    ``drop_prefix`` (the last token's attention without the prompt's head) and ``long_text`` (only
    ``"truncate"`` here: ``"chunk"`` needs :class:`valuelens.Encoder` or the LangChain / LlamaIndex adapters),
    ``query_template`` and the lexical part (``lexical``, ``lexical_query``, ``lexical_corpus``, ``lexical_kind``,
    ``lexical_dim``, ``lexical_k1``, ``lexical_b``, ``lexical_language``).
    ``preset="best"`` starts from the model's recommended spec (:mod:`valuelens.presets`), resolved when
    the model is known; the fields passed override it (by key: ``drop_prefix=False`` or
    ``postprocess=None`` too), and a preset's ``drop_prefix`` or fitted state that they invalidate is
    dropped with a log line (:func:`valuelens.presets.resolution.resolve`). Every field, with its
    default and meaning, is in one table: ``docs/fields.md``.

    Like sentence-transformers' ``Pooling``, it returns the recipe's vectors as they are (not unit
    length); put a ``Normalize()`` module after it for unit vectors, as sentence-transformers' own models
    do. The backbone runs in float32 on CPU unless a dtype was asked for
    (:mod:`valuelens_sentence_transformers.precision`).
    """

    config_keys: list[str] = list(FIELDS)  # noqa: RUF012 - sentence-transformers declares it so

    @_records_given
    def __init__(
        self,
        recipe: str = "va",
        layers: LayerSpec = "auto",
        prompt: str | None = None,
        embed_filter: float | None = None,
        embed_filter_offset: int = 0,
        max_length: int | None = None,
        combine: str = "mean",
        final_norm: bool = False,
        prepend_layers: LayerSpec | None = None,
        contrast_layer: int | None = None,
        contrast_scale: float = 0.5,
        contrast_prompt: str = "irrelevant",
        fusion: Sequence[Any] = (),
        postprocess: str | None = None,
        drop_prefix: bool = False,
        long_text: str = "truncate",
        query_template: str | None = None,
        lexical: float | None = None,
        lexical_query: float | None = None,
        lexical_corpus: str | None = None,
        lexical_kind: str = "bm25",
        lexical_dim: int = 8192,
        lexical_k1: float = 1.5,
        lexical_b: float = 0.75,
        lexical_language: str = "english",
        *,
        preset: str | None = None,
        _given: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        given = {
            "recipe": recipe,
            "layers": layers,
            "prompt": prompt,
            "embed_filter": embed_filter,
            "embed_filter_offset": embed_filter_offset,
            "max_length": max_length,
            "combine": combine,
            "final_norm": final_norm,
            "prepend_layers": prepend_layers,
            "contrast_layer": contrast_layer,
            "contrast_scale": contrast_scale,
            "contrast_prompt": contrast_prompt,
            "fusion": fusion,
            "postprocess": postprocess,
            "drop_prefix": drop_prefix,
            "long_text": long_text,
            "query_template": query_template,
            "lexical": lexical,
            "lexical_query": lexical_query,
            "lexical_corpus": lexical_corpus,
            "lexical_kind": lexical_kind,
            "lexical_dim": lexical_dim,
            "lexical_k1": lexical_k1,
            "lexical_b": lexical_b,
            "lexical_language": lexical_language,
        }
        self.encoder_config = EncoderConfig.from_dict(given)
        # with a preset, the fields passed (by key, whatever their values) override it once the model
        # is known; until then they are what a save writes, with the preset
        self._preset = None if preset is None else check_preset_name(preset)
        self._given = _given
        self._check_supported(self.encoder_config)
        self._encoder: Encoder | None = None
        self._projection: torch.Tensor | None = None

    @staticmethod
    def _check_supported(config: EncoderConfig) -> None:
        """Refuse what sentence-transformers' one forward per text cannot run (MetaEOL, chunking)."""
        if config.long_text == "chunk":
            msg = (
                "long_text='chunk' embeds a text longer than max_length as several windows and averages "
                "their vectors; in sentence-transformers the Transformer module tokenizes one row per text, "
                "cut at max_seq_length, before ValuePooling sees it: use valuelens.Encoder, the LangChain or "
                "LlamaIndex adapters, or the valuelens command line to chunk long texts "
                "(docs/sentence-transformers.md)"
            )
            raise ConfigError(msg)
        prompt = resolve_prompt(config.prompt)
        passes = prompt.passes if prompt is not None else 1
        if passes > 1:
            msg = (
                f"prompt={config.prompt!r} needs {passes} forward passes per text (one per template, averaged); "
                "sentence-transformers runs one: use valuelens.Encoder (or the LangChain / LlamaIndex "
                "adapters) for it"
            )
            raise ConfigError(msg)

    # ------------------------------------------------------------------ wiring
    def on_model_ready(self, model: Any) -> None:
        """Bind to the ``Transformer`` in front of this module (after construction and after reload)."""
        first = model[0]
        if not isinstance(first, Transformer):
            msg = (
                f"ValuePooling must follow a sentence_transformers Transformer module, but the first module "
                f"is {type(first).__name__}: build the model as "
                "SentenceTransformer(modules=[Transformer(path), ValuePooling(...)])"
            )
            raise UnsupportedModelError(msg)
        if not isinstance(first, ValueTransformer):
            first = ValueTransformer.from_transformer(first)
            model[0] = first
        dtype = default_cast(first)  # valuelens' dtype rule: float32 on CPU unless a dtype was asked for
        if dtype is not None:
            model.to(dtype)  # the later modules follow the backbone, as sentence-transformers casts them
        backbone = first.auto_model
        if getattr(backbone.config, "is_encoder_decoder", False):
            msg = f"ValuePooling needs a decoder-only LLM, got the encoder-decoder {type(backbone).__name__}"
            raise UnsupportedModelError(msg)
        if self._preset is not None:  # the model is known now: its preset, then the fields passed
            key = model_key(backbone.config.get_text_config())
            self.encoder_config = resolve(self._preset, key, self._passed())
            self._check_supported(self.encoder_config)
            self._preset = None
        try:  # without a saved filter the Encoder builds one from the model's unembedding matrix
            encoder = Encoder(
                backbone, first.tokenizer, self.encoder_config, embed_filter=self._saved_filter()
            )
        except UnsupportedModelError as exc:
            msg = (
                f"ValuePooling needs a decoder LLM (llama, qwen2, gemma, gpt2, ...); "
                f"{type(backbone).__name__} does not fit: {exc}"
            )
            raise UnsupportedModelError(msg) from exc
        prune_layers(encoder.parts, encoder.config.deepest_layer + 1)
        encoder.runner.current_parts()  # located again over the pruned layers
        self.encoder_config = encoder.config  # saved with resolved layers: a reload selects the same
        if encoder.embed_filter is not None:
            self._projection = encoder.embed_filter.projection
        self._encoder = encoder
        first.bind(encoder, max_length=self.encoder_config.max_length)

    def _saved_filter(self) -> EmbedFilter | None:
        """The EmbedFilter projection saved with this module (``None`` before the first save/load)."""
        config = self.encoder_config
        if config.embed_filter is None or self._projection is None:
            return None
        return EmbedFilter(
            self._projection.float(),
            config.embed_filter,
            config.embed_filter_offset,
            int(self._projection.shape[1]),
        )

    @property
    def encoder(self) -> Encoder:
        """The core encoder this module runs (available once the module is part of a model)."""
        if self._encoder is None:
            msg = (
                "ValuePooling is not bound to a model yet: use it inside "
                "SentenceTransformer(modules=[Transformer(path), ValuePooling(...)])"
            )
            raise RuntimeError(msg)
        return self._encoder

    def __getattr__(self, name: str) -> Any:
        """The spec's fields read as attributes (``module.recipe``, ``module.layers``, ...)."""
        if name in FIELDS:
            value = getattr(self.__dict__["encoder_config"], name)
            return list(value) if isinstance(value, tuple) else value
        return super().__getattr__(name)

    # ------------------------------------------------------------------ the pipeline
    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        vectors = features.pop(LAYER_VECTORS_KEY, None)
        if vectors is None:
            msg = (
                "ValuePooling found no captured signals: it must directly follow the ValueTransformer "
                "(or Transformer) module it was bound to "
                "(SentenceTransformer(modules=[Transformer(path), ValuePooling(...)]))"
            )
            raise RuntimeError(msg)
        embedding = self.encoder.finish(vectors, features.pop(LEXICAL_KEY, None))
        reference = features.get("token_embeddings")
        if isinstance(reference, torch.Tensor) and reference.is_floating_point():
            embedding = embedding.to(reference.dtype)
        features["sentence_embedding"] = embedding
        return features

    # ------------------------------------------------------------------ sentence-transformers contract
    def get_embedding_dimension(self) -> int | None:
        return self._encoder.dimension if self._encoder is not None else None

    def _passed(self) -> dict[str, Any]:
        """The spec fields the caller passed, as the spec stores them."""
        stored = self.encoder_config.to_dict()
        return {name: stored[name] for name in FIELDS if name in self._given}

    def get_config_dict(self) -> dict[str, Any]:
        """The whole spec; while a preset is unresolved (no model yet), the preset and the fields passed."""
        if self._preset is not None:
            return {**self._passed(), "preset": self._preset}
        return self.encoder_config.to_dict()

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        config = self.encoder_config
        if self._encoder is not None:  # the fitted states travel with the module, named relatively
            written = self._encoder.composition.save(output_path, config)
            self.encoder_config = config.replace(**written)
        try:
            self.save_config(output_path)
        finally:
            self.encoder_config = config
        if self._projection is not None:
            save_file(
                {"embed_filter_projection": self._projection.detach().float().contiguous().cpu()},
                os.path.join(output_path, WEIGHTS_NAME),
            )

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        init_defaults: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ValuePooling:
        """Read the saved spec (data only: unknown keys are refused) and the EmbedFilter projection."""
        hub_kwargs: dict[str, Any] = {
            "token": token,
            "cache_folder": cache_folder,
            "revision": revision,
            "local_files_only": local_files_only,
        }
        saved = dict(cls.load_config(model_name_or_path, subfolder=subfolder, **hub_kwargs))
        for field, filename in STATE_FILES.items():
            if saved.get(field) != filename:  # a fitted state saved beside the config, named relatively
                continue
            state = cls.load_file_path(
                model_name_or_path, filename=filename, subfolder=subfolder, **hub_kwargs
            )
            if state is None:
                msg = f"the saved ValuePooling names {filename!r} but the file is missing"
                raise ConfigError(msg)
            saved[field] = str(state)
        preset = saved.pop("preset", None)  # saved with an unresolved preset: the fields are those passed
        fields = EncoderConfig.from_dict(saved).to_dict()  # data only: unknown keys are refused
        module = cls(**{name: fields[name] for name in saved}, preset=preset)
        weights = cls.load_file_path(
            model_name_or_path, filename=WEIGHTS_NAME, subfolder=subfolder, **hub_kwargs
        )
        if weights is not None:
            module._projection = load_file(weights)["embed_filter_projection"]
        return module

    def __repr__(self) -> str:
        return f"ValuePooling({self.get_config_dict()})"


ValuePooling.__module__ = "valuelens_sentence_transformers"
