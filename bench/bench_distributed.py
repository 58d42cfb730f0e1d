"""Throughput of valuelens.distributed on a local Ray: 1 vs 2 workers (docs/distributed.md).

Usage::

    python bench/bench_distributed.py --texts 1200 --workers 1 2

Each run starts a local Ray with ``workers * threads + 1`` logical CPUs (one for Ray Data's own
tasks), embeds the same texts with the default model (recipe ``va``), and reports texts/s from
submission to the last row: starting the actors and loading the model (a few seconds per run) is
included, as it is in a real job.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def sentences(n: int) -> list[str]:
    """STS-B test sentences (both sides of each pair), repeated up to ``n``."""
    from valuelens.evaluation.tasks import find_set

    found: list[str] = []
    with (find_set("stsb") / "test.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            found += [row["sentence1"], row["sentence2"]]
    return [found[i % len(found)] for i in range(n)]


def run(texts: list[str], workers: int, batch_size: int, threads: int) -> float:
    import pyarrow as pa
    import ray

    from valuelens.distributed import embed_dataset

    ray.init(address="local", num_cpus=workers * threads + 1, include_dashboard=False, log_to_driver=False)
    try:
        table = pa.table({"id": list(range(len(texts))), "text": texts})
        ds = ray.data.from_arrow(table).repartition(max(8, len(texts) // batch_size))
        embedded = embed_dataset(
            ds, config={"recipe": "va"}, batch_size=batch_size, concurrency=workers, num_cpus=threads
        )
        start = time.perf_counter()
        n = sum(len(b["id"]) for b in embedded.iter_batches(batch_size=None, batch_format="pyarrow"))
        elapsed = time.perf_counter() - start
        assert n == len(texts)
        return elapsed
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1200)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1, help="CPUs (torch threads) per worker")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    texts = sentences(args.texts)
    print(f"cores: {os.cpu_count()}, load average: {os.getloadavg()}, texts: {len(texts)}")
    results = {}
    for workers in args.workers:
        elapsed = run(texts, workers, args.batch_size, args.threads)
        results[workers] = len(texts) / elapsed
        print(
            f"workers={workers} threads/worker={args.threads}: {elapsed:.1f} s, {results[workers]:.1f} texts/s"
        )
    base = results[min(results)]
    for workers, rate in sorted(results.items()):
        print(f"  {workers} worker(s): {rate:.1f} texts/s, x{rate / base:.2f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
