"""Hub ids: fail fast, naming the way out, when the Hugging Face hub cannot be reached.

transformers retries an unreachable hub for tens of seconds and then raises a bare ``OSError``;
:func:`check` asks the hub once (a few seconds at most) before anything loads, so a model reference
that is neither a bundled name nor a local folder fails in one line that names the alternatives.

A dataset id (``valuelens tune --dev mteb/scifact``) goes through :func:`dataset`: the hub's snapshot
of the dataset's data files, downloaded once into the Hugging Face cache, or read from that cache when
the hub cannot be reached.

Usage::

    hub.check("Qwen/Qwen3-0.6B")   # returns when the hub answers or the model is cached, else raises
    folder = hub.dataset("mteb/stsbenchmark-sts")   # a local folder of the dataset's files
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from valuelens.errors import HubUnreachableError

__all__ = ["DATASET_FILES", "PROBE_TIMEOUT_S", "check", "dataset", "is_cached"]

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0
"""How long one reachability probe waits for the hub (connect and first byte)."""

#: The files of a dataset repository :func:`dataset` fetches: what a BEIR / MTEB folder and STS pairs are
#: read from (not the parquet conversions, loading scripts or READMEs beside them).
DATASET_FILES = ("*.jsonl", "*.jsonl.gz", "*.tsv", "qrels/*.tsv", "qrels/*.jsonl")

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


def dataset(repo_id: str) -> Path:
    """A local folder holding the data files (:data:`DATASET_FILES`) of the hub dataset ``repo_id``: a
    snapshot downloaded into the Hugging Face cache, or the cached one when the hub cannot be reached or
    ``HF_HUB_OFFLINE=1``. Raises :class:`HubUnreachableError` naming the offline alternative when neither
    works. Usage: ``load_task(hub.dataset("mteb/scifact"))``."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    offline = bool(constants.HF_HUB_OFFLINE) or not _reachable(constants.ENDPOINT.rstrip("/"))
    try:
        folder = snapshot_download(
            repo_id, repo_type="dataset", allow_patterns=list(DATASET_FILES), local_files_only=offline
        )
    except LocalEntryNotFoundError:
        why = (
            "HF_HUB_OFFLINE=1 is set"
            if constants.HF_HUB_OFFLINE
            else f"the Hugging Face hub ({constants.ENDPOINT}) cannot be reached"
        )
        msg = (
            f"dataset {repo_id!r}: {why} and it is not in the local cache ({constants.HF_HUB_CACHE}). "
            f"Download it on a connected machine (`hf download {repo_id} --repo-type dataset --local-dir DIR`) "
            "and give the folder instead"
        )
        raise HubUnreachableError(msg) from None
    except HfHubHTTPError as exc:  # no such repository, gated, ...
        msg = f"dataset {repo_id!r} cannot be read from the Hugging Face hub: {str(exc).splitlines()[0]}"
        raise HubUnreachableError(msg) from None
    return Path(folder)
