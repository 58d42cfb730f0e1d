"""Presets: the table, the one merge rule with the fields a caller passes, the generic fallback and
the built-in fitted states (:mod:`valuelens.presets`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from tiny_models import CORPUS, save_tiny_model, tune_tiny_preset
from valuelens import ConfigError, Encoder, EncoderConfig, presets
from valuelens.postprocess import load_postprocess
from valuelens.presets.resolution import preset_config
from valuelens.presets.table import tuned_folders

TEXTS = CORPUS[:6]


def test_preset_best_falls_back_to_the_untuned_rule_and_can_be_overridden(tmp_path, monkeypatch):
    path = save_tiny_model(tmp_path / "m")
    assert preset_config("best", path) == EncoderConfig.from_dict(presets.UNTUNED)
    assert preset_config("untuned", path) == EncoderConfig.from_dict(presets.UNTUNED)
    entry = {"recipe": "last-token", "prompt": "pcot", "layers": [2], "prepend_layers": [1]}
    monkeypatch.setitem(presets.PRESETS, ("llama", 4, 64), {"best": entry})
    enc = Encoder.from_pretrained(path, preset="best", max_length=40)
    assert enc.config.recipe == "last-token" and enc.config.prepend_layers == (1,)
    assert enc.config.max_length == 40
    # "sts" is the model's "best" where it has no entry of its own, its own entry where it has one
    assert preset_config("sts", path) == preset_config("best", path)
    monkeypatch.setitem(presets.PRESETS, ("llama", 4, 64), {"best": entry, "sts": {"recipe": "va"}})
    assert preset_config("sts", path).recipe == "va"
    assert preset_config("generic", path) == EncoderConfig.from_dict(presets.GENERIC)
    with pytest.raises(ConfigError, match="unknown preset"):
        Encoder.from_pretrained(path, preset="fastest")
    with pytest.raises(ConfigError, match="preset= or config="):
        Encoder.from_pretrained(path, EncoderConfig(), preset="best")


class _Loaded(Exception):
    """Raised in place of loading a model: what happened before it happened before any model loaded."""


def _no_loading(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise _Loaded

    monkeypatch.setattr("valuelens.encoder.load_model", refuse)


def _dropped(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("valuelens") and "dropped" in r.getMessage()
    ]


def test_preset_overrides_win_by_key_even_none_and_defaults(tmp_path, monkeypatch, caplog):
    path = save_tiny_model(tmp_path / "m")
    entry = tune_tiny_preset(monkeypatch, path, tmp_path)
    plain = Encoder.from_pretrained(path, preset="best")
    assert plain.config.drop_prefix and plain.config.postprocess == entry["postprocess"]
    assert plain.config.prompt == "futureeol" and plain.postprocess is not None
    caplog.set_level(logging.WARNING, logger="valuelens")
    # a default value passed wins (drop_prefix=False); the state fitted with drop_prefix goes, logged
    enc = Encoder.from_pretrained(path, preset="best", drop_prefix=False)
    assert not enc.config.drop_prefix and enc.config.postprocess is None and enc.postprocess is None
    assert enc.config.recipe == "aligned-wva" and enc.config.prompt == "futureeol"
    (line,) = _dropped(caplog)
    assert "postprocess=" in line and "drop_prefix= changed it" in line
    # None passed wins: prompt=None, postprocess=None
    caplog.clear()
    enc = Encoder.from_pretrained(path, preset="best", prompt=None)
    assert enc.config.prompt is None and enc.config.postprocess is None and enc.config.drop_prefix
    assert "prompt= changed it" in _dropped(caplog)[0]
    caplog.clear()
    enc = Encoder.from_pretrained(path, preset="best", postprocess=None)
    assert enc.config.postprocess is None and enc.config.drop_prefix and not _dropped(caplog)
    np.testing.assert_allclose(
        enc.encode(TEXTS),
        Encoder.from_pretrained(path, **{**entry, "postprocess": None}).encode(TEXTS),
        atol=1e-6,
    )
    # max_length is not part of what a state was fitted for: kept, silently
    enc = Encoder.from_pretrained(path, preset="best", max_length=40)
    assert enc.config.postprocess == entry["postprocess"] and not _dropped(caplog)


def test_preset_parts_an_override_invalidates_are_dropped_before_any_model_loads(
    tmp_path, monkeypatch, caplog
):
    path = save_tiny_model(tmp_path / "m")
    entry = tune_tiny_preset(monkeypatch, path, tmp_path)
    caplog.set_level(logging.WARNING, logger="valuelens")
    _no_loading(monkeypatch)
    with pytest.raises(_Loaded):  # recipe="va" cannot drop the prefix: both dependent parts dropped first
        Encoder.from_pretrained(path, preset="best", recipe="va")
    (line,) = _dropped(caplog)
    assert "drop_prefix=True (recipe='va' does not read the last token's attention)" in line
    assert f"postprocess={entry['postprocess']!r}" in line and "recipe=" in line
    config = preset_config("best", path, recipe="va")
    assert config == EncoderConfig(recipe="va", layers=(2, 3), prompt="futureeol")
    # what the caller passed is never dropped: refused before loading, with the fix
    caplog.clear()
    with pytest.raises(ConfigError, match="drop_prefix=True applies to"):
        Encoder.from_pretrained(path, preset="best", recipe="va", drop_prefix=True)
    with pytest.raises(ConfigError, match=r"fitted for another spec: prompt.*Pass postprocess=None"):
        Encoder.from_pretrained(path, preset="best", prompt="prompteol", postprocess=entry["postprocess"])
    # Contrastive Prompting at a layer drop_prefix would recompute takes drop_prefix out too
    assert not preset_config("best", path, contrast_layer=2).drop_prefix
    assert "Contrastive Prompting edits layer 2" in _dropped(caplog)[0]
    assert preset_config("best", path, contrast_layer=1).drop_prefix  # before the layers read: kept


def test_a_preset_falls_back_to_the_untuned_rule_with_one_log_line_per_model(tmp_path, monkeypatch, caplog):
    from valuelens.presets import resolution

    monkeypatch.setattr(resolution, "_FALLBACK_LOGGED", set())
    path = save_tiny_model(tmp_path / "m")
    caplog.set_level(logging.WARNING, logger="valuelens")
    assert (
        preset_config("best", path) == preset_config("sts", path) == EncoderConfig.from_dict(presets.UNTUNED)
    )
    Encoder.from_pretrained(path, preset="best")
    lines = [r.getMessage() for r in caplog.records if "rule for untuned models" in r.getMessage()]
    assert len(lines) == 1, lines
    assert f"no tuned entry for {path} (llama, 4 layers, hidden size 64)" in lines[0]
    assert "valuelens tune MODEL -o DIR" in lines[0] and "postprocess='fit:abtt:2@FILE'" in lines[0]
    caplog.clear()
    preset_config("generic", tmp_path / "m")
    preset_config("untuned", tmp_path / "m")
    assert not caplog.records  # asked for by name: nothing to say


def test_the_real_presets_resolve_overrides_without_loading_a_model(caplog):
    smollm2 = ("llama", 30, 576)  # the key alone: no model is read
    caplog.set_level(logging.WARNING, logger="valuelens")
    assert preset_config("best", smollm2).postprocess == "builtin:smollm2-135m-best-v7"
    config = preset_config("best", smollm2, recipe="va")  # raised a ConfigError about drop_prefix before
    assert config.recipe == "va" and not config.drop_prefix and config.postprocess is None
    assert config.fusion == preset_config("best", smollm2).fusion  # the rest of the preset stays
    for change in ({"prompt": "prompteol"}, {"layers": "half"}):  # failed after loading the model before
        config = preset_config("best", smollm2, **change)
        assert config.postprocess is None and config.drop_prefix, change
    assert preset_config("best", smollm2, layers=list(range(21, 30))).postprocess is not None  # = "21-29"
    assert len(_dropped(caplog)) == 3
    # lexical=None turns the part off on both sides: the preset's query weight goes with it, silently
    off = preset_config("best", smollm2, lexical=None)
    assert off.lexical is None and off.lexical_query is None and off.postprocess is not None
    assert len(_dropped(caplog)) == 3
    with pytest.raises(ConfigError, match="lexical_query needs a lexical part"):
        preset_config("best", smollm2, lexical=None, lexical_query=0.5)  # both given: the caller's mistake


@pytest.mark.slow
def test_the_real_best_preset_takes_the_overrides_that_failed_before(caplog):
    """SmolLM2's best with recipe="va" raised a ConfigError about drop_prefix; with prompt="prompteol"
    it failed after the model loaded (the state was fitted for another spec)."""
    caplog.set_level(logging.WARNING, logger="valuelens")
    for change in ({"recipe": "va"}, {"prompt": "prompteol"}):
        enc = Encoder.from_pretrained("smollm2-135m", preset="best", device="cpu", **change)
        assert enc.postprocess is None and enc.config.fusion, change
        assert np.isfinite(enc.encode(TEXTS)).all()
    assert len(_dropped(caplog)) == 2


def test_builtin_states_are_named_by_a_preset_or_kept_as_retired():
    from valuelens.presets.builtin import RETIRED_STATES, shipped_states

    named = {
        fields["postprocess"].removeprefix("builtin:")
        for entries in presets.PRESETS.values()
        for fields in entries.values()
        if str(fields.get("postprocess", "")).startswith("builtin:")
    }
    assert set(shipped_states()) == named | set(RETIRED_STATES)
    assert not named & set(RETIRED_STATES)
    with pytest.raises(ConfigError, match=r"no built-in post-processing state 'nope'.*ships"):
        load_postprocess("builtin:nope")


def test_every_builtin_state_a_preset_names_loads_and_matches_its_spec():
    named = [
        (arch, name, fields)
        for arch, entries in presets.PRESETS.items()
        for name, fields in entries.items()
        if str(fields.get("postprocess", "")).startswith("builtin:")
    ]
    assert {name for _, name, _ in named} == {"best", "sts"}
    for arch, name, fields in named:
        config = EncoderConfig.from_dict(fields).resolved(*arch)  # layers as the model resolves them
        state = load_postprocess(config.postprocess, config)  # raises if fitted for another spec
        assert state.encoder_config, (arch, name)
        assert state.kind == "abtt", (arch, name, state.kind)


#: The presets the tuned ones replaced are kept as spec files, research/presets/former-<what>-<model>.json;
#: the model's key is its tuned folders' (each names its model and key).
FORMER_DIR = Path(__file__).resolve().parents[2] / "research/presets"
MODEL_KEYS = {folder.model: folder.model_key for folder in tuned_folders()}
FORMER = {
    path.name: key
    for path in sorted(FORMER_DIR.glob("former-*.json"))
    for model, key in MODEL_KEYS.items()
    if path.stem.endswith("-" + model)
}


def test_every_former_preset_file_names_a_bundled_model():
    assert len(FORMER) == len(list(FORMER_DIR.glob("former-*.json"))) >= 5


@pytest.mark.parametrize(("name", "key"), FORMER.items(), ids=list(FORMER))
def test_a_former_preset_is_kept_as_a_spec_file_with_its_retired_state(name, key):
    """research/results/README.md compares the tuned presets with the ones they replaced, by these files."""
    from valuelens.presets.builtin import RETIRED_STATES

    config = EncoderConfig.from_dict(json.loads((FORMER_DIR / name).read_text()))
    assert config not in (preset_config("best", key), preset_config("sts", key))
    if config.postprocess is None:  # nothing was fitted (Qwen's first tuned sts)
        return
    assert config.postprocess.removeprefix("builtin:") in RETIRED_STATES
    state = load_postprocess(config.postprocess, config.resolved(*key))  # fitted for this spec
    assert state.kind in ("center", "abtt")
