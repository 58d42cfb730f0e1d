"""Input checks shared by the pipeline and every adapter: what counts as texts, and a batch size.

Usage: ``items, single = check_texts(["a", "b"])``; ``check_batch_size(32)``.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from typing import Any

__all__ = ["check_batch_size", "check_texts"]

_SHORT = reprlib.Repr()  # short reprs of bad items in error messages
_SHORT.maxstring = _SHORT.maxother = 60


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


def check_batch_size(batch_size: Any) -> None:
    """``batch_size`` must be a positive int (``ValueError`` naming it otherwise)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        msg = f"batch_size must be a positive int, got {batch_size!r}"
        raise ValueError(msg)
