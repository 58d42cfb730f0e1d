"""Loading: a checkpoint (folder, bundled name or hub id) → backbone and tokenizer, and the load options.

Usage::

    model, tokenizer = load_model("smollm2-135m", keep_layers=24, device="cpu", dtype="bf16")
    prune_layers(parts, keep=24)                  # the same cut on an already loaded backbone
    ef = build_embed_filter(model, tau=2)         # W_U from the model, else from its checkpoint

Device and dtype are *load options*: they choose where and how the weights run, not what the
embedding is (that is :class:`valuelens.EncoderConfig`). Only the layers up to the deepest selected
one are loaded (the later ones could never contribute), and no LM head.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import nn

from valuelens.architectures import FULL_DEPTH_ATTR, ModelParts, full_depth, model_key
from valuelens.config import EncoderConfig
from valuelens.embed_filter import EmbedFilter
from valuelens.errors import ConfigError
from valuelens.prompts import Prompt

__all__ = [
    "DTypeSpec",
    "build_embed_filter",
    "check_load_options",
    "check_loaded",
    "checkpoint_folder",
    "default_dtype",
    "load_model",
    "prune_layers",
    "resolve_config",
    "resolve_device",
    "resolve_dtype",
    "same_device",
    "spec_and_filter",
]

DTypeName = Literal["auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16"]
DTypeSpec = DTypeName | torch.dtype | None
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype: Any) -> torch.dtype | Literal["auto"] | None:
    """A dtype option (``"float32"``, ``"bf16"``, ``"auto"``, a ``torch.dtype``, ``None``) as transformers takes it."""
    if dtype is None or isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    try:
        return _DTYPES[str(dtype).lower()]
    except KeyError:
        msg = f"unknown dtype {dtype!r}: use 'auto', 'float32', 'bfloat16', 'float16' or a torch.dtype"
        raise ConfigError(msg) from None


def default_dtype(device: torch.device | str) -> torch.dtype | None:
    """The dtype a model runs in when the caller names none, on every surface: float32 on CPU (exact,
    and faster than bf16 on CPUs without AMX; the cached checkpoints are bf16), ``None`` (the
    checkpoint's own dtype) on an accelerator. Usage: ``default_dtype("cpu")`` → ``torch.float32``."""
    return torch.float32 if torch.device(device).type == "cpu" else None


def resolve_device(device: Any) -> torch.device | None:
    """A device option (``"cpu"``, ``"cuda:1"``, a ``torch.device``, ``None``) checked before loading."""
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        msg = f"unknown device {device!r}: use 'cpu', 'cuda', 'cuda:1', 'mps' or a torch.device"
        raise ConfigError(msg) from exc


def same_device(wanted: str | torch.device, actual: torch.device) -> bool:
    """Whether a requested device names ``actual``; ``"cuda"`` (no index) matches any CUDA device,
    and an index matches a device without one as index 0."""
    target = resolve_device(wanted)
    assert target is not None
    return target.type == actual.type and (target.index is None or target.index == (actual.index or 0))


def check_load_options(model: nn.Module, device: Any = None, dtype: Any = None) -> list[str]:
    """Which requested load options disagree with an already loaded ``model`` (readable strings)."""
    found = []
    param = next(model.parameters(), None)
    if device is not None and param is not None and not same_device(device, param.device):
        found.append(f"device={device!r} (the model is on {str(param.device)!r})")
    wanted = resolve_dtype(dtype)
    if wanted not in (None, "auto") and param is not None and wanted != param.dtype:
        found.append(f"dtype={dtype!r} (the model is {str(param.dtype).removeprefix('torch.')})")
    return found


def load_model(
    path: str | os.PathLike[str] | None,
    *,
    keep_layers: int | None = None,
    device: Any = None,
    dtype: Any = None,
    **model_kwargs: Any,
) -> tuple[nn.Module, Any]:
    """Load a backbone (``AutoModel``, no LM head) and its tokenizer.

    ``path`` is a folder, a bundled model name (:mod:`valuelens.models`) or a hub id; ``None`` is the
    embedded default. ``keep_layers`` loads only the first decoder layers. ``device`` defaults to
    CUDA when available; ``dtype=None`` means float32 on CPU and the checkpoint's dtype elsewhere.
    """
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from valuelens import models

    torch_dtype = resolve_dtype(dtype)
    target = resolve_device(device) or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    local = models.path(path)
    hf_config = load_config(local, trust_remote_code=bool(model_kwargs.get("trust_remote_code", False)))
    text_config = hf_config.get_text_config()
    if keep_layers is not None and keep_layers < text_config.num_hidden_layers:
        _cut_config(text_config, keep_layers)
    kwargs = dict(model_kwargs)
    kwargs["trust_remote_code"] = trust_remote_code = bool(kwargs.get("trust_remote_code", False))
    if torch_dtype is None and "device_map" not in kwargs:
        torch_dtype = default_dtype(target)
    if torch_dtype is not None:
        kwargs["dtype"] = torch_dtype
    # transformers reports the LM head (never loaded here) and any layers left out as "unexpected"
    # keys: silence that report and warn only about weights that are really missing
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model, info = AutoModel.from_pretrained(local, config=hf_config, output_loading_info=True, **kwargs)
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
    return model, AutoTokenizer.from_pretrained(local, trust_remote_code=trust_remote_code)


def load_config(path: str | os.PathLike[str], *, trust_remote_code: bool = False) -> Any:
    """The transformers config of a local folder or hub id (``trust_remote_code`` stays off unless asked)."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)


def check_loaded(config: EncoderConfig, parts: ModelParts) -> None:
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


def prune_layers(parts: ModelParts, keep: int) -> None:
    """Drop the decoder layers after the first ``keep`` of a loaded backbone (they would never
    contribute to the embedding); the config follows, so a saved model reloads the same way."""
    if keep >= parts.n_layers:
        return
    del parts.layers[keep:]
    backbone: Any = parts.backbone  # a transformers PreTrainedModel
    _cut_config(backbone.config.get_text_config(), keep)


def _cut_config(text_config: Any, keep: int) -> None:
    """Shorten a text config to its first ``keep`` layers, recording the checkpoint's depth once
    (``layers="auto"`` and the presets stay those of the full model, also after a save and reload)."""
    setattr(text_config, FULL_DEPTH_ATTR, full_depth(text_config))
    text_config.num_hidden_layers = keep
    if getattr(text_config, "layer_types", None) is not None:
        text_config.layer_types = list(text_config.layer_types)[:keep]


def checkpoint_folder(model: nn.Module, fix: str) -> str:
    """The folder ``model`` was loaded from, to read its unembedding matrix (W_U) when the loaded
    backbone holds none (no LM head, embeddings not tied); ``ConfigError`` ending in ``fix`` if unknown."""
    source = getattr(getattr(model, "config", None), "_name_or_path", None)
    if not source or not os.path.isdir(source):
        msg = (
            f"{type(model).__name__} has no LM head, its embeddings are not tied to one, and the checkpoint "
            f"folder it came from is unknown: {fix}"
        )
        raise ConfigError(msg)
    return source


def build_embed_filter(model: nn.Module, tau: float, offset: int = 0) -> EmbedFilter:
    """EmbedFilter from the model's own W_U (LM head or tied embeddings), else from the checkpoint
    folder it was loaded from (only the head is read)."""
    try:
        return EmbedFilter.from_model(model, tau=tau, offset=offset)
    except ConfigError:
        fix = "build the filter with EmbedFilter.from_model(path, tau=...) and pass it as embed_filter="
        return EmbedFilter.from_model(checkpoint_folder(model, fix), tau=tau, offset=offset)


def resolve_config(
    path: str | os.PathLike[str] | None, config: EncoderConfig, *, trust_remote_code: bool = False
) -> EncoderConfig:
    """``config`` with its layer specs resolved for the model at ``path`` (reads its config, no weights).

    Usage: ``resolve_config("smollm2-135m", EncoderConfig(recipe="va")).layers`` → ``(21, 22, 23)``.
    """
    from valuelens import models

    text_config = load_config(models.path(path), trust_remote_code=trust_remote_code).get_text_config()
    return config.resolved(*model_key(text_config))


def spec_and_filter(
    config: EncoderConfig | None, embed_filter: float | EmbedFilter | None, settings: Mapping[str, Any]
) -> tuple[EncoderConfig, EmbedFilter | None]:
    """One validated spec from ``config`` or keyword settings (not both), and the prebuilt filter if
    ``embed_filter`` is one (a number is the field). Usage: ``spec_and_filter(None, 2, {"recipe": "hs"})``."""
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
