"""The band of W_U's right singular directions EmbedFilter keeps: arithmetic only, no torch, so the spec
(:mod:`valuelens.config`) checks τ and the offset before anything loads.

Usage: ``band(576, tau=2)`` → ``(144, 432)``; ``band(576, 2, offset=16)`` → ``(160, 448)``.
"""

from __future__ import annotations

from valuelens.errors import ConfigError

__all__ = ["band"]


def band(hidden_size: int, tau: float, offset: int = 0) -> tuple[int, int]:
    """The kept band ``[start, stop)`` of right singular vectors for ``tau`` and ``offset``."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not tau >= 1:
        msg = f"tau must be a number >= 1 (tau=2 keeps half the dimensions), got {tau!r}"
        raise ConfigError(msg)
    k = int(hidden_size // tau)
    if k < 1:
        msg = f"tau={tau!r} keeps no dimension of a {hidden_size}-dim embedding"
        raise ConfigError(msg)
    start = (hidden_size - k) // 2 + int(offset)
    if start < 0 or start + k > hidden_size:
        msg = (
            f"offset={offset!r} moves the band [{start}, {start + k}) outside the {hidden_size} singular "
            f"directions: use |offset| <= {(hidden_size - k) // 2}"
        )
        raise ConfigError(msg)
    return start, start + k
