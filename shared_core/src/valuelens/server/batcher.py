"""Batching across requests: a bounded queue and one worker thread that runs the encoder.

Each request is a :class:`Job` of texts (with their token counts). The worker takes what is queued
and packs a batch by length (:func:`pack`): a forward pass pads every text to the batch's longest, so a
batch is cut by its padded size (texts × longest ≤ ``max_batch_tokens``), anchored on the oldest job's
next text (nothing starves) and filled with the queued texts closest to it in length, in round-robin
order across jobs (at most ``slice_size`` texts per job and turn, so a huge request does not crowd out
small ones): a short text never pads to an abstract. The wait is adaptive: with one job queued the worker
starts at once; with several, it waits up to ``max_wait_ms`` for more while the queue holds less than a
batch. It calls ``encode`` on the packed texts off the event loop and scatters the rows back to each
job; a job's future resolves once all its rows are in. With ``Limits(batching=False)``
(``--no-batching``) a batch holds one job's texts only and nothing waits.
A job is a query job or a document job (the request's ``input_type``); a batch holds one side only and
goes to ``encode_query`` or ``encode``.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Literal

import numpy as np

from valuelens.server.limits import Limits
from valuelens.server.metrics import Metrics

__all__ = ["Batcher", "Job", "QueueFull", "Side", "pack"]

#: The longest text of a batch is at most this many times its shortest. On a CPU a forward call's own
#: cost is worth padding a few short texts for (2 lost to an extra call on mixed requests in
#: bench/serve.py; 4 kept batching at or above one forward per request); a one-line query still never
#: pads to an abstract.
MAX_PADDING = 4.0
#: What a job's texts are: search queries or the documents searched.
Side = Literal["query", "document"]


class QueueFull(Exception):
    """The queue holds ``max_queue`` unfinished requests already."""


class Job:
    """One request's texts (search queries or documents), its rows as they arrive and its future
    (``[n, dim]`` float32)."""

    def __init__(self, texts: Sequence[str], tokens: Sequence[int], side: Side = "document") -> None:
        self.texts = list(texts)
        self.side: Side = side
        self.tokens = list(tokens)
        self.future: Future[np.ndarray] = Future()
        self.pending = list(range(len(self.texts)))  # the texts not yet packed, in order
        self.done_rows = 0
        self.rows: np.ndarray | None = None
        self.abandoned = False
        self.finished = False

    def abandon(self) -> None:
        """Stop packing this job's texts (its caller gave up, e.g. on a timeout)."""
        self.abandoned = True
        self.future.cancel()


