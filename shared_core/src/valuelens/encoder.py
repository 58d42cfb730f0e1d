"""The encoder: it assembles a spec's pieces over one model and embeds texts with them.

Usage::

    enc = Encoder.from_pretrained(recipe="va")                 # the embedded default model
    vectors = enc.encode(["A cat sits.", "A dog runs."])       # np.float32 [2, enc.dimension]
    enc = Encoder(model, tokenizer, recipe="aligned-wva", prompt="futureeol", embed_filter=2)
    enc = Encoder(model, tokenizer, EncoderConfig(recipe="va", layers="20-27"))

Its pieces: the texts' reading (:class:`~valuelens.tokenization.TextReader`), the forward pass
(:class:`~valuelens.forward.ForwardPass`), the readouts (:mod:`valuelens.readout`), what a vector is made of
(:class:`~valuelens.composition.Composition`) and its fitted states (:mod:`valuelens.states`, or
``states=``); :mod:`valuelens.batching` drives them, :mod:`valuelens.loading` loads the model.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from valuelens.architectures import ModelParts, locate
from valuelens.batching import Stages, embed_all, encode_many
from valuelens.bm25 import BM25Part
from valuelens.composition import Composition, FittedStates, Side
from valuelens.config import DEFAULT_MAX_LENGTH, FIELDS, EncoderConfig
from valuelens.embed_filter import EmbedFilter
from valuelens.errors import ConfigError
from valuelens.forward import ForwardPass
from valuelens.inputs import check_batch_size, check_texts, check_token_budget
from valuelens.layers import layers_label
from valuelens.lexical import LexicalPart
from valuelens.loading import build_embed_filter, check_loaded, load_model, resolve_config, spec_and_filter
from valuelens.presets.resolution import resolve
from valuelens.prompts import Prompt
from valuelens.readout import Readout, build_readouts
from valuelens.recipes import Recipe
from valuelens.states import RawEncoder, build_states
from valuelens.tokenization import TextReader

__all__ = ["Encoder"]


class Encoder:
    """A training-free sentence encoder over a decoder LLM (see the module docstring).

    ``config`` (an :class:`EncoderConfig`) or its fields as keywords define the embedding;
    ``embed_filter`` may also be a prebuilt :class:`EmbedFilter` (e.g. a loaded one, or an ablation);
    ``states`` the fitted states the spec needs (default: built by :func:`valuelens.states.build_states`,
    from the cache or fitted once). ``encoder.config`` is the spec with ``layers`` resolved for this model.
    """

    side: Side = "document"
    """Which side of a search this encoder embeds for (:meth:`for_queries` gives the query side)."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        config: EncoderConfig | None = None,
        *,
        embed_filter: float | EmbedFilter | None = None,
        states: FittedStates | None = None,
        name_or_path: str | None = None,
        **settings: Any,
    ) -> None:
        spec, prebuilt = spec_and_filter(config, embed_filter, settings)
        self.model = model
        self.tokenizer = tokenizer
        self.name_or_path = (
            name_or_path
            or getattr(getattr(model, "config", None), "_name_or_path", None)
            or type(model).__name__
        )
        parts = locate(model)
        self.config: EncoderConfig = spec.resolved(*parts.model_key)
        check_loaded(self.config, parts)
        self.runner = ForwardPass(model, parts, self.config)
        self.reader = TextReader.for_spec(tokenizer, self.config)
        if prebuilt is None and spec.embed_filter is not None:
            prebuilt = build_embed_filter(model, spec.embed_filter, spec.embed_filter_offset)
        offset = self.config.embed_filter_offset
        readouts = build_readouts(
            self.config, parts, prebuilt, lambda tau: build_embed_filter(model, tau, offset)
        )
        if states is None:
            states = build_states(
                self.config, model=model, tokenizer=tokenizer, raw=self._fit_source(readouts)
            )
        embeddings = parts.backbone.get_input_embeddings().weight  # type: ignore[operator]
        self.composition = Composition.assemble(
            self.config, readouts, states, embeddings=embeddings, tokenizer=tokenizer
        )
        self._queries: Encoder | None = None

    def _fit_source(self, readouts: Sequence[Readout]) -> RawEncoder:
        """The raw vectors a first-use fit reads: these readouts at the default token limit, truncating
        (every encoder of this model and spec then reads the same state, whatever its own limit)."""
        reader = self.reader.replace(max_length=DEFAULT_MAX_LENGTH, long_text="truncate")
        stages = Stages(reader, self.runner, Composition.of_readouts(self.config, readouts))
        return RawEncoder(
            stages, self.name_or_path, self.config.replace(max_length=None, long_text="truncate")
        )

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
        """Load a model folder, a bundled model name (``"smollm2-135m"``; ``None``: the default) or a hub id.

        The spec is ``config`` or its fields as keywords; other keywords go to transformers'
        ``from_pretrained``. ``preset="best"`` starts from the model's recommended spec, which keyword
        fields override (:func:`valuelens.presets.resolution.resolve`). Only the layers up to the deepest
        selected one load (``truncate_layers``), no LM head. ``device``: CUDA when available;
        ``dtype=None``: float32 on CPU, the checkpoint's dtype elsewhere."""
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
        spec, prebuilt = spec_and_filter(config, embed_filter, settings)  # validated before any loading
        spec = resolve_config(local, spec, trust_remote_code=bool(kwargs.get("trust_remote_code", False)))
        keep = spec.deepest_layer + 1 if truncate_layers else None
        model, tokenizer = load_model(local, keep_layers=keep, device=device, dtype=dtype, **kwargs)
        if prebuilt is None and spec.embed_filter is not None:
            prebuilt = EmbedFilter.from_model(local, tau=spec.embed_filter, offset=spec.embed_filter_offset)
        name = str(path) if path is not None else models.DEFAULT_MODEL
        return cls(model, tokenizer, spec, embed_filter=prebuilt, name_or_path=name)

    # ------------------------------------------------------------------ what it is
    @property
    def parts(self) -> ModelParts:
        return self.runner.parts

    @property
    def readouts(self) -> tuple[Readout, ...]:
        """The main readout, then one per fusion part (all captured in the same forward)."""
        return self.composition.readouts

    @property
    def readout(self) -> Readout:
        return self.readouts[0]

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
    def prompt(self) -> Prompt | None:
        """The prompt this side reads texts under (queries: ``query_template`` when the spec has one)."""
        return self.reader.prompt

    @property
    def postprocess(self) -> Any:
        """The fitted post-processing (a :class:`~valuelens.Postprocess`), ``None`` without one."""
        return self.composition.postprocess

    @property
    def lexical(self) -> Any:
        """The lexical part's lens (:class:`~valuelens.lexical.LexicalLens`), ``None`` without one."""
        return self.composition.lexical

    @property
    def max_length(self) -> int:
        """Token limit per text, prompt included (``config.max_length`` or the default 512)."""
        return self.reader.max_length

    @property
    def device(self) -> torch.device:
        return self.runner.device

    @property
    def dimension(self) -> int:
        """Size of the embeddings :meth:`encode` returns (:meth:`encode_raw`'s: ``raw_dimension``)."""
        return self.composition.dimension

    @property
    def raw_dimension(self) -> int:
        return self.composition.raw_dimension

    # ------------------------------------------------------------------ for hosts that run the forward
    def finish(
        self, layer_vectors: Sequence[Sequence[Tensor]], lexical: LexicalPart | BM25Part | None = None
    ) -> Tensor:
        """The embedding from a capture's per-layer vectors (``session.layer_vectors()``): each readout's
        steps, the composition's model part, then the texts' ``lexical`` part when the spec has one."""
        parts = self.runner.current_parts()
        vectors = [r.finish(list(v), parts) for r, v in zip(self.readouts, layer_vectors, strict=True)]
        return self.composition.join(self.composition.dense(vectors), lexical)

    def lexical_part(self, texts: Sequence[str]) -> LexicalPart | BM25Part | None:
        """The lexical vectors of ``texts`` at this side's weight; ``None`` without a lexical part."""
        return self.composition.lexical_part(texts, self.side)

    # ------------------------------------------------------------------ embedding
    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        normalize: bool = False,
        show_progress: bool = False,
        convert_to_tensor: bool = False,
        max_tokens_per_batch: int | Literal["auto"] | None = "auto",
    ) -> np.ndarray | Tensor:
        """Embed ``texts``: ``[n, dimension]`` float32 (a bare string gives ``[dimension]``, an empty list
        ``[0, dimension]``). Batches are sorted by length and hold at most ``max_tokens_per_batch`` padded
        tokens (``"auto"``: 2048 on CPU, 16384 on accelerators; ``None``: no budget). Texts past
        ``max_length`` are truncated, the prompt kept, with one ``TruncationWarning`` per call, or, under
        ``long_text="chunk"``, embedded in windows (:mod:`valuelens.chunking`; :mod:`valuelens.batching`)."""
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

    def encode_raw(
        self, texts: Sequence[str], *, batch_size: int = 32, show_progress: bool = False
    ) -> Tensor:
        """The raw vectors of ``texts`` (the readouts fused; no post-processing, no lexical part): what
        :func:`valuelens.fit_texts` fits a post-processing on. ``[n, raw_dimension]`` fp32."""
        out = encode_many(
            [self],
            texts,
            batch_size=batch_size,
            show_progress=show_progress,
            convert_to_tensor=True,
            raw=True,
        )
        return out[0]  # type: ignore[return-value]

    def for_queries(self) -> Encoder:
        """The encoder search queries go through: this one, or (when the spec has a ``query_template``, a
        ``lexical_query`` or a BM25 part, whose queries carry term weights of their own) the same encoder on
        the query side, sharing the model, readouts, fusion and post-processing, so queries and documents
        land in one space."""
        config = self.config
        bm25 = config.lexical is not None and config.lexical_kind == "bm25"
        if config.query_template is None and config.lexical_query is None and not bm25:
            return self
        if self._queries is None:
            twin = object.__new__(Encoder)
            twin.__dict__.update(self.__dict__)
            twin.reader = TextReader.for_spec(self.tokenizer, config, query=True)
            twin.side = "query"
            self._queries = twin
        return self._queries

    def encode_query(self, texts: str | Sequence[str], **kwargs: Any) -> np.ndarray | Tensor:
        """:meth:`encode` for search queries, on the query side (:meth:`for_queries`).
        Usage: ``enc.encode_query("what causes rain?", normalize=True)``."""
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
        shown = layers_label(self.layers)
        tail = (", " + ", ".join(extras)) if extras else ""
        return f"Encoder({self.name_or_path!r}, recipe={self.recipe.name!r}, layers={shown!r}{tail}, dim={self.dimension})"
