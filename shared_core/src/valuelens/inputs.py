"""Input checks shared by the pipeline and every adapter: what counts as texts, and a batch size.

Usage: ``items, single = check_texts(["a", "b"])``; ``check_batch_size(32)``.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from typing import Any

__all__ = ["check_batch_size", "check_texts", "check_token_budget"]

_SHORT = reprlib.Repr()  # short reprs of bad items in error messages
_SHORT.maxstring = _SHORT.maxother = 60


def check_texts(texts: Any, *, allow_single: bool = True, name: str = "text") -> tuple[list[str], bool]:
    """Validate input texts; return them as a list and whether a single string was given.

    Usage: ``items, single = check_texts(["a", "b"])``. ``None``, bytes, non-iterables and non-string
    items raise ``TypeError`` (naming the index); with ``allow_single=False`` a bare string does too.
    A text holding a surrogate code point (``"\\ud800"``: not valid Unicode, no tokenizer can encode
    it) raises ``ValueError`` naming the index (or ``name`` for a bare string) and the position. Every
    other string is accepted as is: empty, whitespace, control characters and NUL, any script.
    """
    if isinstance(texts, str):
        if not allow_single:
            msg = "texts must be a list of strings, got a single str (wrap it in a list)"
            raise TypeError(msg)
        _check_encodable(texts, name)
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
        _check_encodable(text, f"texts[{i}]")
    return items, False


def _check_encodable(text: str, name: str) -> None:
    """``ValueError`` if ``text`` holds a surrogate code point (U+D800-U+DFFF), which UTF-8 cannot encode.

    Such strings come from bytes decoded with ``errors="surrogateescape"`` or from JSON escapes like
    ``"\\ud800"``; tokenizers reject them with an opaque ``TypeError``. Not replaced silently: the
    caller decides (``text.encode("utf-8", "replace").decode()`` turns each into ``"?"``).
    """
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        msg = (
            f"{name} ({_SHORT.repr(text)}) holds the surrogate code point {text[exc.start]!r} at position "
            f"{exc.start}, which is "
            "not valid Unicode (it usually comes from bytes decoded with errors='surrogateescape' or a "
            "JSON '\\ud800' escape); clean the text first, e.g. "
            "text.encode('utf-8', 'replace').decode('utf-8') turns each one into '?'"
        )
        raise ValueError(msg) from exc


#: ``max_tokens_per_batch="auto"``: padded tokens per batch by device type (CPU: measured best on the
#: STS-B + SciFact length mix, docs/performance.md; accelerators: large batches, the budget only splits
#: batches of long texts).
AUTO_TOKEN_BUDGET: dict[str, int] = {"cpu": 2048}
AUTO_TOKEN_BUDGET_ACCELERATOR = 16384


def check_token_budget(max_tokens: Any) -> None:
    """``max_tokens_per_batch`` must be ``"auto"``, ``None`` or a positive int (``ValueError`` naming it otherwise)."""
    if max_tokens == "auto" and isinstance(max_tokens, str):
        return
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        msg = f"max_tokens_per_batch must be 'auto', a positive int or None (no budget), got {max_tokens!r}"
        raise ValueError(msg)


def token_budget(max_tokens: int | str | None, device_type: str) -> int | None:
    """The token budget ``max_tokens`` means on a device type (``"auto"`` resolved)."""
    if max_tokens == "auto":
        return AUTO_TOKEN_BUDGET.get(device_type, AUTO_TOKEN_BUDGET_ACCELERATOR)
    return max_tokens  # type: ignore[return-value]


def check_batch_size(batch_size: Any) -> None:
    """``batch_size`` must be a positive int (``ValueError`` naming it otherwise)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        msg = f"batch_size must be a positive int, got {batch_size!r}"
        raise ValueError(msg)