class Batcher:
    """Runs ``encode(texts) -> [n, dim]`` (``encode_query`` for query jobs, when given) on one worker
    thread for every submitted job."""

    def __init__(
        self,
        encode: Callable[[list[str]], np.ndarray],
        limits: Limits,
        metrics: Metrics | None = None,
        *,
        encode_query: Callable[[list[str]], np.ndarray] | None = None,
    ) -> None:
        self.encode = encode
        self.encode_query = encode_query
        self.limits = limits
        self.metrics = metrics
        self._jobs: collections.deque[Job] = collections.deque()
        self._open = 0  # accepted and unfinished jobs
        self._lock = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="valuelens-batcher", daemon=True)

    # ------------------------------------------------------------------ the callers' side
    def start(self) -> None:
        self._thread.start()

    def submit(self, texts: Sequence[str], tokens: Sequence[int], side: Side = "document") -> Job:
        """Queue a job; raises :class:`QueueFull` (or ``RuntimeError`` once closing)."""
        job = Job(texts, tokens, side)
        with self._lock:
            if self._closing:
                msg = "the server is shutting down"
                raise RuntimeError(msg)
            if self._open >= self.limits.max_queue:
                raise QueueFull(f"the request queue is full ({self.limits.max_queue} requests)")
            self._open += 1
            self._gauge()
            if not job.texts:
                self._finish(job, np.zeros((0, 0), dtype=np.float32))
            else:
                self._jobs.append(job)
                self._lock.notify_all()
        return job

    def close(self, timeout: float | None = None) -> None:
        """Finish the queued jobs, then stop the worker."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def depth(self) -> int:
        return self._open

    # ------------------------------------------------------------------ the worker
    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth.set(self._open)

    def _finish(self, job: Job, rows: np.ndarray | None = None, error: BaseException | None = None) -> None:
        """Resolve ``job`` once (the lock is held; a failed batch may hold several slices of it)."""
        if job.finished:
            return
        job.finished = True
        self._open -= 1
        self._gauge()
        if job.future.done():  # cancelled by its caller
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            assert rows is not None
            job.future.set_result(rows)

    def _pack(self) -> list[tuple[Job, list[int]]]:
        """The next batch: :func:`pack` over the oldest job's side (one job's texts without batching);
        the lock is held."""
        for job in [j for j in self._jobs if j.abandoned]:
            self._jobs.remove(job)
            self._finish(job)
        if not self._jobs:
            return []
        side = self._jobs[0].side
        jobs = [j for j in self._jobs if j.side == side] if self.limits.batching else [self._jobs[0]]
        taken = pack(jobs, self.limits.max_batch_tokens, self.limits.slice_size)
        for job, indices in taken:
            chosen = set(indices)
            job.pending = [i for i in job.pending if i not in chosen]
            if not job.pending:
                self._jobs.remove(job)
        return taken

    def _run(self) -> None:
        wait_s = self.limits.max_wait_ms / 1000 if self.limits.batching else 0.0
        while True:
            with self._lock:
                while not self._jobs and not self._closing:
                    self._lock.wait()
                if not self._jobs and self._closing:
                    return
                if wait_s > 0 and not self._closing and len(self._jobs) > 1:  # alone: no wait
                    deadline = time.monotonic() + wait_s
                    while (left := deadline - time.monotonic()) > 0 and not self._closing:
                        queued = sum(j.tokens[i] for j in self._jobs for i in j.pending)
                        if queued >= self.limits.max_batch_tokens:  # a full batch is there already
                            break
                        self._lock.wait(left)
                taken = self._pack()
            if taken:
                self._encode(taken)

    def _encode(self, taken: list[tuple[Job, list[int]]]) -> None:
        texts = [job.texts[i] for job, indices in taken for i in indices]
        query = taken[0][0].side == "query"
        encode = self.encode_query if query and self.encode_query is not None else self.encode
        began = time.perf_counter()
        try:
            rows = np.asarray(encode(texts), dtype=np.float32)
        except Exception as exc:  # every job of the batch gets the error
            with self._lock:
                for job in {id(job): job for job, _ in taken}.values():
                    if job in self._jobs:
                        self._jobs.remove(job)
                    job.pending = []
                    self._finish(job, error=exc)
            return
        if self.metrics is not None:
            self.metrics.encode_seconds.observe(time.perf_counter() - began)
            self.metrics.batch_texts.observe(len(texts))
            self.metrics.batch_requests.observe(len({id(job) for job, _ in taken}))
            self.metrics.batch_tokens.observe(sum(job.tokens[i] for job, indices in taken for i in indices))
            self.metrics.texts.inc(len(texts))
        offset = 0
        with self._lock:
            for job, indices in taken:
                n = len(indices)
                if job.rows is None:
                    job.rows = np.empty((len(job.texts), rows.shape[1]), dtype=np.float32)
                job.rows[indices] = rows[offset : offset + n]
                offset += n
                job.done_rows += n
                if job.done_rows == len(job.texts):
                    self._finish(job, rows=job.rows)


def pack(jobs: Sequence[Job], budget: int, slice_size: int) -> list[tuple[Job, list[int]]]:
    """One batch from ``jobs`` (oldest first), as ``(job, indices)``: the first job's next pending text
    anchors it; the others join in order of how close their token count is to the anchor's (ties: in
    round-robin order, ``slice_size`` texts per job and turn) while the padded size, texts × longest,
    stays within ``budget`` and the longest is at most :data:`MAX_PADDING` times the shortest (a short
    text waits for a batch of its length rather than pad to a long one; a lone text longer than the
    budget makes a batch of its own).

    Usage: ``pack(queued_jobs, limits.max_batch_tokens, limits.slice_size)``."""
    order: list[tuple[Job, int]] = []  # round-robin: each job's next slice, turn after turn
    turn = 0
    while True:
        added = False
        for job in jobs:
            part = job.pending[turn * slice_size : (turn + 1) * slice_size]
            order += [(job, i) for i in part]
            added = added or bool(part)
        if not added:
            break
        turn += 1
    if not order:
        return []
    anchor_job, anchor = order[0]
    anchor_tokens = max(anchor_job.tokens[anchor], 1)
    closest = sorted(
        range(len(order)), key=lambda n: abs(max(order[n][0].tokens[order[n][1]], 1) - anchor_tokens)
    )
    chosen: dict[int, list[int]] = {}
    by_id: dict[int, Job] = {}
    count, longest, shortest = 0, 0, anchor_tokens
    for n in closest:
        job, i = order[n]
        tokens = max(job.tokens[i], 1)
        wider, narrower = max(longest, tokens), min(shortest, tokens)
        if count and ((count + 1) * wider > budget or wider > MAX_PADDING * narrower):
            continue
        chosen.setdefault(id(job), []).append(i)
        by_id[id(job)] = job
        count, longest, shortest = count + 1, wider, narrower
    return [(by_id[key], sorted(indices)) for key, indices in chosen.items()]
