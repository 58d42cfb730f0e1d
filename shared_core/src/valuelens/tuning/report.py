"""The report of a tuning run: ``report.md`` (the choice, its cost, the best candidates) and
``candidates.jsonl`` (every candidate's dev scores).

Usage: ``write_report(folder, rows, references, data, prompts)`` after :func:`valuelens.tuning.search.search`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

from valuelens.presets.folder import PresetFolder
from valuelens.tuning.data import OBJECTIVE_MEANING, Objective, TuneData
from valuelens.tuning.search import Row

__all__ = ["CANDIDATES_FILE", "REPORT_FILE", "write_report"]

REPORT_FILE = "report.md"
CANDIDATES_FILE = "candidates.jsonl"
_TOP = 20


def _cell(text: str) -> str:
    """``text`` in a markdown table cell (a fusion's ``|`` escaped)."""
    return text.replace("|", "\\|")


def _num(value: float) -> str:
    """A score with two decimals; ``–`` for a set the run does not have (``nan``)."""
    return "–" if math.isnan(value) else f"{value:.2f}"


def _line(label: str, stage: str, sts: float, retrieval: float, objective: float) -> str:
    return f"| {_cell(label)} | {stage} | {_num(sts)} | {_num(retrieval)} | {_num(objective)} |"


def score_names(data: TuneData) -> tuple[str, str]:
    """The two scores' column names: the STS set's Spearman and the retrieval set's nDCG@10."""
    return data.sts_name, f"{data.retrieval_name} nDCG@10"


def _objective_meaning(objective: str, data: TuneData) -> str:
    """What the objective scores on this run's data: the project's STS-B and SciFact (as documented), or
    the sets of this run (a ``balanced`` run without STS pairs scores retrieval alone)."""
    if data.dev_source == "project":
        return OBJECTIVE_MEANING.get(cast(Objective, objective), "?")
    sts_name, ret_name = score_names(data)
    scores = {
        "sts": f"{sts_name} Spearman" if data.sts.gold else "",
        "retrieval": ret_name if data.retrieval.queries else "",
    }
    if objective in scores:
        return scores[objective]
    present = [name for name in scores.values() if name]
    return f"the mean of {present[0]} and {present[1]}" if len(present) == 2 else f"{present[0]} alone"


def _data_line(data: TuneData) -> str:
    """What the dev data is, in one sentence."""
    if data.dev_source == "project":
        return (
            f"Dev data only: {len(data.sts.gold)} STS-B dev pairs; SciFact's carved dev split "
            f"({len(data.retrieval.queries)} queries) over {len(data.retrieval.docs)} documents."
        )
    parts = []
    if data.sts.gold:
        parts.append(f"{len(data.sts.gold)} scored pairs ({data.sts_name})")
    if data.retrieval.queries:
        parts.append(
            f"{len(data.retrieval.queries)} queries ({data.retrieval_name}) over {len(data.retrieval.docs)} documents"
        )
    return f"Dev data: {'; '.join(parts)} ({data.dev_source})."


def _prompt_names(prompts: Sequence[str | None]) -> dict[str | None, str]:
    return {p: f"P{i + 1}" for i, p in enumerate(prompts)}


def write_report(
    folder: PresetFolder,
    rows: Sequence[Row],
    references: Mapping[str, Mapping],
    data: TuneData,
    prompts: Sequence[str | None],
) -> Path:
    """Write ``report.md`` and ``candidates.jsonl`` into the folder; returns the report's path."""
    names = _prompt_names(prompts)
    with open(folder.path / CANDIDATES_FILE, "w", encoding="utf-8") as handle:
        for row in rows:
            record = {
                "candidate": row.candidate.label(),
                "prompt": row.candidate.prompt,
                "stage": row.stage,
                "sts": None if math.isnan(row.sts) else round(row.sts, 3),
                "retrieval": None if math.isnan(row.retrieval) else round(row.retrieval, 3),
                "objective": round(row.objective, 3),
                "spec": row.candidate.fields(),
                "postprocess": row.candidate.post,
            }
            handle.write(json.dumps(record) + "\n")
    best = rows[0]
    sts_name, ret_name = score_names(data)
    info = folder.info
    seconds = info.get("seconds", {})
    lines = [
        f"# valuelens tune: {folder.model}",
        "",
        f"Objective `{folder.objective}` ({_objective_meaning(folder.objective, data)}, ×100), "
        f"{info.get('mode', '?')} mode. {_data_line(data)} Post-processing fitted on "
        f"{data.fit_source} (unlabeled). A lexical part (`+lexD/Q`: document / query weight; BM25, or "
        "`+lex(embeddings)` for the input-embedding tf-idf) takes its statistics from "
        + (
            f"the {len(data.lexical_texts)} documents given (BM25; kept in the folder)"
            if data.lexical_texts
            else "English word frequencies, as the encoder does at load"
        )
        + ".",
        "",
        'Use it: `Encoder.from_pretrained(MODEL, preset="DIR")`, `ValueLensEmbeddings(model_name=MODEL, preset="DIR")`, '
        '`ValueLensEmbedding(model_name=MODEL, preset="DIR")`, `ValuePooling(preset="DIR")`, `valuelens embed ... --preset DIR`.',
        "",
        "## Chosen",
        "",
        f"`{best.candidate.label()}` (stage {best.stage}): {sts_name} {_num(best.sts)}, {ret_name} "
        f"{_num(best.retrieval)}, objective {_num(best.objective)}.",
        "",
        "```json",
        json.dumps(folder.spec, indent=1),
        "```",
        "",
        f"The real encoder of this spec reproduces the search's vectors (smallest cosine on "
        f"{len(data.sts.texts[:48])} dev sentences and 8 documents: {info.get('check_min_cosine', float('nan')):.5f}).",
        "",
        "## Cost",
        "",
        "| step | seconds |",
        "|---|---:|",
        *[f"| {step} | {value:.0f} |" for step, value in seconds.items()],
        "",
        f"{len(rows)} candidates scored offline from one forward pass per text and prompt "
        f"({len(prompts)} prompts × {sum(len(t) for t in data.sets().values())} texts).",
        "",
        "## Prompts",
        "",
        *[f"- {names[p]}: {p!r}" for p in prompts],
        "",
    ]
    if references:
        lines += [
            "## Compared with existing presets (same dev data)",
            "",
            "Scored from the cache where it holds every readout a preset reads (with the preset's own fitted "
            "state, after a few of its real embeddings agreed with the cache's), else embedded by the real "
            "encoder.",
            "",
        ]
        lines += [
            f"| preset | {sts_name} | {ret_name} | objective | scored |",
            "|---|---:|---:|---:|---|",
        ]
        for ref, scores in references.items():
            how = scores.get("scored", "encoder")
            if "check_min_cosine" in scores:
                how += f" (real embeddings agree: cosine ≥ {scores['check_min_cosine']:.4f})"
            lines.append(
                f"| {ref} | {_num(scores['sts'])} | {_num(scores['retrieval'])} | {_num(scores['objective'])} | {how} |"
            )
        lines.append(
            f"| tuned (this folder) | {_num(best.sts)} | {_num(best.retrieval)} | {_num(best.objective)} | cache |"
        )
        lines.append("")
    lines += [
        "## Best band of each readout family",
        "",
        f"| prompt · candidate | stage | {sts_name} | {ret_name} | objective |",
        "|---|---|---:|---:|---:|",
    ]
    seen: set[tuple[str | None, str]] = set()
    for row in rows:
        key = (row.candidate.prompt, row.candidate.main.family.name)
        if row.stage == "band" and key not in seen:
            seen.add(key)
            lines.append(
                _line(
                    f"{names[row.candidate.prompt]} · {row.candidate.label()}",
                    row.stage,
                    row.sts,
                    row.retrieval,
                    row.objective,
                )
            )
    lines += [
        "",
        f"## The {_TOP} best candidates",
        "",
        f"| prompt · candidate | stage | {sts_name} | {ret_name} | objective |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows[:_TOP]:
        lines.append(
            _line(
                f"{names[row.candidate.prompt]} · {row.candidate.label()}",
                row.stage,
                row.sts,
                row.retrieval,
                row.objective,
            )
        )
    lines += ["", f"Every candidate's scores: `{CANDIDATES_FILE}` ({len(rows)} rows).", ""]
    report = folder.path / REPORT_FILE
    report.write_text("\n".join(lines), encoding="utf-8")
    return report
