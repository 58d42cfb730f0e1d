"""The fitted states a spec needs, built from the spec and a corpus and cached: the builder the encoder
hands its spec to (the encoder assembles; it fits nothing itself).

Usage::

    states = build_states(config, model=model, tokenizer=tok, raw=RawEncoder(stages, name, config))
    lens = lexical_lens(model, tokenizer)             # the default lexical part of a model (tune, research)
    enc = Encoder.from_pretrained(path, recipe="va", postprocess="fit:center@my_texts.txt")   # through here

- **Post-processing fitted at first use.** A reference ``fit:KIND[:K][@FILE]`` (:class:`FitRequest`) asks
  for a :class:`~valuelens.Postprocess` of ``KIND`` (``center``, ``abtt`` with ``K`` components,
  ``standardize``) fitted on the encoder's own raw vectors of unlabeled texts: the small corpus the package
  ships (:data:`CORPUS`, sentences, questions and short documents the project wrote, no benchmark text)
  or the user's ``FILE`` (any file or folder :func:`valuelens.io.unlabeled_texts` reads). Any other
  reference (a file, ``builtin:NAME``) is loaded.
- **The lexical part's state**: for ``lexical_kind="bm25"`` the corpus statistics
  (:class:`~valuelens.bm25.BM25State`: counted on ``lexical_corpus``, else from English word frequencies);
  for ``"embeddings"`` the whitening and idf (:class:`~valuelens.lexical.LexicalState`: English word
  frequencies and the package's corpus, or ``lexical_corpus``); or a saved state.

Fitted states are cached per model fingerprint, spec and corpus in :func:`cache_folder`, so later loads
read them in milliseconds and give the same vectors. The fingerprint holds the model's config and the
first values of every weight it loaded, so a fine-tuned checkpoint saved over the same path is fitted
again. A read-only cache is logged and the state used all the same.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import platformdirs
import torch
from torch import Tensor, nn

from valuelens import word_frequency
from valuelens.batching import Pipeline, TruncationWarning, encode_many
from valuelens.bm25 import STATE_VERSION as BM25_VERSION, Analyzer, BM25Lens, BM25State
from valuelens.composition import FittedStates
from valuelens.config import STATE_FREE_FIELDS, EncoderConfig
from valuelens.errors import ConfigError
from valuelens.fitting import fit_texts
from valuelens.io import unlabeled_texts
from valuelens.lexical import FLOOR, STATE_SUFFIX, STATE_VERSION, LexicalLens, LexicalState
from valuelens.postprocess import Postprocess, load_postprocess
from valuelens.presets.builtin import FIT_PREFIX, FitRequest

__all__ = [
    "CORPUS",
    "FIT_CACHE_ENV",
    "FIT_PREFIX",
    "MIN_TEXTS",
    "FitRequest",
    "RawEncoder",
    "bm25_lens",
    "bm25_state",
    "build_states",
    "cache_folder",
    "cache_state",
    "corpus_texts",
    "fingerprint",
    "fit_corpus",
    "fitted_postprocess",
    "lexical_lens",
    "lexical_state",
]

logger = logging.getLogger(__name__)

#: Replaces :func:`cache_folder` when set.
FIT_CACHE_ENV = "VALUELENS_FIT_CACHE"
#: The unlabeled corpus the package ships (480 texts written for it: 200 sentences, 80 questions,
#: 200 short documents), fitted on when a reference names no file.
CORPUS = "fit_corpus.txt"
#: The fewest distinct texts a corpus of the user's may hold to fit a state on.
MIN_TEXTS = 10


@dataclass(frozen=True)
class RawEncoder:
    """What a first-use fit reads: a pipeline's raw vectors (the readouts fused, before any
    post-processing or lexical part) and what the fitted state records; :func:`valuelens.fitting.fit_texts`
    takes it as it takes an encoder."""

    pipeline: Pipeline
    name_or_path: str
    config: EncoderConfig

    @property
    def raw_dimension(self) -> int:
        return self.pipeline.composition.raw_dimension

    def encode_raw(
        self, texts: Sequence[str], *, batch_size: int = 32, show_progress: bool = False
    ) -> Tensor:
        """``[n, raw_dimension]`` fp32 raw vectors of ``texts``."""
        (out,) = encode_many(
            [self.pipeline],
            texts,
            batch_size=batch_size,
            show_progress=show_progress,
            convert_to_tensor=True,
            raw=True,
        )
        return out  # type: ignore[return-value]


def cache_folder() -> Path:
    """Where fitted states are cached: ``$VALUELENS_FIT_CACHE``, else the user cache folder's ``fitted/``."""
    override = os.environ.get(FIT_CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("valuelens")) / "fitted"


