"""Prompted tokenization with pooled-span tracking, truncation that keeps the prompt, and padding.

Usage::

    items, n_truncated = tokenize(tokenizer, ["A cat."], prompt=resolve_prompt("prompteol"), max_length=512)
    batch = collate(items, pad_id=0, padding_side="right")   # tensors: input_ids, attention_mask, ...
    reader = TextReader.for_spec(tokenizer, config)          # how one side of an encoder reads its texts
    items, n_truncated = reader.tokenize(["A cat."]); batch = reader.collate(items)

Each item records the token span ``[start, end)`` of the pooled copy of the text (all tokens when
there is no prompt), so mean-type recipes pool over the text and never over the prompt. With a
``placeholder`` token (Token Prepending) one more token goes right before the pooled copy (after a
leading BOS when there is no prompt; the span then starts after it) and its position is recorded.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from valuelens.config import EncoderConfig, LongText
from valuelens.errors import ConfigError
from valuelens.prompts import PLACEHOLDER, Prompt, resolve_prompt

_IDENTITY = Prompt("none", (PLACEHOLDER,))


@dataclass(frozen=True)
class TokenizedText:
    """Token ids of one prompted text and the span of its pooled copy (end exclusive)."""

    ids: tuple[int, ...]
    span: tuple[int, int]
    truncated: bool = False
    marker: int | None = None
    """Position of the Token Prepending placeholder, if any."""
    aux: TokenizedText | None = None
    """The same text under Contrastive Prompting's auxiliary prompt, if any."""


def _fallback_token(tokenizer) -> int:
    for name in ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    return 0


def _encode(
    tokenizer, prompted: str, start: int, end: int, whole: bool
) -> tuple[list[int], tuple[int, int], list[tuple[int, int]] | None]:
    """Token ids of ``prompted``, the token span overlapping characters ``[start, end)`` (all tokens
    when ``whole``), and the character offsets of the tokens (``None`` for slow tokenizers)."""
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(prompted, add_special_tokens=True, return_offsets_mapping=True, verbose=False)
        ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        inside = [i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > start]
        if whole or not inside:
            return ids, (0, len(ids)), offsets
        return ids, (inside[0], inside[-1] + 1), offsets
    # slow tokenizers have no offsets: tokenize the three pieces and join them
    head, text, tail = prompted[:start], prompted[start:end], prompted[end:]
    with_specials = tokenizer(prompted, add_special_tokens=True, verbose=False)["input_ids"]
    plain = tokenizer(prompted, add_special_tokens=False, verbose=False)["input_ids"]
    n_lead = 0
    if len(with_specials) > len(plain) and with_specials[1 : 1 + len(plain)] == plain:
        n_lead = 1
    pieces = [
        tokenizer(p, add_special_tokens=False, verbose=False)["input_ids"] if p else []
        for p in (head, text, tail)
    ]
    ids = with_specials[:n_lead] + pieces[0] + pieces[1] + pieces[2]
    ids += with_specials[n_lead + len(plain) :]
    if whole or not pieces[1]:
        return ids, (0, len(ids)), None
    s = n_lead + len(pieces[0])
    return ids, (s, s + len(pieces[1])), None


def _text_tokens(offsets: list[tuple[int, int]], start: int, end: int) -> list[int]:
    """Indices of the tokens that overlap the text's characters ``[start, end)``."""
    return [i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > start]


def prompted_length(tokenizer, text: str, prompt: Prompt | None, template_index: int = 0) -> int:
    """How many tokens ``text`` takes under ``prompt``'s template ``template_index``, special tokens
    included, nothing cut, no placeholder: what :func:`tokenize` compares with ``max_length``."""
    chosen = prompt or _IDENTITY
    prompted, start, end = chosen.render(text, template_index)
    return len(_encode(tokenizer, prompted, start, end, prompt is None)[0])


def copies(prompt: Prompt | None, template_index: int = 0) -> int:
    """How many times template ``template_index`` holds the text (2 for Echo, 1 without a prompt)."""
    return 1 if prompt is None else prompt.templates[template_index].count(PLACEHOLDER)


def text_token_spans(tokenizer, text: str) -> list[tuple[int, int]] | None:
    """The character span ``[start, end)`` of each of ``text``'s own tokens (no special tokens, no
    prompt) that covers characters, in order; ``None`` for a slow tokenizer (no character offsets)."""
    if not getattr(tokenizer, "is_fast", False):
        return None
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    return [(s, e) for s, e in enc["offset_mapping"] if e > s]


