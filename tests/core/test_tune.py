"""``valuelens tune`` (:mod:`valuelens.tuning`) and the preset folders it writes (``preset=DIR``), on a
tiny random checkpoint and a tiny data folder in the benchmark formats (fixtures in tests/conftest.py)."""

from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr
from typer.testing import CliRunner

from tiny_models import save_tiny_model
from valuelens import ConfigError, Encoder, EncoderConfig
from valuelens.cli import app
from valuelens.evaluation.metrics import cosine_similarity_matrix, ndcg_at_k, rank_documents
from valuelens.fitting import fit_texts
from valuelens.presets.folder import PRESET_FILE, PresetFolder
from valuelens.presets.resolution import resolve
from valuelens.tuning import STATE_FILE, tune
from valuelens.tuning.cache import FAMILIES, LayerCache
from valuelens.tuning.data import TuneData
from valuelens.tuning.search import Candidate, Part, Scorer

KEY = ("llama", 4, 64)


def _dev_scores(encoder: Encoder, data: TuneData) -> tuple[float, float]:
    """STS-B dev Spearman and retrieval dev nDCG@10 (×100) of a real encoder, computed apart from the search."""
    vec = encoder.encode(list(data.sts.texts), normalize=True)
    cos = (vec[list(data.sts.a)] * vec[list(data.sts.b)]).sum(1)
    sts = float(spearmanr(cos, data.sts.gold).statistic) * 100
    ret = data.retrieval
    scores = cosine_similarity_matrix(encoder.encode(list(ret.queries)), encoder.encode(list(ret.docs)))
    rankings = rank_documents(scores, list(ret.doc_ids), top_k=10)
    ndcg = np.mean([ndcg_at_k(r, ret.qrels[q], 10) for q, r in zip(ret.query_ids, rankings, strict=True)])
    return sts, float(ndcg) * 100


def test_tune_writes_a_folder_whose_spec_reproduces_its_dev_scores(
    tuned_folder, tiny_checkpoint, tiny_data_dir
):
    names = {p.name for p in tuned_folder.iterdir()}
    assert {PRESET_FILE, "report.md", "candidates.jsonl"} <= names and "cache" not in names
    folder = PresetFolder.read(tuned_folder)
    assert folder.model_key == KEY and folder.objective == "balanced" and folder.info["mode"] == "quick"
    rows = [json.loads(line) for line in (tuned_folder / "candidates.jsonl").read_text().splitlines()]
    objectives = [row["objective"] for row in rows]
    assert objectives == sorted(objectives, reverse=True) and len(rows) > 50
    assert {"band", "embed_filter", "fusion", "postprocess", "lexical"} <= {row["stage"] for row in rows}
    assert rows[0]["objective"] == pytest.approx(folder.info["dev"]["objective"], abs=0.01)
    assert folder.info["check_min_cosine"] > 0.99
    # the folder's spec, loaded as a preset by the real encoder, scores what the search said on dev
    encoder = Encoder.from_pretrained(tiny_checkpoint, preset=str(tuned_folder))
    sts, ret = _dev_scores(encoder, TuneData.build("quick", data_dir=tiny_data_dir))
    assert sts == pytest.approx(folder.info["dev"]["sts"], abs=1.0)
    assert ret == pytest.approx(folder.info["dev"]["retrieval"], abs=1.0)
    report = (tuned_folder / "report.md").read_text()
    assert "## Chosen" in report and rows[0]["candidate"] in report and "## Cost" in report
    candidate_rows = [line for line in report.splitlines() if line.startswith("| P1 · ")]
    assert candidate_rows and all(len(re.findall(r"(?<!\\)\|", line)) == 6 for line in candidate_rows)


def test_dev_scores_of_a_preset_with_overrides_are_the_overridden_encoders(tiny_checkpoint, tiny_data_dir):
    """``dev_scores`` (the report's compared presets; research/untuned_rule.py) with field overrides
    scores the encoder those fields give, and ``max_length`` joins the overrides."""
    from valuelens.loading import load_model
    from valuelens.tuning import dev_scores

    data = TuneData.build("quick", data_dir=tiny_data_dir)
    net, tokenizer = load_model(tiny_checkpoint)
    scorer = Scorer(None, data)  # type: ignore[arg-type]  # scores only
    plain = dev_scores("generic", tiny_checkpoint, net, tokenizer, scorer, KEY, None)
    row = dev_scores(
        "generic", tiny_checkpoint, net, tokenizer, scorer, KEY, 300, {"recipe": "va", "prompt": None}
    )
    assert (
        row["spec"]["recipe"] == "va" and row["spec"]["max_length"] == 300 and plain["spec"]["recipe"] != "va"
    )
    encoder = Encoder.from_pretrained(
        tiny_checkpoint, preset="generic", recipe="va", prompt=None, max_length=300
    )
    sts, ret = _dev_scores(encoder, data)
    assert row["sts"] == pytest.approx(sts, abs=1e-3) and row["retrieval"] == pytest.approx(ret, abs=1e-3)


