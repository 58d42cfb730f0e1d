"""The server's limits and batching settings (one frozen dataclass, built from the command's flags)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """What one server accepts and how it batches.

    ``max_input_tokens=None`` means the encoder's ``max_length``."""

    max_batch_tokens: int = 4096
    """Token budget of one packed batch (tokens counted with the model's tokenizer)."""
    max_wait_ms: float = 5.0
    """How long the worker waits for more requests before it runs a batch."""
    max_queue: int = 256
    """Requests accepted and not finished; one more is refused with 503 and ``Retry-After``."""
    max_inputs: int = 2048
    """Inputs per request (OpenAI's limit)."""
    max_input_tokens: int | None = None
    """Tokens per input; a longer one is a 400 unless ``truncate``."""
    truncate: bool = False
    """Cut inputs over ``max_input_tokens`` instead of refusing them (header ``X-Truncated-Inputs``)."""
    max_body_bytes: int = 16 * 1024 * 1024
    """Request body size; a larger one is a 413."""
    request_timeout: float = 60.0
    """Seconds one request may wait and run; then a 504."""
    allow_token_ids: bool = False
    """Accept token arrays as input (decoded with the model's tokenizer)."""
    slice_size: int = 32
    """Texts a request contributes to a batch per round-robin turn (a huge request does not starve small ones)."""
    retry_after_s: int = 1
    """The ``Retry-After`` of a 503."""
    batching: bool = True
    """Pack texts of several requests into one batch; ``False``: one request per batch, no waiting
    (``--no-batching``, the baseline of ``bench/serve.py``)."""

    def __post_init__(self) -> None:
        positive = {
            "max_batch_tokens": self.max_batch_tokens,
            "max_queue": self.max_queue,
            "max_inputs": self.max_inputs,
            "max_body_bytes": self.max_body_bytes,
            "slice_size": self.slice_size,
        }
        if self.max_input_tokens is not None:
            positive["max_input_tokens"] = self.max_input_tokens
        for name, value in positive.items():
            if value < 1:
                msg = f"{name} must be at least 1, got {value}"
                raise ValueError(msg)
        if self.max_wait_ms < 0:
            msg = f"max_wait_ms must be >= 0, got {self.max_wait_ms}"
            raise ValueError(msg)
        if self.request_timeout <= 0:
            msg = f"request_timeout must be > 0, got {self.request_timeout}"
            raise ValueError(msg)
