"""``tune``: the tuning run itself (the package docstring, :mod:`valuelens.tuning`, says what it does)."""

from __future__ import annotations

import logging
import os
import shutil
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from valuelens import models
from valuelens.batching import TruncationWarning
from valuelens.bm25 import BM25Lens
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
from valuelens.tuning.data import Mode, Objective, TuneData
from valuelens.tuning.report import write_report
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


def lexical_lenses(model: Any, tokenizer: Any) -> dict[str, LexicalLens | BM25Lens]:
    """Both kinds of lexical part at their default statistics, as the search scores them and as a preset
    refits them at load: BM25 from word frequencies, the input embeddings' idf."""
    return {
        "bm25": bm25_lens(EncoderConfig(lexical=0.1)),
        "embeddings": lexical_lens(model, tokenizer),
    }


def tune(
    model: str | os.PathLike[str] | None,
    output: str | os.PathLike[str],
    *,
    objective: Objective = "balanced",
    mode: Mode = "quick",
    corpus: str | os.PathLike[str] | None = None,
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
    data = TuneData.build(  # checks every option
        mode, objective=objective, corpus=corpus, distractors=distractors, data_dir=data_dir
    )
    path = models.path(model)
    name = str(model) if model is not None else models.DEFAULT_MODEL
    spec_max = EncoderConfig(max_length=max_length).effective_max_length
    net, tokenizer = load_model(path, device=device, dtype=dtype)
    probe = Encoder(net, tokenizer, recipe="va", layers="all")
    key, n_layers = probe.parts.model_key, len(probe.layers)
    seconds: dict[str, float] = {"load": time.perf_counter() - started}

    layers = LayerCache.open(cache_dir, data, model_name=name, model_key=key, max_length=spec_max)
    prompts = PROMPTS[mode]
    query_templates = [p for p in QUERY_TEMPLATES if p not in prompts]
    sets = data.sets()
    total = sum(len(texts) for texts in sets.values()) * len(prompts) + len(sets["queries"]) * len(
        query_templates
    )
    tick = time.perf_counter()
    with tqdm(
        total=total, desc="valuelens tune: forward passes", unit="text", disable=not show_progress
    ) as bar:
        layers.fill(
            net, tokenizer, prompts, FAMILIES, sets, max_length=spec_max, batch_size=batch_size, progress=bar
        )
        queries = {"queries": sets["queries"]}
        layers.fill(
            net,
            tokenizer,
            query_templates,
            FAMILIES,
            queries,
            max_length=spec_max,
            batch_size=batch_size,
            progress=bar,
        )
    seconds["forward"] = time.perf_counter() - tick

    tick = time.perf_counter()
    taus = (2.0,)
    filters = {tau: EmbedFilter.from_model(path, tau=tau) for tau in taus}
    lenses = lexical_lenses(probe.model, probe.tokenizer) if lexical else {}
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
            "sts": round(best.sts, 2),
            "retrieval": round(best.retrieval, 2),
            "objective": round(best.objective, 2),
        },
        "data": {
            "sts_pairs": len(data.sts.gold),
            "retrieval_queries": len(data.retrieval.queries),
            "retrieval_docs": len(data.retrieval.docs),
            "fit": data.fit_source,
        },
        "check_min_cosine": round(agreement, 6),
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
    }
    folder = PresetFolder(out.resolve(), name, key, fields, objective, info)
    folder.write()
    write_report(folder, rows, references, data, prompts)
    if cache is None and not keep_cache:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return TuneResult(folder.path, fields, best, references, seconds)


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
    fields = folder.fields(key) if folder.spec.get("postprocess") else dict(folder.spec)
    encoder = Encoder(net, tokenizer, EncoderConfig.from_dict(fields))  # type: ignore[arg-type]
    worst = _agreement(encoder, scorer, candidate, post)  # type: ignore[arg-type]
    if worst < _MIN_AGREEMENT:
        msg = f"the chosen spec's real embeddings disagree with the tuning cache (cosine {worst:.4f}): please report this"
        raise ConfigError(msg)
    return worst


def _agreement(encoder: Encoder, scorer: Scorer, candidate: Candidate, post: Postprocess | None) -> float:
    """Embed a few dev texts (sentences, documents, queries) with the real encoder and compare with the
    cache's vectors of the candidate it stands for: the smallest cosine."""
    data = scorer.data
    worst = 1.0
    checks = (
        ("sts", data.sts.texts, _CHECK_TEXTS, encoder.encode),
        ("docs", data.retrieval.docs, _CHECK_DOCS, encoder.encode),
        ("queries", data.retrieval.queries, _CHECK_DOCS, encoder.encode_query),
    )
    for set_name, texts, count, encode in checks:
        real = np.asarray(encode(list(texts[:count]), normalize=True), dtype=np.float64)
        cached = scorer.vectors(candidate, set_name, post)[:count].astype(np.float64)
        cached /= np.linalg.norm(cached, axis=1, keepdims=True)
        worst = min(worst, float((real * cached).sum(1).min()))
    return worst


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
        vec = {
            "sts": np.asarray(encoder.encode(list(data.sts.texts))),
            "queries": np.asarray(encoder.encode_query(list(data.retrieval.queries))),
            "docs": np.asarray(encoder.encode(list(data.retrieval.docs))),
        }
    sts = scorer.sts(vec["sts"])
    ret = scorer.retrieval(vec["queries"], vec["docs"])
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
    agreement = _agreement(encoder, scorer, candidate, encoder.postprocess)
    if agreement < _MIN_AGREEMENT:
        logger.warning(
            "preset %s: the tuning cache disagrees with its real embeddings (cosine %.4f): embedding the dev data",
            preset,
            agreement,
        )
        return None
    vec = {s: scorer.vectors(candidate, s, encoder.postprocess) for s in scorer.SETS}
    return {"scored": "cache", "check_min_cosine": round(agreement, 6)}, vec
