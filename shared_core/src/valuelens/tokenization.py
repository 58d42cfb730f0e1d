"""Prompted tokenization with pooled-span tracking, truncation that keeps the prompt, and padding.

Usage::

    items, n_truncated = tokenize(tokenizer, ["A cat."], prompt=resolve_prompt("prompteol"), max_length=512)
    batch = collate(items, pad_id=0, padding_side="right")   # tensors: input_ids, attention_mask, ...

Each item records the token span ``[start, end)`` of the pooled copy of the text (all tokens when
there is no prompt), so mean-type recipes pool over the text and never over the prompt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from valuelens.errors import ConfigError
from valuelens.prompts import PLACEHOLDER, Prompt

_IDENTITY = Prompt("none", (PLACEHOLDER,))


@dataclass(frozen=True)
class TokenizedText:
    """Token ids of one prompted text and the span of its pooled copy (end exclusive)."""

    ids: tuple[int, ...]
    span: tuple[int, int]
    truncated: bool = False


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


def tokenize(
    tokenizer,
    texts: Sequence[str],
    *,
    prompt: Prompt | None,
    template_index: int = 0,
    max_length: int,
) -> tuple[list[TokenizedText], int]:
    """Tokenize ``texts`` under ``prompt`` (template ``template_index``); return items and the number
    of texts that were truncated to ``max_length`` tokens (the text is cut, the prompt is kept)."""
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
        items.append(TokenizedText(tuple(ids), span, truncated))
    return items, n_truncated


@dataclass(frozen=True)
class Batch:
    """Padded tensors of one batch (all on CPU; the encoder moves them)."""

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    span_start: Tensor
    span_end: Tensor


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
    return Batch(ids, mask, position_ids, start, end)
