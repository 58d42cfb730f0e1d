"""The ``valuelens`` CLI end to end on a tiny model and a tiny task (typer's runner, real files)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tiny_models import CORPUS, build_tiny_model, tune_tiny_preset
from valuelens import EmbedFilter, Encoder, EncoderConfig
from valuelens.batching import SharedEncoding
from valuelens.cli import app
from valuelens.errors import ConfigError, ValueLensError
from valuelens.io import read_texts, read_vectors, report_path
from valuelens.variants import parse_variant, parse_variants

runner = CliRunner()


@pytest.fixture(scope="module")
def sts_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-sts")
    rows = [
        {"sentence1": a, "sentence2": b, "score": float(i % 5)}
        for i, (a, b) in enumerate(zip(CORPUS, CORPUS[1:] + CORPUS[:1], strict=True))
    ]
    (path / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (path / "dev.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _invoke(*args: str):
    result = runner.invoke(app, list(args))
    return result


def _approx(value):
    """``value`` with every float compared to 1e-6: runs that batch texts differently (or run on another
    CPU) agree to float rounding, not bit for bit. Everything else compares exactly."""
    if isinstance(value, float):
        return pytest.approx(value, abs=1e-6)
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_approx(v) for v in value]
    return value


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".csv", ".parquet"])
def test_embed_every_input_format(tiny_checkpoint, tmp_path, suffix):
    source = tmp_path / f"in{suffix}"
    if suffix == ".txt":
        source.write_text("\n".join(CORPUS[:4]) + "\n\n")
    elif suffix == ".jsonl":
        source.write_text(
            "\n".join(json.dumps({"body": t, "key": f"k{i}"}) for i, t in enumerate(CORPUS[:4]))
        )
    elif suffix == ".csv":
        source.write_text("body,key\n" + "\n".join(f'"{t}",k{i}' for i, t in enumerate(CORPUS[:4])))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"body": CORPUS[:4], "key": [f"k{i}" for i in range(4)]}), source)
    extra = [] if suffix == ".txt" else ["--field", "body", "--id-field", "key"]
    out = tmp_path / "out.parquet"
    result = _invoke(
        "embed",
        str(source),
        "-o",
        str(out),
        "--model",
        tiny_checkpoint,
        "--recipe",
        "va",
        "--layers",
        "all",
        *extra,
    )
    assert result.exit_code == 0, result.output
    vectors, ids, texts, settings = read_vectors(out)
    assert texts == CORPUS[:4] and vectors.shape == (4, 32)
    assert ids == (["0", "1", "2", "3"] if suffix == ".txt" else ["k0", "k1", "k2", "k3"])
    assert settings["recipe"] == "va" and settings["dimension"] == 32
    want = Encoder.from_pretrained(tiny_checkpoint, recipe="va", layers="all").encode(
        CORPUS[:4], normalize=True
    )
    np.testing.assert_allclose(vectors, want, atol=1e-5)


def test_embed_npy_and_search(tiny_checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(CORPUS))
    npy = tmp_path / "v.npy"
    assert _invoke("embed", str(source), "-o", str(npy), "--model", tiny_checkpoint).exit_code == 0
    assert np.load(npy).shape == (len(CORPUS), 32) and json.loads(npy.with_suffix(".json").read_text())[
        "ids"
    ] == list(range(len(CORPUS)))
    pq_out = tmp_path / "v.parquet"
    assert (
        _invoke(
            "embed",
            str(source),
            "-o",
            str(pq_out),
            "--model",
            tiny_checkpoint,
            "--prompt",
            "prompteol",
            "--recipe",
            "aligned-wva",
        ).exit_code
        == 0
    )
    result = _invoke("search", str(pq_out), CORPUS[2], "-k", "2")
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    at = lines.index(CORPUS[2])
    assert lines[at + 1].strip().endswith(CORPUS[2])  # a text is its own nearest neighbour


def test_embed_query_reads_texts_through_the_query_side(tiny_checkpoint, tmp_path):
    """``valuelens embed --query`` embeds search queries as ``Encoder.encode_query`` does; without it,
    documents as ``encode``."""
    source = tmp_path / "queries.txt"
    source.write_text("\n".join(CORPUS[:6]))
    spec = {"recipe": "aligned-wva", "prompt": "futureeol", "query_template": "prompteol"}
    config = tmp_path / "spec.json"
    config.write_text(json.dumps(spec))
    outputs = {}
    for side, extra in (("query", ["--query"]), ("document", [])):
        out = tmp_path / f"{side}.parquet"
        args = ("embed", str(source), "-o", str(out), "--model", tiny_checkpoint, "--config", str(config))
        result = _invoke(*args, *extra)
        assert result.exit_code == 0, result.output
        vectors, _, texts, settings = read_vectors(out)
        assert texts == CORPUS[:6] and settings.get("side") == ("query" if extra else None)
        outputs[side] = vectors
    enc = Encoder.from_pretrained(tiny_checkpoint, **spec)
    np.testing.assert_allclose(outputs["query"], enc.encode_query(CORPUS[:6], normalize=True), atol=1e-5)
    np.testing.assert_allclose(outputs["document"], enc.encode(CORPUS[:6], normalize=True), atol=1e-5)
    assert not np.allclose(outputs["query"], outputs["document"], atol=1e-3)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["embed", "missing.txt", "-o", "x.npy"], "does not exist"),
        (["embed", "{src}", "-o", "x.npy", "--recipe", "vaa"], "unknown recipe"),
        (["embed", "{src}", "-o", "x.csv"], "use .npy or .parquet"),
        (["embed", "{jsonl}", "-o", "x.npy", "--field", "nope"], "has no field 'nope'"),
        (["eval", "stsb", "--recipes", "va@middle"], "cannot parse"),
        (["eval", "stsb", "--recipes", "va,hs,va"], "['va'] are listed more than once"),
        (["eval", "stsb:0"], "must be at least 1"),
    ],
)
def test_errors_are_clear(tiny_checkpoint, tmp_path, args, message):
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"text": "hi"}\n')
    args = [a.format(src=src, jsonl=jsonl) for a in args]
    args = [a if a != "x.npy" and a != "x.csv" else str(tmp_path / a) for a in args]
    result = _invoke(*args, "--model", tiny_checkpoint)
    assert result.exit_code == 2
    assert message in result.output


def test_eval_compares_recipes_and_writes_reports(tiny_checkpoint, sts_dir, tmp_path):
    out = tmp_path / "model2.5-0.5b-report"  # dots in a stem (model names have them) are not a suffix
    result = _invoke(
        "eval",
        str(sts_dir),
        "--model",
        tiny_checkpoint,
        "--recipes",
        "hs,va@all,prompteol+ef2,prompteol+trunc2",
        "--out",
        str(out),
        "--time-sample",
        "4",
    )
    assert result.exit_code == 0, result.output
    report = (tmp_path / "model2.5-0.5b-report.md").read_text()
    for label in ("hs", "va@all", "prompteol+ef2", "prompteol+trunc2", "ms / text"):
        assert f"| {label} |" in report or label in report
    data = json.loads((tmp_path / "model2.5-0.5b-report.json").read_text())
    assert set(data["results"]) == {"hs", "va@all", "prompteol+ef2", "prompteol+trunc2"}
    score = data["results"]["va@all"][0]["main_score"]
    from valuelens.evaluation import evaluate

    direct = evaluate(Encoder.from_pretrained(tiny_checkpoint, recipe="va", layers="all"), sts_dir)
    assert score == pytest.approx(direct.main_score, abs=1e-6)  # shared passes vs one encoder


def test_eval_of_a_set_missing_from_the_data_folder_fails_in_one_line(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("VALUELENS_DATA_DIR", str(tmp_path / "empty"))
    result = _invoke("eval", "stsb", "--model", tiny_checkpoint, "--recipes", "va")
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert "'stsb' not found" in line and "VALUELENS_DATA_DIR" in line and str(tmp_path / "empty") in line


def test_eval_task_limits(tiny_checkpoint, sts_dir, tmp_path):
    out = tmp_path / "limited"
    result = _invoke(
        "eval",
        f"{sts_dir}:3",
        "--model",
        tiny_checkpoint,
        "--recipes",
        "va",
        "--out",
        str(out),
        "--time-sample",
        "0",
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.with_suffix(".json").read_text())["results"]["va"]
    assert row["n_examples"] == 3 and row["limit"] == 3 and row["subsampled"]


def test_reports_of_task_pieces_join_to_the_joint_report(tiny_checkpoint, sts_dir, tmp_path):
    """bench/merge_reports.py: tasks run apart and joined score as one run of all of them (to float
    rounding: the joint run encodes the second task's texts in other batches)."""
    import importlib.util
    import shutil

    other = tmp_path / "tiny-sts-b"
    shutil.copytree(sts_dir, other)
    common = ["--model", tiny_checkpoint, "--recipes", "va,prompteol+ef2", "--time-sample", "0"]
    tasks = [f"{sts_dir}:5", str(other)]
    for name, args in (("joint", tasks), ("a", tasks[:1]), ("b", tasks[1:])):
        result = _invoke("eval", *args, *common, "--out", str(tmp_path / name))
        assert result.exit_code == 0, result.output
    script = Path(__file__).resolve().parents[2] / "bench" / "merge_reports.py"
    spec = importlib.util.spec_from_file_location("merge_reports", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    joined = module.merge([tmp_path / "a.json", tmp_path / "b.json"])
    joint = json.loads((tmp_path / "joint.json").read_text())
    assert len(joined["command"].splitlines()) == 2  # one command per piece
    assert joined["results"].keys() == joint["results"].keys()

    def untimed(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "encode_seconds"} for r in rows]

    for label, rows in joint["results"].items():
        assert untimed(joined["results"][label]) == _approx(untimed(rows))
    with pytest.raises(SystemExit, match="already in an earlier report"):
        module.merge([tmp_path / "a.json", tmp_path / "a.json"])
    # --rerun: the joint run's tasks, then task b rerun on its own, replace b's scores in place
    rerun = module.merge([tmp_path / "joint.json", tmp_path / "b.json"], rerun=True)
    assert rerun["replaced"] == ["tiny-sts-b (from b.json)"]
    for label, rows in rerun["results"].items():
        assert [r["task"] for r in rows] == [r["task"] for r in joint["results"][label]]
        assert untimed(rows) == _approx(untimed(joined["results"][label]))


def test_sweep_writes_curve_table_and_plot(tiny_checkpoint, sts_dir, tmp_path):
    out = tmp_path / "sweep.md"  # a report extension on the stem is not doubled
    result = _invoke(
        "sweep",
        str(sts_dir),
        "--model",
        tiny_checkpoint,
        "--recipe",
        "va,hs",
        "--split",
        "dev",
        "--min-width",
        "2",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    for recipe in ("va", "hs"):
        data = json.loads((tmp_path / f"sweep-{recipe}.json").read_text())
        assert len(data["per_layer"]) == 4
        assert (tmp_path / f"sweep-{recipe}.md").exists()
        a, b = data["best_band"]
        assert b - a + 1 >= 2 and data["best_band_score"] == max(data["bands"].values())
        assert (tmp_path / f"sweep-{recipe}.png").stat().st_size > 1000


def test_models_list():
    result = _invoke("models", "list")
    assert result.exit_code == 0 and "smollm2-135m" in result.output and "(default)" in result.output


def test_read_texts_skips_blank_lines(tmp_path):
    src = tmp_path / "a.txt"
    src.write_text("one\n\n  \ntwo\n")
    assert read_texts(src) == (["one", "two"], [0, 3])


def test_read_texts_and_vectors_reject_other_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"text": ["a"]}), other)
    with pytest.raises(ValueLensError, match="not written by `valuelens embed`"):
        read_vectors(other)
    (tmp_path / "in.tsv").write_text("a\n")
    with pytest.raises(ValueLensError, match=r"unsupported input '\.tsv'"):
        read_texts(tmp_path / "in.tsv")
    (tmp_path / "in.jsonl").write_text('{"text": 3}\n')
    with pytest.raises(ValueLensError, match=r"in\.jsonl line 1: field 'text' is 3, not a string"):
        read_texts(tmp_path / "in.jsonl")


