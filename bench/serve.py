"""Serving throughput and latency: ``valuelens serve`` with and without cross-request batching, with plain
mean pooling, a plain FastAPI + sentence-transformers server, Infinity from its own environment, and
in-process ``Encoder.encode`` as the ceiling.

Usage::

    python -m bench.serve --model smollm2-135m --concurrency 1,8,64 --requests 64

Each server is a real process on a free port of 127.0.0.1, polled until ready, warmed up, then driven by
one asyncio load generator (:func:`drive`: ``httpx.AsyncClient`` with ``CONCURRENCY`` requests in flight,
in this one thread, reporting its own CPU share) sending ``--requests`` (small) or ``--mixed-requests``
(mixed) requests per cell, for two workloads built with :func:`bench.texts.length_mix`: ``small`` (one
STS-B sentence per request) and ``mixed`` (1-8 texts per request, one SciFact abstract in seven). Every
row a server returns is checked against the row it gave the same text before (``mismatched``). The
servers:

- ``valuelens`` — ``valuelens serve`` (recipe va, or ``--preset``; ``--truncate`` at 512 tokens as
  sentence-transformers does), cross-request batching (the default);
- ``valuelens --no-batching`` — the same with ``--no-batching --max-wait-ms 0``: one request per forward;
- ``valuelens hs-final`` — the mean of the last hidden state after the final norm, like for like with
  Infinity's mean pooling;
- ``fastapi+st`` — :data:`PLAIN_SERVER`: a minimal FastAPI app running sentence-transformers mean pooling
  over the same backbone, one ``model.encode`` per request (under a lock: HF fast tokenizers are not
  thread-safe), the usual hand-written embeddings server;
- ``infinity`` — ``infinity_emb v2`` (mean pooling, torch engine, CPU) on the same checkpoint folder,
  from a virtual environment of its own (``--infinity-venv``, created on first use with
  :data:`INFINITY_REQUIREMENT` and its own pins; this environment is never changed). If it cannot
  install or start, the row says why.

``in-process`` encodes every text of a workload with one ``Encoder.encode`` call in a fresh process (same
spec, same threads): the ceiling; ``× in-process`` is a valuelens cell's share of it. Every process gets
the same ``--threads`` (``auto`` is resolved once here). Throughput is texts/s and tokens/s (tokens as the
servers' ``usage`` counts them); latency is per request (p50/p99, ms).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.child import run_child
from bench.texts import ROOT, length_mix

SYSTEMS = ("valuelens", "valuelens --no-batching", "valuelens hs-final", "fastapi+st", "infinity")
#: What the Infinity environment installs (its own pins, beside torch from this machine's disk).
INFINITY_REQUIREMENT = "infinity-emb[server,torch]"
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

    def __init__(
        self,
        command: Sequence[str],
        port: int,
        log: Path,
        ready_path: str = "/ready",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.ready_path = ready_path
        self.log = log
        self._err = log.open("wb")
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            **(extra_env or {}),
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
                if httpx.get(self.url + self.ready_path, timeout=5).status_code == 200:
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


def infinity_command(venv: Path, torch_pin: str) -> Path:
    """``infinity_emb`` of the virtual environment at ``venv``, created with :data:`INFINITY_REQUIREMENT` on
    first use (its own pins, as its users run it; this project's environment is never touched)."""
    program = venv / "bin" / "infinity_emb"
    if not program.exists():
        python = venv / "bin" / "python"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", torch_pin], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", INFINITY_REQUIREMENT, torch_pin], check=True)
    return program


def older_transformers_folder(folder: str, tmp: Path) -> str:
    """``folder`` as transformers 4 reads it: the same weights and ``tokenizer.json`` (linked), with the
    tokenizer class transformers 5 writes (``TokenizersBackend``) named as transformers 4 knows it
    (``PreTrainedTokenizerFast``, the same fast tokenizer)."""
    source, copy = Path(folder), tmp / "checkpoint-for-transformers-4"
    copy.mkdir(exist_ok=True)
    for item in source.iterdir():
        target = copy / item.name
        if item.name == "tokenizer_config.json":
            config = json.loads(item.read_text(encoding="utf-8"))
            if config.get("tokenizer_class") == "TokenizersBackend":
                config["tokenizer_class"] = "PreTrainedTokenizerFast"
            target.write_text(json.dumps(config), encoding="utf-8")
        elif not target.exists():
            target.symlink_to(item.resolve())
    return str(copy)


