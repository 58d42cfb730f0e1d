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
import torch
from langchain_core.embeddings import Embeddings
from langchain_core.runnables.config import run_in_executor
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictInt

import valuelens
from valuelens.encoder import check_texts, resolve_dtype

__all__ = ["ValueLensEmbeddings"]

#: Fields that define the embedding pipeline; with an already-built model they must agree with it.
_PIPELINE_FIELDS = ("recipe", "layers", "prompt", "embed_filter", "max_length", "device", "dtype")

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60


class ValueLensEmbeddings(BaseModel, Embeddings):
    """Training-free sentence embeddings from a decoder LLM (valuelens) as LangChain ``Embeddings``.

    Example:
        ```python
        from langchain_valuelens import ValueLensEmbeddings

        embeddings = ValueLensEmbeddings(model="smollm2-135m", recipe="va")
        vectors = embeddings.embed_documents(["A man plays guitar.", "Stocks fell sharply."])
        query = embeddings.embed_query("music")
        ```

    ``model`` is loaded once, at construction; invalid settings raise ``ValueError``
    (:class:`valuelens.ConfigError` for recipe, layers, prompt, EmbedFilter and length settings)
    before anything is loaded. See ``docs/langchain.md`` for every field and the bad-input rules.
    """

    model_config = ConfigDict(
        extra="forbid", arbitrary_types_allowed=True, protected_namespaces=(), validate_assignment=True
    )

    # The pipeline fields build the model at construction, so they are frozen: assigning one later would
    # describe embeddings the loaded model does not compute (build a new instance instead).
    model: Any = Field(default=None, frozen=True)
    """A provisioned model name (``"smollm2-135m"``, see ``valuelens.models.available()``), a local
    model folder, an already-built :class:`valuelens.Encoder` or a
    ``sentence_transformers.SentenceTransformer``. ``None`` is the embedded default model."""
    recipe: str = Field(default="va", frozen=True)
    """The valuelens recipe (``"va"``, ``"aligned-wva"``, ``"hs"``, ... see ``valuelens.RECIPES``)."""
    layers: str | StrictInt | list[StrictInt] = Field(default="auto", frozen=True)
    """Decoder layers to read: ``"auto"``, ``"all"``, ``"half"``, ``"last"``, ``"band"``, an int, a list of
    ints or ranges such as ``"20-27"``."""
    prompt: str | None = Field(default=None, frozen=True)
    """A valuelens prompt: ``None``, a name (``"prompteol"``, ``"futureeol"``, ``"echo"``, ``"metaeol"``)
    or a custom template containing ``{text}``."""
    query_prompt: str | None = None
    """An instruction prepended verbatim (no separator) to every query before ``prompt`` is applied."""
    document_prompt: str | None = None
    """An instruction prepended verbatim (no separator) to every document before ``prompt`` is applied."""
    embed_filter: float | None = Field(default=None, frozen=True)
    """EmbedFilter ratio tau (``2`` keeps half the dimensions); residual-space recipes only."""
    device: str | torch.device | None = Field(default=None, frozen=True)
    """Where the model runs (``"cpu"``, ``"cuda"``, ...); ``None``: CUDA when available, else CPU."""
    dtype: str | torch.dtype | None = Field(default=None, frozen=True)
    """``"auto"``, ``"float32"``, ``"bfloat16"``, ``"float16"`` or a ``torch.dtype``; ``None``: float32 on CPU,
    the checkpoint's dtype elsewhere (bf16 for the provisioned models)."""
    batch_size: StrictInt = Field(default=32, gt=0)
    """Texts per forward pass."""
    normalize: bool = True
    """L2-normalise every embedding (cosine similarity then equals the dot product)."""
    show_progress: bool = False
    """Show a progress bar while embedding."""
    max_length: StrictInt | None = Field(default=None, gt=0, frozen=True)
    """Token limit per text (the prompt is kept; longer texts are truncated with a warning);
    ``None``: 512."""

    _encoder: Any = PrivateAttr(default=None)

    def __init__(self, **kwargs: Any) -> None:
        """Validate the settings, then load (or adopt) the model."""
        super().__init__(**kwargs)
        model = self.model
        if model is None or isinstance(model, (str, os.PathLike)):
            self._encoder = self._load(model)
        elif isinstance(model, valuelens.Encoder):
            self._adopt_encoder(model)
            self._encoder = model
        elif _is_sentence_transformer(model):
            self._adopt_sentence_transformer(model)
            self._encoder = model
        else:
            msg = (
                f"model must be None, a model name, a folder path, a valuelens.Encoder or a "
                f"sentence_transformers.SentenceTransformer, got {type(model).__name__}"
            )
            raise TypeError(msg)

    # ------------------------------------------------------------------ construction helpers
    def _load(self, model: str | os.PathLike[str] | None) -> valuelens.Encoder:
        # Check every setting before any (possibly slow) model provisioning.
        if self.dtype is not None:
            resolve_dtype(self.dtype)
        if self.device is not None:
            try:
                torch.device(self.device)
            except (RuntimeError, TypeError) as exc:
                msg = f"unknown device {self.device!r}: use 'cpu', 'cuda', 'cuda:1', 'mps' or a torch.device"
                raise valuelens.ConfigError(msg) from exc
        valuelens.EncoderConfig(
            recipe=self.recipe,
            layers=self.layers,
            prompt=self.prompt,
            embed_filter=self.embed_filter,
            max_length=self.max_length,
        )
        return valuelens.Encoder.from_pretrained(
            model,
            recipe=self.recipe,
            layers=self.layers,
            prompt=self.prompt,
            embed_filter=self.embed_filter,
            device=self.device,
            dtype=self.dtype,
            max_length=self.max_length,
        )

    def _adopt_encoder(self, encoder: valuelens.Encoder) -> None:
        """Check explicitly set pipeline fields against ``encoder``, then mirror its settings."""
        explicit = self.model_fields_set
        given = {
            k: getattr(self, k)
            for k in ("recipe", "layers", "prompt", "embed_filter", "max_length")
            if k in explicit
        }
        conflicts = encoder.conflicts(**given)
        if "device" in explicit and self.device is not None and not _same_device(self.device, encoder.device):
            conflicts.append(f"device={self.device!r} (the encoder's model is on {str(encoder.device)!r})")
        if "dtype" in explicit and self.dtype is not None:
            model_dtype = next(encoder.model.parameters()).dtype
            if resolve_dtype(self.dtype) not in (None, "auto", model_dtype):
                conflicts.append(f"dtype={self.dtype!r} (the encoder's model is {model_dtype})")
        if conflicts:
            msg = (
                "these settings disagree with the valuelens.Encoder passed as `model`: "
                + "; ".join(conflicts)
                + ". An Encoder's recipe settings are fixed when it is built: leave these fields unset "
                "to use the Encoder's, or build a new Encoder (or pass a model name) with the settings you want."
            )
            raise valuelens.ConfigError(msg)
        # Mirror what will actually run, so the fields (and repr) describe the embeddings.
        settings = encoder.settings()
        # `frozen` guards later assignments, not this mirroring at construction
        self.__dict__.update(
            {key: settings[key] for key in ("recipe", "layers", "prompt", "embed_filter", "max_length")}
        )

    def _adopt_sentence_transformer(self, model: Any) -> None:
        """A SentenceTransformer defines its own pipeline: pipeline fields cannot be set with it."""
        given = [name for name in _PIPELINE_FIELDS if name in self.model_fields_set]
        if given:
            msg = (
                f"{', '.join(given)} cannot be set when `model` is a SentenceTransformer: its modules define "
                "the embedding pipeline (use valuelens_sentence_transformers.ValuePooling to choose a recipe). "
                "query_prompt, document_prompt, batch_size, normalize and show_progress still apply."
            )
            raise valuelens.ConfigError(msg)

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
        if isinstance(enc, valuelens.Encoder):
            vectors = enc.encode(
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
    return text


def _is_sentence_transformer(obj: Any) -> bool:
    """Whether ``obj`` is a SentenceTransformer, without importing sentence-transformers."""
    return any(
        cls.__name__ == "SentenceTransformer" and cls.__module__.startswith("sentence_transformers")
        for cls in type(obj).__mro__
    )


def _same_device(wanted: str | torch.device, actual: torch.device) -> bool:
    target = torch.device(wanted)
    return target.type == actual.type and (target.index is None or target.index == (actual.index or 0))
