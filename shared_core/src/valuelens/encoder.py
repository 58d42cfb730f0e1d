"""The encoder: tokenize → sort and batch → capture → pool → combine layers → project → normalize.

Usage::

    enc = Encoder.from_pretrained(recipe="va")                 # the embedded default model
    vectors = enc.encode(["A cat sits.", "A dog runs."])       # np.float32 [2, enc.dimension]
    enc = Encoder(model, tokenizer, recipe="aligned-wva", prompt="futureeol", embed_filter=2)
"""

from __future__ import annotations

import contextlib
import inspect
import os
import reprlib
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from valuelens.architectures import ModelParts, locate
from valuelens.capture import CapturePlan, StopForward, capturing
from valuelens.embed_filter import EmbedFilter
from valuelens.errors import ConfigError, SpaceMismatchError
from valuelens.layers import LayerSpec, auto_layers, depth_band, resolve_layers, validate_spec
from valuelens.pooling import combine_layers, last_index, token_weights
from valuelens.prompts import Prompt, resolve_prompt
from valuelens.recipes import Recipe, get_recipe
from valuelens.tokenization import Batch, TokenizedText, collate, tokenize

__all__ = [
    "Encoder",
    "EncoderConfig",
    "TruncationWarning",
    "default_layers",
    "embed_batch_group",
    "encode_many",
]

DEFAULT_MAX_LENGTH = 512
_SHORT = reprlib.Repr()  # short reprs of bad items in error messages
_SHORT.maxstring = _SHORT.maxother = 60
Combine = Literal["mean", "normalized-mean"]
DTypeSpec = Literal["auto", "float32", "bfloat16", "float16"] | torch.dtype | None


class TruncationWarning(UserWarning):
    """Some texts were longer than ``max_length`` tokens and were cut (the prompt is kept)."""


@dataclass(frozen=True)
class EncoderConfig:
    """Everything that defines an embedding besides the model; validated at construction.

    Usage: ``EncoderConfig(recipe="aligned-wva", prompt="futureeol", embed_filter=2)``.
    """

    recipe: str = "va"
    layers: LayerSpec = "auto"
    prompt: str | None = None
    embed_filter: float | None = None
    embed_filter_offset: int = 0
    max_length: int | None = None
    combine: Combine = "mean"
    final_norm: bool = False

    def __post_init__(self) -> None:
        recipe = get_recipe(self.recipe)
        object.__setattr__(self, "recipe", recipe.name)
        validate_spec(self.layers)
        if isinstance(self.layers, list):
            object.__setattr__(self, "layers", tuple(self.layers))
        prompt = resolve_prompt(self.prompt)
        object.__setattr__(self, "prompt", None if prompt is None else prompt.spec)
        if self.embed_filter is not None:
            from valuelens.embed_filter import band

            band(10**6, self.embed_filter, 0)
            if not recipe.residual:
                raise SpaceMismatchError(_space_message(recipe))
        if self.max_length is not None and (
            isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 1
        ):
            msg = f"max_length must be a positive int or None, got {self.max_length!r}"
            raise ConfigError(msg)
        if self.combine not in ("mean", "normalized-mean"):
            msg = f"combine must be 'mean' or 'normalized-mean', got {self.combine!r}"
            raise ConfigError(msg)
        if self.final_norm and recipe.signal != "hidden":
            msg = (
                f"final_norm=True applies to hidden-state recipes (hs, last-token, wmp), not {recipe.name!r}"
            )
            raise ConfigError(msg)


def _space_message(recipe: Recipe, dims: str = "") -> str:
    return (
        f"EmbedFilter projects residual-stream embeddings, but recipe {recipe.name!r} produces "
        f"{recipe.space}-space vectors{dims}. Use a residual-space recipe: 'aligned-va' maps the value "
        "vectors through W_O into the residual stream (VA + EmbedFilter), or 'aligned-wva', 'hs', "
        "'last-token', 'wmp'."
    )


