"""Concurrency: threads and asyncio tasks share one model and get what sequential encoding gives.

The capture keeps its state in a ``ContextVar`` (valuelens.capture): hooks installed for one caller
pass every other caller's forward through untouched. The last tests prove it by running a plain
``model(...)`` in another thread *inside* a capture (from a hook, mid-forward) and checking both.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from reliability.support import Surface, hook_count
from tiny_models import CORPUS
from valuelens import Encoder
from valuelens.capture import is_instrumented, start_capture

TEXTS = [f"{CORPUS[i % len(CORPUS)]} ({i})" for i in range(48)]
JOBS = [TEXTS[i : i + 6] for i in range(0, len(TEXTS), 6)]  # 8 calls of 6 texts


def test_eight_threads_share_one_model(surface: Surface):
    expected = [surface.embed(job) for job in JOBS]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(3):
            results = list(pool.map(surface.embed, JOBS))
            for got, want in zip(results, expected, strict=True):
                np.testing.assert_allclose(got, want, atol=1e-5)
    assert surface.clean()


def test_thirty_two_asyncio_tasks(async_surface: Surface):
    surface = async_surface
    assert surface.aembed is not None and surface.aembed_one is not None
    docs = [surface.embed(job) for job in JOBS]
    queries = [surface.embed_one(text) for text in TEXTS[:16]]

    async def main():
        tasks = [surface.aembed(job) for job in JOBS] * 2 + [surface.aembed_one(t) for t in TEXTS[:16]]
        assert len(tasks) == 32
        return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    for got, want in zip(results, docs * 2 + queries, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert surface.clean()


def _plain_logits(model, ids):
    with torch.inference_mode():
        return model(**ids).last_hidden_state


def test_plain_forward_from_another_thread_mid_capture(encoder, tiny_tokenizer):
    """A hook on layer 1 runs a whole plain forward in another thread while the capture is mid-forward:
    that forward is not captured nor altered, and the capture's own vectors are not either."""
    model = encoder.model
    ids = tiny_tokenizer(CORPUS[:3], padding=True, return_tensors="pt")
    want_plain = _plain_logits(model, ids)
    want_vectors = encoder.encode(CORPUS, batch_size=2)
    seen: dict[str, object] = {}

    def other_caller():
        seen["instrumented"] = is_instrumented(model)
        seen["plain"] = _plain_logits(model, ids)

    caller = threading.get_ident()

    def interleave(module, args):  # runs in the other thread's forward too: spawn only once, from here
        if threading.get_ident() == caller and "spawned" not in seen:
            seen["spawned"] = True
            thread = threading.Thread(target=other_caller)
            thread.start()
            thread.join(timeout=60)

    probe = encoder.parts.layers[1].register_forward_pre_hook(interleave)
    try:
        got_vectors = encoder.encode(CORPUS, batch_size=2)
    finally:
        probe.remove()
    assert seen["instrumented"] is True  # the hooks were on the model while the other thread ran
    torch.testing.assert_close(seen["plain"], want_plain, atol=0, rtol=0)
    np.testing.assert_array_equal(got_vectors, want_vectors)
    assert hook_count(model) == 0 and not is_instrumented(model)


def test_capture_state_is_per_context(encoder, tiny_tokenizer):
    """An open capture in this thread records nothing from another thread's forward (ContextVar)."""
    model = encoder.model
    batch = encoder.reader.collate(encoder.reader.tokenize(CORPUS[:2])[0])
    inputs = encoder.runner.model_inputs(batch, encoder.device)
    mask = inputs["attention_mask"]
    handle = start_capture(
        encoder.parts,
        [encoder.readout.plan],
        attention_mask=mask,
        weights={"mean": mask.float()},
        stop_early=False,
    )
    try:
        thread = threading.Thread(target=lambda: _plain_logits(model, inputs))
        thread.start()
        thread.join(timeout=60)
        assert handle.session.captures[0]._vectors == {}  # the other thread's forward left no trace
        with torch.inference_mode():
            model(**inputs)  # this context's forward is captured
        assert len(handle.session.captures[0].layer_vectors()) == len(encoder.layers)
    finally:
        handle.close()
    assert hook_count(model) == 0 and not is_instrumented(model)


@pytest.mark.parametrize("recipe", ["wva-lt", "aligned-wva", "hs"])
def test_threads_with_different_recipes_on_one_model(encoder, recipe):
    """Two encoders over one model capture different signals at the same time without mixing them."""
    other = Encoder(encoder.model, encoder.tokenizer, recipe=recipe, layers="all")
    want = {"va": encoder.encode(TEXTS, batch_size=4), recipe: other.encode(TEXTS, batch_size=4)}
    jobs = [("va", encoder), (recipe, other)] * 8
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [(name, pool.submit(enc.encode, TEXTS, 4)) for name, enc in jobs]
        for name, future in futures:
            np.testing.assert_allclose(future.result(), want[name], atol=1e-5)
    assert hook_count(encoder.model) == 0
