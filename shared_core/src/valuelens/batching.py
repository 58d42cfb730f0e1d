"""The batching driver: texts → sorted, token-budgeted batches → one forward each, for one encoder or
several sharing passes.

Usage::

    vectors = encode_many([encoder], texts)[0]                 # what encoder.encode(texts) gives
    va, hs = encode_many([Encoder(m, t, recipe="va"), Encoder(m, t, recipe="hs")], texts)  # one pass a batch
    shared = SharedEncoding([Encoder(m, t, recipe="va"), Encoder(m, t, recipe="hs")])
    evaluate(shared.view(0), "stsb"); evaluate(shared.view(1), "stsb")   # one forward pass per batch

Texts are sorted by length (less padding), packed into batches of at most ``batch_size`` texts and
``max_tokens_per_batch`` padded tokens (:func:`plan_batches`), and the order restored; a prompt with
several templates (MetaEOL) runs one pass each and averages them. A batch that runs out of memory is
split in halves and retried, down to one text. Under ``long_text="chunk"`` a text longer than
``max_length`` goes in as its windows, items like the others, and their vectors are pooled back before
the encoder's combine step (:mod:`valuelens.chunking`). Encoders over the same model, tokenizer, prompt,
``max_length``, ``long_text`` and forward edits tokenize once and run one forward per batch for all their readouts;
e.g. VA, HS and WVA(LT) of an evaluation cost one pass. A :class:`SharedEncoding` view behaves like an
encoder (``encode(texts, *, batch_size, show_progress)``): the first view asked for a text computes it
for every encoder at once and later views read the cache.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from valuelens import chunking
from valuelens.composition import Composition, Side
from valuelens.errors import ValueLensError
from valuelens.forward import ForwardPass
from valuelens.inputs import check_batch_size, check_texts, check_token_budget, token_budget
from valuelens.readout import Readout, average_passes
from valuelens.tokenization import TextReader, TokenizedText

__all__ = [
    "EncodeOutOfMemoryError",
    "Pipeline",
    "Searchable",
    "SharedEncoding",
    "Stages",
    "TruncationWarning",
    "encode_many",
    "plan_batches",
    "run_batches",
]


class EncodeOutOfMemoryError(ValueLensError, torch.OutOfMemoryError):
    """One text alone does not fit in memory, after its batch was split in halves down to it.

    The message names the text's index in the caller's list and its length in tokens; it is still a
    ``torch.OutOfMemoryError``, so existing ``except torch.OutOfMemoryError`` blocks catch it."""


class Pipeline(Protocol):
    """What the driver needs of an encoder (:class:`valuelens.Encoder` is one): how it reads texts, the
    forward pass, what its vectors are made of, and which side (documents or queries) it embeds for."""

    @property
    def reader(self) -> TextReader: ...

    @property
    def runner(self) -> ForwardPass: ...

    @property
    def composition(self) -> Composition: ...

    @property
    def side(self) -> Side: ...


@dataclass(frozen=True)
class Stages:
    """A :class:`Pipeline` from its pieces (e.g. the raw vectors a first-use fit reads, at another limit)."""

    reader: TextReader
    runner: ForwardPass
    composition: Composition
    side: Side = "document"


class Searchable(Pipeline, Protocol):
    """A pipeline with a query side (:meth:`valuelens.Encoder.for_queries`), as :class:`SharedEncoding` reads."""

    @property
    def dimension(self) -> int: ...

    def for_queries(self) -> Searchable: ...


class TruncationWarning(UserWarning):
    """Some texts were longer than ``max_length`` tokens and were cut (the prompt is kept); never
    raised for ``long_text="chunk"``, which embeds such texts in windows."""


def plan_batches(
    order: Sequence[int], lengths: Sequence[int], batch_size: int, max_tokens: int | None = None
) -> list[list[int]]:
    """Split ``order`` (text indices, longest first) into batches of at most ``batch_size`` texts and,
    with ``max_tokens``, at most that many padded tokens (rows × the batch's longest text). A text
    longer than the budget gets a batch of its own.

    Usage: ``plan_batches([2, 0, 1], lengths=[5, 3, 9], batch_size=32, max_tokens=12)`` → ``[[2], [0, 1]]``.
    """
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        if current:
            width = lengths[current[0]]  # the longest: order is longest first
            full = len(current) == batch_size
            if full or (max_tokens is not None and (len(current) + 1) * width > max_tokens):
                batches.append(current)
                current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def run_batches(
    reader: TextReader,
    runner: ForwardPass,
    items: Sequence[str],
    readouts: Sequence[Readout],
    *,
    batch_size: int,
    max_tokens_per_batch: int | None = None,
    progress: tqdm | None = None,
) -> tuple[list[Tensor], int]:
    """Embed checked ``items`` for ``readouts``, read by ``reader`` and run by ``runner``. Returns one
    ``[n, dim]`` tensor per readout and how many texts were truncated.

    Under ``long_text="chunk"`` a text longer than ``max_length`` is embedded as its windows (each an
    item of the batches) and their vectors are pooled back into one per readout
    (:mod:`valuelens.chunking`); none is truncated."""
    device = runner.device
    if not items:
        return [torch.zeros((0, r.dimension), dtype=torch.float32, device=device) for r in readouts], 0
    if reader.long_text == "chunk":
        plan = chunking.split(reader, items)
        grown = len(plan.items) - len(items)
        if grown and progress is not None and progress.total is not None:  # the bar counts the windows
            progress.total += grown * reader.passes
            progress.refresh()
        vectors, n_truncated = _run_passes(
            reader, runner, plan.items, readouts, batch_size, max_tokens_per_batch, progress
        )
        return [plan.pool(v) for v in vectors], n_truncated
    return _run_passes(reader, runner, items, readouts, batch_size, max_tokens_per_batch, progress)


def _run_passes(
    reader: TextReader,
    runner: ForwardPass,
    items: Sequence[str],
    readouts: Sequence[Readout],
    batch_size: int,
    max_tokens_per_batch: int | None,
    progress: tqdm | None,
) -> tuple[list[Tensor], int]:
    """:func:`run_batches` for items embedded as they are: each prompt pass in sorted batches, averaged."""
    device = runner.device
    passes: list[list[Tensor]] = [[] for _ in readouts]
    n_truncated = 0
    for template_index in range(reader.passes):
        tokenized, truncated = reader.tokenize(items, template_index)
        n_truncated = max(n_truncated, truncated)
        order = sorted(range(len(items)), key=lambda i: -len(tokenized[i].ids))
        outs = [torch.empty((len(items), r.dimension), dtype=torch.float32, device=device) for r in readouts]
        lengths = [len(item.ids) for item in tokenized]
        for chunk in plan_batches(order, lengths, batch_size, max_tokens_per_batch):
            embedded = _embed_chunk(reader, runner, tokenized, chunk, readouts)
            rows = torch.tensor(chunk, device=device)
            for out, emb in zip(outs, embedded, strict=True):
                out[rows] = emb.to(device)
            if progress is not None:
                progress.update(len(chunk))
        for collected, out in zip(passes, outs, strict=True):
            collected.append(out)
    return [average_passes(collected) for collected in passes], n_truncated


def _embed_chunk(
    reader: TextReader,
    runner: ForwardPass,
    tokenized: Sequence[TokenizedText],
    chunk: list[int],
    readouts: Sequence[Readout],
) -> list[Tensor]:
    """Embed the texts ``chunk`` (indices into ``tokenized``) in one batch; when that runs out of
    memory, embed each half on its own (recursively), down to one text, which then raises
    :class:`EncodeOutOfMemoryError` naming its index and length."""
    try:
        return runner.run(reader.collate([tokenized[i] for i in chunk]), readouts)
    except torch.OutOfMemoryError as exc:
        if len(chunk) == 1:
            msg = (
                f"out of memory embedding texts[{chunk[0]}] on its own ({len(tokenized[chunk[0]].ids)} "
                f"tokens, prompt included) on {runner.device}: lower max_length (now {reader.max_length}), "
                "or load the model in a smaller dtype or on a device with more free memory"
            )
            raise EncodeOutOfMemoryError(msg) from exc
    # retried outside the except block, so the failed attempt's tensors (held by the traceback) are freed
    if runner.device.type == "cuda":
        torch.cuda.empty_cache()
    half = len(chunk) // 2
    first = _embed_chunk(reader, runner, tokenized, chunk[:half], readouts)
    second = _embed_chunk(reader, runner, tokenized, chunk[half:], readouts)
    return [torch.cat(pair) for pair in zip(first, second, strict=True)]


def _group_key(pipeline: Pipeline) -> tuple[Any, ...]:
    """Pipelines with equal keys run the same forward passes (same inputs, same edits of the forward)."""
    return (pipeline.runner.key, pipeline.reader.key)


def embed_all(
    encoders: Sequence[Pipeline],
    items: Sequence[str],
    *,
    batch_size: int,
    show_progress: bool,
    max_tokens_per_batch: int | Literal["auto"] | None,
    stacklevel: int,
    raw: bool = False,
) -> list[Tensor]:
    """The embeddings of checked ``items`` for each encoder (fp32 tensors on its device), one
    :class:`TruncationWarning` for the call (``stacklevel`` counted from the public caller); with ``raw``,
    the readouts fused only (no post-processing, no lexical part: what a post-processing is fitted on)."""
    outputs: list[Tensor | None] = [None] * len(encoders)
    groups: dict[tuple, list[int]] = {}
    for i, encoder in enumerate(encoders):
        groups.setdefault(_group_key(encoder), []).append(i)
    total_passes = sum(encoders[members[0]].reader.passes for members in groups.values())
    n_truncated = 0
    with (
        tqdm(
            total=len(items) * total_passes,
            desc="valuelens",
            unit="text",
            disable=not show_progress or not items,
        ) as progress,
        torch.inference_mode(),
    ):
        for members in groups.values():
            leader = encoders[members[0]]
            readouts = [readout for i in members for readout in encoders[i].composition.readouts]
            results, truncated = run_batches(
                leader.reader,
                leader.runner,
                items,
                readouts,
                batch_size=batch_size,
                max_tokens_per_batch=token_budget(max_tokens_per_batch, leader.runner.device.type),
                progress=progress,
            )
            n_truncated = max(n_truncated, truncated)
            start = 0
            for i in members:
                composition = encoders[i].composition
                count = len(composition.readouts)
                parts = results[start : start + count]
                if raw:
                    outputs[i] = composition.raw(parts)
                else:
                    lexical = composition.lexical_part(items, encoders[i].side)
                    outputs[i] = composition.join(composition.dense(parts), lexical)
                start += count
    if n_truncated and encoders:
        warnings.warn(
            f"{n_truncated} of {len(items)} texts were longer than max_length={encoders[0].reader.max_length} tokens "
            "and were truncated (the prompt was kept)",
            TruncationWarning,
            stacklevel=stacklevel + 1,
        )
    return [out for out in outputs if out is not None]


def encode_many(
    encoders: Sequence[Pipeline],
    texts: Sequence[str],
    *,
    batch_size: int = 32,
    normalize: bool = False,
    show_progress: bool = False,
    convert_to_tensor: bool = False,
    max_tokens_per_batch: int | Literal["auto"] | None = "auto",
    raw: bool = False,
) -> list[np.ndarray] | list[Tensor]:
    """Embed ``texts`` with several encoders, sharing forward passes where they can.

    Returns one ``[n, dimension]`` array (or tensor) per encoder, in order; each equals what the
    encoder's own :meth:`~valuelens.Encoder.encode` gives (with ``raw``: its raw vectors, before the
    post-processing and the lexical part).
    """
    items, _ = check_texts(texts)
    check_batch_size(batch_size)
    check_token_budget(max_tokens_per_batch)
    tensors = embed_all(
        encoders,
        items,
        batch_size=batch_size,
        show_progress=show_progress,
        max_tokens_per_batch=max_tokens_per_batch,
        stacklevel=2,
        raw=raw,
    )
    if normalize:
        tensors = [torch.nn.functional.normalize(out, dim=-1) for out in tensors]
    return tensors if convert_to_tensor else [out.cpu().numpy() for out in tensors]


class SharedEncoding:
    """A text → vectors cache filled by :func:`encode_many` for several encoders at once; a view's
    ``encode_query`` reads queries through each encoder's query side (:meth:`Encoder.for_queries`).

    Usage: ``shared = SharedEncoding([va, best]); shared.view(1).encode_query(["what causes rain?"])``.
    """

    def __init__(self, encoders: Sequence[Searchable]) -> None:
        self.encoders = list(encoders)
        self.query_encoders = [encoder.for_queries() for encoder in self.encoders]
        self._cache: dict[str, list[np.ndarray]] = {}
        same = all(q is e for q, e in zip(self.query_encoders, self.encoders, strict=True))
        # without a query side anywhere, queries are documents: one cache serves both
        self._query_cache: dict[str, list[np.ndarray]] = self._cache if same else {}

    def compute(
        self, texts: Sequence[str], *, batch_size: int = 32, show_progress: bool = False, query: bool = False
    ) -> None:
        """Embed the ``texts`` not cached yet with every encoder (with ``query``, every query side)."""
        texts, _ = check_texts(texts, allow_single=False)
        cache = self._query_cache if query else self._cache
        missing = list(dict.fromkeys(t for t in texts if t not in cache))
        if not missing:
            return
        encoders = self.query_encoders if query else self.encoders
        results = encode_many(encoders, missing, batch_size=batch_size, show_progress=show_progress)
        arrays = [np.asarray(result) for result in results]
        for row, text in enumerate(missing):
            cache[text] = [array[row] for array in arrays]

    def view(self, index: int) -> _View:
        return _View(self, index)

    def clear(self) -> None:
        self._cache.clear()
        self._query_cache.clear()


class _View:
    """One encoder's vectors from a :class:`SharedEncoding` (``encode``, and ``encode_query`` for search
    queries, as :meth:`Encoder.encode_query`)."""

    def __init__(self, shared: SharedEncoding, index: int) -> None:
        self.shared = shared
        self.index = index
        self.encoder = shared.encoders[index]

    def encode(self, texts: list[str], *, batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return self._read(texts, batch_size, show_progress, query=False)

    def encode_query(
        self, texts: list[str], *, batch_size: int = 32, show_progress: bool = False
    ) -> np.ndarray:
        return self._read(texts, batch_size, show_progress, query=True)

    def _read(self, texts: list[str], batch_size: int, show_progress: bool, *, query: bool) -> np.ndarray:
        shared = self.shared
        shared.compute(texts, batch_size=batch_size, show_progress=show_progress, query=query)
        if not texts:
            return np.zeros((0, self.encoder.dimension), dtype=np.float32)
        cache = shared._query_cache if query else shared._cache
        return np.stack([cache[t][self.index] for t in texts])
