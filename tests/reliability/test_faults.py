"""Faults injected inside the model: an exception, a KeyboardInterrupt, an out-of-memory error.

Each is raised by a forward hook on a decoder layer (CPU; no real memory is exhausted). Afterwards
the model has no valuelens hook left, no capture is active, and it embeds as before. An OOM batch is
split in halves down to one text (``Encoder._embed_chunk``); a text that does not fit on its own
raises :class:`valuelens.batching.EncodeOutOfMemoryError` naming its index and length in tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest
import torch

from reliability.support import Surface, hook_count
from tiny_models import CORPUS
from valuelens.batching import EncodeOutOfMemoryError
from valuelens.capture import is_instrumented

TEXTS = [f"{CORPUS[i % len(CORPUS)]} #{i}" for i in range(40)]  # two batches of 32 (default)


class Injector:
    """A pre-hook on one decoder layer that calls ``fault(input_ids_shape, call)`` on each forward."""

    def __init__(self, layer: torch.nn.Module, fault: Callable[[torch.Size, int], None]) -> None:
        self.calls = 0
        self.faults = 0
        self._fault = fault
        self._handle = layer.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        self.calls += 1
        try:
            self._fault(args[0].shape, self.calls)
        except BaseException:
            self.faults += 1
            raise

    def remove(self) -> None:
        self._handle.remove()


def _layer(surface: Surface) -> torch.nn.Module:
    return surface.backbone.layers[1]


def _on_second_batch(error: BaseException) -> Callable[[torch.Size, int], None]:
    def fault(shape, call):
        if call == 2:
            raise error

    return fault


@pytest.mark.parametrize(
    "error", [RuntimeError("injected failure"), KeyboardInterrupt()], ids=["exception", "keyboard-interrupt"]
)
def test_fault_mid_batch_leaves_the_model_usable(surface: Surface, error):
    want = surface.embed(TEXTS)
    injector = Injector(_layer(surface), _on_second_batch(error))
    try:
        with pytest.raises(type(error)):
            surface.embed(TEXTS)
    finally:
        injector.remove()
    assert injector.faults == 1 and injector.calls == 2
    assert surface.clean()
    np.testing.assert_array_equal(surface.embed(TEXTS), want)


def test_fault_in_async_call(async_surface: Surface):
    surface = async_surface
    assert surface.aembed is not None

    injector = Injector(_layer(surface), _on_second_batch(RuntimeError("injected failure")))
    try:
        with pytest.raises(RuntimeError, match="injected"):
            asyncio.run(surface.aembed(TEXTS))
    finally:
        injector.remove()
    assert surface.clean()


def _oom_above(rows: int, tokens: int | None = None) -> Callable[[torch.Size, int], None]:
    def fault(shape, call):
        if shape[0] > rows or (tokens is not None and shape[0] * shape[1] > tokens):
            raise torch.OutOfMemoryError(f"injected: batch of {shape[0]} x {shape[1]} tokens")

    return fault


@pytest.mark.parametrize("limit", [1, 3, 5])
def test_oom_batches_are_split_in_halves(encoder, limit):
    want = encoder.encode(TEXTS, batch_size=16)
    injector = Injector(encoder.parts.layers[1], _oom_above(limit))
    try:
        got = encoder.encode(TEXTS, batch_size=16)
    finally:
        injector.remove()
    assert injector.faults > 0
    np.testing.assert_allclose(got, want, atol=1e-5)  # smaller batches: less padding, same vectors
    assert hook_count(encoder.model) == 0 and not is_instrumented(encoder.model)


def test_oom_on_one_text_names_its_index_and_length(encoder):
    long_text = "the cat sat on the mat and then it ran into the park " * 6
    texts = [*TEXTS[:10], long_text, *TEXTS[10:]]
    n_tokens = len(encoder.reader.tokenize([long_text])[0][0].ids)
    injector = Injector(encoder.parts.layers[1], _oom_above(8, tokens=n_tokens - 1))
    try:
        with pytest.raises(
            EncodeOutOfMemoryError, match=rf"texts\[10\] on its own \({n_tokens} tokens"
        ) as info:
            encoder.encode(texts, batch_size=8)
    finally:
        injector.remove()
    assert isinstance(info.value, torch.OutOfMemoryError)  # existing handlers still catch it
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)
    assert hook_count(encoder.model) == 0 and not is_instrumented(encoder.model)
    assert np.isfinite(encoder.encode(TEXTS)).all()  # still usable


def test_oom_retry_through_the_adapters(surface: Surface):
    """LangChain and LlamaIndex go through ``Encoder.encode`` and retry; sentence-transformers runs its
    own batching loop, so the OOM reaches the caller (hooks removed, model usable)."""
    want = surface.embed(TEXTS)
    injector = Injector(_layer(surface), _oom_above(2))
    try:
        if surface.name == "sentence-transformers":
            with pytest.raises(torch.OutOfMemoryError):
                surface.embed(TEXTS)
        else:
            np.testing.assert_allclose(surface.embed(TEXTS), want, atol=1e-5)
    finally:
        injector.remove()
    assert injector.faults > 0 and surface.clean()
    np.testing.assert_allclose(surface.embed(TEXTS), want, atol=1e-6)


def test_oom_retry_with_several_passes(tiny_llama, tiny_tokenizer):
    """MetaEOL runs eight prompt passes: each pass retries on its own, the average is unchanged."""
    from valuelens import Encoder

    enc = Encoder(tiny_llama, tiny_tokenizer, recipe="last-token", prompt="metaeol", layers="all")
    want = enc.encode(TEXTS[:6], batch_size=6)
    injector = Injector(enc.parts.layers[1], _oom_above(2))
    try:
        got = enc.encode(TEXTS[:6], batch_size=6)
    finally:
        injector.remove()
    assert injector.faults >= 8
    np.testing.assert_allclose(got, want, atol=1e-5)
