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
from typing import Any, Literal, TypeVar

import torch
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr

from valuelens import ConfigError, Encoder, EncoderConfig, check_texts
from valuelens.models import DEFAULT_MODEL

__all__ = ["DEFAULT_EMBED_BATCH_SIZE", "ValueLensEmbedding"]

#: Texts per forward pass (and per LlamaIndex batch / callback event); ``Encoder.encode``'s default.
DEFAULT_EMBED_BATCH_SIZE = 32

DType = Literal["auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16"]
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

#: Fields that define the embedding itself: they build the encoder, so they are frozen.
_ENCODER_FIELDS = (
    "recipe",
    "layers",
    "prompt",
    "embed_filter",
    "embed_filter_offset",
    "max_length",
    "combine",
    "final_norm",
    "device",
    "dtype",
)

T = TypeVar("T")


class ValueLensEmbedding(BaseEmbedding):
    """Training-free sentence embeddings from a decoder LLM (valuelens) for LlamaIndex.

    Usage::

        embed_model = ValueLensEmbedding()                           # embedded default model, recipe "va"
        embed_model = ValueLensEmbedding("smollm2-135m", recipe="aligned-wva", prompt="futureeol")
        embed_model = ValueLensEmbedding(encoder=valuelens.Encoder.from_pretrained(), normalize=False)
        Settings.embed_model = embed_model

    ``query_instruction`` / ``text_instruction`` are prepended verbatim (no separator is added) to
    queries / documents *before* the valuelens prompt template is applied, so with
    ``prompt="prompteol"`` the model reads ``This sentence: "<instruction><text>" means in one word:"``.

    Passing ``encoder=`` shares an already loaded :class:`valuelens.Encoder` (one model in memory for
    several instances); the encoder-defining fields (recipe, layers, prompt, embed_filter, ...) are
    then read from it, and passing a different value for one of them raises :class:`valuelens.ConfigError`.

    Async methods run the forward passes in worker threads; at most ``max(1, num_workers)`` of them
    run at once per instance, all on the same model.
    """

    model_config = ConfigDict(extra="forbid")

    model_name: str = Field(
        default=DEFAULT_MODEL,
        frozen=True,
        description=(
            "A model provisioned by valuelens (e.g. 'smollm2-135m', 'gemma3-270m', 'qwen2.5-0.5b'), a local "
            "folder with a transformers checkpoint, or a hub id (which needs network access)."
        ),
    )
    recipe: str = Field(
        default="va",
        frozen=True,
        description="valuelens recipe: 'va', 'aligned-va', 'wva', 'wva-lt', 'aligned-wva', 'hs', 'last-token', 'wmp', ...",
    )
    layers: str | int | list[int] = Field(
        default="auto",
        frozen=True,
        description="Decoder layers to read: 'auto', 'all', 'half', 'last', a range string such as '15-25', an int or a list of ints.",
    )
    prompt: str | None = Field(
        default=None,
        frozen=True,
        description="Prompt template: None, 'prompteol', 'futureeol', 'echo', 'metaeol' or a custom template containing '{text}'.",
    )
    query_instruction: str | None = Field(
        default=None,
        description="Prepended verbatim to every query before the prompt template (no separator added).",
    )
    text_instruction: str | None = Field(
        default=None,
        description="Prepended verbatim to every document text before the prompt template (no separator added).",
    )
    embed_filter: float | None = Field(
        default=None,
        frozen=True,
        description="EmbedFilter tau (2 keeps the middle half of the unembedding spectrum); residual-space recipes only.",
    )
    embed_filter_offset: int = Field(default=0, frozen=True, description="Shift of the EmbedFilter band.")
    combine: Literal["mean", "normalized-mean"] = Field(
        default="mean", frozen=True, description="How per-layer vectors are combined."
    )
    final_norm: bool = Field(
        default=False,
        frozen=True,
        description="Apply the model's final norm (hidden-state recipes 'hs', 'last-token', 'wmp' only).",
    )
    device: str | None = Field(
        default=None, frozen=True, description="Torch device for the model; None picks CUDA when available."
    )
    dtype: DType | None = Field(
        default=None,
        frozen=True,
        description="Model dtype ('fp32', 'bf16', 'fp16' are aliases); None: float32 on CPU, the checkpoint's elsewhere (bf16 for the bundled models).",
    )
    max_length: int | None = Field(
        default=None,
        frozen=True,
        gt=0,
        description="Token limit per text, prompt included (None: 512); longer texts are truncated with a warning.",
    )
    normalize: bool = Field(default=True, description="L2-normalise the embeddings.")
    embed_batch_size: int = Field(
        default=DEFAULT_EMBED_BATCH_SIZE,
        gt=0,
        le=2048,
        description="Texts per forward pass (also the size of LlamaIndex's batches and callback events).",
    )

    _encoder: Encoder = PrivateAttr()
    _slots: threading.BoundedSemaphore | None = PrivateAttr(default=None)
    _slots_size: int = PrivateAttr(default=0)
    _slots_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(
        self, model_name: str | None = None, *, encoder: Encoder | None = None, **fields: Any
    ) -> None:
        if encoder is None:
            super().__init__(model_name=DEFAULT_MODEL if model_name is None else model_name, **fields)
            encoder = self._load()
            # Record what "auto", aliases and defaults resolved to, so that to_dict() re-creates exactly
            # this embedding and from_dict(data, encoder=...) agrees; device and dtype stay as given
            # (portable across machines). `frozen` guards later assignments, not this one.
            resolved = _settings_of(encoder)
            del resolved["device"], resolved["dtype"]
            self.__dict__.update(resolved)
            self._encoder = encoder
            return
        if not isinstance(encoder, Encoder):
            msg = f"encoder must be a valuelens.Encoder, got {type(encoder).__name__}"
            raise TypeError(msg)
        actual = _settings_of(encoder)
        for key in _ENCODER_FIELDS:
            if key in fields and _conflict(encoder, key, fields[key], actual[key]) is not None:
                msg = (
                    f"{key}={fields[key]!r} conflicts with the encoder passed as encoder= (its {key} is "
                    f"{actual[key]!r}); leave {key} unset when passing encoder=, or build a new encoder"
                )
                raise ConfigError(msg)
        for key in ("device", "dtype"):  # kept as given, as when loading by name (None: portable)
            actual[key] = fields.get(key)
        if model_name is None:
            model_name = encoder.name_or_path or "unknown"
        super().__init__(model_name=model_name, **{**fields, **actual})
        self._encoder = encoder

    def _load(self) -> Encoder:
        """Validate the configuration (``ConfigError`` before any loading), then load the model."""
        settings = {
            "recipe": self.recipe,
            "layers": self.layers,
            "prompt": self.prompt,
            "embed_filter": self.embed_filter,
            "embed_filter_offset": self.embed_filter_offset,
            "max_length": self.max_length,
            "combine": self.combine,
            "final_norm": self.final_norm,
        }
        EncoderConfig(**settings)
        return Encoder.from_pretrained(self.model_name, device=self.device, dtype=self.dtype, **settings)

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
        return self._embed([_check_text(query, "query")], self.query_instruction)[0]

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
    def _embed(self, texts: list[str], instruction: str | None) -> list[Embedding]:
        if not texts:
            return []
        if instruction:
            texts = [instruction + text for text in texts]
        vectors = self._encoder.encode(texts, batch_size=self.embed_batch_size, normalize=self.normalize)
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
    return text


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str):
        msg = "texts must be a list of strings, got a single str; use get_text_embedding() for one text"
        raise TypeError(msg)
    return check_texts(texts)[0]