def test_a_candidate_and_the_spec_it_stands_for_convert_both_ways():
    """``Candidate.from_config`` inverts ``Candidate.fields`` (the post-processing apart), and turns down a
    spec no candidate reads: a band with a gap, two fused parts, Token Prepending, a family not searched."""
    family = {f.name: f for f in FAMILIES}
    candidate = Candidate(
        "futureeol",
        Part(family["aligned-wva-dp"], 1, 3, 2.0),
        Part(family["va"], 0, 2),
        0.5,
        "center",
        query_template="prompteol",
        lexical=0.1,
        lexical_query=0.9,
    )
    config = EncoderConfig.from_dict({**candidate.fields(), "postprocess": "fit:center", "max_length": 64})
    assert Candidate.from_config(config.resolved(*KEY), FAMILIES) == replace(candidate, post="none")
    plain = Candidate(None, Part(family["hs"], 0, 1))
    assert Candidate.from_config(EncoderConfig.from_dict(plain.fields()), FAMILIES) == plain
    fields = plain.fields()
    refused = [
        {**fields, "layers": [0, 2]},
        {
            **fields,
            "fusion": [{"recipe": "va", "layers": [1, 2]}, {"recipe": "aligned-va", "layers": [1, 2]}],
        },
        {**fields, "prepend_layers": [1]},
        {**fields, "combine": "normalized-mean"},
        {**fields, "recipe": "wva"},
    ]
    for spec in refused:
        assert Candidate.from_config(EncoderConfig.from_dict(spec).resolved(*KEY), FAMILIES) is None, spec


def test_compared_presets_are_scored_from_the_cache_where_it_holds_them(
    tiny_checkpoint, tiny_data_dir, tmp_path, monkeypatch, caplog
):
    """``tune(compare=...)`` scores a preset whose readouts the cache holds (``untuned``: the quick mode's
    prompt, its own first-use state and lexical part) from the cache, and what it finds is what the real
    encoder gives; a preset under a prompt the quick mode does not cache (``generic``) is embedded, and
    so is one whose real embeddings disagree with the cache's (here: a threshold no cosine reaches)."""
    from valuelens.loading import load_model
    from valuelens.tuning import run as tuning

    result = tune(
        tiny_checkpoint,
        tmp_path / "t",
        data_dir=tiny_data_dir,
        compare=["untuned", "generic"],
        keep_cache=True,
        show_progress=False,
    )
    cached, generic = result.references["untuned"], result.references["generic"]
    assert cached["scored"] == "cache" and cached["check_min_cosine"] > 0.99
    assert generic["scored"] == "encoder" and "check_min_cosine" not in generic
    report = (tmp_path / "t" / "report.md").read_text()
    assert "| untuned |" in report and "cache (real embeddings agree" in report
    assert re.search(r"\| generic \|.*\| encoder \|", report)

    data = TuneData.build("quick", data_dir=tiny_data_dir)
    cache = LayerCache.open(
        tmp_path / "t" / "cache", data, model_name=tiny_checkpoint, model_key=KEY, max_length=512
    )
    net, tokenizer = load_model(tiny_checkpoint)
    scorer = Scorer(cache, data, lexical=tuning.lexical_lenses(net, tokenizer))  # the rule's BM25 part too
    real = tuning.dev_scores("untuned", tiny_checkpoint, net, tokenizer, scorer, KEY, None)
    assert real["scored"] == "encoder"
    assert cached["sts"] == pytest.approx(real["sts"], abs=1.0)
    assert cached["retrieval"] == pytest.approx(real["retrieval"], abs=1.0)
    monkeypatch.setattr(tuning, "_MIN_AGREEMENT", 1.5)
    with caplog.at_level(logging.WARNING, logger="valuelens.tuning"):
        fallback = tuning.dev_scores(
            "untuned", tiny_checkpoint, net, tokenizer, scorer, KEY, None, from_cache=True
        )
    assert fallback["scored"] == "encoder" and "disagrees with its real embeddings" in caplog.text
    assert fallback["objective"] == pytest.approx(real["objective"], abs=1e-6)


