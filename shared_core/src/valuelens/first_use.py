"""Post-processing fitted at first use: ``postprocess="fit:abtt:2"`` and its cache.

Usage::

    enc = Encoder.from_pretrained("my/untuned-model", preset="best")    # the default rule: fit:abtt:2
    enc = Encoder.from_pretrained(path, recipe="va", postprocess="fit:center@my_texts.txt")
    enc = Encoder.from_pretrained("my/untuned-model", preset="best", postprocess=None)  # no fit at all

A reference ``fit:KIND[:K][@FILE]`` (:class:`FitRequest`) asks the encoder to fit a
:class:`~valuelens.Postprocess` of ``KIND`` (``center``, ``abtt`` with ``K`` components, ``standardize``)
on its own raw embeddings of unlabeled texts the first time it loads a model: the small corpus the
package ships (:data:`CORPUS`, sentences, questions and short documents the project wrote, no benchmark
text) or the user's ``FILE`` (one text per line, or ``.jsonl`` with a ``text`` field). The state is
cached per model fingerprint, spec and corpus in :func:`cache_folder`, so later loads read it in
milliseconds and give the same vectors. The fingerprint holds the model's config and the first values
of every weight it loaded, so a fine-tuned checkpoint saved over the same path is fitted again.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import warnings
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs
import torch

from valuelens.batching import TruncationWarning
from valuelens.config import STATE_FREE_FIELDS
from valuelens.errors import ConfigError
from valuelens.postprocess import Postprocess, load_postprocess
from valuelens.presets.builtin import FIT_PREFIX, FitRequest

if TYPE_CHECKING:
    from valuelens.encoder import Encoder

__all__ = [
    "CORPUS",
    "FIT_CACHE_ENV",
    "FIT_PREFIX",
    "FitRequest",
    "cache_folder",
    "cache_state",
    "corpus_texts",
    "fingerprint",
    "fit_corpus",
    "fitted_state",
]

logger = logging.getLogger(__name__)

#: Replaces :func:`cache_folder` when set.
FIT_CACHE_ENV = "VALUELENS_FIT_CACHE"
#: The unlabeled corpus the package ships (480 texts written for it: 200 sentences, 80 questions,
#: 200 short documents), fitted on when a reference names no file.
CORPUS = "fit_corpus.txt"


def fit_corpus(request: FitRequest) -> tuple[list[str], str]:
    """The texts ``request`` fits on and a name for them (:func:`corpus_texts`)."""
    return corpus_texts(request.corpus, option=f"postprocess='{FIT_PREFIX}...@FILE': FILE")


def corpus_texts(file: Path | None, *, option: str) -> tuple[list[str], str]:
    """The unlabeled texts of ``file`` (``None``: the package's :data:`CORPUS`) and a name for them (the
    file's, with a digest of its contents, so a cache key changes when the texts do: a user's edited
    file, or another release's corpus); ``option`` names where the path came from in an error."""
    if file is None:
        text = (resources.files("valuelens.presets") / CORPUS).read_text(encoding="utf-8")
        texts = [line.strip() for line in text.splitlines() if line.strip()]
        name = f"valuelens {CORPUS}"
    else:
        from valuelens.tuning.data import read_corpus  # above the encoder: read when a file is named

        texts = read_corpus(file, None, option=option)
        name = file.name
    digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:12]
    return texts, f"{name} ({len(texts)} texts, sha256 {digest})"


def cache_folder() -> Path:
    """Where fitted states are cached: ``$VALUELENS_FIT_CACHE``, else the user cache folder's ``fitted/``."""
    override = os.environ.get(FIT_CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("valuelens")) / "fitted"


def fingerprint(encoder: Encoder, source: str, spec: Mapping[str, Any] | None = None) -> str:
    """A digest of the model (its config and the first values of every weight it loaded), the spec (the
    fields that change the raw vectors; or ``spec``, what else the state depends on) and the corpus: one
    cached state per distinct combination. A fine-tuned checkpoint saved over the same path changes
    some weight, so it gets its own state."""
    config: Any = getattr(encoder.model, "config", None)
    model_config: dict[str, Any] = dict(config.to_dict()) if hasattr(config, "to_dict") else {}
    model_config.pop("_name_or_path", None)
    if spec is None:
        spec = {
            key: value
            for key, value in encoder.config.to_dict().items()
            if key not in STATE_FREE_FIELDS and key != "postprocess"
        }
    digest = hashlib.sha256()
    digest.update(json.dumps([model_config, spec, source], sort_keys=True, default=str).encode())
    with torch.no_grad():
        for param in encoder.model.parameters():
            digest.update(param.detach().flatten()[:16].float().cpu().numpy().tobytes())
    return digest.hexdigest()[:24]


def fitted_state(encoder: Encoder, reference: str) -> Postprocess:
    """The state ``reference`` (a ``fit:`` reference) asks for, for ``encoder`` (built without a
    post-processing): read from the cache, else fitted on the corpus and cached (one log line)."""
    from valuelens.fitting import fit_texts

    request = FitRequest.parse(reference)
    if request is None:
        msg = f"{reference!r} is not a first-use reference (fit:KIND[:K][@FILE])"
        raise ConfigError(msg)
    texts, source = fit_corpus(request)
    file = cache_folder() / f"{fingerprint(encoder, source)}.safetensors"
    if file.is_file():
        try:
            return load_postprocess(str(file), encoder.config)
        except ConfigError as exc:  # unreadable or from an older layout: fitted again below
            logger.warning("fitted state %s cannot be used (%s); fitting it again", file, exc)
    logger.warning(
        "postprocess=%r: fitting %s on %s once for %s (cached in %s; postprocess=None turns it off)",
        reference,
        request.kind if request.kind != "abtt" else f"abtt (k={request.k})",
        source,
        encoder.name_or_path,
        file.parent,
    )
    # fitted at the default token limit and truncating, whatever this encoder's max_length and long_text
    # (they are not in the fingerprint: every encoder of this model and spec reads the same state)
    fitter = copy.copy(encoder)
    fitter.config = encoder.config.replace(max_length=None, long_text="truncate")
    with warnings.catch_warnings():  # the few shipped documents the limit cuts: not the user's texts
        warnings.simplefilter("ignore", TruncationWarning)
        state = fit_texts(
            fitter,
            texts,
            request.kind,  # type: ignore[arg-type]
            request.k,
            fitted_on=f"{source}, at first use",
            show_progress=True,  # a minute or more for a large model on a CPU: say how far it is
        )
    cache_state(state, file, "fitted state")
    return state


def cache_state(state: Any, file: Path, what: str) -> None:
    """``state.save(file)`` into the cache; a read-only cache is logged (the state is used, and fitted
    again at the next load), never raised."""
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        state.save(file)
    except OSError as exc:
        logger.warning("cannot cache the %s in %s (%s); it is refitted at every load", what, file.parent, exc)
