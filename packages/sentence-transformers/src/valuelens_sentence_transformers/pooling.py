"""``ValuePooling``: a sentence-transformers module that embeds with a valuelens recipe.

Usage::

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from valuelens_sentence_transformers import ValuePooling

    model = SentenceTransformer(modules=[Transformer(path), ValuePooling(recipe="va", layers="auto")])
    vectors = model.encode(["A man plays a guitar.", "Someone makes music."])

How it fits into sentence-transformers (all work is done by the valuelens core):

- ``on_model_ready`` finds the ``Transformer`` in front of it and builds a ``valuelens.Encoder`` over
  the *same* backbone and tokenizer (nothing is copied or saved twice). The backbone's layers after the
  deepest selected one are removed, since they would never contribute (the core's early exit, made
  permanent); the resolved layer list is saved, so a reload selects the same layers.
- Text preprocessing goes through the core (prompt template, pooled spans, truncation that keeps the
  prompt), so ``model.encode`` equals ``Encoder.encode``. A sentence-transformers ``prompt`` (e.g. from
  ``encode_query``) is prepended to the text before the valuelens template is applied.
- During the ``Transformer`` forward the core's capture is active (hooks reduce each selected layer to
  per-sentence vectors); ``ValuePooling.forward`` combines them into ``sentence_embedding``.
"""

from __future__ import annotations

import functools
import os
from typing import Any, ClassVar

import torch
from safetensors.torch import load_file, save_file
from sentence_transformers.base.modules import Module, Transformer
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from valuelens import EmbedFilter, Encoder, EncoderConfig
from valuelens.capture import capturing
from valuelens.encoder import DEFAULT_MAX_LENGTH
from valuelens.errors import ConfigError, UnsupportedModelError

_SPAN_KEY = "valuelens_span"
_LAYERS_KEY = "valuelens_layer_vectors"
WEIGHTS_NAME = "model.safetensors"


