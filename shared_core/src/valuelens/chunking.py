"""Long texts read whole (``long_text="chunk"``): overlapping windows of a text's tokens, each embedded
under the prompt like a text of its own, and their vectors averaged back into one per text.

Usage::

    enc = Encoder.from_pretrained(max_length=128, long_text="chunk")
    enc.encode(long_document)                  # one vector: its windows' vectors, averaged
    [w.text for w in windows(enc.reader, long_document)]   # the window texts it embedded
    plan = split(enc.reader, texts)            # what the batching driver does: windows as items ...
    vectors = plan.pool(per_item_vectors)      # ... and their vectors back to one per text

It reads texts through a :class:`~valuelens.tokenization.TextReader` (the tokenizer, the prompt's
templates, the token limit), not through an encoder.

The rule, for a text that does not fit in ``max_length`` tokens under every template of the prompt
(MetaEOL's eight, Contrastive Prompting's auxiliary prompt) with Token Prepending's placeholder:

- **Window size** ``W``: the text tokens that fit beside the longest template (``max_length`` minus the
  template's own tokens and the placeholder, divided by the copies of the text it holds: 2 for Echo).
  If a window, embedded under its prompt, still takes more (tokens merge differently at its edges),
  ``W`` shrinks until every window fits: a window is never cut, so no ``TruncationWarning``.
- **Overlap**: a quarter of the window (``W // 4`` tokens; the step is ``W - W // 4``). A decoder reads
  each token in the light of the tokens before it, so the first tokens of a window are read there with
  little context; the overlap makes them the last quarter of the window before, read with up to
  ``W`` tokens of context. It costs about a third more tokens than the text holds (``W / step``). The
  last window ends at the text's end and may be shorter; it holds more than the overlap, never only
  tokens already read.
- **Windows are texts**: each is the text's characters from its first token to its last, put in the
  prompt like any text (Token Prepending's placeholder and Contrastive Prompting's auxiliary prompt
  apply to it as to any text), embedded in the usual token-budgeted batches.
- **Pooling**: per readout (after MetaEOL's passes are averaged for each window; before fusion,
  post-processing and normalization, which then run once per text), the mean of the windows' vectors weighted by each window's count of text tokens. For the
  mean-pooling recipes (VA, HS) that is the mean over every token the windows read, what the
  recipe computes over a text that fits (tokens in an overlap count twice); for the last-token ones
  (AlignedWVA, WVA), each window's summary counts in proportion to the text it summarizes, so a short
  last window does not weigh as much as a full one. Vectors are not normalized before the mean: a
  window's vector is what the recipe gives, as for a text that fits.

A text that fits is one item, embedded as under ``long_text="truncate"``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from valuelens.errors import ConfigError
from valuelens.tokenization import TextReader, copies, prompted_length, text_token_spans

__all__ = ["OVERLAP", "ChunkPlan", "Window", "split", "window_size", "windows"]

#: The overlap of two consecutive windows, as a fraction of the window (``W // 4`` tokens).
OVERLAP = 0.25


@dataclass(frozen=True)
class Window:
    """One window of a long text: its text, and the text tokens ``[first, end)`` it covers."""

    text: str
    first: int
    end: int

    @property
    def tokens(self) -> int:
        """Text tokens in the window: its weight in the mean."""
        return self.end - self.first


def _placeholder(reader: TextReader) -> int:
    return 1 if reader.placeholder else 0


def _excess(reader: TextReader, text: str) -> int:
    """How many tokens ``text`` takes beyond ``max_length`` under its longest template (≤ 0: it fits)."""
    room = reader.max_length - _placeholder(reader)
    return max(prompted_length(reader.tokenizer, text, p, i) for p, i in reader.templates) - room


def window_size(reader: TextReader) -> int:
    """Text tokens per window for ``reader``: what fits beside its longest template (see the module
    docstring). Raises :class:`ConfigError` when the prompt alone leaves no room."""
    room = reader.max_length - _placeholder(reader)
    sizes = []
    for prompt, index in reader.templates:
        alone = prompted_length(reader.tokenizer, "", prompt, index)
        if alone >= room:
            extra = " and Token Prepending's placeholder" if _placeholder(reader) else ""
            msg = (
                f"the prompt template alone is {alone} tokens{extra}, leaving no room for text in "
                f"max_length={reader.max_length}: raise max_length or use a shorter prompt"
            )
            raise ConfigError(msg)
        sizes.append((room - alone) // copies(prompt, index))
    return max(1, min(sizes))


def _bounds(n: int, size: int) -> list[tuple[int, int]]:
    """Windows ``[first, end)`` of ``size`` tokens over ``n``, a quarter overlapping; the last ends at ``n``."""
    step = size - int(size * OVERLAP)
    found = []
    first = 0
    while True:
        end = min(n, first + size)
        found.append((first, end))
        if end == n:
            return found
        first += step


def windows(reader: TextReader, text: str) -> list[Window]:
    """The windows ``reader`` embeds ``text`` as under ``long_text="chunk"``: overlapping windows that
    each fit in ``max_length`` when the text does not, else one window holding the whole text."""
    tokenizer = reader.tokenizer
    spans = text_token_spans(tokenizer, text)
    if spans is not None:
        n = len(spans)

        def piece(first: int, end: int) -> str:
            return text[spans[first][0] : spans[end - 1][1]]
    else:  # a slow tokenizer: no offsets, the window's tokens decoded
        ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        n = len(ids)

        def piece(first: int, end: int) -> str:
            return tokenizer.decode(ids[first:end], clean_up_tokenization_spaces=False)

    if n == 0 or _excess(reader, text) <= 0:
        return [Window(text, 0, n)]
    most = max(copies(p, i) for p, i in reader.templates)
    size = window_size(reader)
    while True:
        found = [Window(piece(first, end), first, end) for first, end in _bounds(n, size)]
        excess = max(_excess(reader, window.text) for window in found)
        if excess <= 0:
            return found
        size -= max(1, math.ceil(excess / most))
        if size < 1:  # pragma: no cover - a window of one token that does not fit beside the prompt
            msg = (
                f"a single token of the text does not fit beside the prompt in max_length={reader.max_length}: "
                "raise max_length or use a shorter prompt"
            )
            raise ConfigError(msg)


@dataclass(frozen=True)
class ChunkPlan:
    """The items that stand for ``n_texts`` texts (a text that fits is one item, a long one its windows),
    which text each item belongs to, and its weight (its text tokens; 1 for a text that fits)."""

    items: tuple[str, ...]
    owners: tuple[int, ...]
    weights: tuple[float, ...]
    n_texts: int

    @property
    def chunked(self) -> tuple[int, ...]:
        """The texts (indices) that were split into windows."""
        counts = [0] * self.n_texts
        for owner in self.owners:
            counts[owner] += 1
        return tuple(i for i, count in enumerate(counts) if count > 1)

    @property
    def n_chunked(self) -> int:
        """How many texts were split into windows."""
        return len(self.chunked)

    def pool(self, vectors: Tensor) -> Tensor:
        """One vector per text from one per item (``[len(items), dim]`` fp32): a text that fits keeps its
        item's vector as it is, a long text gets its windows' token-weighted mean."""
        if len(self.items) == self.n_texts:
            return vectors
        device = vectors.device
        owners = torch.tensor(self.owners, device=device)
        weights = torch.tensor(self.weights, dtype=vectors.dtype, device=device)
        sums = torch.zeros((self.n_texts, vectors.shape[1]), dtype=vectors.dtype, device=device)
        sums.index_add_(0, owners, vectors * weights[:, None])
        totals = torch.zeros(self.n_texts, dtype=vectors.dtype, device=device).index_add_(0, owners, weights)
        pooled = sums / totals[:, None]
        long = set(self.chunked)
        first: dict[int, int] = {}
        for row, owner in enumerate(self.owners):
            first.setdefault(owner, row)
        fits = [i for i in range(self.n_texts) if i not in long]
        pooled[fits] = vectors[[first[i] for i in fits]]  # a text that fits: its own vector, untouched
        return pooled


def split(reader: TextReader, texts: Sequence[str]) -> ChunkPlan:
    """The items ``reader`` embeds for ``texts`` under ``long_text="chunk"`` (see :class:`ChunkPlan`):
    a text that fits stays one item (weight 1), a long one becomes its :func:`windows`."""
    items: list[str] = []
    owners: list[int] = []
    weights: list[float] = []
    for owner, text in enumerate(texts):
        found = windows(reader, text) if _excess(reader, text) > 0 else [Window(text, 0, 1)]
        for window in found:
            items.append(window.text)
            owners.append(owner)
            weights.append(float(window.tokens))
    return ChunkPlan(tuple(items), tuple(owners), tuple(weights), len(texts))
