"""Exceptions raised by valuelens.

Usage: ``except valuelens.errors.ValueLensError`` catches every error valuelens raises on purpose.
"""

from __future__ import annotations

import torch


class ValueLensError(Exception):
    """Base class of every error valuelens raises on purpose."""


class ConfigError(ValueLensError, ValueError):
    """An invalid recipe, prompt, layer spec or EmbedFilter setting (raised before any forward)."""


class UnsupportedModelError(ValueLensError, ValueError):
    """The model lacks a part a recipe needs (no attention interface, no output projection, ...)."""


class SpaceMismatchError(ConfigError):
    """EmbedFilter applied to an embedding that does not live in the residual stream."""


class DataNotFoundError(ValueLensError, FileNotFoundError):
    """A benchmark set is in none of the data folders searched (the message names them and the fix)."""


class HubUnreachableError(ValueLensError, OSError):
    """A hub id cannot load: the hub does not answer (or ``HF_HUB_OFFLINE=1``) and it is not cached.

    Still an ``OSError``, as transformers' own loading error is; the message names the bundled models,
    local folders and ``HF_HUB_OFFLINE=1``."""


class ModelProvisioningError(ValueLensError, RuntimeError):
    """A bundled model could not be downloaded, checked or converted (the message names the fix)."""


class EncodeOutOfMemoryError(ValueLensError, torch.OutOfMemoryError):
    """One text alone does not fit in memory, after ``Encoder.run`` split its batch in halves down to it.

    The message names the text's index in the caller's list and its length in tokens; it is still a
    ``torch.OutOfMemoryError``, so existing ``except torch.OutOfMemoryError`` blocks catch it."""