def tokenize(
    tokenizer,
    texts: Sequence[str],
    *,
    prompt: Prompt | None,
    template_index: int = 0,
    max_length: int,
    placeholder: int | None = None,
) -> tuple[list[TokenizedText], int]:
    """Tokenize ``texts`` under ``prompt`` (template ``template_index``); return items and the number
    of texts that were truncated to ``max_length`` tokens (the text is cut, the prompt is kept).
    ``placeholder``: a token id put before the pooled copy (Token Prepending), counted in ``max_length``."""
    if placeholder is not None:
        max_length -= 1
        if max_length < 1:
            msg = "max_length must leave room for Token Prepending's placeholder token (at least 2)"
            raise ConfigError(msg)
    chosen = prompt or _IDENTITY
    whole = prompt is None
    copies = chosen.templates[template_index].count(PLACEHOLDER)
    items: list[TokenizedText] = []
    n_truncated = 0
    for text in texts:
        prompted, start, end = chosen.render(text, template_index)
        ids, span, offsets = _encode(tokenizer, prompted, start, end, whole)
        truncated = False
        cut = text
        while len(ids) > max_length and cut:
            truncated = True
            excess = len(ids) - max_length
            inside = _text_tokens(offsets, start, end) if offsets is not None else []
            n_text_tokens = len(inside) if inside else max(span[1] - span[0], 1)
            keep_tokens = n_text_tokens - math.ceil(excess / copies)
            if keep_tokens <= 0:
                keep_chars = 0
            elif inside and offsets is not None:
                # cut on a token boundary: the kept text re-tokenizes to the same tokens
                keep_chars = offsets[inside[keep_tokens - 1]][1] - start
            else:  # no offsets: cut proportionally, then re-check
                keep_chars = int(len(cut) * keep_tokens / n_text_tokens)
            cut = cut[: max(0, min(keep_chars, len(cut) - 1))]
            prompted, start, end = chosen.render(cut, template_index)
            ids, span, offsets = _encode(tokenizer, prompted, start, end, whole)
        if len(ids) > max_length:
            if whole:
                ids, span = ids[:max_length], (0, max_length)
            else:
                empty_len = len(_encode(tokenizer, chosen.render("", template_index)[0], 0, 0, True)[0])
                msg = (
                    f"the prompt template alone is {empty_len} tokens, more than max_length={max_length}: "
                    "raise max_length or use a shorter prompt"
                )
                raise ConfigError(msg)
        if not ids:  # an empty text with no prompt and no special tokens: embed the end-of-text token
            ids, span = [_fallback_token(tokenizer)], (0, 1)
        n_truncated += truncated
        marker = None
        if placeholder is not None:
            ids, span, marker = _insert_placeholder(tokenizer, ids, span, placeholder, whole)
        items.append(TokenizedText(tuple(ids), span, truncated, marker))
    return items, n_truncated


def _insert_placeholder(
    tokenizer, ids: list[int], span: tuple[int, int], placeholder: int, whole: bool
) -> tuple[list[int], tuple[int, int], int]:
    """Put ``placeholder`` before the pooled copy; return ids, span and the placeholder's position."""
    if whole:  # no prompt: after a leading BOS, and the pooled span is the text after the placeholder
        bos = getattr(tokenizer, "bos_token_id", None)
        at = 1 if len(ids) > 1 and bos is not None and ids[0] == bos else 0
        return [*ids[:at], placeholder, *ids[at:]], (at + 1, len(ids) + 1), at
    at = span[0]
    return [*ids[:at], placeholder, *ids[at:]], (span[0] + 1, span[1] + 1), at


def placeholder_token(tokenizer) -> int:
    """The token id Token Prepending puts before the text (its state is overwritten from the first
    prepend layer on): the end-of-text token, else another special token."""
    return _fallback_token(tokenizer)


@dataclass(frozen=True)
class Batch:
    """Padded tensors of one batch (all on CPU; the encoder moves them)."""

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    span_start: Tensor
    span_end: Tensor
    marker: Tensor | None = None
    """Position of each row's Token Prepending placeholder (padded coordinates), if any."""
    aux: Batch | None = None
    """The rows under Contrastive Prompting's auxiliary prompt, if any."""


