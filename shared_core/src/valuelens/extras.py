"""The optional extras and the one-line hint a path that needs one gives when it is not installed.

Usage::

    pq = require("pyarrow.parquet", "eval", "reading .parquet files")   # the module, or one clear error

``pip install valuelens`` runs every core path (presets, first-use fits, the lexical part, chunking,
``.txt``/``.jsonl``/``.csv`` files, ``.npy`` vectors); what needs more names its extra here.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from valuelens.errors import ValueLensError

__all__ = ["EXTRAS", "MissingExtraError", "hint", "require"]

#: Each extra and what it brings (``shared_core/pyproject.toml`` lists the packages).
EXTRAS: dict[str, str] = {
    "eval": "evaluation, tuning, .parquet files and plots (scipy, scikit-learn, pyarrow, matplotlib)",
    "models": "the bundled GGUF models (gguf, accelerate)",
    "ray": "embedding a corpus on Ray Data (ray[data])",
    "serve": "the OpenAI-compatible server (fastapi, uvicorn, prometheus-client, orjson)",
}


class MissingExtraError(ValueLensError, ImportError):
    """A path that needs an optional extra that is not installed (the message names the pip command)."""


def hint(extra: str, what: str) -> str:
    """``WHAT needs the EXTRA extra: pip install 'valuelens[EXTRA]'``."""
    return f"{what} needs the {extra} extra: pip install 'valuelens[{extra}]'"


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming ``extra`` (one line, no traceback
    through the caller's code)."""
    if extra not in EXTRAS:
        msg = f"unknown extra {extra!r}: {', '.join(EXTRAS)}"
        raise ValueError(msg)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        msg = f"{hint(extra, what)} ({exc})"
        raise MissingExtraError(msg) from None