def default_layers(recipe: Recipe, model_type: str, n_layers: int, hidden_size: int) -> tuple[int, ...]:
    """What ``layers="auto"`` means for ``recipe`` on a model: the last layer for last-token/WMP
    recipes, else a per-model, per-recipe default (:data:`valuelens.layers.AUTO_LAYERS`) or the 50–85 %
    band."""
    if recipe.auto_layers == "last":
        return (n_layers - 1,)
    return auto_layers(model_type, n_layers, hidden_size, recipe.name) or depth_band(n_layers)


def resolve_dtype(dtype: DTypeSpec) -> torch.dtype | str | None:
    """A dtype setting (``"float32"``, ``"bf16"``, ``"auto"``, a ``torch.dtype``, ``None``) as transformers takes it."""
    if dtype is None or isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    table = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    try:
        return table[str(dtype).lower()]
    except KeyError:
        msg = f"unknown dtype {dtype!r}: use 'auto', 'float32', 'bfloat16', 'float16' or a torch.dtype"
        raise ConfigError(msg) from None


def check_texts(texts: Any, *, allow_single: bool = True) -> tuple[list[str], bool]:
    """Validate input texts; return them as a list and whether a single string was given.

    Usage: ``items, single = check_texts(["a", "b"])``. ``None``, bytes, non-iterables and non-string
    items raise ``TypeError`` (naming the index); with ``allow_single=False`` a bare string does too.
    """
    if isinstance(texts, str):
        if not allow_single:
            msg = "texts must be a list of strings, got a single str (wrap it in a list)"
            raise TypeError(msg)
        return [texts], True
    if texts is None:
        msg = "texts must be a string or a list of strings, got None"
        raise TypeError(msg)
    if isinstance(texts, (bytes, bytearray)) or not isinstance(texts, Iterable):
        msg = f"texts must be a string or a list of strings, got {type(texts).__name__}"
        raise TypeError(msg)
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            msg = f"texts[{i}] is {_SHORT.repr(text)} ({type(text).__name__}); every item must be a str"
            raise TypeError(msg)
    return items, False