def test_the_search_computes_a_candidate_as_the_encoder_does(tiny_checkpoint, tiny_data_dir, tmp_path):
    """Band mean, EmbedFilter on a fused part, fusion weight and a fitted centering, from the cache,
    against the real encoder of the candidate's spec."""
    tune(tiny_checkpoint, tmp_path / "t", data_dir=tiny_data_dir, keep_cache=True, show_progress=False)
    data = TuneData.build("quick", data_dir=tiny_data_dir)
    cache = LayerCache.open(
        tmp_path / "t" / "cache", data, model_name=tiny_checkpoint, model_key=KEY, max_length=512
    )
    from valuelens.embed_filter import EmbedFilter

    scorer = Scorer(cache, data, embed_filters={2.0: EmbedFilter.from_model(tiny_checkpoint, tau=2.0)})
    family = {f.name: f for f in FAMILIES}
    prompt = folder_prompt = PresetFolder.read(tmp_path / "t").spec["prompt"]
    candidate = Candidate(
        prompt, Part(family["aligned-wva-dp"], 1, 3), Part(family["aligned-va"], 0, 2, 2.0), 0.5, "center"
    )
    post = scorer.fit_post(candidate)
    searched = scorer.vectors(candidate, "sts", post)
    encoder = Encoder.from_pretrained(tiny_checkpoint, EncoderConfig.from_dict(candidate.fields()))
    assert encoder.config.drop_prefix and encoder.config.fusion[0].embed_filter == 2.0
    assert folder_prompt == encoder.config.prompt
    real = post.transform(encoder.encode(list(data.sts.texts)))
    cos = (real * searched).sum(1) / np.linalg.norm(real, axis=1) / np.linalg.norm(searched, axis=1)
    assert cos.min() > 0.999


def test_the_search_joins_a_lexical_part_as_the_encoder_does(tiny_checkpoint, tiny_data_dir, tmp_path):
    """A candidate with a lexical part at its document and query weights, after its fitted centering."""
    from valuelens.states import lexical_lens

    tune(tiny_checkpoint, tmp_path / "t", data_dir=tiny_data_dir, keep_cache=True, show_progress=False)
    data = TuneData.build("quick", data_dir=tiny_data_dir)
    cache = LayerCache.open(
        tmp_path / "t" / "cache", data, model_name=tiny_checkpoint, model_key=KEY, max_length=512
    )
    probe = Encoder.from_pretrained(tiny_checkpoint, recipe="va")
    scorer = Scorer(cache, data, lexical={"embeddings": lexical_lens(probe.model, probe.tokenizer)})
    prompt = PresetFolder.read(tmp_path / "t").spec["prompt"]
    family = {f.name: f for f in FAMILIES}
    candidate = Candidate(
        prompt,
        Part(family["va"], 1, 3),
        post="center",
        lexical=0.1,
        lexical_query=0.9,
        lexical_kind="embeddings",
    )
    post = scorer.fit_post(candidate)
    assert post is not None
    post.save(tmp_path / "state.safetensors")
    fields = {**candidate.fields(), "postprocess": str(tmp_path / "state.safetensors")}
    encoder = Encoder.from_pretrained(tiny_checkpoint, EncoderConfig.from_dict(fields))
    for set_name, texts, encode in (
        ("sts", data.sts.texts, encoder.encode),
        ("queries", data.retrieval.queries, encoder.encode_query),
    ):
        searched = scorer.vectors(candidate, set_name, post)
        real = np.asarray(encode(list(texts)))
        assert real.shape == searched.shape
        assert (real * searched).sum(1).min() > 0.999  # both unit length; the cache stores half floats
        lexical = encoder.lexical.dimension  # type: ignore[union-attr]
        np.testing.assert_allclose(real[:, -lexical:], searched[:, -lexical:], atol=1e-5)
    assert "+lex(embeddings)0.1/0.9" in candidate.label()