def collate(
    items: Sequence[TokenizedText], *, pad_id: int, padding_side: Literal["left", "right"] = "right"
) -> Batch:
    """Pad ``items`` to one length on ``padding_side``; spans are shifted into padded coordinates."""
    width = max(len(item.ids) for item in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    start = torch.empty(len(items), dtype=torch.long)
    end = torch.empty(len(items), dtype=torch.long)
    for row, item in enumerate(items):
        n = len(item.ids)
        offset = width - n if padding_side == "left" else 0
        ids[row, offset : offset + n] = torch.tensor(item.ids, dtype=torch.long)
        mask[row, offset : offset + n] = 1
        start[row] = offset + item.span[0]
        end[row] = offset + item.span[1]
    position_ids = (mask.cumsum(dim=1) - 1).clamp_min(0)
    marker = None
    if any(item.marker is not None for item in items):
        if any(item.marker is None for item in items):
            msg = "either every text of a batch has a Token Prepending placeholder or none does"
            raise ValueError(msg)
        offsets = [width - len(item.ids) if padding_side == "left" else 0 for item in items]
        marker = torch.tensor([o + item.marker for o, item in zip(offsets, items, strict=True)])  # type: ignore[operator]
    aux = None
    if any(item.aux is not None for item in items):
        auxes = [item.aux for item in items]
        if any(a is None for a in auxes):
            msg = "either every text of a batch has an auxiliary (contrast) prompt or none does"
            raise ValueError(msg)
        aux = collate([a for a in auxes if a is not None], pad_id=pad_id, padding_side=padding_side)
    return Batch(ids, mask, position_ids, start, end, marker, aux)


@dataclass(frozen=True, eq=False)
class TextReader:
    """How one side of an encoder reads its texts: the tokenizer, the prompt (documents: ``prompt``;
    queries: ``query_template``), Contrastive Prompting's auxiliary prompt, Token Prepending's placeholder,
    the token limit and what happens past it. It tokenizes and pads; the chunking and batching drivers
    take it instead of an encoder. Usage: ``TextReader.for_spec(tokenizer, config).tokenize(["A cat."])``.
    """

    tokenizer: Any
    prompt: Prompt | None
    contrast_prompt: Prompt | None
    placeholder: bool
    max_length: int
    long_text: LongText

    @classmethod
    def for_spec(cls, tokenizer: Any, config: EncoderConfig, *, query: bool = False) -> TextReader:
        """The documents' reader of ``config`` (or, with ``query``, the queries': under ``query_template``
        when the spec has one)."""
        template = config.query_template if query and config.query_template is not None else config.prompt
        return cls(
            tokenizer,
            resolve_prompt(template),
            resolve_prompt(config.contrast_prompt) if config.contrast_layer is not None else None,
            config.prepend_layers is not None,
            config.effective_max_length,
            config.long_text,
        )

    def replace(self, **changes: Any) -> TextReader:
        """A copy with ``changes`` (e.g. ``max_length=512, long_text="truncate"``)."""
        return dataclasses.replace(self, **changes)

    @property
    def passes(self) -> int:
        """Forward passes per text: one per prompt template (eight for MetaEOL)."""
        return self.prompt.passes if self.prompt is not None else 1

    @property
    def templates(self) -> list[tuple[Prompt | None, int]]:
        """Every (prompt, template index) a text is tokenized under (the auxiliary prompt's included)."""
        found: list[tuple[Prompt | None, int]] = [(self.prompt, i) for i in range(self.passes)]
        if self.contrast_prompt is not None:
            found.append((self.contrast_prompt, 0))
        return found

    @property
    def key(self) -> tuple[Any, ...]:
        """Readers with equal keys give equal tokens for equal texts (they may share forward passes)."""
        prompt = self.prompt.templates if self.prompt is not None else None
        contrast = self.contrast_prompt.templates if self.contrast_prompt is not None else None
        return (id(self.tokenizer), prompt, contrast, self.placeholder, self.max_length, self.long_text)

    def tokenize(
        self, texts: Sequence[str], template_index: int = 0, *, max_length: int | None = None
    ) -> tuple[list[TokenizedText], int]:
        """Prompted tokenization with pooled spans (and the placeholder and auxiliary prompt the spec asks
        for); returns the items and how many texts were truncated (under the prompt or the auxiliary one)."""
        limit = max_length or self.max_length
        placeholder = placeholder_token(self.tokenizer) if self.placeholder else None
        items, n_truncated = tokenize(
            self.tokenizer,
            texts,
            prompt=self.prompt,
            template_index=template_index,
            max_length=limit,
            placeholder=placeholder,
        )
        if self.contrast_prompt is not None:
            auxes, _ = tokenize(
                self.tokenizer, texts, prompt=self.contrast_prompt, max_length=limit, placeholder=placeholder
            )
            items = [dataclasses.replace(item, aux=aux) for item, aux in zip(items, auxes, strict=True)]
            n_truncated = sum(item.truncated or aux.truncated for item, aux in zip(items, auxes, strict=True))
        return items, n_truncated

    def collate(self, items: Sequence[TokenizedText]) -> Batch:
        """Pad tokenized items to one batch, on the tokenizer's padding side."""
        tokenizer = self.tokenizer
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        side: Literal["left", "right"] = (
            "left" if getattr(tokenizer, "padding_side", "right") == "left" else "right"
        )
        return collate(items, pad_id=pad, padding_side=side)
