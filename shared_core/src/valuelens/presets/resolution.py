"""A preset plus the fields a caller passed, resolved into one spec: the rule every surface uses.

Usage::

    resolve("best", "smollm2-135m", {"max_length": 256})       # the EncoderConfig Encoder loads
    resolve("best", ("llama", 30, 576), {"prompt": None})       # by model key (a loaded model's)
    resolve("tuned/smollm2", "smollm2-135m")                    # a folder written by `valuelens tune`
    preset_config("best", "smollm2-135m", recipe="va")          # the same, keywords as overrides

The rule (docs/recipes.md, "Presets"):

1. A field the caller passed wins over the preset's, whatever its value: ``None`` and the field's
   default included (``drop_prefix=False``, ``prompt=None``, ``postprocess=None``). Decided by key
   presence, never by comparing values with defaults.
2. A preset's dependent parts follow the fields they depend on. When a passed field changes what
   they were made for, they are dropped with one log line naming what and why, before any model
   loads: ``drop_prefix=True`` when the recipe no longer reads the last token's attention (or
   Contrastive Prompting edits a layer it reads), and the fitted ``postprocess`` state when any field
   besides ``max_length``, ``long_text`` and ``query_template`` differs from the spec it was fitted for. A ``drop_prefix`` or
   ``postprocess`` the caller passed is never dropped (a state fitted for another spec then fails
   here, before the model loads, naming the fix). ``lexical=None`` takes the preset's ``lexical_query``
   and ``lexical_corpus`` with it (:data:`LEXICAL_DEPENDENTS`): the part is off on both sides.
3. A model without a tuned entry gets :data:`~valuelens.presets.table.UNTUNED` (a relative layer band
   and a post-processing fitted at first use, :mod:`valuelens.states`), with one log line per model
   and process pointing at ``valuelens tune``, which tunes a preset folder for any model.

A preset is a name (:data:`~valuelens.presets.PRESET_NAMES`) or a preset folder
(:mod:`valuelens.presets.folder`); the rule is the same for both.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Mapping
from typing import Any

from valuelens import models
from valuelens.architectures import model_key
from valuelens.config import FIELDS, STATE_FREE_FIELDS, EncoderConfig
from valuelens.errors import ConfigError
from valuelens.loading import load_config
from valuelens.postprocess import load_postprocess
from valuelens.presets.builtin import FIT_PREFIX
from valuelens.presets.folder import PresetFolder, is_preset_folder
from valuelens.presets.table import GENERIC, PRESET_NAMES, PRESETS, UNTUNED, ModelKey
from valuelens.recipes import get_recipe

__all__ = ["check_preset_name", "model_key_of", "preset_config", "preset_fields", "preset_for", "resolve"]

logger = logging.getLogger(__name__)

#: Models whose fallback to :data:`UNTUNED` was logged in this process (one line per model).
_FALLBACK_LOGGED: set[ModelKey] = set()
#: The presets that are one spec for every model.
_FOR_EVERY_MODEL: dict[str, dict[str, Any]] = {"generic": GENERIC, "untuned": UNTUNED}

ModelRef = ModelKey | str | os.PathLike[str] | None


def check_preset_name(name: Any) -> str:
    """The preset name, normalized (``"Best"`` → ``"best"``), or a preset folder's absolute path (its
    ``preset.json`` read and checked); ``ConfigError`` for anything else."""
    if is_preset_folder(name):
        return str(PresetFolder.read(name).path)
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in PRESET_NAMES:
        msg = (
            f"unknown preset {name!r}: choose one of {', '.join(map(repr, PRESET_NAMES))}, or a folder "
            "written by `valuelens tune MODEL -o DIR` (one holding preset.json)"
        )
        raise ConfigError(msg)
    return str(key)


def _describe(key: ModelKey, label: str | None) -> str:
    shape = f"{key[0]}, {key[1]} layers, hidden size {key[2]}"
    return f"{label} ({shape})" if label else shape


def preset_fields(name: str, key: ModelKey, *, label: str | None = None) -> dict[str, Any]:
    """The fields of preset ``name`` for the model ``key`` (a copy); logs once per model and process
    when it falls back to :data:`UNTUNED`. ``label`` names the model in that line."""
    name = check_preset_name(name)
    if name not in PRESET_NAMES:  # a preset folder
        return PresetFolder.read(name).fields(key, label=label)
    if name in _FOR_EVERY_MODEL:
        return copy.deepcopy(_FOR_EVERY_MODEL[name])
    entries = PRESETS.get(key, {})
    fields = entries.get(name) or entries.get("best")
    if fields is None:
        fields = UNTUNED
        if key not in _FALLBACK_LOGGED:
            _FALLBACK_LOGGED.add(key)
            logger.warning(
                "preset %r: no tuned entry for %s; using the rule for untuned models (preset='untuned': "
                "a relative layer band, all-but-the-top fitted once on a small corpus and cached, a "
                "lexical part).\n"
                "  To fit it on your own texts instead: postprocess='fit:abtt:2@FILE' (queries and "
                "documents alike).\n"
                "  To tune a preset for this model: valuelens tune MODEL -o DIR, then preset=DIR (tune "
                "needs the eval extra: pip install 'valuelens[eval]'). See docs/tuning.md.",
                name,
                _describe(key, label),
            )
    return copy.deepcopy(fields)


def preset_for(model_type: str, n_layers: int, hidden_size: int, name: str = "best") -> EncoderConfig:
    """The spec ``name`` for a model key (``"generic"``: :data:`GENERIC` for every model)."""
    return EncoderConfig.from_dict(preset_fields(name, (model_type, n_layers, hidden_size)))


def model_key_of(model: ModelRef) -> ModelKey:
    """``model``'s key: a ``(model_type, depth, hidden_size)`` tuple as is, else read from the config of a
    bundled name, folder or hub id (``None``: the default model), no weights."""
    if isinstance(model, tuple):
        return model
    return model_key(load_config(models.path(model)).get_text_config())


def _label(model: ModelRef) -> str | None:
    if isinstance(model, tuple):
        return None
    return str(model) if model is not None else models.DEFAULT_MODEL


#: The fields that only mean something with a lexical part (``lexical`` set).
LEXICAL_DEPENDENTS = ("lexical_query", "lexical_corpus")


def resolve(preset: str | None, model: ModelRef, overrides: Mapping[str, Any] | None = None) -> EncoderConfig:
    """The spec of ``preset`` for ``model`` with ``overrides`` applied by the module docstring's rule.

    ``model`` is a model key or a model reference (its config is read, not its weights); without a
    preset it is not read and the spec is ``overrides`` alone. Raises :class:`ConfigError` for an
    unknown preset, an unknown field or a bad value, before any model loads.
    """
    given = dict(overrides or {})
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        msg = (
            f"unknown EncoderConfig field(s) {', '.join(map(repr, unknown))}: choose from {', '.join(FIELDS)}"
        )
        raise ConfigError(msg)
    if preset is None:
        return EncoderConfig.from_dict(given)
    name = check_preset_name(preset)
    key = model_key_of(model)
    base = preset_fields(name, key, label=_label(model))
    merged = {**base, **given}
    dropped: list[str] = []
    if "lexical" in given and given["lexical"] is None:  # no lexical part: the preset's query weight goes too
        merged.update({name: None for name in LEXICAL_DEPENDENTS if name not in given})
    if base.get("drop_prefix") and "drop_prefix" not in given:
        why = _drop_prefix_conflict(merged, key)
        if why:
            merged["drop_prefix"] = False
            dropped.append(f"drop_prefix=True ({why})")
    reference = base.get("postprocess")
    if reference is not None and "postprocess" not in given:
        fitted_for = EncoderConfig.from_dict({**base, "postprocess": None}).resolved(*key)
        wanted = EncoderConfig.from_dict({**merged, "postprocess": None}).resolved(*key)
        changed = [
            item.split(":")[0]
            for item in wanted.diff(fitted_for)
            if item.split(":")[0] not in STATE_FREE_FIELDS
        ]
        if changed:
            merged["postprocess"] = None
            named = [field for field in changed if field in given] or changed
            dropped.append(
                f"postprocess={reference!r} (fitted for the preset's spec; "
                f"{', '.join(f'{field}=' for field in named)} changed it)"
            )
    if dropped:
        logger.warning(
            "preset %r for %s: dropped %s; pass drop_prefix= / postprocess= explicitly to choose them",
            name,
            _describe(key, _label(model)),
            " and ".join(dropped),
        )
    config = EncoderConfig.from_dict(merged)
    if (
        config.postprocess is not None
        and "postprocess" in given
        and not config.postprocess.startswith(FIT_PREFIX)
    ):
        load_postprocess(config.postprocess, config.resolved(*key))  # a mismatched state fails now
    return config


def _drop_prefix_conflict(fields: Mapping[str, Any], key: ModelKey) -> str | None:
    """Why ``drop_prefix=True`` cannot go with the other ``fields``, or ``None`` when it can."""
    recipe = get_recipe(fields.get("recipe", "va"))
    if not recipe.reads_last_attention:
        return f"recipe={recipe.name!r} does not read the last token's attention"
    if fields.get("contrast_layer") is not None:
        config = EncoderConfig.from_dict({**fields, "drop_prefix": False}).resolved(*key)
        if config.contrast_layer in config.layers and recipe.reads_last_heads:  # type: ignore[operator]
            return f"Contrastive Prompting edits layer {config.contrast_layer}, which it would recompute"
    return None


def preset_config(name: str, model: ModelRef = None, **overrides: Any) -> EncoderConfig:
    """The spec of preset ``name`` for ``model`` (a bundled name, a folder, a hub id or a model key;
    ``None``: the default model) with ``overrides`` applied: :func:`resolve`."""
    return resolve(name, model, overrides)