def test_a_second_run_reuses_the_cache_and_a_stale_one_is_cleared(
    tiny_checkpoint, tiny_data_dir, tmp_path, monkeypatch, caplog
):
    first = tune(
        tiny_checkpoint, tmp_path / "t", data_dir=tiny_data_dir, keep_cache=True, show_progress=False
    )

    def no_forward(*args, **kwargs):
        raise AssertionError("the cached passes ran again")

    monkeypatch.setattr("valuelens.tuning.cache.run_batches", no_forward)
    again = tune(
        tiny_checkpoint, tmp_path / "t", data_dir=tiny_data_dir, keep_cache=True, show_progress=False
    )
    assert again.spec == first.spec
    meta = tmp_path / "t" / "cache" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "model": "other"}))
    caplog.set_level(logging.WARNING, logger="valuelens")
    with pytest.raises(AssertionError, match="ran again"):  # made for another model: cleared and recomputed
        tune(tiny_checkpoint, tmp_path / "t", data_dir=tiny_data_dir, show_progress=False)
    assert any("clearing the tuning cache" in r.getMessage() for r in caplog.records)


def test_a_shared_cache_recomputes_only_the_sets_another_objective_reads_differently(
    tiny_checkpoint, tiny_data_dir, tmp_path, monkeypatch, caplog
):
    """``cache=`` (``--cache``): kept after the run; an ``sts`` run after a balanced one embeds only its
    STS-B pairs again, since it reads all of them (here the balanced run reads 5)."""
    from valuelens.tuning import data as tuning_data

    monkeypatch.setitem(tuning_data.SIZES, "quick", {**tuning_data.SIZES["quick"], "sts_pairs": 5})
    balanced = TuneData.build("quick", data_dir=tiny_data_dir)
    sts = TuneData.build("quick", objective="sts", data_dir=tiny_data_dir)
    assert len(balanced.sts.gold) == 5 and len(sts.sts.gold) == 40  # every dev pair of the tiny set
    assert balanced.sets()["docs"] == sts.sets()["docs"] and balanced.fit_texts == sts.fit_texts
    cache = tmp_path / "shared-cache"
    tune(tiny_checkpoint, tmp_path / "a", data_dir=tiny_data_dir, cache=cache, show_progress=False)
    assert (cache / "meta.json").is_file() and not (tmp_path / "a" / "cache").exists()

    from valuelens.tuning import cache as tuning_cache

    embedded: list[tuple[str, ...]] = []
    real = tuning_cache.run_batches

    def recording(reader, runner, texts, *args, **kwargs):
        embedded.append(tuple(texts))
        return real(reader, runner, texts, *args, **kwargs)

    monkeypatch.setattr(tuning_cache, "run_batches", recording)
    caplog.set_level(logging.WARNING, logger="valuelens")
    result = tune(
        tiny_checkpoint,
        tmp_path / "b",
        objective="sts",
        data_dir=tiny_data_dir,
        cache=cache,
        show_progress=False,
    )
    assert embedded and all(texts == sts.sts.texts for texts in embedded)
    assert any("holds other sts texts" in r.getMessage() for r in caplog.records)
    assert PresetFolder.read(tmp_path / "b").info["data"]["sts_pairs"] == 40
    assert "Objective `sts` (STS-B dev Spearman, ×100)" in (tmp_path / "b" / "report.md").read_text()
    assert result.best.objective == pytest.approx(result.best.sts)
    with pytest.raises(ConfigError, match=r"cache .* is not a folder"):
        tune(tiny_checkpoint, tmp_path / "c", data_dir=tiny_data_dir, cache=tmp_path / "b" / "preset.json")


def test_bad_options_fail_before_any_model_loads(tiny_checkpoint, tiny_data_dir, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("valuelens.tuning.run.load_model", refuse)
    with pytest.raises(ConfigError, match="objective must be one of 'balanced', 'sts', 'retrieval'"):
        tune(tiny_checkpoint, tmp_path / "a", objective="speed", data_dir=tiny_data_dir)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="mode must be one of"):
        tune(tiny_checkpoint, tmp_path / "a", mode="fast", data_dir=tiny_data_dir)  # type: ignore[arg-type]
    for bad in (-1, True, 2.5):
        with pytest.raises(ConfigError, match="distractors must be a whole number of documents >= 0"):
            tune(tiny_checkpoint, tmp_path / "a", distractors=bad, data_dir=tiny_data_dir)  # type: ignore[arg-type]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a folder"):
        tune(tiny_checkpoint, tmp_path / "file", data_dir=tiny_data_dir)
    (tmp_path / "few.txt").write_text("one\ntwo\n")
    with pytest.raises(ConfigError, match="at least 10"):
        tune(tiny_checkpoint, tmp_path / "a", corpus=tmp_path / "few.txt", data_dir=tiny_data_dir)


