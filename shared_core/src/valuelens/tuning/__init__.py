"""``valuelens tune``: tune a preset for any model on dev data, as a folder that ``preset=DIR`` loads.

Usage::

    from valuelens.tuning import tune
    result = tune("./my-model", "tuned/mine", corpus="my_docs/")     # label-free: your documents only
    result = tune("./my-model", "tuned/mine", dev=["my_beir/"])      # labelled data of yours
    result = tune("smollm2-135m", "tuned/smollm2", objective="balanced", mode="quick")  # this repository
    enc = Encoder.from_pretrained("smollm2-135m", preset="tuned/smollm2")

One forward pass per dev text and prompt captures every candidate readout at every layer
(:mod:`~valuelens.tuning.cache`); everything else — recipe family, layer band, prompt, ``drop_prefix``,
EmbedFilter, a fusion of two readouts with its weight, post-processing fitted on unlabeled text, a
query side, a lexical part read from the input embeddings with its document and query weights — is
scored offline from that cache (:mod:`~valuelens.tuning.search`) on dev data (:mod:`~valuelens.tuning.data`):
pseudo-queries made from the user's documents (:mod:`~valuelens.tuning.pseudo`), labelled sets of theirs,
or, in this repository, STS-B dev and SciFact's dev split. The winner is checked against the real encoder, then written as
``DIR/preset.json`` (:mod:`valuelens.presets.folder`), ``DIR/state.safetensors`` (its fitted
post-processing, if any), ``DIR/report.md`` and ``DIR/candidates.jsonl`` (every candidate's dev scores,
:mod:`~valuelens.tuning.report`). The cache (``DIR/cache``) makes an interrupted run resumable; it is
removed after a run unless ``keep_cache=True``. A cache folder of one's own (``cache=``) is kept, and
serves every later run on the same model: another objective or corpus recomputes only the sets it reads
differently, e.g. ``tune(m, "a", cache="c"); tune(m, "b", objective="sts", cache="c")``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from valuelens.lazy import lazy_exports

#: Each public name and the module that defines it (loaded on first use: :mod:`valuelens.lazy`).
_EXPORTS: dict[str, str] = {
    name: "valuelens.tuning.run"
    for name in ("PROMPTS", "QUERY_TEMPLATES", "STATE_FILE", "TuneResult", "dev_scores", "tune")
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers see: the same names, imported eagerly
    from valuelens.tuning.run import (
        PROMPTS as PROMPTS,
        QUERY_TEMPLATES as QUERY_TEMPLATES,
        STATE_FILE as STATE_FILE,
        TuneResult as TuneResult,
        dev_scores as dev_scores,
        tune as tune,
    )
