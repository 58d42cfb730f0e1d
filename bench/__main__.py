"""``python -m bench``: speed and peak memory of valuelens against the plain forward, one table.

Usage::

    python -m bench --model smollm2-135m --texts 96                 # every row, a fresh process each
    python -m bench --rows va,st-mean --json out/bench.json          # rows 1 and 2 are always added
    python -m bench --rows batching --texts 448                     # fixed batches against token budgets
    python -m bench --random-init qwen3-8b --device cuda --dtype bfloat16 --source scifact \\
        --max-length 256 --batch-size 64 --max-tokens-per-batch none   # the GPU script's shape
    python -m bench.memory_7b                                        # Llama-2-7B-shaped peak RSS on CPU
    python -m bench.dtype                                            # bf16 against fp32 on CPU

Rows (``--rows``; groups in brackets): [reference] ``bare``, ``bare-truncated``, ``st-mean``;
[naive] ``hidden-states``, ``eager-attentions``; [valuelens] ``va``, ``wva-lt``, ``aligned-wva``,
``hs``, ``prompteol-ef``; [adapters] ``va-fixed`` (the Encoder in ST's fixed batches), ``st-va``, ``langchain-va``, ``llamaindex-va``; [baselines]
``metaeol``, ``echo``; [embed-filter] ``ef-fit``; [batching] ``batch-8``, ``batch-32``,
``budget-1024``, ``budget-2048``, ``budget-4096``, ``budget-2048-bs64`` (any ``batch-N`` /
``budget-T[-bsN]``). ``all`` (the default) is every group but batching. A row whose host framework
is not importable is reported as skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

from bench.suite import Settings, measure_row, run_suite, select_rows, to_markdown


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=(__doc__ or "").split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join((__doc__ or "").split("\n")[2:]),
    )
    parser.add_argument(
        "--model", default=None, help="bundled model name, folder or hub id (default: smollm2-135m)"
    )
    parser.add_argument(
        "--random-init", default=None, help="a randomly initialised shape from bench.shapes.SHAPES"
    )
    parser.add_argument("--texts", type=int, default=96, help="how many texts (default 96)")
    parser.add_argument(
        "--source",
        choices=["mix", "stsb", "scifact"],
        default="mix",
        help="the length mix (default), or one kind",
    )
    parser.add_argument("--seed", type=int, default=0, help="of the text sample and random weights")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--max-tokens-per-batch",
        default="default",
        help="a token budget, 'none', or 'default' (Encoder.encode's)",
    )
    parser.add_argument("--dtype", default=None, help="float32, bfloat16, float16 (default: float32 on CPU)")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    parser.add_argument("--max-length", type=int, default=512, help="token limit per text, prompt included")
    parser.add_argument(
        "--repeats", type=int, default=1, help="timed runs per row after the warm-up; the best counts"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--rows", default="all", help="row keys and groups, comma-separated")
    parser.add_argument("--json", type=Path, default=None, help="write the report as JSON here")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows already in --json (a run cut short) and measure the rest",
    )
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables as markdown here")
    isolation = parser.add_mutually_exclusive_group()
    isolation.add_argument(
        "--in-process",
        dest="in_process",
        action="store_true",
        default=None,
        help="one process, one model (default on CUDA)",
    )
    isolation.add_argument(
        "--isolate", dest="in_process", action="store_false", help="a fresh process per row (default on CPU)"
    )
    parser.add_argument(
        "--memory-7b", action="store_true", help="run bench.memory_7b with its defaults instead"
    )
    parser.add_argument("--one-row", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> dict | None:
    args = _parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.memory_7b:
        from bench import memory_7b

        memory_7b.main([])
        return None
    settings = Settings(
        model=args.model,
        random_init=args.random_init,
        texts=args.texts,
        source=args.source,
        seed=args.seed,
        batch_size=args.batch_size,
        max_tokens_per_batch=str(args.max_tokens_per_batch),
        dtype=args.dtype,
        device=args.device,
        max_length=args.max_length,
        repeats=args.repeats,
        threads=args.threads,
    )
    if args.one_row:
        from bench.suite import Context, cpu_threads

        with _quiet(), cpu_threads(settings.threads):
            print(json.dumps(measure_row(Context(settings, shared=False), args.one_row)))
        return None
    keys = select_rows(args.rows)

    done: list[dict] = []
    if args.resume and args.json and args.json.exists():
        saved = json.loads(args.json.read_text(encoding="utf-8"))
        wanted = dataclasses.asdict(settings)
        if saved.get("meta", {}).get("settings", wanted) != wanted:
            raise SystemExit(f"--resume: {args.json} was written with other settings")
        done = [r for r in saved.get("rows", []) if r.get("status") in ("ok", "skipped")]
    earlier = list(done)

    def progress(row: dict) -> None:
        done.append(row)
        if args.json:  # the rows so far, in case the run is cut short (a time limit, a kill)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            meta = {"command": command, "partial": True, "settings": dataclasses.asdict(settings)}
            partial = {"meta": meta, "rows": done}
            args.json.write_text(json.dumps(partial, indent=2) + "\n", encoding="utf-8")
        shown = (
            f"{row['texts_per_s']:.2f} texts/s, peak {row['peak_mib']:.0f} MiB"
            if "texts_per_s" in row
            else row.get("note", "")
        )
        print(f"  {row['key']}: {row['status']} {shown}", file=sys.stderr, flush=True)

    command = "python -m bench " + shlex.join(argv if argv is not None else sys.argv[1:])
    with _quiet():
        report = run_suite(settings, keys, in_process=args.in_process, progress=progress, done=earlier)
    report["meta"]["command"] = command
    text = to_markdown(report, command)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text + "\n", encoding="utf-8")
    return report


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers' load reports and progress bars off while the rows run (the tables are the output)."""
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)
        hf_logging.enable_progress_bar()


if __name__ == "__main__":
    main()
