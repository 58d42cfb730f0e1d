"""Assemble docs/results.md from the reports that bench/run_results.sh writes into docs/results/.

Usage: ``python bench/results_page.py`` (after ``bash bench/run_results.sh``).

Every number on the page is read from those reports (each starts with the command that produced it);
the "targets" section is computed here from the same JSON files.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-0.5b"]


def _scores(path: Path) -> dict[str, dict[str, float]]:
    data = json.loads(path.read_text())["results"]
    return {label: {r["task"]: r["main_score"] for r in rows} for label, rows in data.items()}


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def targets(sts: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    lines = ["| target | " + " | ".join(MODELS) + " | met |", "|---|" + "---:|" * len(MODELS) + "---|"]

    def row(name: str, values: list[str], met: bool) -> None:
        lines.append(f"| {name} | " + " | ".join(values) + f" | {'yes' if met else 'no'} |")

    have = [m for m in MODELS if m in sts]
    if not have:
        return ["(no STS results yet)"]
    gaps = {m: sts[m]["va"]["stsb"] - sts[m]["hs"]["stsb"] for m in have}
    row(
        "VA (auto layers) − HS mean (auto layers), STS-B test, ≥ 10",
        [_fmt(gaps.get(m)) for m in MODELS],
        all(g >= 0.10 for g in gaps.values()),
    )
    gaps_all = {m: sts[m]["va"]["stsb"] - sts[m]["hs@all"]["stsb"] for m in have}
    row(
        "VA (auto layers) − HS mean (all layers), STS-B test, ≥ 10",
        [_fmt(gaps_all.get(m)) for m in MODELS],
        all(g >= 0.10 for g in gaps_all.values()),
    )

    def sts_avg(m: str, label: str) -> float:
        return (sts[m][label]["stsb"] + sts[m][label]["lee"]) / 2

    diff = {m: sts_avg(m, "aligned-wva:futureeol") - sts_avg(m, "prompteol") for m in have}
    row(
        "AlignedWVA(FutureEOL) − PromptEOL, mean of STS-B and Lee, > 0 for ≥ 2 models",
        [_fmt(diff.get(m)) for m in MODELS],
        sum(d > 0 for d in diff.values()) >= 2,
    )
    ef = {m: sts_avg(m, "prompteol+ef2") - sts_avg(m, "prompteol") for m in have}
    row(
        "EmbedFilter τ=2 on PromptEOL − PromptEOL (half the dims), ≥ 0",
        [_fmt(ef.get(m)) for m in MODELS],
        all(d >= 0 for d in ef.values()),
    )
    trunc = {m: sts_avg(m, "prompteol+ef2") - sts_avg(m, "prompteol+trunc2") for m in have}
    row(
        "… − Matryoshka-style truncation to d/2, > 0",
        [_fmt(trunc.get(m)) for m in MODELS],
        all(d > 0 for d in trunc.values()),
    )
    rand = {m: sts_avg(m, "prompteol+ef2") - sts_avg(m, "prompteol+rand2") for m in have}
    row(
        "… − a random half of the coordinates, > 0",
        [_fmt(rand.get(m)) for m in MODELS],
        all(d > 0 for d in rand.values()),
    )
    have_meta = [m for m in have if "metaeol" in sts[m]]
    if have_meta:
        meta = {m: sts_avg(m, "aligned-wva:futureeol") - sts_avg(m, "metaeol") for m in have_meta}
        row(
            "AlignedWVA(FutureEOL) − MetaEOL (8 passes), mean of STS-B and Lee",
            [_fmt(meta.get(m)) for m in MODELS],
            sum(d > 0 for d in meta.values()) >= 2,
        )
    if "qwen2.5-0.5b" in sts:
        q = {k: v["stsb"] for k, v in sts["qwen2.5-0.5b"].items() if "MiniLM" not in k}
        best = max(q, key=q.get)
        lines.append(
            f"| best training-free recipe on Qwen2.5-0.5B, STS-B test, ≥ 70 | | | {_fmt(q[best])} ({best}) | {'yes' if q[best] >= 0.70 else 'no'} |"
        )
    return lines


def main() -> None:
    sts = {m: _scores(RESULTS / f"{m}-sts.json") for m in MODELS if (RESULTS / f"{m}-sts.json").exists()}
    for m in sts:  # the MetaEOL rows come from their own (long) run on the same tasks
        if (RESULTS / f"{m}-meta.json").exists():
            sts[m].update(_scores(RESULTS / f"{m}-meta.json"))
    parts = [
        "# Results",
        "",
        "Every table below is a report written by `valuelens eval` (the command that produced it is",
        "printed above it; `bash bench/run_results.sh` reruns them all, `python bench/results_page.py`",
        "rebuilds this page). Scores are ×100 on the **test** splits of the data in `data/` (MTEB metrics:",
        "Spearman for STS-B and Lee, accuracy for classification, V-measure for clustering, MAP for",
        "reranking, AP for pair classification, nDCG@10 for SciFact). Layer defaults (`auto`) were chosen on",
        "STS-B **dev** with `valuelens sweep` (docs/sweeps/). CPU, float32, 2 cores.",
        "",
        "## Targets",
        "",
        *targets(sts),
        "",
    ]
    for m in MODELS:
        for kind, title in (
            ("sts", "STS tasks"),
            ("meta", "STS tasks, MetaEOL (eight passes per text)"),
            ("other", "classification, clustering, retrieval, reranking, pair classification"),
        ):
            report = RESULTS / f"{m}-{kind}.md"
            if report.exists():
                parts += [f"## {m}: {title}", "", report.read_text().strip(), ""]
    (ROOT / "docs" / "results.md").write_text("\n".join(parts) + "\n", encoding="utf-8")
    print("\n".join(targets(sts)))


if __name__ == "__main__":
    main()
