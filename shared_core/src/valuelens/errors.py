"""Exceptions raised by valuelens.

Usage: ``except valuelens.errors.ValueLensError`` catches every error valuelens raises on purpose.

No torch here (the command line and the spec import this module before any model code):
:class:`valuelens.batching.EncodeOutOfMemoryError`, a ``torch.OutOfMemoryError`` too, lives where it is raised.
"""

from __future__ import annotations


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
