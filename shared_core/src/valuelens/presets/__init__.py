"""Per-model knowledge in one place: the presets, the ``layers="auto"`` bands and the fitted states.

Usage::

    enc = Encoder.from_pretrained("smollm2-135m", preset="best")
    from valuelens.presets.resolution import resolve
    resolve("best", "smollm2-135m", {"max_length": 256})    # the EncoderConfig it loads

``preset="best"`` is the recommended :class:`~valuelens.EncoderConfig` for a model (:data:`UNTUNED`, a
rule in relative terms, for a model without an entry), ``"sts"`` the one tuned for short-sentence
similarity, ``"untuned"`` :data:`UNTUNED` and ``"generic"`` :data:`GENERIC` for every model. A model is
recognised by its key ``(model_type, full depth, hidden_size)``, read from its config (no weights).

The package holds:

- :mod:`~valuelens.presets.table`: :data:`PRESETS` (model key → preset name → fields), :data:`UNTUNED`,
  :data:`GENERIC`;
- :mod:`~valuelens.presets.bands`: :data:`AUTO_LAYERS` (model key → recipe → the ``"auto"`` layers;
  :mod:`valuelens.layers` keeps the resolution logic);
- ``states/``: the fitted post-processing states the presets name, as ``"builtin:NAME"``
  (:mod:`~valuelens.presets.builtin`, with the rule that keeps retired states for saved specs);
- :mod:`~valuelens.presets.resolution`: :func:`~valuelens.presets.resolution.resolve`, the one rule
  that merges a preset with the fields a caller passed (every surface uses it; ``valuelens.preset_config``).

Every entry was chosen on dev/train splits only; how, and the scores of each round, are in
``research/rounds/README.md`` (research notes); the test-split scores in ``docs/results.md``.

The data modules import nothing from valuelens but :mod:`valuelens.errors`, so :mod:`valuelens.layers`
and :mod:`valuelens.postprocess` read them without an import cycle; the resolution module sits above
:mod:`valuelens.config` and :mod:`valuelens.postprocess` and is not imported here for that reason.
"""

from __future__ import annotations

from valuelens.presets.bands import AUTO_LAYERS
from valuelens.presets.builtin import BUILTIN_PREFIX, FIT_PREFIX, RETIRED_STATES, builtin_path
from valuelens.presets.table import FUTUREEOL_SENTENCE, GENERIC, PRESET_NAMES, PRESETS, UNTUNED, ModelKey

__all__ = [
    "AUTO_LAYERS",
    "BUILTIN_PREFIX",
    "FIT_PREFIX",
    "FUTUREEOL_SENTENCE",
    "GENERIC",
    "PRESETS",
    "PRESET_NAMES",
    "RETIRED_STATES",
    "UNTUNED",
    "ModelKey",
    "builtin_path",
]