def test_a_corpus_of_ones_own_is_what_the_state_is_fitted_on(tiny_checkpoint, tiny_data_dir, tmp_path):
    texts = [f"note {i}: the cat sat on the mat near the park" for i in range(40)]
    (tmp_path / "mine.txt").write_text("\n".join(texts) + "\n\n")
    dev = [tiny_data_dir / "stsb", tiny_data_dir / "scifact"]  # labelled sets of one's own: --dev
    data = TuneData.build("quick", corpus=tmp_path / "mine.txt", dev=dev, data_dir=tiny_data_dir)
    assert data.fit_texts == tuple(texts) and data.fit_source == "40 texts of mine.txt"
    assert data.sts_name == "stsb (dev)" and data.retrieval_name == "scifact (test)"


def test_the_command_line(tiny_checkpoint, tiny_data_dir, tmp_path):
    runner = CliRunner()
    bad = runner.invoke(app, ["tune", tiny_checkpoint, "-o", str(tmp_path / "a"), "--objective", "speed"])
    assert bad.exit_code == 2 and "objective must be one of" in bad.output
    args = [
        "tune",
        tiny_checkpoint,
        "-o",
        str(tmp_path / "t"),
        "--data-dir",
        str(tiny_data_dir),
        "--compare",
        "best",
        "--distractors",
        "3",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "preset best: STS-B dev" in result.output
    dev = TuneData.build("quick", distractors=3, data_dir=tiny_data_dir)
    relevant = {d for q in dev.retrieval.qrels.values() for d, r in q.items() if r > 0}
    assert len(dev.retrieval.docs) == len(relevant & set(dev.retrieval.doc_ids)) + 3
    assert PresetFolder.read(tmp_path / "t").info["data"]["retrieval_docs"] == len(dev.retrieval.docs)
    assert "| preset | STS-B dev" in (tmp_path / "t" / "report.md").read_text()
    out = tmp_path / "v.npy"
    (tmp_path / "in.txt").write_text("A cat.\nA dog.\n")
    embed = runner.invoke(
        app,
        [
            "embed",
            str(tmp_path / "in.txt"),
            "-o",
            str(out),
            "--model",
            tiny_checkpoint,
            "--preset",
            str(tmp_path / "t"),
        ],
    )
    assert embed.exit_code == 0, embed.output
    reference = Encoder.from_pretrained(tiny_checkpoint, preset=str(tmp_path / "t")).encode(
        ["A cat.", "A dog."], normalize=True
    )
    np.testing.assert_allclose(np.load(out), reference, atol=1e-5)


# ---------------------------------------------------------------------- preset folders


@pytest.fixture
def folder_with_state(tiny_checkpoint, tmp_path):
    """A preset folder written by hand: VA over layers 1-2 and a centering fitted for that spec."""
    spec = {"recipe": "va", "layers": [1, 2]}
    encoder = Encoder.from_pretrained(tiny_checkpoint, EncoderConfig.from_dict(spec))
    state = fit_texts(encoder, [f"text number {i} about cats" for i in range(20)], kind="center")
    out = tmp_path / "folder"
    out.mkdir()
    state.save(out / STATE_FILE)
    PresetFolder(out, "tiny", KEY, {**spec, "postprocess": STATE_FILE}).write()
    return out


def test_a_folder_is_a_preset_on_its_model_and_can_be_moved(folder_with_state, tiny_checkpoint, tmp_path):
    config = resolve(str(folder_with_state), tiny_checkpoint)
    assert config.recipe == "va" and config.postprocess == str(folder_with_state.resolve() / STATE_FILE)
    moved = tmp_path / "moved"
    shutil.copytree(folder_with_state, moved)
    shutil.rmtree(folder_with_state)
    a = Encoder.from_pretrained(tiny_checkpoint, preset=moved)  # a path object too
    assert a.postprocess is not None and a.config.layers == (1, 2)
    texts = ["A cat.", "A dog in the park."]
    plain = Encoder.from_pretrained(tiny_checkpoint, recipe="va", layers=[1, 2]).encode(texts)
    np.testing.assert_allclose(a.encode(texts), a.postprocess.transform(plain), atol=1e-5)


def test_overrides_on_a_folder_follow_the_one_preset_rule(folder_with_state, tiny_checkpoint, caplog):
    caplog.set_level(logging.WARNING, logger="valuelens")
    assert resolve(str(folder_with_state), KEY, {"max_length": 64}).postprocess is not None  # kept
    config = resolve(str(folder_with_state), KEY, {"recipe": "hs"})
    assert config.recipe == "hs" and config.postprocess is None
    assert any(
        "dropped postprocess=" in r.getMessage() and "recipe=" in r.getMessage() for r in caplog.records
    )


def test_a_folder_is_refused_for_another_model_and_when_broken(folder_with_state, tmp_path):
    qwen = save_tiny_model(tmp_path / "qwen", arch="qwen2")
    with pytest.raises(ConfigError, match=r"was tuned for tiny \(llama, 4 layers, hidden size 64\), not for"):
        Encoder.from_pretrained(qwen, preset=str(folder_with_state))
    with pytest.raises(ConfigError, match="or a folder written by `valuelens tune"):
        resolve(str(tmp_path / "nowhere"), KEY)
    (folder_with_state / STATE_FILE).unlink()
    with pytest.raises(ConfigError, match=r"names the state 'state\.safetensors', which is not in it"):
        resolve(str(folder_with_state), KEY)
    (folder_with_state / PRESET_FILE).write_text('{"format": "something-else"}')
    with pytest.raises(ConfigError, match="is not a valuelens-preset/1 file"):
        resolve(str(folder_with_state), KEY)
    (folder_with_state / PRESET_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read"):
        resolve(str(folder_with_state), KEY)


def test_a_folder_may_fit_its_state_at_first_use(tiny_checkpoint, tmp_path):
    """A hand-written folder whose spec says ``postprocess="fit:center"``: nothing to find in the folder,
    the encoder fits it on the package's corpus when it loads the model."""
    out = tmp_path / "fitted-at-first-use"
    PresetFolder(out, "tiny", KEY, {"recipe": "va", "layers": [1, 2], "postprocess": "fit:center"}).write()
    assert resolve(str(out), KEY).postprocess == "fit:center"
    enc = Encoder.from_pretrained(tiny_checkpoint, preset=str(out))
    assert enc.postprocess is not None and enc.postprocess.kind == "center"


def test_a_tuned_folder_is_bundled_as_a_builtin_preset(
    folder_with_state, tiny_checkpoint, tmp_path, monkeypatch
):
    """tools/bundle_preset.py: how the bundled models' presets were shipped."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "tools"))
    from bundle_preset import bundle

    into = tmp_path / "presets"
    (into / "states").mkdir(parents=True)
    out = bundle(folder_with_state, "tiny-best", into=into)
    assert out == into / "tuned" / "tiny-best"  # objective balanced → "best"
    bundled = PresetFolder.read(out)
    assert bundled.spec == {"recipe": "va", "layers": [1, 2], "postprocess": "builtin:tiny-best"}
    assert bundled.model_key == KEY and bundled.objective == "balanced"
    state = into / "states" / "tiny-best.safetensors"
    assert state.read_bytes() == (folder_with_state / STATE_FILE).read_bytes()
    assert bundle(folder_with_state, "tiny-best", into=into) == out  # a rerun that fitted the same state
    assert state.read_bytes() == (folder_with_state / STATE_FILE).read_bytes()
    from safetensors.numpy import load_file, save_file

    tensors = load_file(folder_with_state / STATE_FILE)
    tensors["mean"] = tensors["mean"] + 1.0
    save_file(tensors, folder_with_state / STATE_FILE, metadata=dict(_metadata(state)))
    with pytest.raises(ConfigError, match="a shipped state keeps its name"):
        bundle(folder_with_state, "tiny-best", into=into)
    assert state.read_bytes() != (folder_with_state / STATE_FILE).read_bytes()  # never overwritten
    PresetFolder(tmp_path / "r", "tiny", KEY, {"recipe": "va"}, "retrieval").write()
    with pytest.raises(ConfigError, match="objective 'retrieval' has no bundled preset name"):
        bundle(tmp_path / "r", "x", into=into)


def _metadata(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(path, "np") as handle:
        return handle.metadata()


def test_every_bundled_preset_is_a_tuned_folder():
    """No hand-written entry is left: each bundled model's ``best`` and ``sts`` are folders tune wrote,
    with the dev scores and timings of their run."""
    from valuelens.presets import PRESETS
    from valuelens.presets.table import _bundled, tuned_folders

    assert _bundled() == PRESETS
    for key, entries in PRESETS.items():
        assert set(entries) == {"best", "sts"}, key
        assert entries["best"]["postprocess"].startswith("builtin:")
    folders = tuned_folders()
    assert len(folders) == 2 * len(PRESETS)
    for folder in folders:
        assert folder.info["mode"] == "quick" and folder.info["check_min_cosine"] >= 0.99, folder.path
        assert folder.info["dev"]["objective"] > 0 and folder.info["seconds"]["total"] > 0, folder.path
