"""CPU threads on an idle and on a busy machine: torch's default, one thread, the CPU share, ``auto``.

Usage::

    python -m bench.threads --texts 200 --busy 0,1,2 --repeats 2

For each number of competing busy processes (``--busy``: pure-Python loops, one core each, as another
job on the same machine) and each thread setting, a fresh process loads the model
(``Encoder.from_pretrained(model, recipe="va")``), embeds a warm-up batch, then times
``encoder.encode`` of the STS-B sentences (:func:`bench.texts.length_mix`, ``source="stsb"``). The
settings: ``default`` (torch's own choice, untouched), ``1``, ``share`` (:func:`valuelens.cpu.cpu_share`)
and ``auto`` (:func:`valuelens.cpu.auto_threads`: the share minus the busy CPUs, what the CLI uses).
The table gives seconds (the median of ``--repeats``) and each setting's time relative to one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.child import run_child
from bench.texts import length_mix

SETTINGS = ["default", "1", "share", "auto"]
BUSY_LOOP = "while True: pass"


def run_one(model: str, setting: str, texts: int) -> dict[str, Any]:
    """In this (fresh) process: set the threads, load, warm up, time one encode."""
    import torch

    from valuelens import Encoder, cpu

    if setting != "default":
        torch.set_num_threads(
            cpu.auto_threads()
            if setting == "auto"
            else cpu.cpu_share()
            if setting == "share"
            else int(setting)
        )
    encoder = Encoder.from_pretrained(model, recipe="va", device="cpu")
    sample = length_mix(texts, source="stsb")
    encoder.encode(sample[:16])
    start = time.perf_counter()
    encoder.encode(sample)
    return {"seconds": time.perf_counter() - start, "threads": torch.get_num_threads()}


def _child(model: str, setting: str, texts: int) -> dict[str, Any]:
    code = f"import json; from bench.threads import run_one; print(json.dumps(run_one({model!r}, {setting!r}, {texts})))"
    result = run_child(["-c", code], timeout=900)
    if "failed" in result:
        raise RuntimeError(f"bench.threads {setting}: {result['failed']}")
    return result


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--busy", default="0,1,2", help="numbers of competing busy processes")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    args = parser.parse_args(argv)
    rows = []
    for busy in [int(b) for b in args.busy.split(",")]:
        hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
        try:
            time.sleep(2 if busy else 0)
            for setting in args.settings.split(","):
                runs = [_child(args.model, setting, args.texts) for _ in range(args.repeats)]
                rows.append(
                    {
                        "busy": busy,
                        "setting": setting,
                        "threads": runs[0]["threads"],
                        "seconds": statistics.median(r["seconds"] for r in runs),
                        "all": [round(r["seconds"], 2) for r in runs],
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    print(to_markdown(rows, args))
    return rows


def to_markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    cores = os.cpu_count()
    lines = [
        f"model {args.model}, recipe va, {args.texts} STS-B sentences, CPU with {cores} logical cores; "
        f"median of {args.repeats} fresh processes",
        "",
        "| busy processes | setting | torch threads | seconds | × one thread's time |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        one = next(r["seconds"] for r in rows if r["busy"] == row["busy"] and r["setting"] == "1")
        lines.append(
            f"| {row['busy']} | {row['setting']} | {row['threads']} | {row['seconds']:.2f} "
            f"({', '.join(map(str, row['all']))}) | {row['seconds'] / one:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
