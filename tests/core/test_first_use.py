"""Post-processing fitted at first use (``postprocess="fit:..."``, :mod:`valuelens.states`): what the
untuned rule (``preset="best"`` on a model without an entry) relies on."""

from __future__ import annotations

import logging
import shutil
from importlib import resources

import numpy as np
import pytest
import torch

from tiny_models import CORPUS, save_tiny_model
from valuelens import ConfigError, Encoder, EncoderConfig, fit_texts
from valuelens.evaluation.tasks import default_data_dir
from valuelens.presets.table import UNTUNED
from valuelens.states import CORPUS as CORPUS_FILE, FIT_CACHE_ENV, FitRequest

TEXTS = CORPUS[:6]
FIELDS = {"recipe": "va", "layers": [1, 2], "prompt": None}


def _shipped() -> list[str]:
    text = (resources.files("valuelens.presets") / CORPUS_FILE).read_text(encoding="utf-8")
    return text.splitlines()


@pytest.mark.parametrize(
    ("reference", "why"),
    [
        ("fit:abtt", "component count"),
        ("fit:abtt:0", "component count"),
        ("fit:whiten", "unknown kind 'whiten'"),
        ("fit:center:2", "takes no component count"),
        ("fit:abtt:2@", "followed by a text file"),
    ],
)
def test_a_malformed_fit_reference_is_refused_before_any_load(reference, why):
    with pytest.raises(ConfigError, match=why):
        EncoderConfig(postprocess=reference)


def test_fit_references_parse():
    assert FitRequest.parse("fit:abtt:2") == FitRequest("abtt", 2, None)
    assert FitRequest.parse("fit:center@~/t.txt").corpus.name == "t.txt"  # type: ignore[union-attr]
    assert FitRequest.parse("builtin:smollm2-135m-best-v3") is None