def start_server(system: str, args: argparse.Namespace, threads: int, tmp: Path) -> Process:
    port = free_port()
    ready, env = "/ready", None
    if system in ("fastapi+st", "infinity"):
        from valuelens import models

        folder = str(models.path(args.model)) if models.is_provisioned(args.model) else args.model
    if system == "fastapi+st":
        command = [sys.executable, "-c", PLAIN_SERVER, folder, str(port), str(threads), args.model]
    elif system == "infinity":
        try:
            program = infinity_command(Path(args.infinity_venv), args.torch)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"could not install {INFINITY_REQUIREMENT}: {exc}") from exc
        command = [
            str(program),
            "v2",
            "--model-id",
            older_transformers_folder(folder, tmp),  # Infinity pins transformers 4
            "--served-model-name",
            args.model,
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--engine",
            "torch",
            "--device",
            "cpu",
            "--pooling-method",
            "mean",
            "--batch-size",
            "32",
            "--url-prefix",
            "/v1",
            "--dtype",
            "float32",
            "--no-bettertransformer",
            # its warm-up times batches at the model's 8192-token limit: minutes on a CPU, and it is
            # not needed (bench warms every server up with the same requests)
            "--no-model-warmup",
        ]
        ready = "/health"  # outside the url prefix
        env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    else:
        spec = ["--preset", args.preset] if args.preset else ["--recipe", "va"]
        if (
            system == "valuelens hs-final"
        ):  # mean of the last hidden state after the final norm: like Infinity
            spec = ["--recipe", "hs", "--layers", "last", "--final-norm", "--postprocess", "none"]
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
    server = Process(command, port, tmp / f"{system.replace(' ', '_')}.err", ready, env)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def drive(
    url: str,
    model: str,
    requests: list[list[str]],
    concurrency: int,
    path: str = "/v1/embeddings",
    seen: dict[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Send ``requests`` with ``concurrency`` in flight from one asyncio client (one process, one thread:
    the load generator takes little of the cores the server runs on, and says how much: ``client_cpu``,
    its CPU seconds per wall second); throughput, latency percentiles, failures, and mismatches (a text
    whose row disagrees with the row it got before, in this cell or, through ``seen``, an earlier one
    of the same server: a row given to the wrong request or place)."""
    return asyncio.run(_drive(url + path, model, requests, concurrency, {} if seen is None else seen))


async def _drive(
    endpoint: str, model: str, requests: list[list[str]], concurrency: int, rows: dict[str, np.ndarray]
) -> dict[str, Any]:
    import httpx
    import orjson

    pending = iter(requests)
    results: list[tuple[float, int, int]] = []
    mismatched = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def worker() -> None:
            nonlocal mismatched
            for texts in pending:  # one iterator shared by the workers of this one thread
                began = time.perf_counter()
                try:
                    response = await client.post(endpoint, json={"model": model, "input": texts})
                except httpx.HTTPError:
                    results.append((time.perf_counter() - began, 0, -1))
                    continue
                took = time.perf_counter() - began
                if response.status_code != 200:
                    results.append((took, 0, -1))
                    continue
                body = orjson.loads(response.content)
                data = sorted(body["data"], key=lambda d: d["index"])
                if len(data) != len(texts):
                    results.append((took, 0, -1))
                    continue
                for text, item in zip(texts, data, strict=True):
                    row = np.asarray(item["embedding"], dtype=np.float32)
                    row /= np.linalg.norm(row) or 1.0
                    seen = rows.setdefault(text, row)
                    mismatched += int(float(seen @ row) < 0.999)
                results.append((took, int(body.get("usage", {}).get("prompt_tokens", 0)), len(texts)))

        cpu = time.process_time()
        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - began
        cpu = time.process_time() - cpu
    latencies = np.array([r[0] for r in results]) * 1000
    ok = [r for r in results if r[2] >= 0]
    return {
        "seconds": wall,
        "texts_s": sum(r[2] for r in ok) / wall,
        "tokens_s": sum(r[1] for r in ok) / wall,
        "p50_ms": float(np.percentile(latencies, 50)),
        "p99_ms": float(np.percentile(latencies, 99)),
        "failed": len(results) - len(ok),
        "mismatched": mismatched,
        "client_cpu": cpu / wall,
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
    parser.add_argument(
        "--infinity-venv",
        default=str(Path(tempfile.gettempdir()) / "valuelens-bench-infinity"),
        help="Infinity's own virtual environment (created on first use, then reused)",
    )
    parser.add_argument("--torch", default="torch==2.13.0", help="the torch pin of that environment")
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
                seen: dict[str, np.ndarray] = {}  # every row this server gave, across its cells
                drive(server.url, args.model, loads["small"][:4], 2, seen=seen)  # warm-up
                for kind in WORKLOADS:
                    for level in levels:
                        row = {"system": system, "workload": kind, "concurrency": level}
                        row.update(drive(server.url, args.model, loads[kind], level, seen=seen))
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
        "| workload | concurrency | server | texts/s | tokens/s | p50 ms | p99 ms | × no-batching | × in-process | client CPU |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            error = row["error"].replace("|", "/")
            lines.append(f"| | | {row['system']} | failed to start: {error} | | | | | | |")
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
        share = f"{row['texts_s'] / top:.2f}" if top and row["system"] in SYSTEMS[:2] else ""
        failed = f" ({row['failed']} failed)" if row["failed"] else ""
        failed += f" ({row['mismatched']} mismatched)" if row.get("mismatched") else ""
        lines.append(
            f"| {row['workload']} | {row['concurrency']} | {row['system']}{failed} | {row['texts_s']:.1f} "
            f"| {row['tokens_s']:.0f} | {row['p50_ms']:.0f} | {row['p99_ms']:.0f} | {ratio} | {share} "
            f"| {row.get('client_cpu', float('nan')):.0%} |"
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
