"""The benchmark suite (``python -m bench``) end to end on a tiny model; no timing is asserted.

Checks the report's rows, columns and ratios (each ratio equals the quotient of its numbers), the
fresh-process row path, skipped rows, and that a capture keeps no ``[B, N, d]`` tensor per layer.
"""

from __future__ import annotations

import gc
import json
import math

import pytest
import torch
from bench import __main__ as bench_main
from bench.memory_7b import keep_sessions, retained_tensors
from bench.suite import ROWS, Context, Settings, measure_row, run_suite, select_rows, to_markdown

from tiny_models import CORPUS, build_tiny_model
from valuelens import Encoder

ROW_FIELDS = {
    "key",
    "label",
    "group",
    "status",
    "layers",
    "seconds",
    "texts",
    "tokens",
    "texts_per_s",
    "tokens_per_s",
    "peak_mib",
    "extra_mib",
    "loaded_mib",
    "peak_source",
}


def _settings(path, **kwargs) -> Settings:
    return Settings(model=str(path), texts=6, max_length=48, batch_size=4, threads=1, **kwargs)


def test_suite_end_to_end(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = ["--model", str(tiny_checkpoint), "--texts", "6", "--max-length", "48", "--batch-size", "4"]
    args += ["--threads", "1", "--rows", "va,prompteol-ef,ef-fit", "--in-process", "--json", str(out)]
    report = bench_main.main(args)
    printed = capsys.readouterr().out
    saved = json.loads(out.read_text(encoding="utf-8"))
    assert saved["rows"] == json.loads(json.dumps(report["rows"]))
    keys = [r["key"] for r in saved["rows"]]
    assert keys == ["bare", "bare-truncated", "va", "prompteol-ef", "ef-fit"]  # rows 1 and 2 added
    by_key = {r["key"]: r for r in saved["rows"]}
    for key in ("bare", "bare-truncated", "va", "prompteol-ef"):
        row = by_key[key]
        assert row["status"] == "ok", row
        assert set(row) >= ROW_FIELDS
        assert row["texts"] == 6 and row["tokens"] > 0 and row["peak_mib"] > 0
        assert math.isclose(
            row["texts_per_s"] * row["seconds"], row["texts"], rel_tol=1e-3, abs_tol=row["texts_per_s"] * 1e-4
        )  # seconds are stored rounded to 1e-4
        for base, suffix in (("bare", "bare"), ("bare-truncated", "truncated")):
            assert math.isclose(row[f"x_{suffix}"], row["texts_per_s"] / by_key[base]["texts_per_s"])
            assert math.isclose(row[f"peak_x_{suffix}"], row["peak_mib"] / by_key[base]["peak_mib"])
    assert by_key["bare"]["x_bare"] == 1.0 and by_key["bare-truncated"]["x_truncated"] == 1.0
    meta = saved["meta"]
    assert meta["va_layers"] == [2, 3] and meta["n_layers"] == 4
    assert by_key["bare-truncated"]["layers"] == "0–3"  # up to VA's deepest layer
    assert by_key["bare"]["tokens"] == by_key["bare-truncated"]["tokens"] == by_key["va"]["tokens"]
    assert by_key["prompteol-ef"]["tokens"] > by_key["va"]["tokens"]  # the prompt is read too
    assert 0 < by_key["prompteol-ef"]["transform_share"] < 1
    assert by_key["ef-fit"]["unembedding"][1] == 64 and by_key["ef-fit"]["fit_first_s"] >= 0
    targets = {t["target"]: t for t in saved["targets"]}
    ratio = targets["VA speed ÷ bare truncated"]
    assert math.isclose(ratio["value"], by_key["va"]["x_truncated"]) and ratio["goal"] == "≥ 0.95"
    assert "EmbedFilter transform ÷ encode time" in targets
    for key in keys:
        assert f"(`{key}`)" in printed or key in ("ef-fit",)
    assert "| EmbedFilter τ=2 |" in printed and "| target |" in printed


def test_resume_keeps_the_rows_of_an_interrupted_run(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "bench.json"
    common = ["--model", str(tiny_checkpoint), "--texts", "6", "--max-length", "48", "--batch-size", "4"]
    common += ["--threads", "1", "--in-process", "--json", str(out)]
    bench_main.main([*common, "--rows", "va"])
    first = {r["key"]: r for r in json.loads(out.read_text(encoding="utf-8"))["rows"]}
    report = bench_main.main([*common, "--rows", "va,wva-lt", "--resume"])
    rows = {r["key"]: r for r in report["rows"]}
    assert list(rows) == ["bare", "bare-truncated", "va", "wva-lt"]
    for key in ("bare", "bare-truncated", "va"):  # kept as measured, not run again
        assert rows[key]["seconds"] == first[key]["seconds"]
    assert rows["wva-lt"]["status"] == "ok"
    assert report["meta"]["resumed_rows"] == ["bare", "bare-truncated", "va"]
    assert "measured by an earlier, interrupted run" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="other settings"):
        bench_main.main([*common[:5], "5", *common[6:], "--rows", "va", "--resume"])


def test_fresh_process_row(tiny_checkpoint):
    report = run_suite(_settings(tiny_checkpoint), ["bare-truncated"], in_process=False)
    (row,) = report["rows"]
    assert row["status"] == "ok", row
    assert row["peak_source"].startswith("VmHWM") or row["peak_source"].startswith("ru_maxrss")
    assert row["peak_mib"] >= row["loaded_mib"] > 0 and row["x_truncated"] == 1.0
    assert report["meta"]["isolation"] == "a fresh process per row"


def test_random_init_rows_and_skips():
    settings = Settings(random_init="tiny", texts=4, max_length=32, batch_size=4, threads=1, device="cpu")
    report = run_suite(settings, ["bare", "bare-truncated", "st-mean", "budget-64-bs2"], in_process=True)
    by_key = {r["key"]: r for r in report["rows"]}
    assert by_key["st-mean"]["status"] == "skipped" and "checkpoint folder" in by_key["st-mean"]["note"]
    assert by_key["budget-64-bs2"]["status"] == "ok" and by_key["budget-64-bs2"]["group"] == "batching"
    assert report["meta"]["model"] == "random tiny"
    text = to_markdown(report)
    assert "skipped" in text and "| batching (VA) |" in text


def test_row_selection():
    assert select_rows("va") == ["bare", "bare-truncated", "va"]
    assert select_rows("batching")[:2] == ["batch-8", "batch-32"]
    assert set(select_rows("all")) == set(ROWS)
    assert select_rows("adapters")[2:] == ["va-fixed", "st-va", "langchain-va", "llamaindex-va"]
    with pytest.raises(ValueError, match="unknown row 'nope'"):
        select_rows("nope")


def test_missing_host_framework_is_skipped(tiny_checkpoint, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "langchain_valuelens", None)  # import fails as if not installed
    row = measure_row(Context(_settings(tiny_checkpoint), shared=True), "langchain-va")
    assert row["status"] == "skipped" and "langchain_valuelens is not importable" in row["note"]


def test_capture_keeps_no_token_tensor(tiny_tokenizer):
    """After the forward, the capture session holds per-layer [B, F] vectors and [B, N] pooling inputs,
    never a [B, N, d] tensor; no such tensor stays alive in the process either."""
    model = build_tiny_model("llama", len(tiny_tokenizer))
    texts = [text + " And then some more words were added to it." for text in CORPUS[:3]]
    for recipe in ("va", "hs", "wva-lt", "aligned-wva"):
        encoder = Encoder(model, tiny_tokenizer, recipe=recipe, layers="all", prompt="prompteol")
        items, _ = encoder.reader.tokenize(texts)
        batch = encoder.reader.collate(items)
        b, n = batch.input_ids.shape
        with torch.inference_mode(), keep_sessions(encoder.runner) as sessions:
            out = encoder.runner.run(batch, encoder.readouts)[0]
        assert out.shape == (b, encoder.dimension)
        (session,) = sessions
        kept = retained_tensors(session)
        assert kept, "the walk found the captured vectors"
        assert all(len(shape) <= 2 for shape in kept.values()), kept
        (capture,) = session.captures
        assert sorted(capture._vectors) == list(range(4))
        width = {"va": 32, "wva-lt": 32, "hs": 64, "aligned-wva": 64}[recipe]
        assert all(tuple(v.shape) == (b, width) for v in capture._vectors.values())
        gc.collect()
        alive = [
            obj.shape
            for obj in gc.get_objects()
            if type(obj) in (torch.Tensor, torch.nn.Parameter)
            and obj.dim() >= 3
            and tuple(obj.shape[:2]) == (b, n)
        ]
        assert not alive, alive


def test_the_results_tables_are_what_results_page_writes_from_the_reports():
    """docs/results.md's and README.md's generated tables match the reports in research/results/ (after a
    report changes: ``python bench/results_page.py``), and every report the presets' table names exists."""
    from bench import results_page as page

    named = {r for _, _, reports in page.HEADLINE for r in reports.values()} | set(page.HEADLINE_REF.values())
    assert all((page.RESULTS / f"{r}.json").exists() for r in named), named
    glance = page.glance(page.sts_scores())
    user, readme = (
        page.USER_PAGE.read_text(encoding="utf-8"),
        (page.ROOT / "README.md").read_text(encoding="utf-8"),
    )
    assert page.PRESETS_START in user and page.README_START in user and page.README_START in readme
    blocks = {
        (page.README_START, page.README_END): glance,
        (page.PRESETS_START, page.PRESETS_END): page.presets_headline(),
    }
    for (start, end), lines in blocks.items():
        assert page.with_block(user, start, end, lines) == user, f"docs/results.md's {start} block is stale"
    assert page.with_block(readme, page.README_START, page.README_END, glance) == readme
    assert page.FULL_PAGE.exists()
