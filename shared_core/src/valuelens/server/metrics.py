"""Prometheus metrics of one server (their own registry, so several apps can live in one process)."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST as CONTENT_TYPE,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["CONTENT_TYPE", "Metrics"]

_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
_TOKENS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 65536)
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The counters, gauges and histograms ``/metrics`` shows."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "valuelens_requests", "HTTP requests by route and status.", ["route", "status"], registry=r
        )
        self.errors = Counter(
            "valuelens_errors", "Error responses by kind (the error code).", ["kind"], registry=r
        )
        self.latency = Histogram(
            "valuelens_request_seconds", "Request latency by route.", ["route"], buckets=_SECONDS, registry=r
        )
        self.batch_texts = Histogram(
            "valuelens_batch_texts", "Texts per encoded batch.", buckets=_SIZES, registry=r
        )
        self.batch_requests = Histogram(
            "valuelens_batch_requests",
            "Requests with texts in one encoded batch.",
            buckets=_SIZES,
            registry=r,
        )
        self.batch_tokens = Histogram(
            "valuelens_batch_tokens", "Tokens per encoded batch.", buckets=_TOKENS, registry=r
        )
        self.encode_seconds = Histogram(
            "valuelens_encode_seconds", "Time of one encoder.encode call.", buckets=_SECONDS, registry=r
        )
        self.queue_depth = Gauge("valuelens_queue_depth", "Requests accepted and not finished.", registry=r)
        self.texts = Counter("valuelens_texts", "Texts embedded.", registry=r)
        self.truncated = Counter("valuelens_truncated_inputs", "Inputs cut to max-input-tokens.", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