def test_report_stems_keep_dots_and_drop_a_typed_extension():
    from valuelens.evaluation.sweep import sweep_stem

    assert report_path(Path("out/qwen2.5-0.5b-sts"), ".md") == Path("out/qwen2.5-0.5b-sts.md")
    assert report_path(Path("out/sweep.MD"), ".json") == Path("out/sweep.json")
    assert sweep_stem(Path("out/sweep.md"), "va", 1) == Path("out/sweep")
    assert sweep_stem(Path("out/sweep"), "va", 2) == Path("out/sweep-va")


def test_variants():
    assert parse_variant("prompteol").encoder_kwargs() == {
        "recipe": "last-token",
        "layers": "auto",
        "prompt": "prompteol",
        "embed_filter": None,
    }
    assert parse_variant("echo").layers == "last"
    v = parse_variant("aligned-wva@half:futureeol+ef4")
    assert (v.recipe, v.layers, v.prompt, v.embed_filter, v.reduction) == (
        "aligned-wva",
        "half",
        "futureeol",
        4.0,
        "ef",
    )
    assert parse_variant("prompteol+rand2").reduction == "rand"
    assert parse_variant("hs-final").encoder_kwargs() == {
        "recipe": "hs",
        "layers": "last",
        "prompt": None,
        "embed_filter": None,
        "final_norm": True,
    }
    assert "final_norm" not in parse_variant("hs@last").encoder_kwargs()
    assert [v.label for v in parse_variants("va@3,5,hs")] == ["va@3,5", "hs"]
    with pytest.raises(ConfigError, match="aligned-va"):
        parse_variant("va+ef2")
    with pytest.raises(ConfigError, match="cannot parse"):
        parse_variant("va:")