class Encoder:
    """A training-free sentence encoder over a decoder LLM (see the module docstring)."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        recipe: str = "va",
        layers: LayerSpec = "auto",
        prompt: str | Prompt | None = None,
        embed_filter: float | EmbedFilter | None = None,
        max_length: int | None = None,
        *,
        embed_filter_offset: int = 0,
        combine: Combine = "mean",
        final_norm: bool = False,
        name_or_path: str | None = None,
    ) -> None:
        prompt_spec = prompt.spec if isinstance(prompt, Prompt) else prompt
        tau = embed_filter.tau if isinstance(embed_filter, EmbedFilter) else embed_filter
        offset = embed_filter.offset if isinstance(embed_filter, EmbedFilter) else embed_filter_offset
        self.config = EncoderConfig(
            recipe=recipe,
            layers=layers,
            prompt=prompt_spec,
            embed_filter=tau,
            embed_filter_offset=offset,
            max_length=max_length,
            combine=combine,
            final_norm=final_norm,
        )
        self.recipe: Recipe = get_recipe(self.config.recipe)
        self.prompt: Prompt | None = (
            prompt if isinstance(prompt, Prompt) else resolve_prompt(self.config.prompt)
        )
        self.model = model
        self.tokenizer = tokenizer
        self.name_or_path = (
            name_or_path
            or getattr(getattr(model, "config", None), "_name_or_path", None)
            or type(model).__name__
        )
        self.parts: ModelParts = locate(model)
        parts = self.parts
        self.layers: tuple[int, ...] = resolve_layers(
            self.config.layers,
            parts.n_layers,
            auto=default_layers(self.recipe, parts.model_type, parts.n_layers, parts.hidden_size),
        )
        if self.config.final_norm and parts.final_norm is None:
            msg = f"final_norm=True but {parts.model_type!r} has no final norm module"
            raise ConfigError(msg)
        self.embed_filter: EmbedFilter | None = None
        if isinstance(embed_filter, EmbedFilter):
            self.embed_filter = embed_filter
        elif embed_filter is not None:
            self.embed_filter = EmbedFilter.from_model(model, tau=embed_filter, offset=embed_filter_offset)
        if self.embed_filter is not None and self.embed_filter.hidden_size != parts.hidden_size:
            msg = f"the EmbedFilter was built for {self.embed_filter.hidden_size}-dim models, this one has {parts.hidden_size}"
            raise ConfigError(msg)
        self.max_length = self.config.max_length or DEFAULT_MAX_LENGTH
        accepts = inspect.signature(parts.backbone.forward).parameters
        self._pass_positions = "position_ids" in accepts

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike | None = None,
        *,
        recipe: str = "va",
        layers: LayerSpec = "auto",
        prompt: str | None = None,
        embed_filter: float | EmbedFilter | None = None,
        device: str | torch.device | None = None,
        dtype: DTypeSpec = None,
        max_length: int | None = None,
        embed_filter_offset: int = 0,
        combine: Combine = "mean",
        final_norm: bool = False,
        truncate_layers: bool = True,
        **model_kwargs: Any,
    ) -> Encoder:
        """Load a model folder, a bundled model name (``"smollm2-135m"``, ...) or a hub id.

        Only the layers up to the deepest selected one are loaded (``truncate_layers``), and no LM head.
        ``path=None`` uses the embedded default model. ``device`` defaults to CUDA when available;
        ``dtype=None`` means float32 on CPU and the checkpoint's dtype elsewhere.
        """
        from transformers import AutoConfig, AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        from valuelens import models

        tau = embed_filter.tau if isinstance(embed_filter, EmbedFilter) else embed_filter
        EncoderConfig(
            recipe=recipe,
            layers=layers,
            prompt=prompt,
            embed_filter=tau,
            max_length=max_length,
            combine=combine,
            final_norm=final_norm,
        )
        torch_dtype = resolve_dtype(dtype)
        local = models.path(path)
        hf_config = AutoConfig.from_pretrained(
            local, trust_remote_code=model_kwargs.get("trust_remote_code", False)
        )
        text_config = hf_config.get_text_config()
        n_layers = int(text_config.num_hidden_layers)
        recipe_obj = get_recipe(recipe)
        chosen = resolve_layers(
            layers,
            n_layers,
            auto=default_layers(recipe_obj, text_config.model_type, n_layers, text_config.hidden_size),
        )
        if truncate_layers and max(chosen) + 1 < n_layers:
            keep = max(chosen) + 1
            text_config.num_hidden_layers = keep
            if getattr(text_config, "layer_types", None) is not None:
                text_config.layer_types = list(text_config.layer_types)[:keep]
        ef = embed_filter
        if ef is not None and not isinstance(ef, EmbedFilter):
            ef = EmbedFilter.from_model(local, tau=ef, offset=embed_filter_offset)
        kwargs = dict(model_kwargs)
        target = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if torch_dtype is None and "device_map" not in kwargs and torch.device(target).type == "cpu":
            # fp32 on CPU: exact, and faster than bf16 on CPUs without AMX (the cached checkpoints are bf16)
            torch_dtype = torch.float32
        if torch_dtype is not None:
            kwargs["dtype"] = torch_dtype
        # transformers reports the LM head (never loaded here) and any layers left out as "unexpected"
        # keys: silence that report and warn only about weights that are really missing
        previous = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            model, info = AutoModel.from_pretrained(
                local, config=hf_config, output_loading_info=True, **kwargs
            )
        finally:
            hf_logging.set_verbosity(previous)
        if info.get("missing_keys"):
            missing = sorted(info["missing_keys"])
            warnings.warn(
                f"{local}: {len(missing)} weights were not in the checkpoint and are random: {missing[:5]}",
                stacklevel=2,
            )
        if "device_map" not in kwargs:
            model.to(target)
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(local)
        return cls(
            model,
            tokenizer,
            recipe=recipe,
            layers=chosen,
            prompt=prompt,
            embed_filter=ef,
            max_length=max_length,
            embed_filter_offset=embed_filter_offset,
            combine=combine,
            final_norm=final_norm,
            name_or_path=str(path) if path is not None else models.DEFAULT_MODEL,
        )

    # ------------------------------------------------------------------ properties
    @property
    def device(self) -> torch.device:
        """Where inputs go: the device of the input embeddings."""
        return self.parts.backbone.get_input_embeddings().weight.device

    @property
    def raw_dimension(self) -> int:
        """Dimension before EmbedFilter."""
        parts, space = self.parts, self.recipe.space
        if space in ("value", "key"):
            return parts.value_dim
        if space in ("head", "query"):
            return parts.head_output_dim
        if space == "mlp":
            if parts.intermediate_size is None:
                msg = f"cannot tell the MLP width of {parts.model_type!r} from its config"
                raise ConfigError(msg)
            return parts.intermediate_size
        return parts.hidden_size

    @property
    def dimension(self) -> int:
        """Size of the embeddings :meth:`encode` returns."""
        return self.embed_filter.dimension if self.embed_filter is not None else self.raw_dimension

    def settings(self) -> dict[str, Any]:
        """The settings that define this encoder's embeddings, with ``layers`` as an explicit list.

        Usage: ``Encoder.from_pretrained(path, **enc.settings())`` rebuilds the same embeddings.
        Raises ``ConfigError`` for an ablation filter (truncation, random subset): no setting names it.
        """
        ef = self.embed_filter
        if ef is not None and ef.kind != "spectral":
            msg = (
                f"this Encoder uses {ef!r}, an ablation baseline that settings cannot describe "
                "(embed_filter=τ means EmbedFilter's spectral band): pass the EmbedFilter object itself"
            )
            raise ConfigError(msg)
        return {
            "recipe": self.recipe.name,
            "layers": list(self.layers),
            "prompt": self.config.prompt,
            "embed_filter": None if ef is None else float(ef.tau),
            "embed_filter_offset": self.config.embed_filter_offset if ef is None else int(ef.offset),
            "max_length": self.max_length,
            "combine": self.config.combine,
            "final_norm": self.config.final_norm,
        }

    def conflicts(self, **given: Any) -> list[str]:
        """Which of the ``given`` settings disagree with this encoder, as readable strings.

        Values are normalized the way the encoder would normalize them (recipe aliases, prompt names,
        layer specs, ``max_length=None`` as the default); ``layers="auto"`` agrees with any layers.
        Usage: ``if enc.conflicts(recipe="va", prompt=None): ...``.
        """
        actual = self.settings()
        found = []
        for key, value in given.items():
            if key not in actual:
                msg = f"unknown setting {key!r}: choose from {sorted(actual)}"
                raise ConfigError(msg)
            if key == "layers":
                if isinstance(value, str) and value.strip().lower() == "auto":
                    continue
                try:
                    wanted: Any = list(resolve_layers(value, self.parts.n_layers, auto=self.layers))
                except ConfigError:
                    wanted = value
            elif key in ("recipe", "prompt"):
                wanted = getattr(EncoderConfig(**{key: value}), key)
            elif key == "embed_filter":
                wanted = None if value is None else float(value)
            elif key == "max_length":
                wanted = DEFAULT_MAX_LENGTH if value is None else value
            else:
                wanted = value
            if wanted != actual[key]:
                found.append(f"{key}={value!r} (the encoder has {actual[key]!r})")
        return found

    def capture_plan(self) -> CapturePlan:
        """The capture this encoder needs (for host frameworks that run the forward themselves)."""
        return CapturePlan(
            signal=self.recipe.signal,
            pool=self.recipe.pool,
            layers=self.layers,
            final_norm=self.config.final_norm,
        )

    # ------------------------------------------------------------------ the pipeline
    def tokenize(self, texts: Sequence[str], template_index: int = 0) -> tuple[list[TokenizedText], int]:
        """Prompted tokenization with pooled spans; returns items and how many were truncated."""
        return tokenize(
            self.tokenizer,
            texts,
            prompt=self.prompt,
            template_index=template_index,
            max_length=self.max_length,
        )

    def collate(self, items: Sequence[TokenizedText]) -> Batch:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        side = "left" if getattr(self.tokenizer, "padding_side", "right") == "left" else "right"
        return collate(items, pad_id=pad, padding_side=side)

    def pooling_inputs(
        self, attention_mask: Tensor, span_start: Tensor, span_end: Tensor, pools: Iterable[str] | None = None
    ) -> tuple[dict[str, Tensor], Tensor]:
        """Token weights per pool (``"mean"``/``"position"``) and the last-token indices for a batch."""
        wanted = set(pools) if pools is not None else {self.recipe.pool}
        weights = {
            p: token_weights(attention_mask, span_start, span_end, p)
            for p in wanted
            if p in ("mean", "position")
        }
        return weights, last_index(attention_mask)

    def finish(self, per_layer: list[Tensor]) -> Tensor:
        """Per-layer pooled vectors → one embedding per row: W_O (aligned-va), layers, EmbedFilter."""
        if self.recipe.project_out:
            per_layer = [
                self._through_out_proj(layer, v) for layer, v in zip(self.layers, per_layer, strict=True)
            ]
        emb = combine_layers(per_layer, self.config.combine)
        if self.embed_filter is not None:
            emb = self.embed_filter.transform(emb)
        return emb

    def _through_out_proj(self, layer: int, values: Tensor) -> Tensor:
        """Map pooled value vectors ``[B, Hkv*D]`` through layer ``layer``'s W_O (GQA heads expanded)."""
        parts = self.parts
        batch = values.shape[0]
        expanded = values.view(batch, parts.n_kv_heads, 1, parts.head_dim).expand(
            -1, -1, parts.group_size, -1
        )
        z = expanded.reshape(batch, parts.head_output_dim)
        out_proj = parts.out_projs[layer]
        weight = next(out_proj.parameters())
        return out_proj(z.to(device=weight.device, dtype=weight.dtype)).to(torch.float32)

    def refresh_parts(self) -> ModelParts:
        """Re-locate the model's modules (adapters such as LoRA replace projections in place)."""
        self.parts = locate(self.model)
        return self.parts

    def embed_batch(self, batch: Batch) -> Tensor:
        """Embed one collated batch: ``[B, dimension]`` fp32 on the model's device."""
        return embed_batch_group([self], batch)[0]

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        normalize: bool = False,
        show_progress: bool = False,
        convert_to_tensor: bool = False,
    ) -> np.ndarray | Tensor:
        """Embed ``texts``: ``[n, dimension]`` float32 (a bare string gives ``[dimension]``).

        Batches are sorted by length to cut padding and the input order is restored. An empty list
        gives a ``[0, dimension]`` array. Texts longer than ``max_length`` tokens are truncated (the
        prompt is kept) with one :class:`TruncationWarning` per call.
        """
        items, single = check_texts(texts)
        (result,) = encode_many(
            [self],
            items,
            batch_size=batch_size,
            normalize=normalize,
            show_progress=show_progress,
            convert_to_tensor=True,
        )
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


