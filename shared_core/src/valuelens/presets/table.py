"""The preset table: per model (keyed by :func:`valuelens.architectures.model_key`), the fields of each
named spec. Data only (it imports nothing from valuelens but the preset-folder reader, which imports
only :mod:`valuelens.errors`), so that :mod:`valuelens.layers` and :mod:`valuelens.postprocess` can
read this package without an import cycle.

Usage: ``PRESETS[("llama", 30, 576)]["best"]`` → the fields of SmolLM2-135M's ``preset="best"``.

Every entry is what ``valuelens tune`` chose for a bundled model (dev data only; ``"best"`` under the
balanced objective, ``"sts"`` under the STS one), shipped as a preset folder in ``tuned/``
(tools/bundle_preset.py; its dev scores in its ``preset.json``, docs/tuning.md). The hand-chosen
presets of the research rounds (``research/rounds/README.md``) it replaced are kept as spec files in
``research/presets/former-*.json``, their states in :data:`~valuelens.presets.builtin.RETIRED_STATES`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from valuelens.presets.folder import PresetFolder, is_preset_folder

__all__ = [
    "FUTUREEOL_SENTENCE",
    "GENERIC",
    "PRESETS",
    "PRESET_NAMES",
    "TUNED_NAMES",
    "UNTUNED",
    "ModelKey",
    "tuned_folders",
]

#: ``(model_type, full depth, hidden_size)``: what a model is recognised by (read from its config).
ModelKey = tuple[str, int, int]

#: FutureEOL worded for a sentence (the best of 17 wordings for AlignedWVA on SmolLM2, round 6).
FUTUREEOL_SENTENCE = 'Forecasting the subsequent tokens of this sentence: "{text}" in one word:"'

#: ``preset="generic"``: the Value Aggregation paper's best one-pass recipe (AlignedWVA under FutureEOL over
#: ``layers="auto"``: the 50-85 % depth band on a model without its own band; no post-processing), for
#: every model.
GENERIC: dict[str, Any] = {"recipe": "aligned-wva", "prompt": "futureeol"}

#: ``preset="best"`` (and ``"sts"``) for a model without its own entry: the rule the three bundled models'
#: tuning shows, leave-one-model-out (research/default_rule.py; docs/tuning.md#models-without-a-preset):
#: AlignedWVA under FutureEOL "of this sentence" over the top 30 % of the depth, fused with VA over the
#: same band at weight 0.5, then all-but-the-top (2 components) fitted at first use on the package's
#: unlabeled corpus and cached per model (:mod:`valuelens.states`; ``postprocess=None`` turns it off);
#: the BM25 part at weight 0.05 for documents and 0.7 for queries, the query weight SmolLM2's and
#: Gemma's ``best`` both took on SciFact dev (research/bm25_hybrid.py; ``lexical=None`` turns it off).
UNTUNED: dict[str, Any] = {
    "recipe": "aligned-wva",
    "prompt": FUTUREEOL_SENTENCE,
    "layers": "70%-100%",
    "fusion": [{"recipe": "va", "layers": "70%-100%", "weight": 0.5}],
    "postprocess": "fit:abtt:2",
    "lexical": 0.05,
    "lexical_query": 0.7,
}

#: ``"best"``: the recommended spec for sentences and documents alike (:data:`UNTUNED` for a model
#: without an entry); ``"sts"``: tuned for short-sentence similarity alone (the model's ``"best"`` where
#: there is no separate entry); ``"untuned"``: :data:`UNTUNED` for every model; ``"generic"``:
#: :data:`GENERIC` for every model.
PRESET_NAMES = ("best", "sts", "untuned", "generic")

#: A tuned folder's objective → the preset name it is bundled as (tools/bundle_preset.py).
TUNED_NAMES = {"balanced": "best", "sts": "sts"}


def tuned_folders() -> list[PresetFolder]:
    """The preset folders ``valuelens tune`` wrote for the bundled models, shipped in ``tuned/`` (their
    states in ``states/``), in name order."""
    root = Path(str(resources.files(__package__ or "valuelens.presets") / "tuned"))
    return [PresetFolder.read(path) for path in sorted(root.iterdir()) if is_preset_folder(path)]


def _bundled() -> dict[ModelKey, dict[str, dict[str, Any]]]:
    """The bundled presets: model key → preset name → the spec's fields (:func:`tuned_folders`)."""
    entries: dict[ModelKey, dict[str, dict[str, Any]]] = {}
    for folder in tuned_folders():
        entries.setdefault(folder.model_key, {})[TUNED_NAMES[folder.objective]] = dict(folder.spec)
    return entries


#: Per model: the preset name → the spec's fields, from ``tuned/``: ``"best"`` is what ``valuelens tune
#: --objective balanced`` chose, ``"sts"`` what ``--objective sts`` chose (quick mode: docs/tuning.md).
PRESETS: dict[ModelKey, dict[str, dict[str, Any]]] = _bundled()