def corpus_texts(file: Path | None, *, option: str) -> tuple[list[str], str]:
    """The unlabeled texts of ``file`` (``None``: the package's :data:`CORPUS`) and a name for them (the
    file's, with a digest of its contents, so a cache key changes when the texts do: a user's edited
    file, or another release's corpus); ``option`` names where the path came from in an error."""
    if file is None:
        text = (resources.files("valuelens.presets") / CORPUS).read_text(encoding="utf-8")
        texts = [line.strip() for line in text.splitlines() if line.strip()]
        name = f"valuelens {CORPUS}"
    else:
        if not file.exists():
            msg = f"{option} {str(file)!r} does not exist (give a text file, .jsonl, .csv, .parquet or a folder)"
            raise ConfigError(msg)
        texts = unlabeled_texts(file)
        if len(texts) < MIN_TEXTS:
            msg = (
                f"{option} {str(file)!r} holds {len(texts)} distinct non-empty texts: at least {MIN_TEXTS} "
                "are needed to fit on"
            )
            raise ConfigError(msg)
        name = file.name
    digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:12]
    return texts, f"{name} ({len(texts)} texts, sha256 {digest})"


def fit_corpus(request: FitRequest) -> tuple[list[str], str]:
    """The texts ``request`` fits on and a name for them (:func:`corpus_texts`)."""
    return corpus_texts(request.corpus, option=f"postprocess='{FIT_PREFIX}...@FILE': FILE")


def fingerprint(model: nn.Module, source: str, spec: Mapping[str, Any]) -> str:
    """A digest of the model (its config and the first values of every weight it loaded), ``spec`` (what
    else the state depends on) and the corpus ``source``: one cached state per distinct combination."""
    config: Any = getattr(model, "config", None)
    model_config: dict[str, Any] = dict(config.to_dict()) if hasattr(config, "to_dict") else {}
    model_config.pop("_name_or_path", None)
    digest = hashlib.sha256()
    digest.update(json.dumps([model_config, dict(spec), source], sort_keys=True, default=str).encode())
    with torch.no_grad():
        for param in model.parameters():
            digest.update(param.detach().flatten()[:16].float().cpu().numpy().tobytes())
    return digest.hexdigest()[:24]


S = TypeVar("S")


def cached_state(file: Path, load: Callable[[Path], S], what: str) -> S | None:
    """``load(file)`` when the cache holds ``file``; ``None`` when it does not, or when the file cannot be
    used (unreadable, an older layout: logged, and the caller builds the state again)."""
    if not file.is_file():
        return None
    try:
        return load(file)
    except ConfigError as exc:
        logger.warning("%s %s cannot be used (%s); building it again", what, file, exc)
        return None


def cache_state(state: Any, file: Path, what: str) -> None:
    """``state.save(file)`` into the cache; a read-only cache is logged (the state is used, and fitted
    again at the next load), never raised."""
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        state.save(file)
    except OSError as exc:
        logger.warning("cannot cache the %s in %s (%s); it is refitted at every load", what, file.parent, exc)


def fitted_postprocess(config: EncoderConfig, raw: RawEncoder, model: nn.Module) -> Postprocess:
    """The state a ``fit:`` reference asks for: read from the cache, else fitted on the corpus with ``raw``
    (at the default token limit, truncating: every encoder of this model and spec reads the same state)
    and cached (one log line)."""
    reference = config.postprocess or ""
    request = FitRequest.parse(reference)
    if request is None:
        msg = f"{reference!r} is not a first-use reference (fit:KIND[:K][@FILE])"
        raise ConfigError(msg)
    texts, source = fit_corpus(request)
    spec = {k: v for k, v in config.to_dict().items() if k not in STATE_FREE_FIELDS and k != "postprocess"}
    file = cache_folder() / f"{fingerprint(model, source, spec)}.safetensors"
    cached = cached_state(file, lambda path: load_postprocess(str(path), config), "fitted state")
    if cached is not None:
        return cached
    logger.warning(
        "postprocess=%r: fitting %s on %s once for %s (cached in %s; postprocess=None turns it off)",
        reference,
        request.kind if request.kind != "abtt" else f"abtt (k={request.k})",
        source,
        raw.name_or_path,
        file.parent,
    )
    with warnings.catch_warnings():  # the few shipped documents the limit cuts: not the user's texts
        warnings.simplefilter("ignore", TruncationWarning)
        state = fit_texts(
            raw,
            texts,
            request.kind,  # type: ignore[arg-type]
            request.k,
            fitted_on=f"{source}, at first use",
            show_progress=True,  # a minute or more for a large model on a CPU: say how far it is
        )
    cache_state(state, file, "fitted state")
    return state


