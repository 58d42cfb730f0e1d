"""Serving throughput and latency: ``valuelens serve`` with and without cross-request batching, a plain
FastAPI + sentence-transformers server, and in-process ``Encoder.encode`` as the ceiling.

Usage::

    python -m bench.serve --model smollm2-135m --concurrency 1,8,64 --requests 64

Each server is a real process on a free port of 127.0.0.1, polled on ``/ready``, warmed up, then driven by
a pool of ``CONCURRENCY`` client threads (one keep-alive ``httpx.Client`` each) sending ``--requests``
(small) or ``--mixed-requests`` (mixed) requests per cell, for two workloads built with
:func:`bench.texts.length_mix`: ``small`` (one STS-B sentence per request) and ``mixed`` (1-8 texts per
request, one SciFact abstract in seven). The servers:

- ``valuelens`` — ``valuelens serve`` (recipe va, or ``--preset``; ``--truncate`` at 512 tokens as
  sentence-transformers does), cross-request batching (the default);
- ``valuelens --no-batching`` — the same with ``--no-batching --max-wait-ms 0``: one request per forward;
- ``fastapi+st`` — :data:`PLAIN_SERVER`: a minimal FastAPI app running sentence-transformers mean pooling
  over the same backbone, one ``model.encode`` per request (under a lock: HF fast tokenizers are not
  thread-safe), the usual hand-written embeddings server.

``in-process`` encodes every text of a workload with one ``Encoder.encode`` call in a fresh process (same
spec, same threads): the ceiling; ``overhead`` is how much slower (texts/s) a server cell is. Every process
gets the same ``--threads`` (``auto`` is resolved once here). Throughput is texts/s and tokens/s (tokens
as the servers' ``usage`` counts them); latency is per request (p50/p99, ms).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.child import run_child
from bench.texts import ROOT, length_mix

SYSTEMS = ("valuelens", "valuelens --no-batching", "fastapi+st")
WORKLOADS = ("small", "mixed")
READY_TIMEOUT_S = 300

#: the plain server: ``python -c PLAIN_SERVER MODEL_DIR PORT THREADS NAME``
PLAIN_SERVER = r"""
import sys, threading
import torch, uvicorn
from fastapi import FastAPI
from sentence_transformers import SentenceTransformer, models

path, port, threads, name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(threads)
word = models.Transformer(path, max_seq_length=512, model_args={"dtype": torch.float32})
if word.tokenizer.pad_token is None:
    word.tokenizer.pad_token = word.tokenizer.eos_token
model = SentenceTransformer(modules=[word, models.Pooling(word.get_word_embedding_dimension(), "mean")], device="cpu")
lock = threading.Lock()
app = FastAPI()

@app.get("/ready")
def ready():
    return {"status": "ready"}

@app.post("/v1/embeddings")
def embeddings(body: dict):
    texts = body["input"]
    texts = [texts] if isinstance(texts, str) else list(texts)
    with lock:
        vectors = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
        tokens = sum(len(ids) for ids in word.tokenizer(texts, add_special_tokens=False)["input_ids"])
    data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": name, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def workload(kind: str, requests: int, seed: int = 0) -> list[list[str]]:
    """``requests`` lists of texts: ``small`` one STS-B sentence each, ``mixed`` 1-8 texts of the length mix."""
    if kind == "small":
        return [[t] for t in length_mix(requests, seed=seed, source="stsb")]
    rng = random.Random(seed)
    sizes = [rng.randint(1, 8) for _ in range(requests)]
    texts = length_mix(sum(sizes), seed=seed)
    out, at = [], 0
    for size in sizes:
        out.append(texts[at : at + size])
        at += size
    return out