def test_hs_final_is_the_mean_of_last_hidden_state(tiny_llama, tiny_tokenizer):
    import torch

    encoder = Encoder(tiny_llama, tiny_tokenizer, **parse_variant("hs-final").encoder_kwargs())
    got = encoder.encode(CORPUS[:3])
    base = build_tiny_model("llama", len(tiny_tokenizer), head=False)
    for text, vector in zip(CORPUS[:3], got, strict=True):
        with torch.no_grad():
            hidden = base(**tiny_tokenizer(text, return_tensors="pt")).last_hidden_state[0]
        np.testing.assert_allclose(vector, hidden.mean(0).numpy(), atol=1e-4)


def test_shared_encoding_equals_separate(tiny_llama, tiny_tokenizer):
    encoders = [Encoder(tiny_llama, tiny_tokenizer, recipe=r, layers="all") for r in ("va", "hs", "wmp")]
    shared = SharedEncoding(encoders)
    for i, encoder in enumerate(encoders):
        np.testing.assert_allclose(shared.view(i).encode(CORPUS[:5]), encoder.encode(CORPUS[:5]), atol=1e-5)
    assert shared.view(0).encode([]).shape == (0, encoders[0].dimension)
    with pytest.raises(TypeError):
        shared.view(0).encode("one text")  # not three one-character texts


