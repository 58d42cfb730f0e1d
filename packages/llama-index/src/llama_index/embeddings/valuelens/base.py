"""``ValueLensEmbedding``: valuelens sentence embeddings as a LlamaIndex ``BaseEmbedding``.

Usage::

    from llama_index.core import Document, VectorStoreIndex
    from llama_index.embeddings.valuelens import ValueLensEmbedding

    embed_model = ValueLensEmbedding(model_name="smollm2-135m", recipe="aligned-wva", prompt="futureeol")
    index = VectorStoreIndex.from_documents([Document(text="...")], embed_model=embed_model)

The adapter only translates: texts (with the optional query / text instruction prepended) go to one
shared :class:`valuelens.Encoder`, vectors come back as lists of Python floats.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr

from valuelens import Encoder, check_texts
from valuelens.models import DEFAULT_MODEL
from valuelens.settings import EncoderSettings, load_encoder, prepare_fields

__all__ = ["DEFAULT_EMBED_BATCH_SIZE", "ValueLensEmbedding"]

#: Texts per LlamaIndex batch (one callback event). Larger than a forward pass: valuelens sorts each
#: batch by length and packs it into forward passes by its token budget, which works best on many texts.
DEFAULT_EMBED_BATCH_SIZE = 256
#: Texts per forward pass at most; ``Encoder.encode``'s default.
DEFAULT_BATCH_SIZE = 32

T = TypeVar("T")


class ValueLensEmbedding(BaseEmbedding, EncoderSettings):
    """Training-free sentence embeddings from a decoder LLM (valuelens) for LlamaIndex.

    Usage::

        embed_model = ValueLensEmbedding()                           # embedded default model, recipe "va"
        embed_model = ValueLensEmbedding("smollm2-135m", recipe="aligned-wva", prompt="futureeol")
        embed_model = ValueLensEmbedding(encoder=valuelens.Encoder.from_pretrained(), normalize=False)
        Settings.embed_model = embed_model

    The fields that define the embedding (``recipe``, ``layers``, ``prompt``, ... ``drop_prefix``, and
    ``preset``) and the load options (``device``, ``dtype``) are those of :class:`valuelens.EncoderConfig`,
    shared with the other valuelens adapters and listed once in ``docs/fields.md``; they are frozen.
    Vectors are unit length (``normalize=True``, the default, as in LlamaIndex's ``HuggingFaceEmbedding``).

    ``query_instruction`` / ``text_instruction`` are prepended verbatim (no separator is added) to
    queries / documents *before* the valuelens prompt template is applied, so with
    ``prompt="prompteol"`` the model reads ``This sentence: "<instruction><text>" means in one word:"``.

    Passing ``encoder=`` shares an already loaded :class:`valuelens.Encoder` (one model in memory for
    several instances); the encoder-defining fields are then read from it, and passing a different
    value for one of them raises :class:`valuelens.ConfigError`.

    Async methods run the forward passes in worker threads; at most ``max(1, num_workers)`` of them
    run at once per instance, all on the same model.
    """

    model_config = ConfigDict(extra="forbid")

    model_name: str = Field(
        default=DEFAULT_MODEL,
        frozen=True,
        description=(
            "A model provisioned by valuelens (e.g. 'smollm2-135m', 'gemma3-270m', 'qwen2.5-coder-0.5b'), "
            "a local folder with a transformers checkpoint, or a hub id (which needs network access)."
        ),
    )
    query_instruction: str | None = Field(
        default=None,
        description="Prepended verbatim to every query before the prompt template (no separator added).",
    )
    text_instruction: str | None = Field(
        default=None,
        description="Prepended verbatim to every document text before the prompt template (no separator added).",
    )
    normalize: bool = Field(default=True, description="L2-normalise the embeddings.")
    embed_batch_size: int = Field(
        default=DEFAULT_EMBED_BATCH_SIZE,
        gt=0,
        le=2048,
        description=(
            "Texts per LlamaIndex batch (one callback event); valuelens sorts each batch by length and "
            "cuts it into forward passes of at most batch_size texts under its token budget."
        ),
    )
    batch_size: int = Field(
        default=DEFAULT_BATCH_SIZE,
        gt=0,
        description="Texts per forward pass at most (the token budget makes batches of long texts smaller).",
    )

    _encoder: Encoder = PrivateAttr()
    _slots: threading.BoundedSemaphore | None = PrivateAttr(default=None)
    _slots_size: int = PrivateAttr(default=0)
    _slots_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(
        self, model_name: str | None = None, *, encoder: Encoder | None = None, **fields: Any
    ) -> None:
        if encoder is not None and not isinstance(encoder, Encoder):
            msg = f"encoder must be a valuelens.Encoder, got {type(encoder).__name__}"
            raise TypeError(msg)
        if model_name is None:
            model_name = DEFAULT_MODEL if encoder is None else (encoder.name_or_path or "unknown")
        fields, config = prepare_fields(
            type(self), {**fields, "model_name": model_name}, encoder=encoder, model=model_name
        )
        super().__init__(**fields)
        if encoder is None:
            encoder = load_encoder(self.model_name, config, device=self.device, dtype=self.dtype)
        self._encoder = encoder

    @classmethod
    def class_name(cls) -> str:
        return "ValueLensEmbedding"

    # ------------------------------------------------------------------ properties
    @property
    def encoder(self) -> Encoder:
        """The :class:`valuelens.Encoder` doing the work (pass it as ``encoder=`` to share the model)."""
        return self._encoder

    @property
    def dimension(self) -> int:
        """Length of every embedding this instance returns."""
        return self._encoder.dimension

    # ------------------------------------------------------------------ the BaseEmbedding hooks
    def _get_query_embedding(self, query: str) -> Embedding:
        return self._embed([_check_text(query, "query")], self.query_instruction, query=True)[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._embed([_check_text(text, "text")], self.text_instruction)[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._embed(_check_texts(texts), self.text_instruction)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await self._in_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await self._in_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await self._in_thread(self._get_text_embeddings, texts)

    # Validate whole batches up front: errors then name the index in the caller's list (LlamaIndex
    # splits it into chunks of embed_batch_size), and no callback event is left open.
    def get_text_embedding_batch(
        self, texts: list[str], show_progress: bool = False, **kwargs: Any
    ) -> list[Embedding]:
        """Embed ``texts`` in batches of ``embed_batch_size`` (``[]`` for an empty list)."""
        return super().get_text_embedding_batch(_check_texts(texts), show_progress=show_progress, **kwargs)

    async def aget_text_embedding_batch(
        self, texts: list[str], show_progress: bool = False, **kwargs: Any
    ) -> list[Embedding]:
        """Async twin of :meth:`get_text_embedding_batch`; up to ``num_workers`` batches run at once."""
        return await super().aget_text_embedding_batch(
            _check_texts(texts), show_progress=show_progress, **kwargs
        )

    # ------------------------------------------------------------------ internals
    def _embed(self, texts: list[str], instruction: str | None, *, query: bool = False) -> list[Embedding]:
        if not texts:
            return []
        if instruction:
            texts = [instruction + text for text in texts]
        encode = self._encoder.encode_query if query else self._encoder.encode  # the spec's query_template
        vectors = encode(texts, batch_size=self.batch_size, normalize=self.normalize)
        return vectors.tolist()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> ValueLensEmbedding:
        """A deep copy (``copy.deepcopy``, ``model_copy(deep=True)``) with its own copy of the model; the
        concurrency slots and their lock are made anew (locks cannot be copied)."""
        memo = {} if memo is None else memo
        cls = type(self)
        clone = cls.__new__(cls)
        memo[id(self)] = clone
        object.__setattr__(clone, "__dict__", copy.deepcopy(self.__dict__, memo))
        object.__setattr__(clone, "__pydantic_extra__", copy.deepcopy(self.__pydantic_extra__, memo))
        object.__setattr__(clone, "__pydantic_fields_set__", set(self.__pydantic_fields_set__))
        private = {
            "_encoder": copy.deepcopy(self._encoder, memo),
            "_slots": None,
            "_slots_size": 0,
            "_slots_lock": threading.Lock(),
        }
        object.__setattr__(clone, "__pydantic_private__", private)
        return clone

    def _forward_slots(self) -> threading.BoundedSemaphore:
        size = max(1, self.num_workers or 1)
        with self._slots_lock:
            if self._slots is None or self._slots_size != size:
                self._slots, self._slots_size = threading.BoundedSemaphore(size), size
            return self._slots

    async def _in_thread(self, fn: Callable[[Any], T], arg: Any) -> T:
        slots = self._forward_slots()

        def run() -> T:
            with slots:
                return fn(arg)

        return await asyncio.to_thread(run)


def _check_text(text: Any, what: str) -> str:
    if not isinstance(text, str):
        msg = f"{what} must be a str, got {text!r} ({type(text).__name__})"
        raise TypeError(msg)
    check_texts(text, name=what)  # ValueError for a surrogate code point, naming its position
    return text


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str):
        msg = "texts must be a list of strings, got a single str; use get_text_embedding() for one text"
        raise TypeError(msg)
    return check_texts(texts)[0]