class Process:
    """A server process on ``port`` (stderr to a file; stopped with SIGTERM, then SIGKILL)."""

    def __init__(self, command: Sequence[str], port: int, log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._err = log.open("wb")
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        env.pop("VALUELENS_API_KEY", None)
        self.process = subprocess.Popen(
            list(command), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self._err
        )

    def wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"the server exited with {self.process.returncode}: {' | '.join(tail)}")
            try:
                if httpx.get(self.url + "/ready", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the server was not ready after {READY_TIMEOUT_S} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._err.close()


def start_server(system: str, args: argparse.Namespace, threads: int, tmp: Path) -> Process:
    port = free_port()
    if system == "fastapi+st":
        from valuelens import models

        folder = str(models.path(args.model)) if models.is_provisioned(args.model) else args.model
        command = [sys.executable, "-c", PLAIN_SERVER, folder, str(port), str(threads), args.model]
    else:
        spec = ["--preset", args.preset] if args.preset else ["--recipe", "va"]
        command = [
            sys.executable,
            "-m",
            "valuelens",
            "serve",
            "--model",
            args.model,
            *spec,
            "--port",
            str(port),
            "--threads",
            str(threads),
            "--device",
            "cpu",
        ]
        command.append("--truncate")  # as sentence-transformers does (max_seq_length 512)
        if system.endswith("--no-batching"):
            command += ["--no-batching", "--max-wait-ms", "0"]
    server = Process(command, port, tmp / f"{system.replace(' ', '_')}.err")
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def drive(url: str, model: str, requests: list[list[str]], concurrency: int) -> dict[str, Any]:
    """Send ``requests`` from ``concurrency`` threads; throughput, latency percentiles, failures."""
    import httpx

    local = threading.local()

    def one(texts: list[str]) -> tuple[float, int, int]:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(timeout=600)
        began = time.perf_counter()
        response = client.post(url + "/v1/embeddings", json={"model": model, "input": texts})
        took = time.perf_counter() - began
        if response.status_code != 200:
            return took, 0, -1
        body = response.json()
        if len(body["data"]) != len(texts):
            return took, 0, -1
        return took, int(body["usage"]["prompt_tokens"]), len(texts)

    began = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as executor:
        results = list(executor.map(one, requests))
    wall = time.perf_counter() - began
    latencies = np.array([r[0] for r in results]) * 1000
    ok = [r for r in results if r[2] >= 0]
    return {
        "seconds": wall,
        "texts_s": sum(r[2] for r in ok) / wall,
        "tokens_s": sum(r[1] for r in ok) / wall,
        "p50_ms": float(np.percentile(latencies, 50)),
        "p99_ms": float(np.percentile(latencies, 99)),
        "failed": len(results) - len(ok),
    }


def run_inprocess(model: str, preset: str | None, threads: int, requests: dict[str, int]) -> dict[str, Any]:
    """In this (fresh) process: load the encoder with the servers' spec, then time one encode per workload."""
    import torch

    from valuelens import Encoder

    torch.set_num_threads(threads)
    spec: dict[str, Any] = {"preset": preset} if preset else {"recipe": "va"}
    encoder = Encoder.from_pretrained(model, device="cpu", **spec)
    encoder.encode(["A short sentence to warm up the model."])
    out = {}
    for kind in WORKLOADS:
        texts = [t for request in workload(kind, requests[kind]) for t in request]
        began = time.perf_counter()
        encoder.encode(texts, normalize=True, max_tokens_per_batch=4096)
        out[kind] = len(texts) / (time.perf_counter() - began)
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--preset", default=None, help="serve with this preset (default: recipe va)")
    parser.add_argument("--concurrency", default="1,8,64")
    parser.add_argument("--requests", type=int, default=64, help="requests per small cell")
    parser.add_argument(
        "--mixed-requests", type=int, default=16, help="requests per mixed cell (~4.5 texts each)"
    )
    parser.add_argument(
        "--threads", default="auto", help="torch threads of every process (auto: resolved once)"
    )
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args(argv)
    from valuelens.cpu import parse_threads

    threads = parse_threads(args.threads) or 1
    levels = [int(c) for c in args.concurrency.split(",")]
    counts = {"small": args.requests, "mixed": args.mixed_requests}
    loads = {kind: workload(kind, counts[kind]) for kind in WORKLOADS}
    rows: list[dict[str, Any]] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        for system in args.systems.split(","):
            try:
                server = start_server(system, args, threads, Path(tmp))
            except RuntimeError as exc:
                rows.append({"system": system, "error": str(exc)})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                continue
            try:
                drive(server.url, args.model, loads["small"][:4], 2)  # warm-up
                for kind in WORKLOADS:
                    for level in levels:
                        row = {"system": system, "workload": kind, "concurrency": level}
                        row.update(drive(server.url, args.model, loads[kind], level))
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
            finally:
                server.stop()
    code = (
        "import json; from bench.serve import run_inprocess; "
        f"print(json.dumps(run_inprocess({args.model!r}, {args.preset!r}, {threads}, {counts!r})))"
    )
    ceiling = run_child(["-c", code], timeout=900)
    print(json.dumps({"in-process": ceiling}), file=sys.stderr, flush=True)
    print(to_markdown(rows, ceiling, args, threads, time.monotonic() - began))
    return rows


def to_markdown(
    rows: list[dict[str, Any]],
    ceiling: dict[str, Any],
    args: argparse.Namespace,
    threads: int,
    seconds: float,
) -> str:
    spec = f"preset {args.preset}" if args.preset else "recipe va"
    lines = [
        f"model {args.model}, {spec}, {args.requests} small / {args.mixed_requests} mixed requests per cell, "
        f"torch threads {threads} in every process, "
        f"CPU with {os.cpu_count()} logical cores, {datetime.date.today().isoformat()}, run took {seconds:.0f} s",
        "",
        "| workload | concurrency | server | texts/s | tokens/s | p50 ms | p99 ms | × no-batching | overhead vs in-process |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| | | {row['system']} | failed to start: {row['error']} | | | | | |")
            continue
        base = next(
            (
                r
                for r in rows
                if r.get("system") == "valuelens --no-batching"
                and r.get("workload") == row["workload"]
                and r.get("concurrency") == row["concurrency"]
            ),
            None,
        )
        ratio = f"{row['texts_s'] / base['texts_s']:.2f}" if base and base["texts_s"] else ""
        top = ceiling.get(row["workload"]) if "failed" not in ceiling else None
        overhead = f"{(top / row['texts_s'] - 1) * 100:+.0f} %" if top and row["texts_s"] else ""
        failed = f" ({row['failed']} failed)" if row["failed"] else ""
        lines.append(
            f"| {row['workload']} | {row['concurrency']} | {row['system']}{failed} | {row['texts_s']:.1f} "
            f"| {row['tokens_s']:.0f} | {row['p50_ms']:.0f} | {row['p99_ms']:.0f} | {ratio} | {overhead} |"
        )
    if "failed" in ceiling:
        lines.append(f"\nin-process ceiling failed: {ceiling['failed']}")
    else:
        lines.append(
            "\nin-process `Encoder.encode` (one call, all texts of the workload): "
            + ", ".join(f"{kind} {ceiling[kind]:.1f} texts/s" for kind in WORKLOADS)
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