def test_the_first_load_fits_on_the_shipped_corpus_and_caches_it(
    tiny_checkpoint, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv(FIT_CACHE_ENV, str(tmp_path / "cache"))
    caplog.set_level(logging.WARNING, logger="valuelens")
    enc = Encoder.from_pretrained(tiny_checkpoint, device="cpu", postprocess="fit:abtt:2", **FIELDS)
    fitting = [r.getMessage() for r in caplog.records if "fitting abtt (k=2)" in r.getMessage()]
    assert len(fitting) == 1 and "postprocess=None turns it off" in fitting[0], fitting
    files = list((tmp_path / "cache").glob("*.safetensors"))
    assert len(files) == 1
    assert enc.postprocess is not None and enc.postprocess.n_fitted == len(_shipped())
    assert enc.config.postprocess == "fit:abtt:2"  # the spec stays portable: another machine fits the same
    # the state is what fitting the raw encoder on the shipped corpus gives
    raw = Encoder.from_pretrained(tiny_checkpoint, device="cpu", **FIELDS)
    manual = fit_texts(raw, _shipped(), kind="abtt", k=2)
    want = manual.transform(raw.encode(TEXTS))
    np.testing.assert_allclose(enc.encode(TEXTS), want, rtol=1e-4, atol=1e-5)
    # a second load reads the cache: no fit, the same vectors
    caplog.clear()
    again = Encoder.from_pretrained(tiny_checkpoint, device="cpu", postprocess="fit:abtt:2", **FIELDS)
    assert not [r for r in caplog.records if "fitting" in r.getMessage()]
    np.testing.assert_allclose(again.encode(TEXTS), want, rtol=1e-4, atol=1e-5)
    assert len(list((tmp_path / "cache").glob("*.safetensors"))) == 1


def test_each_model_spec_and_corpus_gets_its_own_state(tiny_checkpoint, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(FIT_CACHE_ENV, str(cache))
    Encoder.from_pretrained(tiny_checkpoint, device="cpu", postprocess="fit:center", **FIELDS)
    Encoder.from_pretrained(
        tiny_checkpoint, device="cpu", postprocess="fit:center", **{**FIELDS, "layers": [3]}
    )
    own = tmp_path / "mine.txt"
    own.write_text("\n".join(CORPUS[:5]), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"FILE .*mine.txt.* holds 5 distinct non-empty texts"):
        Encoder.from_pretrained(tiny_checkpoint, device="cpu", postprocess=f"fit:center@{own}", **FIELDS)
    mixed = [f"{a} {b}" for a in CORPUS[:4] for b in CORPUS[4:7]]  # 12 texts
    own.write_text("\n".join(mixed), encoding="utf-8")
    mine = Encoder.from_pretrained(tiny_checkpoint, device="cpu", postprocess=f"fit:center@{own}", **FIELDS)
    assert mine.postprocess.n_fitted == len(mixed)  # type: ignore[union-attr]
    assert "mine.txt" in (mine.postprocess.fitted_on or "")  # type: ignore[union-attr]
    assert len(list(cache.glob("*.safetensors"))) == 3
    # a copy of the model elsewhere reads the same state; other weights saved over it (a fine-tune) refit
    copy = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, copy)
    before = Encoder.from_pretrained(copy, device="cpu", postprocess="fit:center", **FIELDS)
    assert len(list(cache.glob("*.safetensors"))) == 3
    from transformers import AutoModelForCausalLM

    net = AutoModelForCausalLM.from_pretrained(copy)
    with torch.no_grad():
        net.get_input_embeddings().weight.mul_(1.5)
    net.save_pretrained(copy)
    after = Encoder.from_pretrained(copy, device="cpu", postprocess="fit:center", **FIELDS)
    assert len(list(cache.glob("*.safetensors"))) == 4
    assert not torch.allclose(before.postprocess.mean, after.postprocess.mean)  # type: ignore[union-attr]


def test_max_length_neither_refits_nor_changes_the_state(tiny_checkpoint, tmp_path, monkeypatch):
    """The state is fitted at the default limit whatever the first encoder's ``max_length``, so the order
    in which encoders of one model and spec load does not matter."""
    monkeypatch.setenv(FIT_CACHE_ENV, str(tmp_path / "short-first"))
    short = Encoder.from_pretrained(
        tiny_checkpoint, device="cpu", postprocess="fit:center", max_length=24, **FIELDS
    )
    monkeypatch.setenv(FIT_CACHE_ENV, str(tmp_path / "default-first"))
    default = Encoder.from_pretrained(tiny_checkpoint, device="cpu", postprocess="fit:center", **FIELDS)
    again = Encoder.from_pretrained(
        tiny_checkpoint, device="cpu", postprocess="fit:center", max_length=24, **FIELDS
    )
    assert len(list((tmp_path / "default-first").glob("*.safetensors"))) == 1
    torch.testing.assert_close(short.postprocess.mean, default.postprocess.mean, rtol=1e-4, atol=1e-5)  # type: ignore[union-attr]
    assert short.config.max_length == again.config.max_length == 24


def test_a_broken_or_unwritable_cache_still_embeds(tiny_checkpoint, tmp_path, monkeypatch, caplog):
    cache = tmp_path / "cache"
    monkeypatch.setenv(FIT_CACHE_ENV, str(cache))
    first = Encoder.from_pretrained(tiny_checkpoint, device="cpu", postprocess="fit:center", **FIELDS)
    (state,) = cache.glob("*.safetensors")
    state.write_bytes(b"not a state")
    caplog.set_level(logging.WARNING, logger="valuelens")
    again = Encoder.from_pretrained(tiny_checkpoint, device="cpu", postprocess="fit:center", **FIELDS)
    assert any("cannot be used" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(again.encode(TEXTS), first.encode(TEXTS), rtol=1e-4, atol=1e-5)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be", encoding="utf-8")
    monkeypatch.setenv(FIT_CACHE_ENV, str(blocked))
    caplog.clear()
    third = Encoder.from_pretrained(tiny_checkpoint, device="cpu", postprocess="fit:center", **FIELDS)
    assert any("cannot cache the fitted state" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(third.encode(TEXTS), first.encode(TEXTS), rtol=1e-4, atol=1e-5)


def test_untuned_preset_best_fits_once_and_postprocess_none_turns_it_off(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(FIT_CACHE_ENV, str(cache))
    path = save_tiny_model(tmp_path / "m")
    enc = Encoder.from_pretrained(path, preset="best", device="cpu")
    assert enc.config.layers == (2, 3) and enc.config.fusion[0].layers == (2, 3)  # 70%-100% of 4 layers
    assert enc.postprocess is not None and enc.postprocess.k == 2
    # one post-processing state and one BM25 state (the rule carries the BM25 part), each built once
    assert len(list(cache.glob("bm25-*.safetensors"))) == 1 and len(list(cache.glob("*.safetensors"))) == 2
    assert enc.config.lexical_kind == "bm25"
    assert (enc.config.lexical, enc.config.lexical_query) == (UNTUNED["lexical"], UNTUNED["lexical_query"])
    off = Encoder.from_pretrained(path, preset="best", postprocess=None, device="cpu")
    assert off.postprocess is None and len(list(cache.glob("*.safetensors"))) == 2
    # the rule for every model, by name: the same spec
    assert Encoder.from_pretrained(path, preset="untuned", device="cpu").config == enc.config


def test_loading_a_fit_reference_as_a_file_names_the_mechanism():
    from valuelens.postprocess import load_postprocess

    with pytest.raises(ConfigError, match="fitted by the encoder when it loads the model"):
        load_postprocess("fit:abtt:2")


def test_the_shipped_corpus_is_the_projects_own_text():
    lines = _shipped()
    assert len(lines) == 480 and all(line.strip() == line and line for line in lines)
    assert len(set(lines)) == len(lines)
    root = default_data_dir()
    if root is None:
        pytest.skip("no benchmark data folder to compare with")
    import json

    bench: set[str] = set()
    for file in root.rglob("*.jsonl"):
        for row in file.read_text(encoding="utf-8").splitlines():
            item = json.loads(row)
            bench.update(v.strip() for v in item.values() if isinstance(v, str) and len(v) > 20)
    shared = [line for line in lines if line in bench]
    assert not shared, shared[:3]
