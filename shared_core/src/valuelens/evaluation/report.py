"""The report of a recipe comparison (``valuelens eval``): markdown for people, JSON for scripts.

Usage::

    report = EvalReport("valuelens eval stsb", "smollm2-135m", "test", {"va": [evaluate(model, "stsb")]})
    print(report.to_markdown())
    report.write(Path("out/smollm2-sts"))  # out/smollm2-sts.md and out/smollm2-sts.json

The markdown starts with the command that produced it, then the score table
(:func:`~valuelens.evaluation.results_to_markdown`) and, when recipes were timed, their ms/text table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from valuelens.io import report_path

from .runner import TaskResult, results_to_markdown

__all__ = ["EvalReport", "Timing"]


@dataclass(frozen=True)
class Timing:
    """Milliseconds per text of each recipe encoding ``n_texts`` texts of ``task`` alone.

    Usage: ``Timing({"va": 12.5}, dims={"va": 576}, n_texts=128, task="stsb", batch_size=32).to_markdown()``
    """

    ms_per_text: Mapping[str, float]
    dims: Mapping[str, int]
    n_texts: int
    task: str
    batch_size: int

    def to_markdown(self) -> str:
        """The ms/text table and a line saying how it was measured."""
        rows = [f"| {label} | {self.dims[label]} | {ms:.1f} |" for label, ms in self.ms_per_text.items()]
        return (
            "| recipe | dim | ms / text (alone) |\n|---|---:|---:|\n"
            + "\n".join(rows)
            + f"\n\n(ms / text: each recipe encoding {self.n_texts} texts of {self.task} alone,"
            f" batch {self.batch_size})"
        )


@dataclass(frozen=True)
class EvalReport:
    """Scores of recipe variants (rows) on tasks (columns) of one model split, with optional timings.

    Usage: ``EvalReport(command, "smollm2-135m", "test", {"va": [r1, r2]}).write(Path("out/report"))``
    """

    command: str
    model: str
    split: str
    results: Mapping[str, Sequence[TaskResult]]
    timing: Timing | None = None

    def to_markdown(self) -> str:
        """The command in a code block, the model and split, the score table, then the timing table."""
        # recipes shared forward passes, so their encode times say nothing: the timing table does
        table = results_to_markdown(self.results, show_time=False)
        extra = f"\n\n{self.timing.to_markdown()}" if self.timing is not None else ""
        return f"```\n{self.command}\n```\n\nModel: {self.model}; split: {self.split}\n\n{table}{extra}\n"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: command, model, split, results (``TaskResult.to_dict`` rows), ms_per_text."""
        return {
            "command": self.command,
            "model": self.model,
            "split": self.split,
            "results": {label: [r.to_dict() for r in rs] for label, rs in self.results.items()},
            "ms_per_text": dict(self.timing.ms_per_text) if self.timing is not None else {},
        }

    def write(self, stem: Path) -> None:
        """Write ``stem.md`` and ``stem.json`` (see :func:`valuelens.io.report_path`)."""
        stem.parent.mkdir(parents=True, exist_ok=True)
        report_path(stem, ".md").write_text(self.to_markdown(), encoding="utf-8")
        report_path(stem, ".json").write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
