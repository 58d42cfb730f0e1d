"""A reusable conformance suite for LlamaIndex ``BaseEmbedding`` implementations.

LlamaIndex ships no standard test suite for embeddings; this one checks the contract its callers
rely on (indices, ingestion pipelines, retrievers, callbacks, serialization). Usage::

    from tests.llama_index.conformance import BaseEmbeddingConformance

    class TestMyEmbedding(BaseEmbeddingConformance):
        @pytest.fixture
        def embedding_factory(self):
            return lambda **fields: MyEmbedding(model="...", **fields)

``embedding_factory(**fields)`` must build the embedding under test with the given pydantic fields
overridden (``embed_batch_size``, ``num_workers``, ``callback_manager``, and, when
``instruction_fields`` is set, the two instruction fields). Share one loaded model between the
instances it returns: the suite builds many. Class attributes tune the suite (tolerances, whether
the model is instruction-aware, extra ``from_dict`` arguments). Standard tests must not be overridden
(:meth:`BaseEmbeddingConformance.test_no_standard_test_overridden` fails if one is); to skip or xfail
one, override it and decorate it with ``pytest.mark.xfail(reason=...)``/``skip(reason=...)``.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager, LlamaDebugHandler
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.embedding import EmbeddingEndEvent, EmbeddingStartEvent
from llama_index.core.schema import TextNode

__all__ = ["BaseEmbeddingConformance", "RecordingEventHandler"]

EmbeddingFactory = Callable[..., BaseEmbedding]


class RecordingEventHandler(BaseEventHandler):
    """Collects instrumentation events (thread-safe: async batches end in worker threads)."""

    events: list[Any]

    @classmethod
    def class_name(cls) -> str:
        return "RecordingEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        with _EVENTS_LOCK:
            self.events.append(event)


_EVENTS_LOCK = threading.Lock()


class BaseEmbeddingConformance:
    """The ``BaseEmbedding`` contract; subclass it and provide the ``embedding_factory`` fixture."""

    #: Short texts on distinct topics, embedded by most tests (keep them few: real models are slow).
    texts: ClassVar[tuple[str, ...]] = (
        "The cat sleeps on the warm windowsill.",
        "Stock prices fell sharply this morning.",
        "Add the flour and bake for twenty minutes.",
        "The rocket reached orbit after launch.",
        "A violin plays a slow melody.",
    )
    query: ClassVar[str] = "Where does the cat sleep?"
    #: Max absolute difference allowed between two computations of one vector (sync vs async,
    #: single vs batched: batch composition moves low-precision results a little).
    atol: ClassVar[float] = 1e-5
    #: Names of the (query, text) instruction fields, or None when the model takes no instructions.
    instruction_fields: ClassVar[tuple[str, str] | None] = ("query_instruction", "text_instruction")
    instruction: ClassVar[str] = "Represent this question for retrieving supporting documents: "
    #: Keyword arguments for ``from_dict`` in the round trip (empty: rebuild everything from the dict).
    from_dict_kwargs: ClassVar[dict[str, Any]] = {}

    # ------------------------------------------------------------------ fixtures
    @pytest.fixture
    def embedding_factory(self) -> EmbeddingFactory:
        msg = f"{type(self).__name__} must override the `embedding_factory` fixture"
        raise NotImplementedError(msg)

    @pytest.fixture
    def embedding(self, embedding_factory: EmbeddingFactory) -> BaseEmbedding:
        return embedding_factory()

    # ------------------------------------------------------------------ helpers
    def assert_close(self, a: Any, b: Any, what: str) -> None:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        assert a.shape == b.shape, f"{what}: shapes differ, {a.shape} vs {b.shape}"
        gap = float(np.max(np.abs(a - b))) if a.size else 0.0
        assert gap <= self.atol, f"{what}: max |difference| {gap:.3g} exceeds atol={self.atol:g}"

    def assert_vector(self, vector: Any, dimension: int | None = None) -> None:
        assert isinstance(vector, list), f"an embedding must be a list, got {type(vector).__name__}"
        assert vector, "an embedding must not be empty"
        assert all(type(x) is float for x in vector), "every component must be a Python float"
        assert all(math.isfinite(x) for x in vector), "every component must be finite"
        if dimension is not None:
            assert len(vector) == dimension

    # ------------------------------------------------------------------ the contract
    def test_is_base_embedding_with_stable_class_name(self, embedding: BaseEmbedding) -> None:
        assert isinstance(embedding, BaseEmbedding)
        name = type(embedding).class_name()
        assert isinstance(name, str) and name
        assert name not in ("base_component", "BaseEmbedding")
        assert embedding.class_name() == name

    def test_query_and_text_embeddings_are_float_lists_of_one_dimension(
        self, embedding: BaseEmbedding
    ) -> None:
        query = embedding.get_query_embedding(self.query)
        self.assert_vector(query)
        self.assert_vector(embedding.get_text_embedding(self.texts[0]), len(query))
        batch = embedding.get_text_embedding_batch(list(self.texts[:3]))
        assert len(batch) == 3
        for vector in batch:
            self.assert_vector(vector, len(query))
        self.assert_vector(embedding.get_query_embedding("A second, different query."), len(query))

    def test_batch_agrees_with_single_texts_across_batch_boundaries(
        self, embedding_factory: EmbeddingFactory
    ) -> None:
        embedding = embedding_factory(embed_batch_size=2)
        batch = embedding.get_text_embedding_batch(list(self.texts))
        assert len(batch) == len(self.texts)
        singles = [embedding.get_text_embedding(text) for text in self.texts]
        self.assert_close(batch, singles, "get_text_embedding_batch vs get_text_embedding")
        assert not np.allclose(batch[0], batch[1]), "different texts gave the same embedding"

    def test_async_agrees_with_sync(self, embedding: BaseEmbedding) -> None:
        async def run() -> tuple[Any, Any, Any]:
            return (
                await embedding.aget_query_embedding(self.query),
                await embedding.aget_text_embedding(self.texts[0]),
                await embedding.aget_text_embedding_batch(list(self.texts[:3])),
            )

        query, text, batch = asyncio.run(run())
        self.assert_close(query, embedding.get_query_embedding(self.query), "aget_query_embedding")
        self.assert_close(text, embedding.get_text_embedding(self.texts[0]), "aget_text_embedding")
        self.assert_close(
            batch, embedding.get_text_embedding_batch(list(self.texts[:3])), "aget_text_embedding_batch"
        )

    def test_async_batch_with_workers_matches_sequential(self, embedding_factory: EmbeddingFactory) -> None:
        embedding = embedding_factory(embed_batch_size=1, num_workers=3)
        texts = list(self.texts)
        concurrent = asyncio.run(embedding.aget_text_embedding_batch(texts, show_progress=False))
        sequential = embedding.get_text_embedding_batch(texts)
        self.assert_close(concurrent, sequential, "aget_text_embedding_batch(num_workers=3) vs sequential")
        with_progress = asyncio.run(embedding.aget_text_embedding_batch(texts[:2], show_progress=True))
        self.assert_close(with_progress, sequential[:2], "aget_text_embedding_batch(show_progress=True)")

    def test_instructions_separate_queries_from_texts(self, embedding_factory: EmbeddingFactory) -> None:
        if self.instruction_fields is None:
            pytest.skip("the embedding under test takes no instructions")
        query_field, text_field = self.instruction_fields
        sentence = self.texts[0]
        plain = embedding_factory()
        self.assert_close(
            plain.get_query_embedding(sentence),
            plain.get_text_embedding(sentence),
            "no instructions: query vs text",
        )
        instructed = embedding_factory(**{query_field: self.instruction})
        as_query = instructed.get_query_embedding(sentence)
        as_text = instructed.get_text_embedding(sentence)
        assert not np.allclose(as_query, as_text, atol=self.atol), (
            "a query instruction did not change the query"
        )
        self.assert_close(
            as_text, plain.get_text_embedding(sentence), "a query instruction changed the text side"
        )
        both = embedding_factory(**{query_field: self.instruction, text_field: self.instruction})
        self.assert_close(
            both.get_query_embedding(sentence),
            both.get_text_embedding(sentence),
            "equal instructions: query vs text",
        )
        self.assert_close(both.get_text_embedding(sentence), as_query, "the same instruction on either side")

    def test_callback_events_cover_every_chunk(self, embedding_factory: EmbeddingFactory) -> None:
        handler = LlamaDebugHandler(print_trace_on_end=False)
        embedding = embedding_factory(callback_manager=CallbackManager([handler]), embed_batch_size=2)
        texts = list(self.texts)
        expected = [texts[i : i + 2] for i in range(0, len(texts), 2)]

        embedding.get_text_embedding_batch(texts)
        self._assert_chunks(handler, expected, "get_text_embedding_batch")
        handler.flush_event_logs()

        asyncio.run(embedding.aget_text_embedding_batch(texts))
        self._assert_chunks(handler, expected, "aget_text_embedding_batch")
        handler.flush_event_logs()

        embedding.get_query_embedding(self.query)
        embedding.get_text_embedding(texts[0])
        self._assert_chunks(handler, [[self.query], [texts[0]]], "get_query_embedding + get_text_embedding")

    def _assert_chunks(self, handler: LlamaDebugHandler, expected: list[list[str]], what: str) -> None:
        pairs = handler.get_event_pairs(CBEventType.EMBEDDING)
        assert len(pairs) == len(expected), f"{what}: {len(pairs)} EMBEDDING events, expected {len(expected)}"
        for (start, end), chunks in zip(pairs, expected, strict=True):
            assert start.id_ == end.id_
            assert end.payload is not None
            assert end.payload[EventPayload.CHUNKS] == chunks
            assert len(end.payload[EventPayload.EMBEDDINGS]) == len(chunks)

    def test_instrumentation_events(self, embedding_factory: EmbeddingFactory) -> None:
        embedding = embedding_factory(embed_batch_size=2)
        dispatcher = get_dispatcher()  # the root: events of every module propagate to it
        handler = RecordingEventHandler(events=[])
        dispatcher.add_event_handler(handler)
        try:
            embedding.get_text_embedding_batch(list(self.texts[:3]))
            asyncio.run(embedding.aget_query_embedding(self.query))
        finally:
            dispatcher.event_handlers.remove(handler)
        starts = [e for e in handler.events if isinstance(e, EmbeddingStartEvent)]
        ends = [e for e in handler.events if isinstance(e, EmbeddingEndEvent)]
        assert len(starts) == len(ends) == 3
        assert [e.chunks for e in ends] == [list(self.texts[:2]), [self.texts[2]], [self.query]]
        assert all(len(e.embeddings) == len(e.chunks) for e in ends)
        assert all(s.model_dict.get("class_name") == embedding.class_name() for s in starts)

    def test_serialization_round_trip(self, embedding: BaseEmbedding) -> None:
        data = embedding.to_dict()
        assert data["class_name"] == embedding.class_name()
        text = embedding.to_json()
        assert json.loads(text) == data
        assert len(text) < 20_000, "to_json() is suspiciously large: is the model being serialized?"
        restored = type(embedding).from_dict(data, **self.from_dict_kwargs)
        assert type(restored) is type(embedding)
        assert restored.to_dict() == data
        assert type(embedding).from_json(text, **self.from_dict_kwargs).to_dict() == data
        self.assert_close(
            restored.get_text_embedding(self.texts[0]),
            embedding.get_text_embedding(self.texts[0]),
            "after from_dict",
        )

    def test_transform_component_sets_node_embeddings(self, embedding: BaseEmbedding) -> None:
        nodes = [TextNode(text=text) for text in self.texts[:2]]
        out = embedding(nodes)
        assert [node.embedding for node in out] == embedding.get_text_embedding_batch(list(self.texts[:2]))

    def test_empty_batch_gives_empty_list(self, embedding: BaseEmbedding) -> None:
        assert embedding.get_text_embedding_batch([]) == []
        assert asyncio.run(embedding.aget_text_embedding_batch([])) == []
        assert embedding([]) == []

    @pytest.mark.parametrize("bad", [None, 42, b"bytes", ["a list"]], ids=["None", "int", "bytes", "list"])
    def test_bad_input_raises_and_leaves_the_model_usable(self, embedding: BaseEmbedding, bad: Any) -> None:
        before = embedding.get_text_embedding(self.texts[0])
        with pytest.raises((TypeError, ValueError)):
            embedding.get_query_embedding(bad)
        with pytest.raises((TypeError, ValueError)):
            embedding.get_text_embedding(bad)
        with pytest.raises((TypeError, ValueError)):
            embedding.get_text_embedding_batch([self.texts[0], bad])
        with pytest.raises((TypeError, ValueError)):
            asyncio.run(embedding.aget_text_embedding_batch([self.texts[0], bad]))
        with pytest.raises((TypeError, ValueError)):
            asyncio.run(embedding.aget_query_embedding(bad))
        self.assert_close(embedding.get_text_embedding(self.texts[0]), before, "after a bad input")

    def test_no_standard_test_overridden(self) -> None:
        """Guard: a subclass may only replace a standard test to mark it xfail/skip, with a reason."""
        for name in dir(BaseEmbeddingConformance):
            if not name.startswith("test_"):
                continue
            mine = getattr(type(self), name)
            if mine is getattr(BaseEmbeddingConformance, name):
                continue
            marks = [m for m in getattr(mine, "pytestmark", []) if m.name in ("xfail", "skip")]
            assert marks and all(m.kwargs.get("reason") for m in marks), (
                f"{type(self).__name__}.{name} overrides a standard test without an xfail/skip reason"
            )