class ValuePooling(Module):
    """Pool a decoder LLM's attention values (or another valuelens signal) into sentence embeddings.

    Args mirror :class:`valuelens.Encoder`: ``recipe`` (``"va"``, ``"aligned-wva"``, ...), ``layers``
    (``"auto"``, ``"all"``, ``"half"``, a list, ``"20-27"``), ``prompt`` (``"prompteol"``,
    ``"futureeol"``, ``"echo"``, ``"metaeol"`` is not supported here, or a ``{text}`` template),
    ``embed_filter`` (τ, e.g. 2), ``embed_filter_offset``, ``combine`` and ``final_norm``.
    """

    config_keys: ClassVar[list[str]] = [
        "recipe",
        "layers",
        "prompt",
        "embed_filter",
        "embed_filter_offset",
        "combine",
        "final_norm",
    ]

    def __init__(
        self,
        recipe: str = "va",
        layers: str | int | list[int] = "auto",
        prompt: str | None = None,
        embed_filter: float | None = None,
        embed_filter_offset: int = 0,
        combine: str = "mean",
        final_norm: bool = False,
    ) -> None:
        super().__init__()
        config = EncoderConfig(
            recipe=recipe,
            layers=list(layers) if isinstance(layers, tuple) else layers,
            prompt=prompt,
            embed_filter=embed_filter,
            embed_filter_offset=embed_filter_offset,
            combine=combine,
            final_norm=final_norm,
        )
        if config.prompt == "metaeol":
            msg = "prompt='metaeol' needs eight forward passes per text; use valuelens.Encoder for it"
            raise ConfigError(msg)
        self.recipe = config.recipe
        self.layers = list(config.layers) if isinstance(config.layers, (list, tuple)) else config.layers
        self.prompt = config.prompt
        self.embed_filter = config.embed_filter
        self.embed_filter_offset = config.embed_filter_offset
        self.combine = config.combine
        self.final_norm = config.final_norm
        self._encoder: Encoder | None = None
        self._transformer: Transformer | None = None
        self._projection: torch.Tensor | None = None

    # ------------------------------------------------------------------ wiring
    def on_model_ready(self, model) -> None:
        """Bind to the ``Transformer`` in front of this module (after construction and after reload)."""
        first = model[0]
        if not isinstance(first, Transformer):
            msg = (
                f"ValuePooling must follow a sentence_transformers Transformer module, but the first module "
                f"is {type(first).__name__}: build the model as "
                "SentenceTransformer(modules=[Transformer(path), ValuePooling(...)])"
            )
            raise UnsupportedModelError(msg)
        self.bind(first)

    def bind(self, transformer: Transformer) -> None:
        """Build the core encoder over ``transformer``'s backbone and take over its text preprocessing."""
        previous = self.__dict__.get("_transformer")
        if previous is not None:  # re-binding: the old Transformer gets its own forward and preprocess back
            for name in ("forward", "preprocess"):
                previous.__dict__.pop(name, None)
        backbone = transformer.auto_model
        if getattr(backbone.config, "is_encoder_decoder", False):
            msg = f"ValuePooling needs a decoder-only LLM, got the encoder-decoder {type(backbone).__name__}"
            raise UnsupportedModelError(msg)
        try:
            probe = Encoder(
                backbone, transformer.tokenizer, recipe=self.recipe, layers=self.layers, prompt=self.prompt
            )
        except UnsupportedModelError as exc:
            msg = (
                f"ValuePooling needs a decoder LLM (llama, qwen2, gemma, gpt2, ...); "
                f"{type(backbone).__name__} does not fit: {exc}"
            )
            raise UnsupportedModelError(msg) from exc
        chosen = list(probe.layers)
        _prune_layers(probe, max(chosen) + 1)
        self.layers = chosen
        embed_filter = self._build_filter(probe, transformer)
        self._encoder = Encoder(
            backbone,
            transformer.tokenizer,
            recipe=self.recipe,
            layers=chosen,
            prompt=self.prompt,
            embed_filter=embed_filter,
            combine=self.combine,
            final_norm=self.final_norm,
        )
        # a plain reference, not a submodule: the backbone's weights belong to the Transformer alone
        # (registering it here would list every weight twice in the model's state_dict)
        object.__setattr__(self, "_transformer", transformer)
        # the Transformer's own preprocess (chat templates, plain prefix prompts) is replaced by the core's
        transformer.preprocess = self._preprocess
        # its forward runs inside a capture, closed in `finally` (also on KeyboardInterrupt, which hooks'
        # always_call does not cover); a partial, not a closure, so that the model still pickles
        transformer.forward = functools.partial(self._capturing_forward, transformer)

    def _build_filter(self, probe: Encoder, transformer: Transformer) -> EmbedFilter | None:
        if self.embed_filter is None:
            return None
        if self._projection is not None:
            return EmbedFilter(
                self._projection.float(),
                float(self.embed_filter),
                int(self.embed_filter_offset),
                probe.parts.hidden_size,
            )
        backbone = transformer.auto_model
        try:
            ef = EmbedFilter.from_model(backbone, tau=self.embed_filter, offset=self.embed_filter_offset)
        except ConfigError:
            source = getattr(backbone.config, "_name_or_path", None)
            if not source or not os.path.isdir(source):
                msg = (
                    f"embed_filter needs the unembedding matrix (LM head) of {type(backbone).__name__}: its "
                    "embeddings are not tied to the head and the checkpoint folder is unknown"
                )
                raise ConfigError(msg) from None
            ef = EmbedFilter.from_model(source, tau=self.embed_filter, offset=self.embed_filter_offset)
        self._projection = ef.projection
        return ef

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

    # ------------------------------------------------------------------ the pipeline
    def _preprocess(self, inputs, prompt: str | None = None, **kwargs: Any) -> dict[str, Any]:
        encoder = self.encoder
        texts = list(inputs)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                msg = f"inputs[{i}] is {type(text).__name__}: ValuePooling embeds text (str) only"
                raise TypeError(msg)
        if not texts:
            return {}
        if prompt:
            texts = [prompt + text for text in texts]
        limit = kwargs.get("max_length") or getattr(self._transformer, "max_seq_length", None)
        encoder.max_length = limit if limit and limit < VERY_LARGE_INTEGER else DEFAULT_MAX_LENGTH
        items, _ = encoder.tokenize(texts)
        batch = encoder.collate(items)
        features: dict[str, Any] = {
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask,
            _SPAN_KEY: torch.stack([batch.span_start, batch.span_end], dim=1),
            "modality": "text",
        }
        if encoder._pass_positions:
            features["position_ids"] = batch.position_ids
        return features

    def _capturing_forward(self, transformer: Transformer, features: dict[str, Any], **kwargs: Any) -> Any:
        features = dict(features)  # the caller's dict keeps its span: a second forward pools the same way
        encoder = self.encoder
        mask = features["attention_mask"]
        span = features.pop(_SPAN_KEY, None)
        if span is None:  # features made elsewhere: pool over every real token
            start = torch.zeros(mask.shape[0], dtype=torch.long, device=mask.device)
            span = torch.stack([start, torch.full_like(start, mask.shape[1])], dim=1)
        span = span.to(mask.device)
        weights, index = encoder.pooling_inputs(mask, span[:, 0], span[:, 1])
        with capturing(
            encoder.refresh_parts(),
            [encoder.capture_plan()],
            attention_mask=mask,
            weights=weights,
            index=index,
            stop_early=False,
        ) as session:
            output = type(transformer).forward(transformer, features, **kwargs)
        if isinstance(output, dict):
            output[_LAYERS_KEY] = session.captures[0].layer_vectors()
        return output

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        vectors = features.pop(_LAYERS_KEY, None)
        if vectors is None:
            msg = (
                "ValuePooling found no captured signals: it must directly follow the Transformer module it "
                "was bound to (SentenceTransformer(modules=[Transformer(path), ValuePooling(...)]))"
            )
            raise RuntimeError(msg)
        embedding = self.encoder.finish(vectors)
        reference = features.get("token_embeddings")
        if isinstance(reference, torch.Tensor) and reference.is_floating_point():
            embedding = embedding.to(reference.dtype)
        features["sentence_embedding"] = embedding
        return features

    # ------------------------------------------------------------------ sentence-transformers contract
    def get_embedding_dimension(self) -> int | None:
        return self._encoder.dimension if self._encoder is not None else None

    def get_config_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.config_keys}

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.save_config(output_path)
        if self._projection is not None:
            save_file(
                {"embed_filter_projection": self._projection.detach().float().contiguous().cpu()},
                os.path.join(output_path, WEIGHTS_NAME),
            )

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs: Any) -> ValuePooling:
        hub_kwargs = {
            k: kwargs[k] for k in ("token", "cache_folder", "revision", "local_files_only") if k in kwargs
        }
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub_kwargs)
        module = cls(**config)
        weights = cls.load_file_path(
            model_name_or_path, filename=WEIGHTS_NAME, subfolder=subfolder, **hub_kwargs
        )
        if weights is not None:
            module._projection = load_file(weights)["embed_filter_projection"]
        return module

    def __repr__(self) -> str:
        return f"ValuePooling({self.get_config_dict()})"


def _prune_layers(encoder: Encoder, keep: int) -> None:
    """Drop the decoder layers after ``keep`` (they would never contribute to the embedding)."""
    parts = encoder.parts
    if keep >= parts.n_layers:
        return
    layers = parts.layers
    del layers[keep:]
    config = parts.backbone.config.get_text_config()
    config.num_hidden_layers = keep
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:keep]


ValuePooling.__module__ = "valuelens_sentence_transformers"