def _settings_of(encoder: Encoder) -> dict[str, Any]:
    """The encoder-defining field values that describe ``encoder``."""
    param = next(encoder.model.parameters(), None)
    dtype = None if param is None else str(param.dtype).removeprefix("torch.")
    settings = encoder.settings()
    settings["max_length"] = encoder.config.max_length  # None stays None (portable default)
    return {
        **settings,
        "device": str(encoder.device),
        "dtype": dtype if dtype in ("float32", "bfloat16", "float16") else None,
    }


def _conflict(encoder: Encoder, key: str, given: Any, actual: Any) -> str | None:
    """Why an explicitly passed field value disagrees with the encoder (``None`` if it agrees)."""
    if key == "device":
        if given is None:
            return None
        try:
            wanted, have = torch.device(given), torch.device(actual)
        except (RuntimeError, TypeError):
            return f"device={given!r} is not a device"
        return (
            None if wanted.type == have.type and wanted.index in (None, have.index) else f"device={given!r}"
        )
    if key == "dtype":
        return (
            None
            if given in (None, "auto") or _DTYPE_ALIASES.get(given, given) == actual
            else f"dtype={given!r}"
        )
    if key in ("embed_filter_offset", "combine", "final_norm"):
        return None if given == actual else f"{key}={given!r}"
    if key == "max_length":
        return None if given in (None, encoder.max_length) else f"max_length={given!r}"
    try:
        found = encoder.conflicts(**{key: given})
    except (ValueError, TypeError):
        return f"{key}={given!r}"
    return found[0] if found else None
