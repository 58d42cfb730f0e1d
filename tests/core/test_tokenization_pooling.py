"""Prompt spans, truncation, padding, and the pure pooling functions."""

from __future__ import annotations

import math

import pytest
import torch

from valuelens.errors import ConfigError
from valuelens.pooling import combine_layers, last_index, pool_heads, pool_tokens, token_weights
from valuelens.prompts import resolve_prompt
from valuelens.tokenization import collate, tokenize


def _decode_span(tok, item):
    return tok.decode(list(item.ids[item.span[0] : item.span[1]]))


def test_no_prompt_pools_every_token(tiny_tokenizer):
    (item,), n = tokenize(tiny_tokenizer, ["The cat sits."], prompt=None, max_length=64)
    assert n == 0 and item.span == (0, len(item.ids))


@pytest.mark.parametrize("name", ["prompteol", "futureeol", "echo"])
def test_prompt_span_covers_exactly_the_text(tiny_tokenizer, name):
    text = "The cat sits on the mat."
    (item,), _ = tokenize(tiny_tokenizer, [text], prompt=resolve_prompt(name), max_length=128)
    assert _decode_span(tiny_tokenizer, item).strip() == text
    if name == "echo":  # the second copy: the span starts after the first copy
        assert item.span[0] > 0 and item.span[1] == len(item.ids)


def test_truncation_cuts_text_and_keeps_prompt(tiny_tokenizer):
    long = " ".join(["The cat sits on the mat."] * 40)
    prompt = resolve_prompt("prompteol")
    (item,), n = tokenize(tiny_tokenizer, [long], prompt=prompt, max_length=48)
    assert n == 1 and item.truncated
    assert len(item.ids) <= 48
    decoded = tiny_tokenizer.decode(list(item.ids))
    assert decoded.startswith("This sentence:") and decoded.endswith('means in one word:"')
    (echo,), _ = tokenize(tiny_tokenizer, [long], prompt=resolve_prompt("echo"), max_length=40)
    assert len(echo.ids) <= 40


def test_prompt_longer_than_max_length_is_an_error(tiny_tokenizer):
    with pytest.raises(ConfigError, match="prompt template alone"):
        tokenize(tiny_tokenizer, ["x"], prompt=resolve_prompt("metaeol"), max_length=10)


def test_empty_text_gets_a_token(tiny_tokenizer):
    items, _ = tokenize(tiny_tokenizer, ["", "   "], prompt=None, max_length=16)
    assert items[0].ids == (tiny_tokenizer.eos_token_id,) and items[0].span == (0, 1)
    assert len(items[1].ids) >= 1
    (prompted,), _ = tokenize(tiny_tokenizer, [""], prompt=resolve_prompt("prompteol"), max_length=64)
    assert prompted.span[1] > prompted.span[0]


@pytest.mark.parametrize("side", ["left", "right"])
def test_collate_shifts_spans(tiny_tokenizer, side):
    items, _ = tokenize(
        tiny_tokenizer, ["A cat.", "A man is playing a guitar."], prompt=resolve_prompt("echo"), max_length=64
    )
    batch = collate(items, pad_id=1, padding_side=side)
    for row, item in enumerate(items):
        got = batch.input_ids[row, batch.span_start[row] : batch.span_end[row]].tolist()
        assert got == list(item.ids[item.span[0] : item.span[1]])
        real = batch.attention_mask[row].nonzero().flatten()
        assert batch.position_ids[row, real].tolist() == list(range(len(item.ids)))
    assert last_index(batch.attention_mask).tolist() == [
        (batch.input_ids.shape[1] - 1 if side == "left" else len(it.ids) - 1) for it in items
    ]


def test_token_weights_mean_and_position():
    mask = torch.tensor([[1, 1, 1, 1, 0], [0, 1, 1, 1, 1]])
    start, end = torch.tensor([1, 1]), torch.tensor([4, 5])
    mean = token_weights(mask, start, end, "mean")
    assert torch.allclose(mean[0], torch.tensor([0, 1 / 3, 1 / 3, 1 / 3, 0]))
    assert torch.allclose(mean[1], torch.tensor([0, 0.25, 0.25, 0.25, 0.25]))
    pos = token_weights(mask, start, end, "position")
    assert torch.allclose(pos[0], torch.tensor([0, 1, 2, 3, 0]) / 6.0)  # SGPT: weight ∝ 1..n
    assert torch.allclose(pos.sum(1), torch.ones(2))


def test_pooling_ignores_nan_in_padding_and_does_not_mutate():
    x = torch.arange(24, dtype=torch.bfloat16).view(2, 3, 4)
    x[1, 2] = float("nan")
    before = x.clone()
    w = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    out = pool_tokens(x, w)
    assert out.dtype == torch.float32 and not torch.isnan(out).any()
    assert torch.allclose(out[0], (x[0, 0].float() + x[0, 1].float()) / 2)
    assert torch.equal(x.isnan(), before.isnan()) and torch.equal(x.nan_to_num(), before.nan_to_num())
    assert torch.equal(pool_tokens(x, index=torch.tensor([2, 0])), torch.stack([x[0, 2], x[1, 0]]).float())


def test_pool_heads_per_head_weights():
    x = torch.randn(2, 3, 5, 4)
    w = torch.softmax(torch.randn(2, 3, 5), -1)
    got = pool_heads(x, w)
    want = torch.stack([torch.cat([(w[b, h, :, None] * x[b, h]).sum(0) for h in range(3)]) for b in range(2)])
    assert torch.allclose(got, want, atol=1e-6)


def test_combine_layers():
    a, b = torch.tensor([[3.0, 4.0]]), torch.tensor([[30.0, 40.0]])
    assert torch.allclose(combine_layers([a, b]), torch.tensor([[16.5, 22.0]]))
    assert torch.allclose(combine_layers([a, b], "normalized-mean"), torch.tensor([[0.6, 0.8]]))
    assert math.isclose(float(combine_layers([a], "mean")[0, 0]), 3.0)
    with pytest.raises(ValueError):
        combine_layers([])