def test_ablation_filters_pick_coordinates():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(EmbedFilter.truncation(6, 2).transform(x), x[:, :3])
    rand = EmbedFilter.random_subset(6, 2, seed=1)
    cols = rand.projection.argmax(1).numpy()
    np.testing.assert_array_equal(rand.transform(x), x[:, cols])
    assert len(set(cols.tolist())) == 3


def test_embed_with_a_preset_or_a_config_file(tiny_checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(CORPUS))
    out = tmp_path / "best.npy"
    result = _invoke("embed", str(source), "-o", str(out), "--model", tiny_checkpoint, "--preset", "best")
    assert result.exit_code == 0, result.output
    reference = Encoder.from_pretrained(tiny_checkpoint, preset="best")
    np.testing.assert_allclose(np.load(out), reference.encode(CORPUS, normalize=True), atol=1e-5)
    spec = {
        "recipe": "last-token",
        "prompt": "pcot",
        "layers": [2],
        "prepend_layers": [1],
        "contrast_layer": 1,
    }
    spec_file = tmp_path / "recipe-spec.json"
    spec_file.write_text(json.dumps(spec))
    out = tmp_path / "spec.parquet"
    result = _invoke(
        "embed", str(source), "-o", str(out), "--model", tiny_checkpoint, "--config", str(spec_file)
    )
    assert result.exit_code == 0, result.output
    reference = Encoder.from_pretrained(tiny_checkpoint, **spec)
    np.testing.assert_allclose(read_vectors(out)[0], reference.encode(CORPUS, normalize=True), atol=1e-5)
    # search embeds its queries with the whole stored spec (Token Prepending and Contrastive Prompting too)
    found = _invoke("search", str(out), CORPUS[3], "-k", "1")
    assert found.exit_code == 0, found.output
    lines = found.output.strip().splitlines()
    assert lines[lines.index(CORPUS[3]) + 1].strip().endswith(CORPUS[3])
    both = _invoke(
        "embed",
        str(source),
        "-o",
        str(out),
        "--model",
        tiny_checkpoint,
        "--preset",
        "best",
        "--config",
        str(spec_file),
    )
    assert both.exit_code != 0 and "either --preset or --config" in both.output
    assert parse_variant(str(spec_file)).config == EncoderConfig.from_dict(spec)
    assert parse_variant("best").preset == "best"


