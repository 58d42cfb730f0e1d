"""Hub ids: fail fast, naming the way out, when the Hugging Face hub cannot be reached.

transformers retries an unreachable hub for tens of seconds and then raises a bare ``OSError``;
:func:`check` asks the hub once (a few seconds at most) before anything loads, so a model reference
that is neither a bundled name nor a local folder fails in one line that names the alternatives.

Usage::

    hub.check("Qwen/Qwen3-0.6B")   # returns when the hub answers or the model is cached, else raises
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from valuelens.errors import HubUnreachableError

__all__ = ["PROBE_TIMEOUT_S", "check", "is_cached"]

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0
"""How long one reachability probe waits for the hub (connect and first byte)."""

_REMEMBER_S = 60.0
_probes: dict[str, tuple[float, bool]] = {}  # endpoint -> (when, reachable): one probe per load, not per file


def is_cached(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds ``repo_id``'s ``config.json`` (a model loaded before)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def _reachable(endpoint: str) -> bool:
    """One HTTP request to the hub's endpoint (the environment's proxies apply): any answer, even an
    error status, means reachable; a refused or timed-out connection means not."""
    seen = _probes.get(endpoint)
    if seen is not None and time.monotonic() - seen[0] < _REMEMBER_S:
        return seen[1]
    request = urllib.request.Request(f"{endpoint}/api/models", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S):
            pass
        reachable = True
    except urllib.error.HTTPError:
        reachable = True
    except (OSError, ValueError):  # URLError, a refused connection, a timeout; a malformed endpoint
        reachable = False
    _probes[endpoint] = (time.monotonic(), reachable)
    return reachable


def check(repo_id: str, bundled: Sequence[str] = ()) -> None:
    """Return when ``repo_id`` can load: the hub answers, or the model is in the local cache.

    Otherwise raise :class:`HubUnreachableError` naming the bundled models, local folders and
    ``HF_HUB_OFFLINE=1`` (``bundled``: the names to suggest). With ``HF_HUB_OFFLINE=1`` set, only the
    local cache is looked at (no request). Usage: ``hub.check("HuggingFaceTB/SmolLM2-135M")``.
    """
    from huggingface_hub import constants

    ways_out = (
        f"use a bundled model ({', '.join(bundled)}; `valuelens models list`), "
        "a local folder holding a transformers checkpoint"
    )
    if constants.HF_HUB_OFFLINE:
        if is_cached(repo_id):
            return
        msg = (
            f"model {repo_id!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            f"HF_HUB_OFFLINE=1 forbids downloading it: {ways_out}, or unset HF_HUB_OFFLINE on a machine "
            "that reaches the hub"
        )
        raise HubUnreachableError(msg)
    endpoint = constants.ENDPOINT.rstrip("/")
    if _reachable(endpoint):
        return
    if is_cached(repo_id):
        logger.info(
            "the Hugging Face hub (%s) cannot be reached: loading %r from the local cache "
            "(set HF_HUB_OFFLINE=1 to skip the hub)",
            endpoint,
            repo_id,
        )
        return
    msg = (
        f"cannot load model {repo_id!r}: it is no local folder, the Hugging Face hub ({endpoint}) cannot be "
        f"reached and the model is not in the local cache. {ways_out[0].upper()}{ways_out[1:]}, or copy the model into the cache "
        "on a connected machine and set HF_HUB_OFFLINE=1 here"
    )
    raise HubUnreachableError(msg)
