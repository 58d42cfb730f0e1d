"""``ValueTransformer``: sentence-transformers' ``Transformer`` with valuelens preprocessing and capture.

Usage::

    model = SentenceTransformer(modules=[ValueTransformer(path), ValuePooling(recipe="va")])
    # the same model: ValuePooling puts a ValueTransformer (same weights, tokenizer, settings) in
    # place of a plain Transformer in front of it
    model = SentenceTransformer(modules=[Transformer(path), ValuePooling(recipe="va")])

It is the input module of a valuelens model and talks to :class:`ValuePooling` only through the
``features`` dict, as sentence-transformers' own modules do:

- :meth:`preprocess` tokenizes through the valuelens core (prompt template, pooled span, truncation
  that keeps the prompt, whatever the spec's forward edits need) and adds the core's batch under
  ``"valuelens_batch"``;
- :meth:`forward` runs the host ``Transformer.forward`` inside the core's capture of that batch
  (:meth:`valuelens.forward.ForwardPass.capture`: hooks reduce each selected layer to per-text vectors and apply
  the forward edits; removed in ``finally``) and adds the vectors under ``"valuelens_layer_vectors"``;
  :class:`ValuePooling` turns them into ``sentence_embedding`` (:meth:`valuelens.Encoder.finish`),
  joining the texts' lexical part that :meth:`preprocess` read when the spec has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sentence_transformers.base.modules import Transformer
from sentence_transformers.base.modules.transformer import ProcessingKwargs
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from valuelens import Encoder
from valuelens.config import DEFAULT_MAX_LENGTH
from valuelens.inputs import check_texts
from valuelens_sentence_transformers.precision import asks_dtype

__all__ = ["BATCH_KEY", "LAYER_VECTORS_KEY", "LEXICAL_KEY", "ValueTransformer"]

#: ``features`` key of the core's tokenized batch (a ``valuelens.tokenization.Batch``: pooled spans and
#: whatever the spec's forward edits need), read by the core's capture.
BATCH_KEY = "valuelens_batch"
#: ``features`` key of the captured per-layer vectors (per readout of the encoder, a list of ``[B, F]`` tensors).
LAYER_VECTORS_KEY = "valuelens_layer_vectors"
#: ``features`` key of the texts' lexical part (a ``valuelens.lexical.LexicalPart``, read from the texts
#: as given, at the side's weight), present when the spec has one; :class:`ValuePooling` joins it.
LEXICAL_KEY = "valuelens_lexical"


class ValueTransformer(Transformer):
    """A ``Transformer`` whose texts are tokenized and whose signals are captured by valuelens.

    Its embedding settings belong to the :class:`ValuePooling` after it, which binds it to a
    :class:`valuelens.Encoder` over this module's backbone and tokenizer (:meth:`bind`).
    """

    _encoder: Encoder | None = None
    _max_length: int | None = None
    #: whether ``model_kwargs`` named a dtype when this module loaded its backbone; ``None`` when it took
    #: over a plain ``Transformer``'s (which keeps no record): see :mod:`valuelens_sentence_transformers.precision`
    dtype_requested: bool | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As ``Transformer(path, ...)``, recording whether ``model_kwargs`` names a dtype."""
        requested = asks_dtype(kwargs.get("model_kwargs") or kwargs.get("model_args"))
        super().__init__(*args, **kwargs)
        self.dtype_requested = requested

    @classmethod
    def from_transformer(cls, transformer: Transformer) -> ValueTransformer:
        """The same module (same backbone, tokenizer and settings, nothing copied) as a ValueTransformer."""
        clone = cls.__new__(cls)
        state = dict(transformer.__dict__)
        for name in ("_parameters", "_buffers", "_modules"):  # own containers over the same children
            state[name] = dict(state[name])
        clone.__dict__.update(state)
        return clone

    def bind(self, encoder: Encoder, *, max_length: int | None = None) -> None:
        """Tokenize and capture for ``encoder``; ``max_length=None`` follows ``max_seq_length``."""
        self._encoder = encoder
        self._max_length = max_length

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            msg = (
                "ValueTransformer is not bound to a ValuePooling yet: build the model as "
                "SentenceTransformer(modules=[ValueTransformer(path), ValuePooling(...)])"
            )
            raise RuntimeError(msg)
        return self._encoder

    def preprocess(
        self,
        inputs: Sequence[Any],
        prompt: str | None = None,
        processing_kwargs: ProcessingKwargs | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Tokenize texts under the valuelens prompt template (``encode_query``'s ``task="query"``: the
        spec's ``query_template``, if any); a sentence-transformers ``prompt`` (e.g. the model's "query"
        prompt) is prepended to each text first. A per-call ``processing_kwargs={"text": {"max_length": N}}``
        overrides the token limit."""
        encoder = self.encoder.for_queries() if kwargs.get("task") == "query" else self.encoder
        texts = list(inputs)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                msg = f"inputs[{i}] is {type(text).__name__}: ValuePooling embeds text (str) only"
                raise TypeError(msg)
            check_texts(text, name=f"inputs[{i}]")  # ValueError for a surrogate code point
        if not texts:
            return {}
        lexical = encoder.lexical_part(texts)  # the texts as given: no sentence-transformers prompt
        if prompt:
            texts = [prompt + text for text in texts]
        override = ((processing_kwargs or {}).get("text") or {}).get("max_length")
        items, _ = encoder.reader.tokenize(texts, max_length=override or self._token_limit())
        batch = encoder.reader.collate(items)
        features = encoder.runner.model_inputs(batch, batch.input_ids.device)
        del features["use_cache"]
        features[BATCH_KEY] = batch
        if lexical is not None:
            features[LEXICAL_KEY] = lexical
        features["modality"] = "text"
        return features

    def _token_limit(self) -> int:
        if self._max_length is not None:
            return self._max_length
        limit = self.max_seq_length
        return limit if limit and limit < VERY_LARGE_INTEGER else DEFAULT_MAX_LENGTH

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The host forward, inside a capture; adds the per-layer vectors to ``features``."""
        encoder = self.encoder
        features = dict(features)  # the caller's dict keeps its batch: a second forward pools the same way
        batch = features.pop(BATCH_KEY, None)  # None for features made elsewhere: every real token is pooled
        # stop_early=False: the layers after the deepest selected one were pruned, nothing is left to skip
        mask = features["attention_mask"]
        with encoder.runner.capture(mask, batch, encoder.readouts, stop_early=False) as session:
            output = super().forward(features, **kwargs)
        output[LAYER_VECTORS_KEY] = session.layer_vectors()
        return output


ValueTransformer.__module__ = "valuelens_sentence_transformers"
