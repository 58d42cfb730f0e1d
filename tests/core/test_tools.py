"""The tuning tools' own logic: the external STS sets' reader, the paired bootstrap of score_cache,
fuse_posted's per-part post-processing, and the spec files the built-in states were fitted for."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from valuelens import EncoderConfig

TOOLS = Path(__file__).resolve().parents[2] / "research"


@pytest.fixture(scope="module")
def tools():
    sys.path.insert(0, str(TOOLS))
    try:
        yield importlib.import_module("embed_cache"), importlib.import_module("score_cache")
    finally:
        sys.path.remove(str(TOOLS))


def test_external_sts_sets_read_scored_pairs_only(tools, tmp_path):
    embed_cache, _ = tools
    year = tmp_path / "data/sts/semeval-sts/2015"
    year.mkdir(parents=True)
    (year / "a.test.tsv").write_text("4.0\tA cat sits.\tA cat is sitting.\n\tNo gold.\tLeft out.\n")
    (year / "b.test.tsv").write_text("1.5\tA dog runs.\tA cat is sitting.\n")
    data = embed_cache.external_set("sts15", tmp_path)
    assert data["gold"] == [4.0, 1.5]
    assert [data["texts"][i] for i in data["a"]] == ["A cat sits.", "A dog runs."]
    assert [data["texts"][i] for i in data["b"]] == ["A cat is sitting.", "A cat is sitting."]
    assert len(data["texts"]) == 3  # a text in two pairs is embedded once
    sick = tmp_path / "data/sts/sick2014"
    sick.mkdir(parents=True)
    (sick / "SICK_test_annotated.txt").write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
        "6\tA boy plays.\tA kid plays.\t4.5\tENTAILMENT\n"
    )
    assert embed_cache.external_set("sickr", tmp_path)["gold"] == [4.5]
    with pytest.raises(SystemExit, match="brmson/dataset-sts"):
        embed_cache.external_set("sts12", tmp_path)
    with pytest.raises(SystemExit, match="--external"):
        embed_cache.build_set("sts13", None)


def test_bootstrap_gain_is_paired_and_signed(tools):
    _, score_cache = tools
    rng = np.random.default_rng(0)
    gold = rng.normal(size=300)
    sets = {"s": {"gold": gold.tolist()}}
    base = {"s": gold + rng.normal(scale=2.0, size=300)}
    better = {"s": gold + rng.normal(scale=0.5, size=300)}
    gains = score_cache.bootstrap_gain([base, base, better], sets, 200)
    assert gains[0] == (0.0, 0.0, 0.0)
    assert gains[1] == (0.0, 0.0, 0.0)  # the same cosines: no gain in any resample
    gain, low, high = gains[2]
    assert 0 < low < gain < high


@pytest.mark.parametrize(
    ("spec_file", "former"),
    [
        ("spec-qwen2.5-coder-0.5b-sts.json", "former-sts-qwen2.5-coder-0.5b.json"),
        ("spec-smollm2-135m-sts.json", "former-sts-smollm2-135m.json"),
    ],
)
def test_a_spec_file_the_docs_report_for_a_preset_is_that_preset(spec_file, former):
    """The hand-tuned preset's state was fitted (``score_cache.py --save --spec FILE``) and its held-out
    checks run for this file: it must stay that preset's spec (kept as a former preset since the tuned
    presets replaced it) without the post-processing."""
    docs = TOOLS.parent / "research/presets"
    spec = EncoderConfig.from_dict(json.loads((docs / spec_file).read_text()))
    assert spec == EncoderConfig.from_dict(json.loads((docs / former).read_text())).replace(postprocess=None)


def test_fuse_posted_weighs_two_post_processed_parts(tools, tmp_path):
    """Weight 0 scores the first part under its own post-processing; a large weight the second."""
    _, score_cache = tools
    fuse_posted = importlib.import_module("fuse_posted")
    rng = np.random.default_rng(0)
    n = 40
    gold = rng.normal(size=n)
    base = rng.normal(size=(2 * n, 8))
    for name, noise in (("p", 0.5), ("q", 2.0)):
        np.save(tmp_path / f"{name}.s.npy", base + rng.normal(scale=noise, size=base.shape))
        np.save(tmp_path / f"{name}.train.npy", rng.normal(size=(60, 8)) + 3.0)
    data = {"a": list(range(n)), "b": list(range(n, 2 * n)), "gold": gold.tolist()}
    (tmp_path / "s.json").write_text(json.dumps(data))

    def alone(combo: str, post: str) -> float:
        fitted = score_cache.fit_post(tmp_path, combo, post)
        vec = score_cache.transform(fitted, score_cache.combine(tmp_path, combo, "s"))
        return score_cache.spearman(score_cache.cosines(vec, data), gold)

    table = fuse_posted.scores(tmp_path, "p~center@train", "q~abtt:1@train", [0.0, 1.0, 1e4], ["s"])
    assert table[0][0] == pytest.approx(alone("p", "center@train"), abs=1e-9)
    assert table[2][0] == pytest.approx(alone("q", "abtt:1@train"), abs=1e-6)
    assert table[1][0] not in (table[0][0], table[2][0])  # an even fusion is neither part
    assert alone("p", "center@train") != pytest.approx(alone("p", "none"), abs=1e-6)  # the post counts


def test_dev_corpus_rank_compares_two_runs_over_their_shared_candidates(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(TOOLS))
    try:
        rank = importlib.import_module("dev_corpus_rank")
    finally:
        sys.path.remove(str(TOOLS))
    runs = {  # candidate: (retrieval, objective) in run a and run b; "only-a" is not shared
        "a": {"x": (70.0, 80.0), "y": (72.0, 79.0), "z": (60.0, 70.0), "only-a": (99.0, 99.0)},
        "b": {"x": (58.0, 70.0), "y": (61.0, 72.0), "z": (50.0, 60.0)},
    }
    for name, rows in runs.items():
        (tmp_path / name).mkdir()
        lines = [
            json.dumps({"candidate": k, "sts": 2 * o - r, "retrieval": r, "objective": o})
            for k, (r, o) in rows.items()
        ]
        (tmp_path / name / "candidates.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(
        sys, "argv", ["dev_corpus_rank.py", str(tmp_path / "a"), str(tmp_path / "b"), "--top", "2"]
    )
    rank.main()
    out = capsys.readouterr().out
    assert "4 and 3 candidates, 3 in both" in out
    assert "| retrieval | 1.000 | -11.00 |" in out  # same order, 11 points lower on average
    assert "| `x` | 70.00 | 80.00 | 58.00 | 70.00 | 2 |" in out  # a's first is b's second
    assert "| `y` | 72.00 | 79.00 | 61.00 | 72.00 | 2 |" in out  # b's first is a's second
    assert "retrieval Spearman over A's 3 best shared candidates: 1.000" in out
    assert "only-a" not in out
