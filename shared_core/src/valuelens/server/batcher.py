"""Batching across requests: a bounded queue and one worker thread that runs the encoder.

Each request is a :class:`Job` of texts (with their token counts). The worker takes what is queued,
waits at most ``max_wait_ms`` for more, then packs a batch round-robin across the queued jobs, one
slice (at most ``slice_size`` texts) per job and turn, up to ``max_batch_tokens`` tokens, so a huge
request does not starve small ones. It calls ``encode`` on the packed texts off the event loop and
scatters the rows back to each job; a job's future resolves once all its rows are in. With
``Limits(batching=False)`` (``--no-batching``) a batch holds one job's texts only and nothing waits.
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

__all__ = ["Batcher", "Job", "QueueFull", "Side"]

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
        self.next = 0  # the first text not yet packed
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

    def _pack(self) -> list[tuple[Job, int, int]]:
        """Round-robin slices ``(job, start, stop)`` of the oldest job's side up to the token budget (the
        lock is held)."""
        budget = self.limits.max_batch_tokens
        used = 0
        taken: list[tuple[Job, int, int]] = []
        for job in [j for j in self._jobs if j.abandoned]:
            self._jobs.remove(job)
            self._finish(job)
        side = self._jobs[0].side if self._jobs else None
        while self._jobs:
            progressed = False
            for job in list(self._jobs):
                if job.side != side:
                    continue
                start = stop = job.next
                limit = min(len(job.texts), start + self.limits.slice_size)
                while stop < limit and (used + job.tokens[stop] <= budget or used == 0):
                    used += max(job.tokens[stop], 1)
                    stop += 1
                if stop > start:
                    taken.append((job, start, stop))
                    job.next = stop
                    progressed = True
                if job.next >= len(job.texts):
                    self._jobs.remove(job)
                if used >= budget or (taken and not self.limits.batching):
                    return taken
            if not progressed:
                break
        return taken

    def _run(self) -> None:
        wait_s = self.limits.max_wait_ms / 1000 if self.limits.batching else 0.0
        while True:
            with self._lock:
                while not self._jobs and not self._closing:
                    self._lock.wait()
                if not self._jobs and self._closing:
                    return
                if wait_s > 0 and not self._closing:
                    deadline = time.monotonic() + wait_s
                    while (left := deadline - time.monotonic()) > 0 and not self._closing:
                        queued = sum(sum(j.tokens[j.next :]) for j in self._jobs)
                        if queued >= self.limits.max_batch_tokens:  # a full batch is there already
                            break
                        self._lock.wait(left)
                taken = self._pack()
            if taken:
                self._encode(taken)

    def _encode(self, taken: list[tuple[Job, int, int]]) -> None:
        texts = [t for job, start, stop in taken for t in job.texts[start:stop]]
        query = taken[0][0].side == "query"
        encode = self.encode_query if query and self.encode_query is not None else self.encode
        began = time.perf_counter()
        try:
            rows = np.asarray(encode(texts), dtype=np.float32)
        except Exception as exc:  # every job of the batch gets the error
            with self._lock:
                for job in {id(job): job for job, _, _ in taken}.values():
                    if job in self._jobs:
                        self._jobs.remove(job)
                    job.next = len(job.texts)
                    self._finish(job, error=exc)
            return
        if self.metrics is not None:
            self.metrics.encode_seconds.observe(time.perf_counter() - began)
            self.metrics.batch_texts.observe(len(texts))
            self.metrics.batch_requests.observe(len({id(job) for job, _, _ in taken}))
            self.metrics.batch_tokens.observe(sum(sum(job.tokens[a:b]) for job, a, b in taken))
            self.metrics.texts.inc(len(texts))
        offset = 0
        with self._lock:
            for job, start, stop in taken:
                n = stop - start
                if job.rows is None:
                    job.rows = np.empty((len(job.texts), rows.shape[1]), dtype=np.float32)
                job.rows[start:stop] = rows[offset : offset + n]
                offset += n
                job.done_rows += n
                if job.done_rows == len(job.texts):
                    self._finish(job, rows=job.rows)
