"""The dtype a valuelens sentence-transformers model runs in: valuelens' one rule, applied when it is built.

Usage (in ``ValuePooling.on_model_ready``)::

    dtype = default_cast(first)          # torch.float32 for a bf16 checkpoint loaded on CPU by default
    if dtype is not None:
        model.to(dtype)                  # every module follows the backbone, as sentence-transformers casts them

The rule is :func:`valuelens.loading.default_dtype`, the same as ``Encoder.from_pretrained`` and the
LangChain and LlamaIndex adapters: float32 on CPU unless the caller named a dtype, the checkpoint's
dtype on an accelerator. transformers 5 loads a checkpoint in its own dtype by default (bf16 for the
bundled models), so a backbone that nobody asked a dtype for is cast here, without touching the host
classes. A dtype asked for (``model_kwargs={"dtype": ...}`` or ``{"torch_dtype": ...}`` given to
``ValueTransformer`` or to ``SentenceTransformer(saved_path, ...)``) is kept. A plain host
``Transformer`` keeps no record of its ``model_kwargs``: its backbone counts as loaded by default when
its dtype is the checkpoint's own (what transformers' default ``dtype="auto"`` gives).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from valuelens.loading import default_dtype

__all__ = ["asks_dtype", "default_cast"]

logger = logging.getLogger(__name__)

_DTYPE_KEYS = ("dtype", "torch_dtype")


def asks_dtype(model_kwargs: Mapping[str, Any] | None) -> bool:
    """Whether ``model_kwargs`` (a ``Transformer``'s) names a dtype (``"auto"`` included)."""
    return any((model_kwargs or {}).get(key) is not None for key in _DTYPE_KEYS)


def default_cast(transformer: Any) -> torch.dtype | None:
    """The dtype valuelens' rule moves ``transformer``'s backbone to, or ``None`` when it stays as it is.

    ``transformer`` is a ``ValueTransformer``; its ``dtype_requested`` is ``True`` / ``False`` when it
    loaded the backbone itself, ``None`` when it took over a plain ``Transformer``'s.
    """
    backbone = transformer.auto_model
    param = next(backbone.parameters(), None)
    if param is None or not param.is_floating_point():
        return None
    wanted = default_dtype(param.device)
    if wanted is None or param.dtype == wanted:
        return None
    requested = transformer.dtype_requested
    if requested is None:  # a plain Transformer: requested unless it is the checkpoint's own dtype
        declared = _checkpoint_dtype(backbone)
        requested = declared is not None and declared != param.dtype
    if requested:
        return None
    logger.info(
        "the backbone was loaded in %s on %s (its checkpoint's dtype, transformers' default): running it in "
        "%s, valuelens' rule on this device; pass model_kwargs={'dtype': ...} to keep another dtype",
        str(param.dtype).removeprefix("torch."),
        param.device.type,
        str(wanted).removeprefix("torch."),
    )
    return wanted


def _checkpoint_dtype(backbone: Any) -> torch.dtype | None:
    """The dtype the checkpoint's ``config.json`` declares (``None`` when it cannot be read locally)."""
    from transformers import PretrainedConfig

    try:
        data, _ = PretrainedConfig.get_config_dict(backbone.name_or_path, local_files_only=True)
    except (OSError, ValueError):
        return None
    name = data.get("dtype") or data.get("torch_dtype")
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    return dtype if isinstance(dtype, torch.dtype) else None
