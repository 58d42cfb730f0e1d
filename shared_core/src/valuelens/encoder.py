"""The encoder: tokenize → sort and batch → capture → recipe readout → (average prompt passes) → normalize.

Usage::

    enc = Encoder.from_pretrained(recipe="va")                 # the embedded default model
    vectors = enc.encode(["A cat sits.", "A dog runs."])       # np.float32 [2, enc.dimension]
    enc = Encoder(model, tokenizer, recipe="aligned-wva", prompt="futureeol", embed_filter=2)
    enc = Encoder(model, tokenizer, EncoderConfig(recipe="va", layers="20-27"))

This module holds the pipeline only: loading is :mod:`valuelens.loading`, the spec
:mod:`valuelens.config`, the recipe math :mod:`valuelens.readout`, the hooks :mod:`valuelens.capture`,
and several encoders sharing forward passes :mod:`valuelens.shared`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from valuelens.architectures import ModelParts, locate
from valuelens.capture import CaptureSession, capturing
from valuelens.config import FIELDS, EncoderConfig
from valuelens.embed_filter import EmbedFilter
from valuelens.errors import ConfigError, EncodeOutOfMemoryError
from valuelens.inputs import check_batch_size, check_texts, check_token_budget, token_budget
from valuelens.layers import resolve_layers
from valuelens.loading import build_embed_filter, check_load_options, load_model, resolve_config
from valuelens.postprocess import Postprocess, load_postprocess
from valuelens.presets.resolution import resolve
from valuelens.prompts import Prompt, resolve_prompt
from valuelens.readout import CapturePlan, Readout, average_passes, fuse, pooling_inputs
from valuelens.recipes import LAST_ATTENTION_RECIPES, Recipe
from valuelens.steering import Contrast, Prepend
from valuelens.tokenization import Batch, TokenizedText, collate, placeholder_token, tokenize

__all__ = ["Encoder", "TruncationWarning", "plan_batches", "warn_truncated"]


class TruncationWarning(UserWarning):
    """Some texts were longer than ``max_length`` tokens and were cut (the prompt is kept)."""


def _check_loaded(config: EncoderConfig, parts: ModelParts) -> None:
    """Every layer a resolved spec reads (or prepends / contrasts at) must be one the model loaded."""
    if parts.n_layers == parts.full_depth:
        return  # resolution already checked the indices against the model's depth
    used: list[tuple[str, object]] = [("layers", config.layers)]
    used += [(f"fusion[{i}].layers", part.layers) for i, part in enumerate(config.fusion)]
    used += [("prepend_layers", config.prepend_layers), ("contrast_layer", config.contrast_layer)]
    deepest = {name: max(spec) if isinstance(spec, tuple) else spec for name, spec in used}
    missing = [f"{name}={i}" for name, i in deepest.items() if isinstance(i, int) and i >= parts.n_layers]
    if missing:
        msg = (
            f"this spec reads a decoder layer the model does not hold ({', '.join(missing)}): only its first "
            f"{parts.n_layers} of {parts.full_depth} layers were loaded (cut for a shallower spec); load "
            "it again, e.g. Encoder.from_pretrained(path, config), or with truncate_layers=False"
        )
        raise ConfigError(msg)


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
        _check_loaded(self.config, parts)
        if prebuilt is None and spec.embed_filter is not None:
            prebuilt = build_embed_filter(model, spec.embed_filter, spec.embed_filter_offset)
        self.readout = Readout.build(self.config, parts, prebuilt)
        self.readouts: list[Readout] = [self.readout, *self._fusion_readouts(prebuilt)]
        """The main readout, then one per fusion part (all captured in the same forward)."""
        self.weights: tuple[float, ...] = (1.0, *(part.weight for part in self.config.fusion))
        self.prompt: Prompt | None = resolve_prompt(spec.prompt)
        self.contrast_prompt: Prompt | None = (
            resolve_prompt(self.config.contrast_prompt) if self.config.contrast_layer is not None else None
        )
        self.postprocess: Postprocess | None = None
        if self.config.postprocess is not None:
            self.postprocess = load_postprocess(self.config.postprocess, self.config)
            raw = sum(r.dimension for r in self.readouts)
            if self.postprocess.input_dim != raw:
                msg = (
                    f"the post-processing state {self.config.postprocess!r} was fitted on {self.postprocess.input_dim}-dim "
                    f"embeddings, this encoder's are {raw}-dim"
                )
                raise ConfigError(msg)
        self._pass_positions = "position_ids" in inspect.signature(self.parts.backbone.forward).parameters

    def _fusion_readouts(self, main_filter: EmbedFilter | None) -> list[Readout]:
        """One readout per fusion part (its own recipe, layers and EmbedFilter; the main layer combine)."""
        readouts = []
        for part in self.config.fusion:
            ef = None
            if part.embed_filter is not None:
                if main_filter is not None and main_filter.tau == part.embed_filter:
                    ef = main_filter
                else:
                    ef = build_embed_filter(self.model, part.embed_filter, self.config.embed_filter_offset)
            recipe = EncoderConfig(
                recipe=part.recipe,
                layers=part.layers,
                embed_filter=part.embed_filter,
                embed_filter_offset=self.config.embed_filter_offset,
                combine=self.config.combine,
                drop_prefix=self.config.drop_prefix and part.recipe in LAST_ATTENTION_RECIPES,
            )
            readouts.append(Readout.build(recipe, self.parts, ef))
        return readouts

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

    def adopt(self, given: Mapping[str, Any], *, device: Any = None, dtype: Any = None) -> EncoderConfig:
        """Check settings a caller asked for against this encoder; return its (resolved) config.

        ``given`` holds spec fields set explicitly (``layers="auto"`` agrees with any layers), plus the
        load options ``device`` / ``dtype``. Raises :class:`ConfigError` naming every conflict.
        Usage: ``config = encoder.adopt({"recipe": "va"}, device="cpu")``.
        """
        if self.embed_filter is not None and self.embed_filter.kind != "spectral":
            msg = (
                f"this Encoder uses {self.embed_filter!r}, an ablation baseline that no EncoderConfig "
                "describes (embed_filter=τ means EmbedFilter's spectral band)"
            )
            raise ConfigError(msg)
        unknown = sorted(set(given) - set(FIELDS))
        if unknown:
            msg = f"unknown setting(s) {', '.join(map(repr, unknown))}: choose from {', '.join(FIELDS)}"
            raise ConfigError(msg)
        wanted = {k: v for k, v in given.items() if not (k == "layers" and _is_auto(v))}
        try:
            candidate = self.config.replace(**wanted)
            if "layers" in wanted:
                candidate = candidate.replace(layers=resolve_layers(candidate.layers, self.parts.full_depth))
            differing = [item.split(":")[0] for item in candidate.diff(self.config)]
        except ConfigError:  # the given values do not even form a spec together with the encoder's
            differing = [k for k, v in wanted.items() if v != getattr(self.config, k, None)]
        conflicts = [f"{k}={wanted[k]!r} (the encoder has {getattr(self.config, k)!r})" for k in differing]
        conflicts += check_load_options(self.model, device=device, dtype=dtype)
        if conflicts:
            msg = (
                "these settings disagree with the valuelens.Encoder given: "
                + "; ".join(conflicts)
                + ". An Encoder's settings are fixed when it is built: leave them unset to use the "
                "Encoder's, or build a new Encoder with the settings you want."
            )
            raise ConfigError(msg)
        return self.config

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
            return self.postprocess.output_dim
        return sum(readout.dimension for readout in self.readouts)

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
        Prompting's auxiliary prompt when the spec has them); returns items and how many were truncated."""
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
        span_start: Tensor,
        span_end: Tensor,
        readouts: Sequence[Readout] | None = None,
        *,
        stop_early: bool = True,
        marker: Tensor | None = None,
        aux_heads: Tensor | None = None,
    ) -> Iterator[CaptureSession]:
        """Capture ``readouts`` (default: this encoder's own) during a forward run in the ``with`` body,
        pooling over each row's span ``[start, end)``; hooks are removed on exit.

        With Token Prepending ``marker`` holds each row's placeholder position; with Contrastive
        Prompting ``aux_heads`` the auxiliary prompt's heads (:meth:`contrast_heads`).
        Usage: ``with enc.capture(mask, start, end) as session: model(...)``, then
        ``session.captures[0].layer_vectors()``. Host frameworks that run the forward themselves use it.
        """
        readouts = self.readouts if readouts is None else list(readouts)
        device = attention_mask.device
        weights, index = pooling_inputs(
            attention_mask, span_start.to(device), span_end.to(device), {r.plan.pool for r in readouts}
        )
        config = self.config
        prepend = None
        if config.prepend_layers is not None:
            if marker is None:
                msg = "this encoder uses Token Prepending (prepend_layers): tokenize with Encoder.tokenize"
                raise ConfigError(msg)
            assert isinstance(config.prepend_layers, tuple)
            prepend = Prepend(frozenset(config.prepend_layers), marker.to(device), index)
        contrast = None
        if config.contrast_layer is not None:
            if aux_heads is None:
                msg = "this encoder uses Contrastive Prompting (contrast_layer): pass aux_heads=contrast_heads(...)"
                raise ConfigError(msg)
            contrast = Contrast(config.contrast_layer, aux_heads, index, config.contrast_scale)
        key_start = None
        if any(r.plan.drop_prefix for r in readouts):  # the text starts at the placeholder, if any
            key_start = (marker if marker is not None else span_start).to(device)
        with capturing(
            self.current_parts(),
            [r.plan for r in readouts],
            attention_mask=attention_mask,
            weights=weights,
            index=index,
            key_start=key_start,
            stop_early=stop_early,
            prepend=prepend,
            contrast=contrast,
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
        prepend = None
        if self.config.prepend_layers is not None and aux.marker is not None:
            assert isinstance(self.config.prepend_layers, tuple)
            prepend = Prepend(frozenset(self.config.prepend_layers), aux.marker.to(mask.device), index)
        with capturing(
            self.current_parts(), [plan], attention_mask=mask, index=index, prepend=prepend
        ) as session:
            self.parts.backbone(**inputs)
        return session.captures[0].layer_vectors()[0]

    def forward(self, batch: Batch, readouts: Sequence[Readout] | None = None) -> list[Tensor]:
        """One forward pass over ``batch`` for ``readouts`` (default: this encoder's own), each giving
        ``[B, dimension]`` fp32 on the model's device. Stops after the deepest layer any readout needs
        (Contrastive Prompting first runs the auxiliary prompt up to its layer)."""
        readouts = self.readouts if readouts is None else list(readouts)
        aux_heads = self.contrast_heads(batch.aux) if batch.aux is not None else None
        inputs = self.model_inputs(batch, self.device)
        with self.capture(
            inputs["attention_mask"],
            batch.span_start,
            batch.span_end,
            readouts,
            marker=batch.marker,
            aux_heads=aux_heads,
        ) as session:
            self.parts.backbone(**inputs)
        return [
            readout.finish(capture.layer_vectors(), self.parts)
            for readout, capture in zip(readouts, session.captures, strict=True)
        ]

    def combine(self, vectors: Sequence[Tensor]) -> Tensor:
        """The embedding from one ``[n, dim]`` tensor per readout (:attr:`readouts`): the fusion parts
        concatenated (:func:`valuelens.readout.fuse`), then the fitted post-processing."""
        emb = fuse(vectors, self.weights)
        if self.postprocess is not None:
            emb = self.postprocess.transform(emb)
        return emb

    def embed_batch(self, batch: Batch) -> Tensor:
        """Embed one collated batch: ``[B, dimension]`` fp32 on the model's device."""
        return self.combine(self.forward(batch))

    def run(
        self,
        items: Sequence[str],
        readouts: Sequence[Readout],
        *,
        batch_size: int,
        max_tokens_per_batch: int | None = None,
        progress: tqdm | None = None,
    ) -> tuple[list[Tensor], int]:
        """Embed checked ``items`` for ``readouts`` sharing this encoder's model, tokenizer and prompt.

        Texts are sorted by length (less padding), packed into batches (:func:`plan_batches`) and the
        order restored; a prompt with several
        templates (MetaEOL) runs one pass each and averages them. A batch that runs out of memory is
        split in halves and retried, down to one text (:meth:`_embed_chunk`). Returns one ``[n, dim]``
        tensor per readout and how many texts were truncated.
        """
        device = self.device
        if not items:
            return [torch.zeros((0, r.dimension), dtype=torch.float32, device=device) for r in readouts], 0
        passes: list[list[Tensor]] = [[] for _ in readouts]
        n_truncated = 0
        for template_index in range(self.passes):
            tokenized, truncated = self.tokenize(items, template_index)
            n_truncated = max(n_truncated, truncated)
            order = sorted(range(len(items)), key=lambda i: -len(tokenized[i].ids))
            outs = [
                torch.empty((len(items), r.dimension), dtype=torch.float32, device=device) for r in readouts
            ]
            lengths = [len(item.ids) for item in tokenized]
            for chunk in plan_batches(order, lengths, batch_size, max_tokens_per_batch):
                embedded = self._embed_chunk(tokenized, chunk, readouts)
                rows = torch.tensor(chunk, device=device)
                for out, emb in zip(outs, embedded, strict=True):
                    out[rows] = emb.to(device)
                if progress is not None:
                    progress.update(len(chunk))
            for collected, out in zip(passes, outs, strict=True):
                collected.append(out)
        return [average_passes(collected) for collected in passes], n_truncated

    def _embed_chunk(
        self, tokenized: Sequence[TokenizedText], chunk: list[int], readouts: Sequence[Readout]
    ) -> list[Tensor]:
        """Embed the texts ``chunk`` (indices into ``tokenized``) in one batch; when that runs out of
        memory, embed each half on its own (recursively), down to one text, which then raises
        :class:`EncodeOutOfMemoryError` naming its index and length."""
        try:
            return self.forward(self.collate([tokenized[i] for i in chunk]), readouts)
        except torch.OutOfMemoryError as exc:
            if len(chunk) == 1:
                msg = (
                    f"out of memory embedding texts[{chunk[0]}] on its own ({len(tokenized[chunk[0]].ids)} "
                    f"tokens, prompt included) on {self.device}: lower max_length (now {self.max_length}), "
                    "or load the model in a smaller dtype or on a device with more free memory"
                )
                raise EncodeOutOfMemoryError(msg) from exc
        # retried outside the except block, so the failed attempt's tensors (held by the traceback) are freed
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        half = len(chunk) // 2
        first = self._embed_chunk(tokenized, chunk[:half], readouts)
        second = self._embed_chunk(tokenized, chunk[half:], readouts)
        return [torch.cat(pair) for pair in zip(first, second, strict=True)]

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
        prompt is kept) with one :class:`TruncationWarning` per call.
        """
        items, single = check_texts(texts)
        check_batch_size(batch_size)
        check_token_budget(max_tokens_per_batch)
        with (
            tqdm(
                total=len(items) * self.passes,
                desc="valuelens",
                unit="text",
                disable=not show_progress or not items,
            ) as progress,
            torch.inference_mode(),
        ):
            vectors, n_truncated = self.run(
                items,
                self.readouts,
                batch_size=batch_size,
                max_tokens_per_batch=token_budget(max_tokens_per_batch, self.device.type),
                progress=progress,
            )
            result = self.combine(vectors)
        warn_truncated(n_truncated, len(items), self.max_length, stacklevel=3)
        if normalize:
            result = torch.nn.functional.normalize(result, dim=-1)
        if single:
            result = result[0]
        return result if convert_to_tensor else result.cpu().numpy()

    def __repr__(self) -> str:
        extras = []
        if self.prompt is not None:
            extras.append(f"prompt={self.config.prompt!r}")
        if self.embed_filter is not None:
            extras.append(f"embed_filter={self.embed_filter.tau:g}")
        layers = self.layers
        shown = (
            f"{layers[0]}-{layers[-1]}"
            if len(layers) > 2 and layers == tuple(range(layers[0], layers[-1] + 1))
            else ",".join(map(str, layers))
        )
        tail = (", " + ", ".join(extras)) if extras else ""
        return f"Encoder({self.name_or_path!r}, recipe={self.recipe.name!r}, layers={shown!r}{tail}, dim={self.dimension})"


def plan_batches(
    order: Sequence[int], lengths: Sequence[int], batch_size: int, max_tokens: int | None = None
) -> list[list[int]]:
    """Split ``order`` (text indices, longest first) into batches of at most ``batch_size`` texts and,
    with ``max_tokens``, at most that many padded tokens (rows × the batch's longest text). A text
    longer than the budget gets a batch of its own.

    Usage: ``plan_batches([2, 0, 1], lengths=[5, 3, 9], batch_size=32, max_tokens=12)`` → ``[[2], [0, 1]]``.
    """
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        if current:
            width = lengths[current[0]]  # the longest: order is longest first
            full = len(current) == batch_size
            if full or (max_tokens is not None and (len(current) + 1) * width > max_tokens):
                batches.append(current)
                current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def warn_truncated(n_truncated: int, total: int, max_length: int, *, stacklevel: int) -> None:
    """One :class:`TruncationWarning` for a call that cut ``n_truncated`` of ``total`` texts."""
    if n_truncated:
        warnings.warn(
            f"{n_truncated} of {total} texts were longer than max_length={max_length} tokens "
            "and were truncated (the prompt was kept)",
            TruncationWarning,
            stacklevel=stacklevel + 1,
        )


def _is_auto(layers: Any) -> bool:
    return isinstance(layers, str) and layers.strip().lower() == "auto"
