"""``ValueLensEmbeddings``: LangChain embeddings computed by valuelens from a decoder LLM, no training.

Usage::

    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_valuelens import ValueLensEmbeddings

    embeddings = ValueLensEmbeddings()                    # the embedded default model, recipe "va"
    store = InMemoryVectorStore.from_texts(["A cat sits.", "Stocks fell."], embedding=embeddings)
    store.as_retriever(search_kwargs={"k": 1}).invoke("a kitten")
"""

from __future__ import annotations

import os
import reprlib
from typing import Any, Literal

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field, PrivateAttr, StrictInt

import valuelens
from valuelens.inputs import check_texts
from valuelens.settings import EncoderSettings, load_encoder, prepare_fields

__all__ = ["ValueLensEmbeddings"]

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60


class ValueLensEmbeddings(EncoderSettings, Embeddings):
    """Training-free sentence embeddings from a decoder LLM (valuelens) as LangChain ``Embeddings``.

    Example:
        ```python
        from langchain_valuelens import ValueLensEmbeddings

        embeddings = ValueLensEmbeddings(model="smollm2-135m", recipe="va")
        vectors = embeddings.embed_documents(["A man plays guitar.", "Stocks fell sharply."])
        query = embeddings.embed_query("music")
        ```

    The fields that define the embedding (``recipe``, ``layers``, ``prompt``, ... ``drop_prefix``, and
    ``preset``) and the load options (``device``, ``dtype``) are those of :class:`valuelens.EncoderConfig`,
    shared with the other valuelens adapters and listed once in ``docs/fields.md``; they are frozen.
    ``model`` is loaded once, at construction; invalid settings raise :class:`valuelens.ConfigError`
    (a ``ValueError``) before anything is loaded. Vectors are unit length (``normalize=True``, the
    default). See ``docs/langchain.md`` for the other fields and the bad-input rules.
    """

    model_config = ConfigDict(
        extra="forbid", arbitrary_types_allowed=True, protected_namespaces=(), validate_assignment=True
    )

    model: Any = Field(default=None, frozen=True)
    """A provisioned model name (``"smollm2-135m"``, see ``valuelens.models.available()``), a local
    model folder, an already-built :class:`valuelens.Encoder` or a
    ``sentence_transformers.SentenceTransformer``. ``None`` is the embedded default model."""
    query_prompt: str | None = None
    """An instruction prepended verbatim (no separator) to every query before ``prompt`` is applied."""
    document_prompt: str | None = None
    """An instruction prepended verbatim (no separator) to every document before ``prompt`` is applied."""
    batch_size: StrictInt = Field(default=32, gt=0)
    """Texts per forward pass."""
    normalize: bool = True
    """L2-normalise every embedding (cosine similarity then equals the dot product)."""
    show_progress: bool = False
    """Show a progress bar while embedding."""

    _encoder: Any = PrivateAttr(default=None)

    def __init__(self, **kwargs: Any) -> None:
        """Build the spec (or adopt a given Encoder's), validate the fields, then load the model."""
        model = kwargs.get("model")
        if model is None or isinstance(model, (str, os.PathLike)):
            kwargs, config = prepare_fields(type(self), kwargs, model=model)
            super().__init__(**kwargs)
            self._encoder = load_encoder(model, config, device=self.device, dtype=self.dtype)
        elif isinstance(model, valuelens.Encoder):
            kwargs, _ = prepare_fields(type(self), kwargs, encoder=model)
            super().__init__(**kwargs)
            self._encoder = model
        elif _is_sentence_transformer(model):
            given = [name for name in EncoderSettings.model_fields if name in kwargs]
            if given:
                msg = (
                    f"{', '.join(given)} cannot be set when `model` is a SentenceTransformer: its modules "
                    "define the embedding pipeline (use valuelens_sentence_transformers.ValuePooling to "
                    "choose a recipe). query_prompt, document_prompt, batch_size, normalize and "
                    "show_progress still apply."
                )
                raise valuelens.ConfigError(msg)
            super().__init__(**kwargs)
            self._encoder = model
        else:
            msg = (
                f"model must be None, a model name, a folder path, a valuelens.Encoder or a "
                f"sentence_transformers.SentenceTransformer, got {type(model).__name__}"
            )
            raise TypeError(msg)

    # ------------------------------------------------------------------ inspection
    @property
    def encoder(self) -> Any:
        """The model that computes the embeddings (a ``valuelens.Encoder`` or a ``SentenceTransformer``)."""
        return self._encoder

    @property
    def dimension(self) -> int:
        """Length of every embedding this instance returns."""
        enc = self._encoder
        if isinstance(enc, valuelens.Encoder):
            return enc.dimension
        getter = getattr(enc, "get_embedding_dimension", None) or enc.get_sentence_embedding_dimension
        return int(getter())

    # ------------------------------------------------------------------ embedding
    def _embed(
        self, texts: list[str], instruction: str | None, kind: Literal["query", "document"]
    ) -> list[list[float]]:
        if not texts:
            return []
        if instruction:
            texts = [instruction + text for text in texts]
        enc = self._encoder
        if isinstance(enc, valuelens.Encoder):  # queries under the spec's query_template, if any
            encode = enc.encode_query if kind == "query" else enc.encode
            vectors = encode(
                texts, batch_size=self.batch_size, normalize=self.normalize, show_progress=self.show_progress
            )
        else:  # a SentenceTransformer: its own "query" / "document" prompts apply too, as in encode_query
            vectors = getattr(enc, f"encode_{kind}", enc.encode)(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=self.normalize,
                show_progress_bar=self.show_progress,
                convert_to_numpy=True,
            )
        # float32 -> Python floats (ndarray.tolist converts each element to a Python float).
        return np.asarray(vectors, dtype=np.float32).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents (``document_prompt`` is prepended to each); ``[]`` gives ``[]``.

        Raises ``TypeError`` for ``None``, a bare string or a non-string item (naming its index).
        """
        return self._embed(_check_documents(texts), self.document_prompt, "document")

    def embed_query(self, text: str) -> list[float]:
        """Embed one query (``query_prompt`` is prepended). Raises ``TypeError`` unless ``text`` is a str."""
        return self._embed([_check_query(text)], self.query_prompt, "query")[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async :meth:`embed_documents`: the forward runs in the default thread pool, off the event loop."""
        items = _check_documents(texts)
        return await run_in_executor(None, self._embed, items, self.document_prompt, "document")

    async def aembed_query(self, text: str) -> list[float]:
        """Async :meth:`embed_query`: the forward runs in the default thread pool, off the event loop."""
        item = _check_query(text)
        vectors = await run_in_executor(None, self._embed, [item], self.query_prompt, "query")
        return vectors[0]


# ---------------------------------------------------------------------- helpers
def _check_documents(texts: Any) -> list[str]:
    if isinstance(texts, str):
        msg = (
            "embed_documents expects a list of strings, got a single str; "
            "use embed_query(text) or embed_documents([text])"
        )
        raise TypeError(msg)
    if texts is None:
        msg = "embed_documents expects a list of strings, got None"
        raise TypeError(msg)
    return check_texts(texts)[0]


def _check_query(text: Any) -> str:
    if not isinstance(text, str):
        msg = f"embed_query expects a str, got {_short.repr(text)} ({type(text).__name__})"
        raise TypeError(msg)
    check_texts(text, name="query")  # ValueError for a surrogate code point, naming its position
    return text


def _is_sentence_transformer(obj: Any) -> bool:
    """Whether ``obj`` is a SentenceTransformer, without importing sentence-transformers."""
    return any(
        cls.__name__ == "SentenceTransformer" and cls.__module__.startswith("sentence_transformers")
        for cls in type(obj).__mro__
    )
