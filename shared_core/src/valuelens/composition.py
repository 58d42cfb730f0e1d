"""What a vector is made of: the model's part (the readouts fused, then post-processed) and the optional
lexical part, joined; how the fitted states behind them save and load; how a joined vector splits again.

Usage::

    composition = Composition.assemble(config, readouts, states, embeddings=emb, tokenizer=tok)
    dense = composition.dense(per_readout_vectors)           # fused, then the fitted post-processing
    vectors = composition.join(dense, composition.lexical_part(texts, "query"))
    model_part, lexical = composition.split(vectors)          # for hosts that store them apart
    composition.save(folder)                                  # {"postprocess": "postprocess.safetensors", ...}

A new part of a vector goes here (its state in :class:`FittedStates`, its file in :data:`STATE_FILES`, its
join in :meth:`Composition.join`), in the spec (:mod:`valuelens.config`) and in the builder that fits its
state (:mod:`valuelens.states`); the encoder and the adapters go through this object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from valuelens.bm25 import BM25Lens, BM25Part, BM25State
from valuelens.config import EncoderConfig
from valuelens.errors import ConfigError
from valuelens.lexical import LexicalLens, LexicalPart, LexicalState
from valuelens.postprocess import Postprocess
from valuelens.presets.builtin import BUILTIN_PREFIX
from valuelens.readout import Readout, fuse

__all__ = ["STATE_FILES", "Composition", "FittedStates", "Side"]

#: Which side of a search a text is embedded for: documents (``encode``) or queries (``encode_query``).
Side = Literal["document", "query"]
#: Each fitted state's spec field and the file it is saved under beside a saved model (sentence-transformers).
STATE_FILES: dict[str, str] = {
    "postprocess": "postprocess.safetensors",
    "lexical_corpus": "lexical.safetensors",
}


@dataclass(frozen=True)
class FittedStates:
    """The fitted states a spec's vector needs: its post-processing and its lexical part's state, each
    ``None`` when the spec has none (built by :func:`valuelens.states.build_states`)."""

    postprocess: Postprocess | None = None
    lexical: LexicalState | BM25State | None = None


@dataclass(frozen=True, eq=False)
class Composition:
    """The parts of an encoder's vectors and how they join (see the module docstring)."""

    readouts: tuple[Readout, ...]
    """The main readout, then one per fusion part (all captured in the same forward)."""
    weights: tuple[float, ...]
    postprocess: Postprocess | None
    lexical: LexicalLens | BM25Lens | None
    lexical_weights: dict[Side, float]
    """Each side's lexical weight (documents: ``lexical``; queries: ``lexical_query`` or ``lexical``)."""

    @classmethod
    def assemble(
        cls,
        config: EncoderConfig,
        readouts: Sequence[Readout],
        states: FittedStates,
        *,
        embeddings: Tensor | None = None,
        tokenizer: Any = None,
    ) -> Composition:
        """The composition of a resolved ``config`` from its readouts and fitted ``states``; the lexical
        part reads the model's input ``embeddings`` through ``tokenizer``."""
        raw = sum(r.dimension for r in readouts)
        post = states.postprocess
        if (config.postprocess is None) != (post is None):
            msg = f"the spec's postprocess={config.postprocess!r} and the fitted states given do not match"
            raise ConfigError(msg)
        if post is not None and post.input_dim != raw:
            msg = (
                f"the post-processing state {config.postprocess!r} was fitted on {post.input_dim}-dim "
                f"embeddings, this encoder's are {raw}-dim"
            )
            raise ConfigError(msg)
        lens: LexicalLens | BM25Lens | None = None
        weights: dict[Side, float] = {}
        if config.lexical is not None:
            state = states.lexical
            if config.lexical_kind == "bm25" and isinstance(state, BM25State):
                lens = BM25Lens(state, dim=config.lexical_dim, k1=config.lexical_k1, b=config.lexical_b)
            elif (
                config.lexical_kind == "embeddings"
                and isinstance(state, LexicalState)
                and embeddings is not None
            ):
                lens = LexicalLens(embeddings, tokenizer, state)
            else:
                msg = (
                    f"the spec has a lexical part of kind {config.lexical_kind!r}: give its fitted state"
                    + (" and the model's input embeddings" if config.lexical_kind == "embeddings" else "")
                )
                raise ConfigError(msg)
            query = config.lexical_query if config.lexical_query is not None else config.lexical
            weights = {"document": config.lexical, "query": query}
        fusion = (1.0, *(part.weight for part in config.fusion))
        return cls(tuple(readouts), fusion, post, lens, weights)

    @classmethod
    def of_readouts(cls, config: EncoderConfig, readouts: Sequence[Readout]) -> Composition:
        """The raw vectors only (the readouts fused; no post-processing, no lexical part): what a
        post-processing is fitted on."""
        return cls(tuple(readouts), (1.0, *(part.weight for part in config.fusion)), None, None, {})

    # ------------------------------------------------------------------ sizes
    @property
    def raw_dimension(self) -> int:
        """The readouts' vectors concatenated (what a post-processing is fitted on)."""
        return sum(r.dimension for r in self.readouts)

    @property
    def model_dimension(self) -> int:
        """The model's part: the raw vectors, post-processed."""
        return self.postprocess.output_dim if self.postprocess is not None else self.raw_dimension

    @property
    def dimension(self) -> int:
        """The joined vector's size."""
        return self.model_dimension + (self.lexical.dimension if self.lexical is not None else 0)

    @property
    def states(self) -> FittedStates:
        return FittedStates(self.postprocess, self.lexical.state if self.lexical is not None else None)

    # ------------------------------------------------------------------ the parts
    def raw(self, vectors: Sequence[Tensor]) -> Tensor:
        """One ``[n, dim]`` tensor per readout fused (:func:`valuelens.readout.fuse`): the raw vectors."""
        return fuse(vectors, self.weights)

    def dense(self, vectors: Sequence[Tensor]) -> Tensor:
        """The model's part: the raw vectors, then the fitted post-processing."""
        emb = self.raw(vectors)
        return self.postprocess.transform(emb) if self.postprocess is not None else emb

    def lexical_part(self, texts: Sequence[str], side: Side = "document") -> LexicalPart | BM25Part | None:
        """The lexical part of ``texts`` (read whole, without the prompt) for ``side``; ``None`` without a
        lexical part."""
        if self.lexical is None:
            return None
        weights = self.lexical_weights
        return self.lexical.part(
            self.lexical.encode(texts, side), side, weights["document"], weights["query"]
        )

    def sparse(self, texts: Sequence[str], side: Side = "document") -> list[tuple[list[int], list[float]]]:
        """The BM25 part of ``texts`` as native sparse vectors (term indices and weights; their dot
        product is BM25), for hosts that store dense and sparse vectors apart (Qdrant)."""
        if not isinstance(self.lexical, BM25Lens):
            msg = "native sparse vectors come from a lexical part of kind 'bm25': set lexical= and lexical_kind='bm25'"
            raise ConfigError(msg)
        return self.lexical.sparse(texts, query=side == "query")

    def join(self, dense: Tensor, lexical: LexicalPart | BM25Part | None) -> Tensor:
        """The vector: ``dense`` as it is, or joined with the lexical part (:class:`LexicalPart`,
        :class:`~valuelens.bm25.BM25Part` say how)."""
        if self.lexical is None:
            return dense
        if lexical is None:
            msg = "this spec has a lexical part: pass the texts' lexical_part(texts) to join"
            raise ConfigError(msg)
        return lexical.join(dense)

    def split(self, vectors: Tensor) -> tuple[Tensor, Tensor | None]:
        """A joined ``[n, dimension]`` tensor as its model part and its lexical part, each unit length
        again (``None`` without a lexical part): for hosts that store and fuse the two apart."""
        if vectors.shape[-1] != self.dimension:
            msg = f"expected {self.dimension}-dim vectors of this composition, got {vectors.shape[-1]}-dim"
            raise ValueError(msg)
        if self.lexical is None:
            return vectors, None
        cut = self.model_dimension
        unit = torch.nn.functional.normalize
        return unit(vectors[..., :cut], dim=-1), unit(vectors[..., cut:], dim=-1)

    # ------------------------------------------------------------------ saving
    def save(self, folder: str | Path, config: EncoderConfig) -> dict[str, str]:
        """Write the fitted states ``config`` refers to by more than a name into ``folder``
        (:data:`STATE_FILES`); returns the spec fields that name them relatively there. A ``builtin:``
        state stays a name (the package ships it)."""
        folder = Path(folder)
        written: dict[str, str] = {}
        reference = config.postprocess
        if (
            self.postprocess is not None
            and reference is not None
            and not reference.startswith(BUILTIN_PREFIX)
        ):
            self.postprocess.save(folder / STATE_FILES["postprocess"])
            written["postprocess"] = STATE_FILES["postprocess"]
        if self.lexical is not None:  # its idf and whitening travel: a saved model embeds the same anywhere
            self.lexical.state.save(folder / STATE_FILES["lexical_corpus"])
            written["lexical_corpus"] = STATE_FILES["lexical_corpus"]
        return written
