"""Join `valuelens eval` reports of one model that scored different tasks into one report.

Usage: ``python bench/merge_reports.py A.json B.json --out research/results/MODEL-other``

With ``--rerun``, a later report's tasks replace the same tasks of the earlier ones (a task rerun after
a fix); the joined report says which tasks were replaced. Without it a repeated task is an error.

A long report can run in pieces (e.g. SciFact apart from the other tasks); each task's seeded sample
does not depend on which other tasks ran, so the joined report has the scores one run would give.
The joined .md prints every piece's command and the join; the .json keeps them in ``command`` (one per
line) and ``joined_by``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from valuelens.evaluation import results_from_json, results_to_markdown
from valuelens.io import report_path


def merge(paths: list[Path], *, rerun: bool = False) -> dict:
    """The joined report as JSON data; the pieces must share model, split and recipes and not repeat a
    task (``rerun``: a later piece's task replaces an earlier piece's)."""
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    first = reports[0]
    results: dict[str, list] = {label: [] for label in first["results"]}
    seen: set[str] = set()
    replaced: list[str] = []
    for path, report in zip(paths, reports, strict=True):
        for key in ("model", "split"):
            if report[key] != first[key]:
                msg = f"{path}: {key} {report[key]!r} differs from {paths[0]}'s {first[key]!r}"
                raise SystemExit(msg)
        if list(report["results"]) != list(results):
            msg = f"{path}: its recipes differ from {paths[0]}'s; run the pieces with the same --recipes"
            raise SystemExit(msg)
        if report.get("ms_per_text"):
            msg = (
                f"{path}: has timings, which do not join (each piece timed its own task); use --time-sample 0"
            )
            raise SystemExit(msg)
        tasks = {r["task"] for rs in report["results"].values() for r in rs}
        if tasks & seen and not rerun:
            msg = f"{path}: tasks {sorted(tasks & seen)} are already in an earlier report (pass --rerun to replace them)"
            raise SystemExit(msg)
        replaced += [f"{t} (from {path.name})" for t in sorted(tasks & seen)]
        seen |= tasks
        for label, rows in report["results"].items():
            new = {r["task"]: r for r in rows}
            kept = [new.pop(r["task"], r) for r in results[label]]  # a rerun task keeps its column
            results[label] = kept + list(new.values())
    return {
        "command": "\n".join(r["command"] for r in reports),
        "model": first["model"],
        "split": first["split"],
        "results": results,
        "ms_per_text": {},
        **({"replaced": replaced} if replaced else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="report .json files, in column order")
    parser.add_argument("--out", type=Path, required=True, help="output stem: OUT.json and OUT.md")
    parser.add_argument("--rerun", action="store_true", help="a later report's tasks replace earlier ones")
    args = parser.parse_args()
    joined = merge(args.reports, rerun=args.rerun)
    table = results_to_markdown(results_from_json(json.dumps(joined["results"])), show_time=False)
    joined["joined_by"] = "python bench/merge_reports.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    rerun = (
        f"Rerun tasks, replacing the earlier scores: {', '.join(joined['replaced'])}.\n\n"
        if "replaced" in joined
        else ""
    )
    md = f"```\n{joined['command']}\n{joined['joined_by']}\n```\n\n{rerun}Model: {joined['model']}; split: {joined['split']}\n\n{table}\n"
    report_path(args.out, ".md").write_text(md, encoding="utf-8")
    report_path(args.out, ".json").write_text(json.dumps(joined, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}.md and .json ({len(joined['results'])} rows)")


if __name__ == "__main__":
    main()
