"""Where a row's time goes: one run of a benchmark row under ``torch.profiler``, its top operators.

Usage::

    python -m bench.profile --model smollm2-135m --rows bare-truncated,va --texts 48 --top 12

Each row is built as in a fresh-process run of ``python -m bench`` (its own model), warmed up once,
then profiled over all texts. The table lists the operators by their own (self) time, and the
share of the run that no torch operator accounts for (Python: tokenization, hooks, glue).
"""

from __future__ import annotations

import argparse
import time
import warnings

from torch.profiler import ProfilerActivity, profile

from bench.suite import Context, Settings, cpu_threads, get_row


def profile_row(settings: Settings, key: str, top: int) -> str:
    from valuelens import TruncationWarning

    ctx = Context(settings, shared=False)
    prepared = get_row(key, settings.batch_size).build(ctx)
    assert prepared.run is not None, f"{key} has no timed run"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        prepared.run(ctx.texts[: settings.batch_size])
        start = time.perf_counter()
        with profile(activities=activities) as prof:
            prepared.run(ctx.texts)
        wall = time.perf_counter() - start
    events = prof.key_averages()
    ops = sum(e.self_cpu_time_total for e in events) / 1e6
    lines = [
        f"### {key}: {wall:.2f} s under the profiler; torch operators' self time {ops:.2f} s "
        f"({100 * ops / wall:.0f} %), the rest Python",
        "",
        "```",
        events.table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=48),
        "```",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--model", default=None)
    parser.add_argument("--random-init", default=None)
    parser.add_argument("--rows", default="bare-truncated,va")
    parser.add_argument("--texts", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    settings = Settings(
        model=args.model,
        random_init=args.random_init,
        texts=args.texts,
        batch_size=args.batch_size,
        dtype=args.dtype,
        device=args.device,
        threads=args.threads,
    )
    with cpu_threads(args.threads):
        for key in args.rows.split(","):
            print(profile_row(settings, key, args.top), flush=True)


if __name__ == "__main__":
    main()
