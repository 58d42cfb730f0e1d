"""``tune``: the tuning run itself (the package docstring, :mod:`valuelens.tuning`, says what it does)."""

from __future__ import annotations

import logging
import os
import shutil
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from valuelens import models
from valuelens.batching import TruncationWarning
from valuelens.bm25 import Analyzer, BM25Lens, BM25State
from valuelens.config import EncoderConfig
from valuelens.embed_filter import EmbedFilter
from valuelens.encoder import Encoder
from valuelens.errors import ConfigError
from valuelens.lexical import LexicalLens
from valuelens.loading import load_model
from valuelens.postprocess import Postprocess
from valuelens.presets.folder import PresetFolder
from valuelens.presets.resolution import resolve
from valuelens.presets.table import FUTUREEOL_SENTENCE
from valuelens.states import bm25_lens, lexical_lens
from valuelens.tuning.cache import FAMILIES, LayerCache
from valuelens.tuning.data import Mode, Objective, TuneData, read_sources, sizes
from valuelens.tuning.pseudo import (
    METHODS,
    PseudoDevSet,
    QueryMethod,
    has_chat_template,
    make_generator,
    pseudo_dev_set,
)
from valuelens.tuning.report import score_names, write_report
from valuelens.tuning.search import Candidate, Row, Scorer, search

__all__ = ["PROMPTS", "QUERY_TEMPLATES", "STATE_FILE", "TuneResult", "dev_scores", "tune"]

logger = logging.getLogger(__name__)

