"""The encoder: tokenize → forward (capture, recipe readouts) → combine (fusion, post-processing) → encode.

Usage::

    enc = Encoder.from_pretrained(recipe="va")                 # the embedded default model
    vectors = enc.encode(["A cat sits.", "A dog runs."])       # np.float32 [2, enc.dimension]
    enc = Encoder(model, tokenizer, recipe="aligned-wva", prompt="futureeol", embed_filter=2)
    enc = Encoder(model, tokenizer, EncoderConfig(recipe="va", layers="20-27"))

This module holds the pipeline only: loading is :mod:`valuelens.loading`, the spec
:mod:`valuelens.config`, the recipe math and readout planning :mod:`valuelens.readout`, the hooks
:mod:`valuelens.capture`, the forward edits :mod:`valuelens.steering`, and the batching driver (also
for several encoders sharing forward passes) :mod:`valuelens.batching`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from valuelens.architectures import ModelParts, locate
from valuelens.batching import embed_all
from valuelens.capture import CaptureSession, capturing
from valuelens.config import FIELDS, EncoderConfig
from valuelens.embed_filter import EmbedFilter
from valuelens.errors import ConfigError
from valuelens.first_use import FIT_PREFIX, fitted_state
from valuelens.inputs import check_batch_size, check_texts, check_token_budget
from valuelens.lexical import LexicalLens, LexicalPart, lexical_lens
from valuelens.loading import build_embed_filter, check_loaded, load_model, resolve_config
from valuelens.postprocess import Postprocess, load_postprocess
from valuelens.presets.resolution import resolve
from valuelens.prompts import Prompt, resolve_prompt
from valuelens.readout import CapturePlan, Readout, fuse, fusion_readouts, pooling_inputs
from valuelens.recipes import Recipe
from valuelens.steering import EditPlan
from valuelens.tokenization import Batch, TokenizedText, collate, placeholder_token, tokenize

__all__ = ["Encoder"]


def _split_settings(
    config: EncoderConfig | None, embed_filter: float | EmbedFilter | None, settings: Mapping[str, Any]
) -> tuple[EncoderConfig, EmbedFilter | None]:
    """One validated spec from ``config`` or keyword settings, and a prebuilt filter if one was given."""
    given = dict(settings)
    prebuilt = embed_filter if isinstance(embed_filter, EmbedFilter) else None
    if embed_filter is not None and prebuilt is None:
        given["embed_filter"] = embed_filter
    if isinstance(given.get("prompt"), Prompt):
        given["prompt"] = given["prompt"].spec
    if config is not None and not isinstance(config, EncoderConfig):
        msg = f"config must be a valuelens.EncoderConfig, got {type(config).__name__}"
        raise TypeError(msg)
    if config is not None and given:
        msg = (
            f"pass either config= or the settings {', '.join(sorted(given))} as keywords, not both "
            "(use config.replace(...) to change a config)"
        )
        raise ConfigError(msg)
    if config is None:
        if prebuilt is not None:
            given.update(embed_filter=prebuilt.tau, embed_filter_offset=prebuilt.offset)
        config = EncoderConfig.from_dict(given)
    elif prebuilt is not None and (config.embed_filter, config.embed_filter_offset) != (
        prebuilt.tau,
        prebuilt.offset,
    ):
        config = config.replace(embed_filter=prebuilt.tau, embed_filter_offset=prebuilt.offset)
    return config, prebuilt


class Encoder:
    """A training-free sentence encoder over a decoder LLM (see the module docstring).

    ``config`` (an :class:`EncoderConfig`) or its fields as keywords define the embedding;
    ``embed_filter`` may also be a prebuilt :class:`EmbedFilter` (e.g. a loaded one, or an ablation).
    ``encoder.config`` is the spec with ``layers`` resolved for this model.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        config: EncoderConfig | None = None,
        *,
        embed_filter: float | EmbedFilter | None = None,
        name_or_path: str | None = None,
        **settings: Any,
    ) -> None:
        spec, prebuilt = _split_settings(config, embed_filter, settings)
        self.model = model
        self.tokenizer = tokenizer
        self.name_or_path = (
            name_or_path
            or getattr(getattr(model, "config", None), "_name_or_path", None)
            or type(model).__name__
        )
        self.parts: ModelParts = locate(model)
        parts = self.parts
        self.config: EncoderConfig = spec.resolved(*parts.model_key)
        check_loaded(self.config, parts)
        if prebuilt is None and spec.embed_filter is not None:
            prebuilt = build_embed_filter(model, spec.embed_filter, spec.embed_filter_offset)
        self.readout = Readout.build(self.config, parts, prebuilt)
        offset = self.config.embed_filter_offset
        self.readouts: list[Readout] = [
            self.readout,
            *fusion_readouts(
                self.config, parts, prebuilt, lambda tau: build_embed_filter(model, tau, offset)
            ),
        ]
        """The main readout, then one per fusion part (all captured in the same forward)."""
        self.weights: tuple[float, ...] = (1.0, *(part.weight for part in self.config.fusion))
        self.prompt: Prompt | None = resolve_prompt(spec.prompt)
        self.contrast_prompt: Prompt | None = (
            resolve_prompt(self.config.contrast_prompt) if self.config.contrast_layer is not None else None
        )
        self.edit_plan = EditPlan.from_config(self.config)
        """The forward edits the spec makes (Token Prepending, Contrastive Prompting), built once."""
        self.postprocess: Postprocess | None = None
        self._pass_positions = "position_ids" in inspect.signature(self.parts.backbone.forward).parameters
        self._queries: Encoder | None = None
        self.lexical: LexicalLens | None = lexical_lens(self) if self.config.lexical is not None else None
        """The lexical part's lens (:mod:`valuelens.lexical`), ``None`` without one."""
        self.lexical_weight: float | None = self.config.lexical
        """This side's lexical weight (documents: ``lexical``; :meth:`for_queries`: ``lexical_query``)."""
        reference = self.config.postprocess
        if reference is not None:
            # a fit: reference is fitted by this encoder (raw, so far) on first use, then read from the cache
            first_use = reference.startswith(FIT_PREFIX)
            state = fitted_state(self, reference) if first_use else load_postprocess(reference, self.config)
            self.postprocess = state
            raw = sum(r.dimension for r in self.readouts)
            if self.postprocess.input_dim != raw:
                msg = (
                    f"the post-processing state {self.config.postprocess!r} was fitted on {self.postprocess.input_dim}-dim "
                    f"embeddings, this encoder's are {raw}-dim"
                )
                raise ConfigError(msg)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str] | None = None,
        config: EncoderConfig | None = None,
        *,
        device: str | torch.device | None = None,
        dtype: Any = None,
        embed_filter: float | EmbedFilter | None = None,
        truncate_layers: bool = True,
        preset: str | None = None,
        **kwargs: Any,
    ) -> Encoder:
        """Load a model folder, a bundled model name (``"smollm2-135m"``, ...) or a hub id.

        The spec is ``config`` or its fields as keywords (``recipe="va"``, ``layers=...``); other
        keywords go to transformers' ``from_pretrained``. ``preset="best"`` starts from the model's
        recommended spec; keyword fields given override it, and dependent parts they invalidate are
        dropped with a log line (:func:`valuelens.presets.resolution.resolve`). Only the layers up to
        the deepest selected one are loaded (``truncate_layers``), and no LM head. ``path=None`` uses the embedded default model.
        ``device`` defaults to CUDA when available; ``dtype=None`` means float32 on CPU and the
        checkpoint's dtype elsewhere.
        """
        from valuelens import models

        settings = {k: kwargs.pop(k) for k in FIELDS if k in kwargs}
        local = models.path(path)
        if preset is not None:
            if config is not None:
                msg = "pass either preset= or config=, not both (use preset_config(...).replace(...))"
                raise ConfigError(msg)
            if embed_filter is not None and not isinstance(embed_filter, EmbedFilter):
                settings["embed_filter"], embed_filter = embed_filter, None  # a field like the others
            config = resolve(preset, path, settings)  # the reference as given: the log line names it
            settings = {}
        spec, prebuilt = _split_settings(config, embed_filter, settings)  # validated before any loading
        spec = resolve_config(local, spec, trust_remote_code=bool(kwargs.get("trust_remote_code", False)))
        keep = spec.deepest_layer + 1 if truncate_layers else None
        model, tokenizer = load_model(local, keep_layers=keep, device=device, dtype=dtype, **kwargs)
        if prebuilt is None and spec.embed_filter is not None:
            prebuilt = EmbedFilter.from_model(local, tau=spec.embed_filter, offset=spec.embed_filter_offset)
        return cls(
            model,
            tokenizer,
            spec,
            embed_filter=prebuilt,
            name_or_path=str(path) if path is not None else models.DEFAULT_MODEL,
        )

    # ------------------------------------------------------------------ properties
    @property
    def recipe(self) -> Recipe:
        return self.readout.recipe

    @property
    def layers(self) -> tuple[int, ...]:
        """The resolved decoder layers (0-based)."""
        return self.readout.plan.layers

    @property
    def embed_filter(self) -> EmbedFilter | None:
        return self.readout.embed_filter

    @property
    def max_length(self) -> int:
        """Token limit per text, prompt included (``config.max_length`` or the default 512)."""
        return self.config.effective_max_length

    @property
    def passes(self) -> int:
        """Forward passes per text: one per prompt template (eight for MetaEOL)."""
        return self.prompt.passes if self.prompt is not None else 1

    @property
    def device(self) -> torch.device:
        """Where inputs go: the device of the input embeddings."""
        backbone: Any = self.parts.backbone  # a transformers PreTrainedModel
        return backbone.get_input_embeddings().weight.device

    @property
    def dimension(self) -> int:
        """Size of the embeddings :meth:`encode` returns."""
        if self.postprocess is not None:
            size = self.postprocess.output_dim
        else:
            size = sum(readout.dimension for readout in self.readouts)
        return size + (self.lexical.dimension if self.lexical is not None else 0)

    def current_parts(self) -> ModelParts:
        """The model's parts, located again only if an adapter (e.g. LoRA) replaced modules in place."""
        if not self.parts.current():
            self.parts = locate(self.model)
        return self.parts

    # ------------------------------------------------------------------ the pipeline
    def tokenize(
        self, texts: Sequence[str], template_index: int = 0, *, max_length: int | None = None
    ) -> tuple[list[TokenizedText], int]:
        """Prompted tokenization with pooled spans (and Token Prepending's placeholder, Contrastive
        Prompting's auxiliary prompt when the spec has them); returns items and how many texts were
        truncated (under the prompt or the auxiliary prompt)."""
        limit = max_length or self.max_length
        placeholder = placeholder_token(self.tokenizer) if self.config.prepend_layers is not None else None
        items, n_truncated = tokenize(
            self.tokenizer,
            texts,
            prompt=self.prompt,
            template_index=template_index,
            max_length=limit,
            placeholder=placeholder,
        )
        if self.contrast_prompt is not None:
            auxes, _ = tokenize(
                self.tokenizer, texts, prompt=self.contrast_prompt, max_length=limit, placeholder=placeholder
            )
            items = [dataclasses.replace(item, aux=aux) for item, aux in zip(items, auxes, strict=True)]
            n_truncated = sum(item.truncated or aux.truncated for item, aux in zip(items, auxes, strict=True))
        return items, n_truncated

    def collate(self, items: Sequence[TokenizedText]) -> Batch:
        """Pad tokenized items to one batch, on the tokenizer's padding side."""
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        side: Literal["left", "right"] = (
            "left" if getattr(self.tokenizer, "padding_side", "right") == "left" else "right"
        )
        return collate(items, pad_id=pad, padding_side=side)

    def model_inputs(self, batch: Batch, device: torch.device) -> dict[str, Any]:
        """The backbone's keyword arguments for ``batch`` (positions only where the model takes them)."""
        inputs: dict[str, Any] = {
            "input_ids": batch.input_ids.to(device),
            "attention_mask": batch.attention_mask.to(device),
            "use_cache": False,
        }
        if self._pass_positions:
            inputs["position_ids"] = batch.position_ids.to(device)
        return inputs

    @contextlib.contextmanager
    def capture(
        self,
        attention_mask: Tensor,
        batch: Batch | None = None,
        readouts: Sequence[Readout] | None = None,
        *,
        stop_early: bool = True,
    ) -> Iterator[CaptureSession]:
        """Capture ``readouts`` (default: this encoder's own) during a forward run in the ``with`` body,
        pooling over ``batch``'s spans with its edits of the forward; hooks are removed on exit.

        ``batch`` comes from :meth:`collate` (``None``: pool over every real token, no edits);
        Contrastive Prompting's auxiliary pass runs here, before the body. Host frameworks that run the
        forward themselves use it. Usage: ``with enc.capture(mask, batch) as session: model(...)``, then
        ``enc.finish(session.layer_vectors())``.
        """
        readouts = self.readouts if readouts is None else list(readouts)
        device = attention_mask.device
        if batch is None:
            start = torch.zeros(attention_mask.shape[0], dtype=torch.long, device=device)
            end = torch.full_like(start, attention_mask.shape[1])
            marker = aux = None
        else:
            start, end, marker, aux = (
                batch.span_start.to(device),
                batch.span_end.to(device),
                batch.marker,
                batch.aux,
            )
        weights, index = pooling_inputs(attention_mask, start, end, {r.plan.pool for r in readouts})
        aux_heads = self.contrast_heads(aux) if aux is not None else None
        try:
            edits = self.edit_plan.for_batch(
                index=index, span_start=start, marker=marker, aux_heads=aux_heads
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        with capturing(
            self.current_parts(),
            [r.plan for r in readouts],
            attention_mask=attention_mask,
            weights=weights,
            index=index,
            stop_early=stop_early,
            edits=edits,
        ) as session:
            yield session

    def contrast_heads(self, aux: Batch) -> Tensor:
        """Contrastive Prompting's first step: run the auxiliary-prompt rows ``aux`` up to
        ``contrast_layer`` and return the last token's head outputs there, ``[B, H*D]`` fp32."""
        layer = self.config.contrast_layer
        assert layer is not None
        plan = CapturePlan(signal="head", pool="last", layers=(layer,))
        inputs = self.model_inputs(aux, self.device)
        mask = inputs["attention_mask"]
        _, index = pooling_inputs(mask, aux.span_start.to(mask.device), aux.span_end.to(mask.device), ())
        edits = self.edit_plan.prepend_only(index=index, marker=aux.marker)
        with capturing(
            self.current_parts(), [plan], attention_mask=mask, index=index, edits=edits
        ) as session:
            self.parts.backbone(**inputs)
        return session.captures[0].layer_vectors()[0]

    def forward(self, batch: Batch, readouts: Sequence[Readout] | None = None) -> list[Tensor]:
        """One forward pass over ``batch`` for ``readouts`` (default: this encoder's own), each giving
        ``[B, dimension]`` fp32 on the model's device. Stops after the deepest layer any readout needs
        (Contrastive Prompting first runs the auxiliary prompt up to its layer)."""
        readouts = self.readouts if readouts is None else list(readouts)
        inputs = self.model_inputs(batch, self.device)
        with self.capture(inputs["attention_mask"], batch, readouts) as session:
            self.parts.backbone(**inputs)
        parts = self.parts
        return [r.finish(v, parts) for r, v in zip(readouts, session.layer_vectors(), strict=True)]

    def finish(self, layer_vectors: Sequence[Sequence[Tensor]], lexical: LexicalPart | None = None) -> Tensor:
        """The embedding from a capture of this encoder's readouts (``session.layer_vectors()``):
        each readout's recipe steps, then :meth:`combine`, then the texts' ``lexical`` part
        (:meth:`lexical_part`) when the spec has one. Usage: see :meth:`capture`."""
        parts = self.current_parts()
        emb = self.combine(
            [r.finish(list(v), parts) for r, v in zip(self.readouts, layer_vectors, strict=True)]
        )
        return self.join_lexical(emb, lexical)

    def combine(self, vectors: Sequence[Tensor]) -> Tensor:
        """The model's part of the embedding from one ``[n, dim]`` tensor per readout (:attr:`readouts`):
        the fusion parts concatenated (:func:`valuelens.readout.fuse`), then the fitted post-processing."""
        emb = fuse(vectors, self.weights)
        if self.postprocess is not None:
            emb = self.postprocess.transform(emb)
        return emb

    def lexical_part(self, texts: Sequence[str]) -> LexicalPart | None:
        """The lexical vectors of ``texts`` (read whole, without the prompt) at this side's weight;
        ``None`` when the spec has no lexical part."""
        if self.lexical is None or self.lexical_weight is None:
            return None
        return LexicalPart(self.lexical.encode(texts), self.lexical_weight)

    def join_lexical(self, dense: Tensor, lexical: LexicalPart | None) -> Tensor:
        """``dense`` (from :meth:`combine`) with the texts' lexical part after it, as the spec asks."""
        if self.lexical is None:
            return dense
        if lexical is None:
            msg = "this encoder's spec has a lexical part: pass the texts' lexical_part(texts) to join"
            raise ConfigError(msg)
        return lexical.join(dense)

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        normalize: bool = False,
        show_progress: bool = False,
        convert_to_tensor: bool = False,
        max_tokens_per_batch: int | Literal["auto"] | None = "auto",
    ) -> np.ndarray | Tensor:
        """Embed ``texts``: ``[n, dimension]`` float32 (a bare string gives ``[dimension]``).

        Batches are sorted by length to cut padding and the input order is restored; a batch also
        holds at most ``max_tokens_per_batch`` padded tokens (``batch_size`` stays the upper bound on
        texts), so long texts go in small batches: ``"auto"`` is 2048 on CPU (measured fastest,
        docs/performance.md) and 16384 on accelerators, ``None`` turns the budget off. An empty list
        gives a ``[0, dimension]`` array. Texts longer than ``max_length`` tokens are truncated (the
        prompt is kept) with one :class:`~valuelens.batching.TruncationWarning` per call, or, under
        ``long_text="chunk"``, embedded in overlapping windows whose vectors are averaged
        (:mod:`valuelens.chunking`; :mod:`valuelens.batching` runs the batches).
        """
        items, single = check_texts(texts)
        check_batch_size(batch_size)
        check_token_budget(max_tokens_per_batch)
        (result,) = embed_all(
            [self],
            items,
            batch_size=batch_size,
            show_progress=show_progress,
            max_tokens_per_batch=max_tokens_per_batch,
            stacklevel=2,
        )
        if normalize:
            result = torch.nn.functional.normalize(result, dim=-1)
        if single:
            result = result[0]
        return result if convert_to_tensor else result.cpu().numpy()

    def for_queries(self) -> Encoder:
        """The encoder search queries go through: this one, or (when the spec has a ``query_template``) a
        copy that reads them under that template, sharing the model, readouts, fusion and post-processing,
        so queries and documents land in one space; ``lexical_query`` sets the queries' lexical weight."""
        config = self.config
        if config.query_template is None and config.lexical_query is None:
            return self
        if self._queries is None:
            twin = copy.copy(self)
            if config.query_template is not None:
                twin.prompt = resolve_prompt(config.query_template)
            if config.lexical_query is not None:
                twin.lexical_weight = config.lexical_query
            self._queries = twin
        return self._queries

    def encode_query(self, texts: str | Sequence[str], **kwargs: Any) -> np.ndarray | Tensor:
        """:meth:`encode` for search queries: under ``query_template`` when the spec has one (documents go
        through :meth:`encode`). Usage: ``enc.encode_query("what causes rain?", normalize=True)``."""
        return self.for_queries().encode(texts, **kwargs)

    def __repr__(self) -> str:
        extras = []
        if self.prompt is not None:
            extras.append(f"prompt={self.config.prompt!r}")
        if self.embed_filter is not None:
            extras.append(f"embed_filter={self.embed_filter.tau:g}")
        lexical, query = self.config.lexical, self.config.lexical_query
        if lexical is not None:
            extras.append(f"lexical={lexical:g}" + (f"/{query:g}" if query is not None else ""))
        layers = self.layers
        shown = (
            f"{layers[0]}-{layers[-1]}"
            if len(layers) > 2 and layers == tuple(range(layers[0], layers[-1] + 1))
            else ",".join(map(str, layers))
        )
        tail = (", " + ", ".join(extras)) if extras else ""
        return f"Encoder({self.name_or_path!r}, recipe={self.recipe.name!r}, layers={shown!r}{tail}, dim={self.dimension})"
