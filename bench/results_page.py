"""Assemble the results pages from the reports that bench/run_results.sh writes into research/results/.

Usage: ``python bench/results_page.py`` (after ``bash bench/run_results.sh``).

Writes the full record, research/results/README.md (every report, the hand-written sections
``tuned.md`` and ``presets.md``, the targets), and the generated blocks of the user page
docs/results.md (between its ``results`` and ``presets`` markers: the recipes at a glance, the
bundled presets on test splits) and of README.md (the recipes at a glance). Every number is read
from those reports (each starts with the command that produced it); the "targets" section is
computed here from the same JSON files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "research" / "results"
FULL_PAGE = RESULTS / "README.md"  # the full record
USER_PAGE = ROOT / "docs" / "results.md"  # the short page: only its marked blocks are written
MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-0.5b"]
# reports that ran single-threaded beside another job (their times are slower than the others')
SIDE_BY_SIDE = ("gemma3-270m-other",)
# the task columns of a full `other` report (bench/run_results.sh's OTHER)
OTHER_TASKS = (
    "banking77",
    "banking77-clustering",
    "emotion",
    "emotion-clustering",
    "stsb-pairs",
    "scifact-reranking",
    "scifact",
)


def _scores(path: Path) -> dict[str, dict[str, float]]:
    data = json.loads(path.read_text())["results"]
    return {label: {r["task"]: r["main_score"] for r in rows} for label, rows in data.items()}


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


Scores = dict[str, dict[str, dict[str, float]]]  # model -> recipe -> task -> main score
REF = "all-MiniLM-L6-v2 (trained)"  # the trained reference row of every report


def sts_avg(sts: Scores, m: str, label: str) -> float:
    """Mean of the STS-B and Lee scores of ``label`` on model ``m``."""
    return (sts[m][label]["stsb"] + sts[m][label]["lee"]) / 2


def meta_gap(meta: dict[str, dict[str, float]]) -> float:
    """AlignedWVA(FutureEOL) − MetaEOL in one MetaEOL report (same STS-B sample, same Lee), mean of the two."""
    return sum(meta["aligned-wva:futureeol"][t] - meta["metaeol"][t] for t in ("stsb", "lee")) / 2


def targets(sts: Scores, meta: Scores) -> list[str]:
    lines = ["| target | " + " | ".join(MODELS) + " | met |", "|---|" + "---:|" * len(MODELS) + "---|"]

    def row(name: str, values: list[str], met: bool) -> None:
        lines.append(f"| {name} | " + " | ".join(values) + f" | {'yes' if met else 'no'} |")

    have = [m for m in MODELS if m in sts]
    if not have:
        return ["(no STS results yet)"]
    final = [m for m in have if "hs-final" in sts[m]]
    if final:
        gaps_final = {m: sts[m]["va"]["stsb"] - sts[m]["hs-final"]["stsb"] for m in final}
        row(
            "VA (auto layers) − mean of last_hidden_state (the issue's HS-mean probe), STS-B test, ≥ 10",
            [_fmt(gaps_final.get(m)) for m in MODELS],
            len(final) == len(have) and all(g >= 0.10 for g in gaps_final.values()),
        )

    def stsb_gap(m: str, a: str, b: str) -> float:
        return sts[m][a]["stsb"] - sts[m][b]["stsb"]

    def avg_gap(m: str, a: str, b: str) -> float:
        return sts_avg(sts, m, a) - sts_avg(sts, m, b)

    def all_at_least(bound: float) -> Callable[[list[float]], bool]:
        return lambda gaps: all(g >= bound for g in gaps)

    def all_above_zero(gaps: list[float]) -> bool:
        return all(g > 0 for g in gaps)

    def two_above_zero(gaps: list[float]) -> bool:
        return sum(g > 0 for g in gaps) >= 2

    gap_rows = (  # (label, gap, recipe, baseline, when the target is met)
        (
            "VA (auto layers) − HS mean (auto layers), STS-B test, ≥ 10",
            stsb_gap,
            "va",
            "hs",
            all_at_least(0.10),
        ),
        (
            "VA (auto layers) − HS mean (all layers), STS-B test, ≥ 10",
            stsb_gap,
            "va",
            "hs@all",
            all_at_least(0.10),
        ),
        (
            "AlignedWVA(FutureEOL) − PromptEOL, mean of STS-B and Lee, > 0 for ≥ 2 models",
            avg_gap,
            "aligned-wva:futureeol",
            "prompteol",
            two_above_zero,
        ),
        (
            "EmbedFilter τ=2 on PromptEOL − PromptEOL (half the dims), ≥ 0",
            avg_gap,
            "prompteol+ef2",
            "prompteol",
            all_at_least(0.0),
        ),
        (
            "… − Matryoshka-style truncation to d/2, > 0",
            avg_gap,
            "prompteol+ef2",
            "prompteol+trunc2",
            all_above_zero,
        ),
        (
            "… − a random half of the coordinates, > 0",
            avg_gap,
            "prompteol+ef2",
            "prompteol+rand2",
            all_above_zero,
        ),
    )
    for name, gap, recipe, baseline, met in gap_rows:
        gaps = {m: gap(m, recipe, baseline) for m in have}
        row(name, [_fmt(gaps.get(m)) for m in MODELS], met(list(gaps.values())))
    if meta:
        gaps_meta = {m: meta_gap(meta[m]) for m in meta}
        row(
            "AlignedWVA(FutureEOL) − MetaEOL (8 passes), mean of STS-B (500-pair sample) and Lee, > 0",
            [_fmt(gaps_meta.get(m)) for m in MODELS],
            all(d > 0 for d in gaps_meta.values()),
        )
    if "qwen2.5-0.5b" in sts:
        q = {k: v["stsb"] for k, v in sts["qwen2.5-0.5b"].items() if k != REF}
        best = max(q, key=q.get)
        lines.append(
            f"| best training-free recipe on Qwen2.5-0.5B, STS-B test, ≥ 70 | | | {_fmt(q[best])} ({best}) | {'yes' if q[best] >= 0.70 else 'no'} |"
        )
    return lines


def _ms(path: Path) -> dict[str, float]:
    return json.loads(path.read_text()).get("ms_per_text", {})


def other_tasks(other: Scores) -> list[str]:
    """How the STS orderings carry over to the other task kinds, counted per task."""
    comparisons = (  # (recipe, baseline, what a win means, ties count as a win)
        ("va", "hs", "VA beats the dev-tuned HS mean", False),
        ("va", "hs@all", "VA beats the all-layer HS mean", False),
        ("aligned-wva:futureeol", "prompteol", "AlignedWVA(FutureEOL) beats PromptEOL", False),
        ("prompteol+ef2", "prompteol", "EmbedFilter τ=2 keeps or improves PromptEOL", True),
        ("prompteol+ef2", "prompteol+rand2", "EmbedFilter τ=2 beats a random half", False),
    )
    lines = []
    for m, scores in other.items():
        tasks = list(scores["va"])
        parts = []
        for recipe, baseline, name, ties in comparisons:
            wins = sum(
                scores[recipe][t] > scores[baseline][t] or (ties and scores[recipe][t] == scores[baseline][t])
                for t in tasks
            )
            parts.append(f"{name} on {wins} of {len(tasks)}")
        best = [t for t in tasks if max(v[t] for k, v in scores.items() if k != REF) > scores[REF][t]]
        parts.append(
            f"the best training-free recipe beats all-MiniLM-L6-v2 on {len(best)} of {len(tasks)}"
            + (f" ({', '.join(best)})" if best else "")
        )
        lines.append(
            f"- **Other tasks, {m}** ({', '.join(tasks)}; seeded test samples): " + "; ".join(parts) + "."
        )
    return lines


def disagreements(sts: Scores, meta: Scores, meta_ms: dict[str, dict[str, float]]) -> list[str]:
    """Where these small, quantized models do and do not follow the papers, computed from the reports."""
    lines: list[str] = []
    have = [m for m in MODELS if m in sts]
    if not have:
        return lines

    def avg(m: str, label: str) -> float:
        return sts_avg(sts, m, label)

    def per_model(fn: Callable[[str], str]) -> str:
        return ", ".join(f"{m} {fn(m)}" for m in have)

    baselines = {
        "hs-final": "the mean of last_hidden_state",
        "hs@all": "the HS mean over all layers",
        "hs": "the HS mean over its own dev-tuned layers",
    }
    clauses = []
    for label, name in baselines.items():
        models = [m for m in have if label in sts[m]]
        if not models:
            continue
        gaps = {m: sts[m]["va"]["stsb"] - sts[m][label]["stsb"] for m in models}
        clauses.append(
            f"against {name}: "
            + ", ".join(f"{m} {100 * g:+.1f}" for m, g in gaps.items())
            + f" (≥ 10 for {sum(g >= 0.10 for g in gaps.values())} of {len(gaps)})"
        )
    lines.append(
        "- **VA vs hidden states** (paper: VA well ahead). VA (auto layers) − HS on STS-B test, "
        + "; ".join(clauses)
        + ". A mean over well-chosen middle layers is a much stronger hidden-state baseline at this size"
        " than the last or all layers."
    )
    lines.append(
        "- **AlignedWVA(FutureEOL) vs PromptEOL** (paper: ahead). Mean of STS-B and Lee: "
        + per_model(lambda m: f"{100 * (avg(m, 'aligned-wva:futureeol') - avg(m, 'prompteol')):+.1f}")
        + "."
    )
    if meta:
        lines.append(
            "- **AlignedWVA(FutureEOL) vs MetaEOL** (paper: ahead at 1/8 of the cost). Mean of STS-B (the"
            " 500-pair sample) and Lee: "
            + ", ".join(
                f"{m} {100 * meta_gap(meta[m]):+.1f}"
                + (
                    f" in {meta_ms[m]['metaeol'] / meta_ms[m]['aligned-wva:futureeol']:.1f}× less time per text"
                    if {"metaeol", "aligned-wva:futureeol"} <= set(meta_ms.get(m, {}))
                    else ""
                )
                for m in meta
            )
            + "."
        )
    for base in ("prompteol", "echo"):
        lines.append(
            f"- **EmbedFilter τ=2 on {base}** (paper: +3 % to +14 % relative, half the dims). Relative change "
            "on STS-B / Lee: "
            + per_model(
                lambda m, b=base: "/".join(
                    f"{100 * (sts[m][b + '+ef2'][t] / sts[m][b][t] - 1):+.0f} %" for t in ("stsb", "lee")
                )
            )
            + "."
        )
    lines.append(
        "- **EmbedFilter vs truncation / a random half** (paper: the band wins). Mean of STS-B and Lee, "
        "ef2 − trunc2 / ef2 − rand2: "
        + per_model(
            lambda m: (
                f"{100 * (avg(m, 'prompteol+ef2') - avg(m, 'prompteol+trunc2')):+.1f}"
                f" / {100 * (avg(m, 'prompteol+ef2') - avg(m, 'prompteol+rand2')):+.1f}"
            )
        )
        + "."
    )

    def best_on(m: str, task: str) -> str:
        label = max((k for k in sts[m] if k != REF), key=lambda k: sts[m][k][task])
        return f"{label} {100 * sts[m][label][task]:.1f}"

    lines.append(
        "- **Sentences vs documents.** Best training-free recipe on STS-B: "
        + per_model(lambda m: best_on(m, "stsb"))
        + "; on Lee (50 short news articles, document-level similarity): "
        + per_model(lambda m: best_on(m, "lee"))
        + ". The rankings differ: plain mean pooling (`hs-final`), weak on STS-B, is among the best on Lee."
    )
    if all(REF in sts[m] for m in have):
        lines.append(
            "- **Trained reference**: the best training-free recipe per model on STS-B test scores "
            + per_model(lambda m: f"{100 * max(v['stsb'] for k, v in sts[m].items() if k != REF):.1f}")
            + f"; all-MiniLM-L6-v2 scores {100 * sts[have[0]][REF]['stsb']:.1f}: on sentences, training-free"
            " embeddings from these 135M–500M models stay behind a small trained encoder. On Lee it scores"
            f" {100 * sts[have[0]][REF]['lee']:.1f}, and the best training-free recipe beats it for"
            f" {sum(max(v['lee'] for k, v in sts[m].items() if k != REF) > sts[m][REF]['lee'] for m in have)}"
            f" of {len(have)} models."
        )
    return lines


GLANCE = {
    "hs-final": "mean of last_hidden_state (plain mean pooling)",
    "hs": "HS mean, dev-tuned layers",
    "va": "VA (attention values), dev-tuned layers",
    "aligned-va": "VA through W_O (residual space)",
    "prompteol": "PromptEOL (last token)",
    "prompteol+ef2": "PromptEOL + EmbedFilter τ=2 (half the dims)",
    "aligned-wva:futureeol": "AlignedWVA(FutureEOL)",
    "echo": "Echo",
    REF: "all-MiniLM-L6-v2 (trained reference)",
}
README_START, README_END = "<!-- results:start -->", "<!-- results:end -->"
PRESETS_START, PRESETS_END = "<!-- presets:start -->", "<!-- presets:end -->"

#: The bundled presets as they ship now, each with the reports (in RESULTS) that scored it on test
#: splits: (model, preset label in the report, {task: report name}). When a preset changes, its runs
#: are redone and named here.
HEADLINE = (
    (
        "smollm2-135m",
        "best",
        {
            "stsb": "smollm2-135m-wordidf-best-test",
            "lee": "smollm2-135m-wordidf-best-test",
            "scifact": "smollm2-135m-wordidf-best-scifact-test",
        },
    ),
    (
        "smollm2-135m",
        "sts",
        {"stsb": "smollm2-135m-tuned-presets-test", "lee": "smollm2-135m-tuned-presets-test"},
    ),
    (
        "smollm2-135m",
        "untuned",
        {"stsb": "smollm2-135m-wordidf-untuned-test", "scifact": "smollm2-135m-wordidf-untuned-test"},
    ),
    (
        "gemma3-270m",
        "best",
        {
            "stsb": "gemma3-270m-wordidf-best-test",
            "lee": "gemma3-270m-wordidf-best-test",
            "scifact": "gemma3-270m-wordidf-best-scifact-test",
        },
    ),
    (
        "gemma3-270m",
        "sts",
        {"stsb": "gemma3-270m-tuned-presets-test", "lee": "gemma3-270m-tuned-presets-test"},
    ),
    (
        "gemma3-270m",
        "untuned",
        {"stsb": "gemma3-270m-wordidf-untuned-test", "scifact": "gemma3-270m-wordidf-untuned-test"},
    ),
    (
        "qwen2.5-coder-0.5b",
        "best",
        {
            "stsb": "qwen2.5-coder-0.5b-wordidf-best-test",
            "lee": "qwen2.5-coder-0.5b-wordidf-best-test",
            "scifact": "qwen2.5-coder-0.5b-wordidf-best-scifact-test",
        },
    ),
    (
        "qwen2.5-coder-0.5b",
        "sts",
        {"stsb": "qwen2.5-coder-0.5b-sts-all-pairs-test", "lee": "qwen2.5-coder-0.5b-sts-all-pairs-test"},
    ),
)
#: The trained reference's row: its STS scores from the STS reports, SciFact from a full-corpus run.
HEADLINE_REF = {
    "stsb": "smollm2-135m-sts",
    "lee": "smollm2-135m-sts",
    "scifact": "smollm2-135m-wordidf-best-scifact-test",
}
PRESET_NAMES = {
    "best": "`best` (retrieval and mixed use)",
    "sts": "`sts` (sentence similarity)",
    "untuned": "`untuned` (the rule for models without a preset)",
}


def presets_headline(results: Path = RESULTS, link: str = "../research/results/") -> list[str]:
    """The bundled presets' test scores next to all-MiniLM-L6-v2 (STS-B, Lee, SciFact over the full
    corpus and its share of MiniLM's nDCG@10), each row linking the reports it is read from."""
    cache: dict[str, Scores] = {}

    def score(report: str, label: str, task: str) -> float | None:
        if report not in cache:
            path = results / f"{report}.json"
            cache[report] = _scores(path) if path.exists() else {}
        return cache[report].get(label, {}).get(task)

    ref_scifact = score(HEADLINE_REF["scifact"], REF, "scifact")

    def row(model: str, name: str, label: str, reports: dict[str, str]) -> str:
        cells = [score(reports[t], label, t) if t in reports else None for t in ("stsb", "lee", "scifact")]
        scifact = cells[2]
        share = "–" if scifact is None or not ref_scifact else f"{100 * scifact / ref_scifact:.1f} %"
        runs = ", ".join(f"[{r}]({link}{r}.md)" for r in dict.fromkeys(reports.values()))
        return f"| {model} | {name} | " + " | ".join(_fmt(c) for c in cells) + f" | {share} | {runs} |"

    lines = [
        "| model | preset | STS-B test | Lee | SciFact nDCG@10 | share of MiniLM's nDCG@10 | runs |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    lines += [row(m, PRESET_NAMES[label], label, reports) for m, label, reports in HEADLINE]
    lines.append(row("all-MiniLM-L6-v2", "trained reference", REF, HEADLINE_REF))
    return lines


def glance(sts: Scores) -> list[str]:
    """The headline rows: STS-B test / Lee per model, for the recipes a user picks between."""
    have = [m for m in MODELS if m in sts]
    lines = [
        "| recipe | " + " | ".join(f"{m} STS-B / Lee" for m in have) + " |",
        "|---|" + "---:|" * len(have),
    ]
    for label, name in GLANCE.items():
        cells = [
            f"{_fmt(sts[m][label]['stsb'])} / {_fmt(sts[m][label]['lee'])}" if label in sts[m] else "–"
            for m in have
        ]
        lines.append(f"| `{label}`: {name} | " + " | ".join(cells) + " |")
    return lines


def _section(path: Path) -> list[str]:
    """A hand-written section kept in its own file (``research/results/tuned.md``: the tuned presets on
    test splits; ``research/results/presets.md``: the hand-tuned preset table; each with its commands and
    what it shows; its links are relative to research/results/), or nothing when the file is absent."""
    if not path.exists():
        return []
    return [path.read_text(encoding="utf-8").strip(), ""]


def with_block(text: str, start: str, end: str, lines: list[str]) -> str:
    """``text`` with the block between its ``start`` and ``end`` markers replaced by ``lines`` (unchanged
    when it lacks either marker)."""
    if start not in text or end not in text:
        return text
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + "\n".join([start, *lines, end]) + tail


def update_blocks(page: Path, blocks: dict[tuple[str, str], list[str]]) -> None:
    """Write each generated block of ``page`` between its markers; the rest of the page is hand-written."""
    if not page.exists():
        return
    text = page.read_text(encoding="utf-8")
    for (start, end), lines in blocks.items():
        text = with_block(text, start, end, lines)
    page.write_text(text, encoding="utf-8")


def sts_scores() -> Scores:
    """The STS reports' scores per model, with the last_hidden_state rows of their own run."""
    sts = {m: _scores(RESULTS / f"{m}-sts.json") for m in MODELS if (RESULTS / f"{m}-sts.json").exists()}
    for m in sts:  # the last_hidden_state rows come from their own run on the same tasks
        if (RESULTS / f"{m}-final.json").exists():
            sts[m].update(_scores(RESULTS / f"{m}-final.json"))
    return sts


def main() -> None:
    sts = sts_scores()
    # MetaEOL runs on a sample of STS-B test, with the one-pass recipes it is compared with on the same sample
    meta_files = {m: RESULTS / f"{m}-meta.json" for m in MODELS if (RESULTS / f"{m}-meta.json").exists()}
    meta = {m: _scores(path) for m, path in meta_files.items()}
    meta_ms = {m: _ms(path) for m, path in meta_files.items()}
    other = {
        m: _scores(RESULTS / f"{m}-other.json") for m in MODELS if (RESULTS / f"{m}-other.json").exists()
    }
    side_by_side = [f"`{r}`" for r in SIDE_BY_SIDE if (RESULTS / f"{r}.json").exists()]
    parts = [
        "# Results: the full record",
        "",
        "The short version, for users: [docs/results.md](../../docs/results.md). Every table below is a",
        "report written by `valuelens eval` (the command that produced it is printed above it; each report",
        "is a file in this folder; `bash bench/run_results.sh` reruns them all, `python bench/results_page.py`",
        "rebuilds this page). Scores are ×100 on the **test** splits of the benchmark sets ([docs/data.md](../../docs/data.md); MTEB metrics:",
        "Spearman for STS-B and Lee, accuracy for classification, V-measure for clustering, MAP for",
        "reranking, AP for pair classification, nDCG@10 for SciFact). Layer defaults (`auto`) were chosen on",
        "STS-B **dev** with `valuelens sweep` ([research/sweeps/](../sweeps/)). CPU, float32, 2 cores. Times (ms per text)",
        "compare recipes within one report only"
        + (
            f": {', '.join(side_by_side)} ran single-threaded, each beside another job (`OMP_NUM_THREADS=1`)."
            if side_by_side
            else "."
        ),
        "",
        "## At a glance (STS-B test / Lee, Spearman ×100)",
        "",
        *glance(sts),
        "",
        *_section(RESULTS / "tuned.md"),
        *_section(RESULTS / "presets.md"),
        "## Targets",
        "",
        *targets(sts, meta),
        "",
        "## Where these small models disagree with the papers",
        "",
        "The papers measure 7B–8B models in bf16; ours are 135M–500M GGUF checkpoints (4-bit weights,",
        "dequantized) on CPU. Computed from the tables below:",
        "",
        *disagreements(sts, meta, meta_ms),
        *other_tasks(other),
        "",
    ]
    missing = [
        f"`bash bench/run_results.sh {kind} {m}`"
        for m in MODELS
        for kind in ("sts", "final", "meta", "other")
        if not (RESULTS / f"{m}-{kind}.json").exists()
    ]
    for m, scores in other.items():  # a report run on part of the tasks
        absent = [t for t in OTHER_TASKS if t not in scores["va"]]
        if absent:
            missing.append(
                f"`bash bench/run_results.sh other {m}` (the report below has {len(OTHER_TASKS) - len(absent)} "
                f"of its {len(OTHER_TASKS)} tasks; {', '.join(absent)} are missing)"
            )
    if missing:
        parts += [
            "## Not run yet",
            "",
            "These parts have no report yet, or only part of one (CPU time on the 2-core machine ran out);",
            "the commands that produce them:",
            "",
            *[f"- {c}" for c in missing],
            "",
        ]
    diagnosis = RESULTS / "massive-activations.md"
    if diagnosis.exists():  # written by bench/massive_activations.py
        parts += [
            "## Why the all-layer HS mean scores 0 on SciFact",
            "",
            "For SmolLM2 and Qwen the all-layer HS mean ranks SciFact documents by length, not content",
            "(the Spearman of a document's score with its token count is strongly negative), so nDCG@10 is 0. On SmolLM2 one",
            "residual coordinate holds most of the squared norm and zeroing it recovers part of the score; on",
            "Qwen zeroing the top one is not enough. Gemma shows that a huge coordinate alone is harmless: one",
            "holds 96 % of ‖x‖² in both HS means, yet its score barely follows length. What hurts is a massive",
            "activation whose share shrinks with length, as the first token's attention-sink activations do",
            "when averaged over more tokens (a likely cause, not measured here). VA's scores barely follow length.",
            "",
            diagnosis.read_text().strip(),
            "",
        ]
    for m in MODELS:
        for kind, title in (
            ("sts", "STS tasks"),
            ("final", "STS tasks, mean of last_hidden_state (plain mean pooling)"),
            ("meta", "MetaEOL (eight passes per text) on a 500-pair sample of STS-B test, and Lee"),
            ("other", "classification, clustering, retrieval, reranking, pair classification"),
            ("best", "presets on STS-B and Lee"),
            ("best-other", "presets on the other task kinds"),
        ):
            report = RESULTS / f"{m}-{kind}.md"
            if report.exists():
                parts += [f"## {m}: {title}", "", report.read_text().strip(), ""]
    FULL_PAGE.write_text("\n".join(parts) + "\n", encoding="utf-8")
    update_blocks(
        USER_PAGE, {(README_START, README_END): glance(sts), (PRESETS_START, PRESETS_END): presets_headline()}
    )
    update_blocks(ROOT / "README.md", {(README_START, README_END): glance(sts)})
    print("\n".join(targets(sts, meta)))


if __name__ == "__main__":
    main()