def lexical_state(
    model: nn.Module, tokenizer: Any, corpus: str | None = None, *, name: str = ""
) -> LexicalState:
    """The lexical part's state for ``model``: a saved state (``corpus`` ending in ``.safetensors``), else
    read from the cache, else fitted (English word frequencies and the package's corpus, or idf counted
    on the texts of ``corpus``) and cached (one log line)."""
    if corpus is not None and corpus.endswith(STATE_SUFFIX):  # a saved state (a sentence-transformers save)
        return LexicalState.load(Path(corpus).expanduser())
    texts, source = corpus_texts(
        None if corpus is None else Path(corpus).expanduser(), option="lexical_corpus"
    )
    words = corpus is None  # the default idf: word frequencies, the package's corpus where they do not reach
    if words:
        source = f"{word_frequency.source()} and {source}"
    key = fingerprint(model, source, {"lexical_state": STATE_VERSION, "floor": FLOOR})
    file = cache_folder() / f"lexical-{key}.safetensors"
    cached_lexical = cached_state(file, LexicalState.load, "lexical state")
    if cached_lexical is not None:
        return cached_lexical
    logger.info(
        "lexical part: fitting idf on %s for %s (cached in %s)", source, name or "the model", file.parent
    )
    embeddings = _input_embeddings(model)
    idf = torch.from_numpy(word_frequency.word_idf(tokenizer, embeddings.shape[0])) if words else None
    state = LexicalState.fit(embeddings, tokenizer, texts, word_idf=idf)
    cache_state(state, file, "lexical state")
    return state


def bm25_state(language: str = "english", corpus: str | None = None) -> BM25State:
    """The BM25 part's statistics (:class:`~valuelens.bm25.BM25State`): a saved state (``corpus`` ending in
    ``.safetensors``), else read from the cache, else counted on the texts of ``corpus`` (``N``, ``df``,
    ``avgdl``) or, without one, from English word frequencies, and cached (one log line). Word-level:
    the same for every model."""
    if corpus is not None and corpus.endswith(STATE_SUFFIX):
        return BM25State.load(Path(corpus).expanduser())
    analyzer = Analyzer(language)
    if corpus is None:
        texts: list[str] = []
        source = f"{word_frequency.source()}"
    else:
        texts, source = corpus_texts(Path(corpus).expanduser(), option="lexical_corpus")
    key = hashlib.sha256(json.dumps([BM25_VERSION, language, source]).encode()).hexdigest()[:24]
    file = cache_folder() / f"bm25-{key}.safetensors"
    cached_bm25 = cached_state(file, BM25State.load, "BM25 state")
    if cached_bm25 is not None:
        return cached_bm25
    logger.info("lexical part: BM25 statistics (%s) from %s (cached in %s)", language, source, file.parent)
    state = (
        BM25State.fit(analyzer, texts) if corpus is not None else BM25State.from_word_frequencies(analyzer)
    )
    cache_state(state, file, "BM25 state")
    return state


def bm25_lens(config: EncoderConfig, state: BM25State | None = None) -> BM25Lens:
    """The BM25 lens ``config``'s lexical fields ask for: over ``state`` when given (statistics counted
    elsewhere), else :func:`bm25_state`'s."""
    if state is None:
        state = bm25_state(config.lexical_language, config.lexical_corpus)
    return BM25Lens(state, dim=config.lexical_dim, k1=config.lexical_k1, b=config.lexical_b)


def lexical_lens(model: nn.Module, tokenizer: Any, corpus: str | None = None) -> LexicalLens:
    """The lexical lens of ``model`` (:func:`lexical_state`, read through its input embeddings)."""
    return LexicalLens(_input_embeddings(model), tokenizer, lexical_state(model, tokenizer, corpus))


def _input_embeddings(model: nn.Module) -> Tensor:
    get = getattr(model, "get_input_embeddings", None)
    if not callable(get):
        msg = f"{type(model).__name__} has no input embeddings for a lexical part to read"
        raise ConfigError(msg)
    return get().weight


def build_states(config: EncoderConfig, *, model: nn.Module, tokenizer: Any, raw: RawEncoder) -> FittedStates:
    """The fitted states a resolved ``config`` needs (see the module docstring); ``raw`` gives the raw
    vectors a first-use fit is fitted on."""
    post = None
    if config.postprocess is not None:
        if config.postprocess.startswith(FIT_PREFIX):
            post = fitted_postprocess(config, raw, model)
        else:
            post = load_postprocess(config.postprocess, config)
    lexical: LexicalState | BM25State | None = None
    if config.lexical is not None and config.lexical_kind == "bm25":
        lexical = bm25_state(config.lexical_language, config.lexical_corpus)
    elif config.lexical is not None:
        lexical = lexical_state(model, tokenizer, config.lexical_corpus, name=raw.name_or_path)
    return FittedStates(post, lexical)
