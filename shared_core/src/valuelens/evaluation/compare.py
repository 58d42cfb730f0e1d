"""Recipe variants of one loaded model scored side by side, sharing forward passes (``valuelens eval``).

Usage::

    probe = load_probe("smollm2-135m")
    encoders = variant_encoders(probe, parse_variants("hs,va,prompteol+ef2"))
    tasks = [(load_task(name), limit) for name, limit in map(parse_task_spec, ["stsb:500", "lee"])]
    results = evaluate_variants(encoders, tasks)  # {"hs": [stsb, lee], "va": [...], ...}
    timing = time_alone(encoders, tasks[0][0], n=128)

Variants that share a prompt share one forward pass per batch (:class:`valuelens.batching.SharedEncoding`),
so comparing twenty recipes costs about as much as the distinct prompts among them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from valuelens import EmbedFilter, Encoder, encode_many
from valuelens.batching import SharedEncoding
from valuelens.config import LongText
from valuelens.errors import ConfigError
from valuelens.loading import build_embed_filter
from valuelens.presets.resolution import resolve
from valuelens.variants import Variant

from .report import Timing
from .runner import TaskResult, evaluate
from .tasks import ClassificationData, PairData, RetrievalData, Task

__all__ = ["evaluate_variants", "load_probe", "time_alone", "variant_encoders"]

WARM_UP_TEXTS = 8  # texts encoded once before timing, so the first recipe timed pays no start-up


def load_probe(model: str | None = None, *, device: str | None = None, dtype: str | None = None) -> Encoder:
    """``model`` (a bundled name, folder or hub id) loaded once with all its layers, for encoders to share.

    Usage: ``probe = load_probe("smollm2-135m", device="cpu")``; then ``probe.model``, ``probe.tokenizer``.
    """
    return Encoder.from_pretrained(
        model, recipe="hs", layers="all", truncate_layers=False, device=device, dtype=dtype
    )


def variant_encoders(
    probe: Encoder,
    variants: Sequence[Variant],
    *,
    max_length: int | None = None,
    long_text: LongText | None = None,
) -> dict[str, Encoder]:
    """One encoder per variant label over ``probe``'s model; variants with the same EmbedFilter share it.
    ``max_length`` / ``long_text`` (``None``: the variant's own, else the default) apply to every variant.

    Usage: ``variant_encoders(probe, parse_variants("va,prompteol+ef2"))``. An untied LM head's
    EmbedFilter is read from the checkpoint ``probe`` was loaded from.
    """
    if not variants:
        msg = "no recipe variants given: pass e.g. --recipes va,hs,prompteol"
        raise ConfigError(msg)
    labels = [v.label for v in variants]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        msg = f"recipe variants {repeated!r} are listed more than once; list each once"
        raise ConfigError(msg)
    filters: dict[tuple[str, float], EmbedFilter] = {}
    encoders: dict[str, Encoder] = {}
    for variant in variants:
        if variant.preset is not None or variant.config is not None:  # a whole spec
            given: dict[str, Any] = {} if max_length is None else {"max_length": max_length}
            if long_text is not None:
                given["long_text"] = long_text
            if variant.config is None:
                config = resolve(str(variant.preset), probe.parts.model_key, given)
            else:
                config = variant.config.replace(**given)
            encoders[variant.label] = Encoder(
                probe.model, probe.tokenizer, config, name_or_path=probe.name_or_path
            )
            continue
        kwargs = variant.encoder_kwargs()
        tau = kwargs.pop("embed_filter")
        embed_filter = None
        if tau is not None:
            key = (variant.reduction, tau)
            if key not in filters:
                filters[key] = _embed_filter(probe, variant.reduction, tau)
            embed_filter = filters[key]
        encoders[variant.label] = Encoder(
            probe.model,
            probe.tokenizer,
            embed_filter=embed_filter,
            max_length=max_length,
            long_text=long_text or "truncate",
            name_or_path=probe.name_or_path,
            **kwargs,
        )
    return encoders


def _embed_filter(probe: Encoder, reduction: str, tau: float) -> EmbedFilter:
    """EmbedFilter (``ef``) or its ablation baselines (``trunc``: first d/τ coordinates, ``rand``)."""
    if reduction == "trunc":
        return EmbedFilter.truncation(probe.parts.hidden_size, tau)
    if reduction == "rand":
        return EmbedFilter.random_subset(probe.parts.hidden_size, tau)
    return build_embed_filter(probe.model, tau)  # an untied head is read from the checkpoint


def evaluate_variants(
    encoders: Mapping[str, Encoder],
    tasks: Sequence[tuple[Task, int | None]],
    *,
    split: str = "test",
    batch_size: int = 32,
    progress: Callable[[str], None] | None = None,
) -> dict[str, list[TaskResult]]:
    """Score every encoder on every ``(task, limit)``, one forward pass per batch for all of them.

    Usage: ``evaluate_variants({"va": va, "hs": hs}, [(load_task("stsb"), 500)])["va"][0].main_score``.
    ``progress`` receives a ``[task/split] label`` line before each evaluation.
    """
    shared = SharedEncoding(list(encoders.values()))
    results: dict[str, list[TaskResult]] = {label: [] for label in encoders}
    for task, limit in tasks:
        for index, label in enumerate(encoders):
            if progress is not None:
                progress(f"[{task.name}/{split}] {label}")
            results[label].append(
                evaluate(
                    shared.view(index),
                    task,
                    split=split,
                    batch_size=batch_size,
                    show_progress=index == 0,
                    limit=limit,
                )
            )
    shared.clear()
    return results


def time_alone(
    encoders: Mapping[str, Encoder], task: Task, *, split: str = "test", n: int = 128, batch_size: int = 32
) -> Timing:
    """Time each encoder alone on up to ``n`` distinct texts of ``task`` (after one warm-up).

    Usage: ``time_alone({"va": va, "hs": hs}, load_task("stsb"), n=128).ms_per_text["va"]``
    """
    sample = _time_sample(task, split, n)
    encode_many([next(iter(encoders.values()))], sample[:WARM_UP_TEXTS], batch_size=batch_size)
    ms_per_text = {}
    for label, encoder in encoders.items():
        start = time.perf_counter()
        encode_many([encoder], sample, batch_size=batch_size)
        ms_per_text[label] = (time.perf_counter() - start) / len(sample) * 1000
    dims = {label: encoder.dimension for label, encoder in encoders.items()}
    return Timing(ms_per_text, dims=dims, n_texts=len(sample), task=task.name, batch_size=batch_size)


def _time_sample(task: Task, split: str, n: int) -> list[str]:
    """Up to ``n`` distinct texts of a task split (``["empty"]`` for an empty split)."""
    data = task.load(split)
    if isinstance(data, PairData):
        texts = list(data.texts1) + list(data.texts2)
    elif isinstance(data, ClassificationData):
        texts = list(data.test.texts)
    elif isinstance(data, RetrievalData):
        texts = list(data.queries.values()) + list(data.corpus.values())
    else:
        texts = list(data.texts)
    return list(dict.fromkeys(texts))[:n] or ["empty"]