def _check_batch_size(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        msg = f"batch_size must be a positive int, got {batch_size!r}"
        raise ValueError(msg)


def embed_batch_group(encoders: Sequence[Encoder], batch: Batch) -> list[Tensor]:
    """Embed one batch for several encoders over the same model with one forward pass.

    The batch must come from the encoders' shared tokenization (same tokenizer, prompt, max_length).
    """
    first = encoders[0]
    parts = first.refresh_parts()
    for encoder in encoders[1:]:
        encoder.refresh_parts()
    device = first.device
    mask = batch.attention_mask.to(device)
    weights, index = first.pooling_inputs(
        mask, batch.span_start.to(device), batch.span_end.to(device), {e.recipe.pool for e in encoders}
    )
    inputs: dict[str, Tensor | bool] = {
        "input_ids": batch.input_ids.to(device),
        "attention_mask": mask,
        "use_cache": False,
    }
    if first._pass_positions:
        inputs["position_ids"] = batch.position_ids.to(device)
    plans = [encoder.capture_plan() for encoder in encoders]
    with (
        capturing(parts, plans, attention_mask=mask, weights=weights, index=index) as session,
        contextlib.suppress(StopForward),
    ):
        parts.backbone(**inputs)
    return [
        encoder.finish(cap.layer_vectors()) for encoder, cap in zip(encoders, session.captures, strict=True)
    ]


def _group_key(encoder: Encoder) -> tuple:
    prompt = encoder.prompt
    return (
        id(encoder.parts.backbone),
        id(encoder.tokenizer),
        prompt.templates if prompt else None,
        encoder.max_length,
    )


def encode_many(
    encoders: Sequence[Encoder],
    texts: Sequence[str],
    *,
    batch_size: int = 32,
    normalize: bool = False,
    show_progress: bool = False,
    convert_to_tensor: bool = False,
) -> list[np.ndarray] | list[Tensor]:
    """Embed ``texts`` with several encoders, sharing forward passes where they can.

    Encoders over the same model, tokenizer, prompt and ``max_length`` tokenize once and run one
    forward per batch for all their recipes (each gets its own vectors); e.g. VA, HS and WVA(LT) of an
    evaluation cost one pass. Returns one ``[n, dimension]`` array (or tensor) per encoder, in order.

    Usage: ``va, hs = encode_many([Encoder(m, t, recipe="va"), Encoder(m, t, recipe="hs")], texts)``.
    """
    items, _ = check_texts(texts)
    _check_batch_size(batch_size)
    outputs: list[Tensor | None] = [None] * len(encoders)
    groups: dict[tuple, list[int]] = {}
    for i, encoder in enumerate(encoders):
        groups.setdefault(_group_key(encoder), []).append(i)
    total_passes = sum(
        encoders[idx[0]].prompt.passes if encoders[idx[0]].prompt else 1 for idx in groups.values()
    )
    progress = tqdm(
        total=len(items) * total_passes, desc="valuelens", unit="text", disable=not show_progress or not items
    )
    n_truncated = 0
    try:
        with torch.inference_mode():
            for members in groups.values():
                group = [encoders[i] for i in members]
                results, truncated = _encode_group(group, items, batch_size, progress)
                n_truncated = max(n_truncated, truncated)
                for i, result in zip(members, results, strict=True):
                    outputs[i] = result
    finally:
        progress.close()
    if n_truncated:
        warnings.warn(
            f"{n_truncated} of {len(items)} texts were longer than max_length={encoders[0].max_length} tokens "
            "and were truncated (the prompt was kept)",
            TruncationWarning,
            stacklevel=3,
        )
    final = []
    for out in outputs:
        assert out is not None
        if normalize:
            out = torch.nn.functional.normalize(out, dim=-1)
        final.append(out if convert_to_tensor else out.cpu().numpy())
    return final


def _encode_group(
    group: Sequence[Encoder], items: list[str], batch_size: int, progress: tqdm
) -> tuple[list[Tensor], int]:
    """Encode ``items`` for encoders that share tokenization; MetaEOL-style prompts average passes."""
    leader = group[0]
    if not items:
        return [torch.zeros((0, e.dimension), dtype=torch.float32, device=e.device) for e in group], 0
    passes = leader.prompt.passes if leader.prompt is not None else 1
    totals: list[Tensor | None] = [None] * len(group)
    n_truncated = 0
    for template_index in range(passes):
        tokenized, truncated = leader.tokenize(items, template_index)
        n_truncated = max(n_truncated, truncated)
        order = sorted(range(len(items)), key=lambda i: -len(tokenized[i].ids))
        outs = [
            torch.empty((len(items), e.dimension), dtype=torch.float32, device=leader.device) for e in group
        ]
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            embedded = embed_batch_group(group, leader.collate([tokenized[i] for i in chunk]))
            rows = torch.tensor(chunk, device=leader.device)
            for out, emb in zip(outs, embedded, strict=True):
                out[rows] = emb.to(out.device)
            progress.update(len(chunk))
        for k, out in enumerate(outs):
            if passes > 1:
                out = torch.nn.functional.normalize(out, dim=-1)
            totals[k] = out if totals[k] is None else totals[k] + out
    return [t / passes if passes > 1 else t for t in totals], n_truncated