def test_embed_options_win_over_a_preset_even_none_and_defaults(
    tiny_checkpoint, tmp_path, monkeypatch, caplog
):
    entry = tune_tiny_preset(monkeypatch, tiny_checkpoint, tmp_path)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(CORPUS))
    out = tmp_path / "out.parquet"
    caplog.set_level(logging.WARNING, logger="valuelens")

    def spec(*options: str) -> dict:
        result = _invoke(
            "embed", str(source), "-o", str(out), "--model", tiny_checkpoint, "--preset", "best", *options
        )
        assert result.exit_code == 0, result.output
        settings = read_vectors(out)[3]
        out.unlink()
        return settings

    plain = spec()
    assert plain["drop_prefix"] and plain["postprocess"] == entry["postprocess"]
    settings = spec("--no-drop-prefix")  # the default value, given
    assert not settings["drop_prefix"] and settings["postprocess"] is None
    assert "drop_prefix= changed it" in caplog.text
    settings = spec("--prompt", "none")  # None, given
    assert settings["prompt"] is None and settings["drop_prefix"] and settings["postprocess"] is None
    settings = spec("--postprocess", "none")
    assert settings["postprocess"] is None and settings["drop_prefix"] and settings["prompt"] == "futureeol"
    caplog.clear()
    settings = spec("--recipe", "va")  # a ConfigError about drop_prefix before
    assert settings["recipe"] == "va" and not settings["drop_prefix"] and settings["postprocess"] is None
    assert "dropped drop_prefix=True (recipe='va'" in caplog.text
    refused = _invoke(
        "embed", str(source), "-o", str(out), "--model", tiny_checkpoint, "--preset", "best",
        "--prompt", "prompteol", "--postprocess", entry["postprocess"],
    )  # fmt: skip
    assert refused.exit_code == 2 and "Pass postprocess=None" in refused.output and not out.exists()


def test_demo_embeds_with_the_best_preset_and_searches(tiny_checkpoint, tmp_path):
    result = _invoke("demo", "--model", tiny_checkpoint, "--out-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "--preset best" in result.output
    vectors = read_vectors(tmp_path / "sentences.parquet")
    reference = Encoder.from_pretrained(tiny_checkpoint, preset="best")
    assert vectors[0].shape[1] == reference.dimension and len(vectors[2]) == len(vectors[0])