#: The prompts each mode tries (every readout family is read under each; ``None``: no prompt, for the
#: families that do not read the last token's attention).
PROMPTS: dict[Mode, tuple[str | None, ...]] = {
    "quick": (FUTUREEOL_SENTENCE,),
    "full": (FUTUREEOL_SENTENCE, "futureeol", "prompteol", None),
}
#: The prompts queries are also embedded under (cheap: queries are few and short), for a query side.
QUERY_TEMPLATES: tuple[str | None, ...] = (
    FUTUREEOL_SENTENCE,
    "futureeol",
    'Forecasting the subsequent tokens of this query: "{text}" in one word:"',
    "prompteol",
)
#: The fitted post-processing's file name in a tuned folder.
STATE_FILE = "state.safetensors"
#: The BM25 statistics counted on the user's corpus, in a folder tuned on one.
LEXICAL_FILE = "lexical.safetensors"
#: Pseudo-queries made from a corpus, per mode (``pseudo_queries`` overrides).
PSEUDO_QUERIES: dict[Mode, int] = {"quick": 100, "full": 300}
#: Dev texts and documents the winner is re-embedded on by the real encoder, to check the cache's math.
_CHECK_TEXTS = 48
_CHECK_DOCS = 8
#: The smallest cosine between a spec's real embeddings and the cache's that counts as agreement.
_MIN_AGREEMENT = 0.99


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` wrote and found."""

    folder: Path
    spec: dict
    best: Row
    references: dict[str, dict]
    """Per preset of ``compare``: its dev ``sts``, ``retrieval``, ``objective``, ``spec`` and how it was
    ``scored`` (:func:`dev_scores`)."""
    seconds: dict[str, float]
    score_names: tuple[str, str] = ("STS-B dev", "SciFact dev nDCG@10")
    """What the two dev scores are (:func:`valuelens.tuning.report.score_names`)."""
    dev_source: str = ""
    """How the dev data was made (the pseudo-queries' report line for a label-free run)."""


def lexical_lenses(
    model: Any, tokenizer: Any, bm25: BM25State | None = None
) -> dict[str, LexicalLens | BM25Lens]:
    """Both kinds of lexical part, as the search scores them and as a preset loads them: BM25 from
    ``bm25`` (statistics counted on the user's corpus) or else from word frequencies; the input
    embeddings' idf."""
    return {
        "bm25": bm25_lens(EncoderConfig(lexical=0.1), bm25),
        "embeddings": lexical_lens(model, tokenizer),
    }


def tune(
    model: str | os.PathLike[str] | None,
    output: str | os.PathLike[str],
    *,
    objective: Objective = "balanced",
    mode: Mode = "quick",
    corpus: str | os.PathLike[str] | Sequence[Any] | None = None,
    dev: Sequence[str | os.PathLike[str]] = (),
    queries: QueryMethod = "auto",
    pseudo_queries: int | None = None,
    distractors: int | None = None,
    compare: Sequence[str] = (),
    max_length: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    device: str | None = None,
    dtype: str | None = None,
    batch_size: int = 32,
    cache: str | os.PathLike[str] | None = None,
    keep_cache: bool = False,
    lexical: bool = True,
    show_progress: bool = True,
) -> TuneResult:
    """Tune a preset folder for ``model`` at ``output`` (see the module docstring).

    What it tunes on (:meth:`TuneData.build <valuelens.tuning.data.TuneData.build>`): labelled ``dev``
    sets (a BEIR folder, STS pairs, a hub dataset id) when given; else, label-free, the user's ``corpus``
    (a file, a folder, or a list of strings or LangChain / LlamaIndex documents), from which
    ``pseudo_queries`` queries are made (``queries``: ``generate`` them with the model's chat template, ``cloze`` sentences out of their
    passages, ``auto`` the first where the model has a template; :mod:`valuelens.tuning.pseudo`), its
    texts also fitting the post-processing and counting the BM25 statistics the folder keeps; else the
    project's data folder (STS-B dev, SciFact's carved dev split).
    ``compare`` names presets (``"best"``, a folder, ...) scored on the same dev data, as rows of the
    report: from the cache where it holds what a preset reads (checked against its real embeddings),
    else with the real encoder. ``distractors``: SciFact documents beside the dev queries' relevant
    ones in the dev corpus (default: the mode's, :func:`~valuelens.tuning.data.sizes`). ``cache``:
    where the layer cache lives (default ``output/cache``, removed after the run unless ``keep_cache``;
    a folder given here is always kept). ``lexical``: try a lexical part (its default idf, :mod:`valuelens.lexical`) on
    the finalists. Raises :class:`ConfigError` for a bad option before any model loads.
    """
    out = Path(output)
    if out.exists() and not out.is_dir():
        msg = f"output {str(out)!r} exists and is not a folder"
        raise ConfigError(msg)
    cache_dir = out / "cache" if cache is None else Path(cache)
    if cache_dir.exists() and not cache_dir.is_dir():
        msg = f"cache {str(cache_dir)!r} exists and is not a folder"
        raise ConfigError(msg)
    started = time.perf_counter()
    sizes(mode, objective, distractors)  # checks the mode, the objective and distractors
    n_queries = PSEUDO_QUERIES[mode] if pseudo_queries is None else pseudo_queries
    if isinstance(n_queries, bool) or not isinstance(n_queries, int) or n_queries < 1:
        msg = f"pseudo_queries must be a whole number >= 1, got {pseudo_queries!r}"
        raise ConfigError(msg)
    if queries not in METHODS:
        msg = f"queries must be one of {', '.join(map(repr, METHODS))}, got {queries!r}"
        raise ConfigError(msg)
    sources = read_sources(objective=objective, corpus=corpus, dev=dev, data_dir=data_dir)
    path = models.path(model)
    name = str(model) if model is not None else models.DEFAULT_MODEL
    spec_max = EncoderConfig(max_length=max_length).effective_max_length
    net, tokenizer = load_model(path, device=device, dtype=dtype)
    probe = Encoder(net, tokenizer, recipe="va", layers="all")
    key, n_layers = probe.parts.model_key, len(probe.layers)
    seconds: dict[str, float] = {"load": time.perf_counter() - started}

    tick = time.perf_counter()
    pseudo = None
    if sources.kind == "corpus":
        pseudo = _pseudo_maker(
            path, tokenizer, queries, n_queries, cache_dir / _pseudo_cache_name(key), device, show_progress
        )
    data = TuneData.build(
        mode, objective=objective, distractors=distractors, data_dir=data_dir, sources=sources, pseudo=pseudo
    )
    if sources.kind == "corpus":
        seconds["pseudo-queries"] = time.perf_counter() - tick
        logger.info("valuelens tune: %s", data.dev_source)
    layers = LayerCache.open(cache_dir, data, model_name=name, model_key=key, max_length=spec_max)
    prompts = PROMPTS[mode]
    query_templates = [p for p in QUERY_TEMPLATES if p not in prompts]
    sets = data.sets()
    total = sum(len(texts) for texts in sets.values()) * len(prompts) + len(sets.get("queries", ())) * len(
        query_templates
    )
    tick = time.perf_counter()
    with tqdm(
        total=total, desc="valuelens tune: forward passes", unit="text", disable=not show_progress
    ) as bar:
        layers.fill(
            net, tokenizer, prompts, FAMILIES, sets, max_length=spec_max, batch_size=batch_size, progress=bar
        )
        query_sets = {"queries": sets["queries"]} if "queries" in sets else {}
        layers.fill(
            net,
            tokenizer,
            query_templates,
            FAMILIES,
            query_sets,
            max_length=spec_max,
            batch_size=batch_size,
            progress=bar,
        )
    seconds["forward"] = time.perf_counter() - tick

    tick = time.perf_counter()
    taus = (2.0,)
    filters = {tau: EmbedFilter.from_model(path, tau=tau) for tau in taus}
    corpus_bm25 = None
    if lexical and data.lexical_texts:  # the user's documents: their own idf and average length
        corpus_bm25 = BM25State.fit(Analyzer(EncoderConfig().lexical_language), list(data.lexical_texts))
    lenses = lexical_lenses(probe.model, probe.tokenizer, corpus_bm25) if lexical else {}
    scorer = Scorer(layers, data, objective=objective, embed_filters=filters, lexical=lenses)
    n_groups = sum(1 for p in prompts for f in FAMILIES if p is not None or not f.reads_last_attention)
    with tqdm(
        total=n_groups, desc="valuelens tune: scoring", unit="family", disable=not show_progress
    ) as bar:
        rows = search(
            scorer, prompts, FAMILIES, n_layers, taus=taus, query_templates=QUERY_TEMPLATES, progress=bar
        )
    seconds["search"] = time.perf_counter() - tick

    best = rows[0]
    fields = best.candidate.fields()
    if max_length is not None:
        fields["max_length"] = max_length
    config = EncoderConfig.from_dict(fields).resolved(*key)
    out.mkdir(parents=True, exist_ok=True)
    state = out / STATE_FILE
    state.unlink(missing_ok=True)
    post = scorer.fit_post(
        best.candidate, fitted_on=data.fit_source, model=name, encoder_config=config.to_dict()
    )
    if post is not None:
        post.save(state)
        fields["postprocess"] = STATE_FILE
    (out / LEXICAL_FILE).unlink(missing_ok=True)
    if (
        corpus_bm25 is not None
        and fields.get("lexical") is not None
        and best.candidate.lexical_kind == "bm25"
    ):
        corpus_bm25.save(out / LEXICAL_FILE)
        fields["lexical_corpus"] = LEXICAL_FILE

    tick = time.perf_counter()
    folder = PresetFolder(out.resolve(), name, key, fields, objective)
    with warnings.catch_warnings():  # documents past max_length are cut, as the spec says: no news here
        warnings.simplefilter("ignore", TruncationWarning)
        agreement = _check(folder, net, tokenizer, scorer, best.candidate, post, key)
        references = {
            ref: dev_scores(ref, name, net, tokenizer, scorer, key, max_length, from_cache=True)
            for ref in compare
        }
    seconds["check"] = time.perf_counter() - tick
    seconds["total"] = time.perf_counter() - started
    info = {
        "mode": mode,
        "dev": {
            name: None if np.isnan(value) else round(value, 2)
            for name, value in (
                ("sts", best.sts),
                ("retrieval", best.retrieval),
                ("objective", best.objective),
            )
        },
        "data": {
            "sts_pairs": len(data.sts.gold),
            "retrieval_queries": len(data.retrieval.queries),
            "retrieval_docs": len(data.retrieval.docs),
            "fit": data.fit_source,
            "sts_set": data.sts_name,
            "retrieval_set": data.retrieval_name,
            "dev": data.dev_source,
            **(
                {"lexical_statistics": f"BM25 counted on {len(data.lexical_texts)} documents"}
                if "lexical_corpus" in fields
                else {}
            ),
        },
        "check_min_cosine": round(agreement, 6),
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
    }
    folder = PresetFolder(out.resolve(), name, key, fields, objective, info)
    folder.write()
    write_report(folder, rows, references, data, prompts)
    if cache is None and not keep_cache:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return TuneResult(folder.path, fields, best, references, seconds, score_names(data), data.dev_source)


def _pseudo_cache_name(key: tuple[str, int, int]) -> str:
    return f"pseudo-queries-{key[0]}-{key[1]}-{key[2]}.json"


def _pseudo_maker(
    path: Any,
    tokenizer: Any,
    method: QueryMethod,
    n_queries: int,
    cache_file: Path,
    device: str | None,
    show_progress: bool,
) -> Callable[[Sequence[str], int], PseudoDevSet]:
    """What makes the label-free dev set from the corpus: :func:`pseudo_dev_set` with the model's own
    generator when ``method`` may generate and the tokenizer has a chat template."""

    def make(texts: Sequence[str], distractors: int) -> PseudoDevSet:
        generator = None
        if method != "cloze" and has_chat_template(tokenizer):
            generator = make_generator(path, tokenizer, device=device)
        what = "generating" if generator is not None else "taking sentences out of"
        with tqdm(
            total=n_queries if generator is not None else min(len(texts), 2 * n_queries),
            desc=f"valuelens tune: pseudo-queries ({what} passages)",
            unit="passage",
            disable=not show_progress,
        ) as bar:
            return pseudo_dev_set(
                texts,
                method=method,
                queries=n_queries,
                distractors=distractors,
                tokenizer=tokenizer,
                generator=generator,
                cache_file=cache_file,
                progress=bar,
            )

    return make


def _check(
    folder: PresetFolder,
    net: object,
    tokenizer: object,
    scorer: Scorer,
    candidate: Candidate,
    post: object,
    key: tuple[str, int, int],
) -> float:
    """The chosen spec's :func:`_agreement` with the cache (``ConfigError`` below 0.99: the search's math
    and the encoder disagree)."""
    fields = folder.fields(key)
    encoder = Encoder(net, tokenizer, EncoderConfig.from_dict(fields))  # type: ignore[arg-type]
    worst, where = _agreement(encoder, scorer, candidate, post)  # type: ignore[arg-type]
    if worst < _MIN_AGREEMENT:
        msg = (
            f"the chosen spec ({candidate.label()}) disagrees with the tuning cache on the dev {where} "
            f"(cosine {worst:.4f}): please report this"
        )
        raise ConfigError(msg)
    return worst


def _agreement(
    encoder: Encoder, scorer: Scorer, candidate: Candidate, post: Postprocess | None
) -> tuple[float, str]:
    """Embed a few dev texts (sentences, documents, queries) with the real encoder and compare with the
    cache's vectors of the candidate it stands for: the smallest cosine and the set it was found on."""
    data = scorer.data
    worst, where = 1.0, ""
    checks = (
        ("sts", data.sts.texts, _CHECK_TEXTS, encoder.encode),
        ("docs", data.retrieval.docs, _CHECK_DOCS, encoder.encode),
        ("queries", data.retrieval.queries, _CHECK_DOCS, encoder.encode_query),
    )
    for set_name, texts, count, encode in checks:
        if not texts:
            continue
        real = np.asarray(encode(list(texts[:count]), normalize=True), dtype=np.float64)
        cached = scorer.vectors(candidate, set_name, post)[:count].astype(np.float64)
        cached /= np.linalg.norm(cached, axis=1, keepdims=True)
        cosine = float((real * cached).sum(1).min())
        if cosine < worst:
            worst, where = cosine, set_name
    return worst, where


def dev_scores(
    preset: str,
    name: str,
    net: object,
    tokenizer: object,
    scorer: Scorer,
    key: tuple[str, int, int],
    max_length: int | None,
    overrides: Mapping[str, Any] | None = None,
    *,
    from_cache: bool = False,
) -> dict:
    """An existing preset's dev scores (a row of the report; also used by ``research/untuned_rule.py``,
    with ``overrides`` of the preset's fields), embedded by the real encoder. ``from_cache``: scored from
    ``scorer``'s cache instead where it holds every readout the preset reads, with the preset's own
    fitted state, once a few real embeddings agree with the cache's (as the tuned spec is checked); the
    row's ``scored`` says which (``"cache"`` or ``"encoder"``)."""
    fields = dict(overrides or {})
    if max_length is not None:
        fields["max_length"] = max_length
    config = resolve(preset, key, fields)
    encoder = Encoder(net, tokenizer, config, name_or_path=name)  # type: ignore[arg-type]
    data = scorer.data
    cached = _from_cache(preset, encoder, scorer) if from_cache else None
    if cached is not None:
        row, vec = cached
    else:
        row = {"scored": "encoder"}
        sets = data.sets()
        vec = {
            name: np.asarray(
                (encoder.encode_query if name == "queries" else encoder.encode)(list(sets[name]))
            )
            for name in scorer.SETS
            if name in sets
        }
    sts = scorer.sts(vec["sts"]) if "sts" in vec else float("nan")
    ret = scorer.retrieval(vec["queries"], vec["docs"]) if "queries" in vec else float("nan")
    return {
        "sts": sts,
        "retrieval": ret,
        "objective": scorer.combine(sts, ret),
        "spec": config.to_dict(),
        **row,
    }


def _from_cache(
    preset: str, encoder: Encoder, scorer: Scorer
) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """The row's provenance and the dev sets' vectors of the encoder's spec, computed from the scorer's
    cache with the encoder's own fitted state, where the cache holds all the spec reads at the same
    token limit and a few real embeddings agree with it (:func:`_agreement`); else ``None``."""
    if scorer.cache is None or encoder.max_length != scorer.cache.meta.get("max_length"):
        return None
    candidate = Candidate.from_config(encoder.config, FAMILIES)
    if candidate is None or not scorer.holds(candidate):
        return None
    agreement, _ = _agreement(encoder, scorer, candidate, encoder.postprocess)
    if agreement < _MIN_AGREEMENT:
        logger.warning(
            "preset %s: the tuning cache disagrees with its real embeddings (cosine %.4f): embedding the dev data",
            preset,
            agreement,
        )
        return None
    vec = {
        s: scorer.vectors(candidate, s, encoder.postprocess) for s in scorer.SETS if s in scorer.data.sets()
    }
    return {"scored": "cache", "check_min_cosine": round(agreement, 6)}, vec
