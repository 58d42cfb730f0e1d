"""The preset table: per model (keyed by :func:`valuelens.architectures.model_key`), the fields of each
named spec. Data only (no valuelens imports), so that :mod:`valuelens.layers` and
:mod:`valuelens.postprocess` can read this package without an import cycle.

Usage: ``PRESETS[("llama", 30, 576)]["best"]`` → the fields of SmolLM2-135M's ``preset="best"``.

How each entry was chosen (dev splits only) and its scores: ``research/rounds/README.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FUTUREEOL_SENTENCE", "GENERIC", "PRESETS", "PRESET_NAMES", "UNTUNED", "ModelKey"]

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
#: unlabeled corpus and cached per model (:mod:`valuelens.first_use`; ``postprocess=None`` turns it off).
UNTUNED: dict[str, Any] = {
    "recipe": "aligned-wva",
    "prompt": FUTUREEOL_SENTENCE,
    "layers": "70%-100%",
    "fusion": [{"recipe": "va", "layers": "70%-100%", "weight": 0.5}],
    "postprocess": "fit:abtt:2",
}

#: ``"best"``: the recommended spec for sentences and documents alike (:data:`UNTUNED` for a model
#: without an entry); ``"sts"``: tuned for short-sentence similarity alone (the model's ``"best"`` where
#: there is no separate entry); ``"untuned"``: :data:`UNTUNED` for every model; ``"generic"``:
#: :data:`GENERIC` for every model.
PRESET_NAMES = ("best", "sts", "untuned", "generic")

#: Per model: the preset name → the spec's fields (round history and scores: research/rounds/README.md).
PRESETS: dict[ModelKey, dict[str, dict[str, Any]]] = {
    # SmolLM2-135M: round 8 (best), round 6 (sts)
    ("llama", 30, 576): {
        "best": {
            "recipe": "aligned-wva",
            "prompt": FUTUREEOL_SENTENCE,
            "drop_prefix": True,
            "fusion": [{"recipe": "aligned-va", "weight": 0.3, "embed_filter": 2}],
            "postprocess": "builtin:smollm2-135m-best-v3",
        },
        "sts": {
            "recipe": "aligned-wva",
            "prompt": FUTUREEOL_SENTENCE,
            "drop_prefix": True,
            "fusion": [{"recipe": "va", "weight": 0.3}],
            "postprocess": "builtin:smollm2-135m-sts-v2",
        },
    },
    # gemma-3-270m: round 4 (drop_prefix not taken in round 6)
    ("gemma3_text", 18, 640): {
        "best": {
            "recipe": "aligned-wva",
            "prompt": "futureeol",
            "prepend_layers": "auto",
            "fusion": [{"recipe": "va", "weight": 0.3}],
            "postprocess": "builtin:gemma3-270m-best",
        },
        "sts": {
            "recipe": "aligned-wva",
            "prompt": "futureeol",
            "prepend_layers": "auto",
            "postprocess": "builtin:gemma3-270m-sts",
        },
    },
    # Qwen2.5-Coder-0.5B: round 4 (best), round 7 (sts)
    ("qwen2", 24, 896): {
        "best": {"recipe": "aligned-wva", "prompt": "futureeol", "fusion": [{"recipe": "va", "weight": 0.7}]},
        "sts": {
            "recipe": "aligned-wva",
            "prompt": FUTUREEOL_SENTENCE,
            "fusion": [{"recipe": "va", "weight": 0.7}],
            "postprocess": "builtin:qwen2.5-coder-0.5b-sts-v2",
        },
    },
}
