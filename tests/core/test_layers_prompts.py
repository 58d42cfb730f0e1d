"""Layer specs and prompt templates."""

from __future__ import annotations

import pytest

from valuelens.errors import ConfigError
from valuelens.layers import depth_band, resolve_layers, validate_spec
from valuelens.prompts import NAMED_PROMPTS, Prompt, resolve_prompt


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("all", tuple(range(8))),
        ("half", (4, 5, 6, 7)),
        ("last", (7,)),
        ("2-4", (2, 3, 4)),
        ("1,3-4,7", (1, 3, 4, 7)),
        ([5, 1, 5], (1, 5)),
        (-1, (7,)),
        ([-2, -1], (6, 7)),
        ("-3--1", (5, 6, 7)),
        (3, (3,)),
        ("70%-100%", (5, 6, 7)),  # round(0.7 * 7) = 5 .. 7
        ("0%", (0,)),
        ("0%-30%,100%", (0, 1, 2, 7)),
    ],
)
def test_resolve_layers(spec, want):
    assert resolve_layers(spec, 8) == want


def test_a_relative_band_lands_on_the_same_depth_for_every_model():
    # the untuned rule's band on the three bundled depths (what research/default_rule.py scored)
    assert resolve_layers("70%-100%", 30) == tuple(range(20, 30))
    assert resolve_layers("70%-100%", 18) == tuple(range(12, 18))
    assert resolve_layers("70%-100%", 24) == tuple(range(16, 24))
    for spec in ("70%-120%", "90%-70%", "70-100%", "x%", "70%-80%-90%"):
        with pytest.raises(ConfigError, match=r"layers="):
            resolve_layers(spec, 30)


def test_auto_uses_given_default_else_band():
    assert resolve_layers("auto", 30, auto=(3, 4)) == (3, 4)
    assert resolve_layers("auto", 30) == depth_band(30)
    assert depth_band(30) == tuple(range(15, 26))  # 50 % .. 85 % of 30 layers
    assert depth_band(32)[0] == 16 and depth_band(32)[-1] == 27
    assert depth_band(1) == (0,)


@pytest.mark.parametrize("spec", [8, [0, 8], "7-9", -9])
def test_out_of_range_names_layer_count(spec):
    with pytest.raises(ConfigError, match="has 8 decoder layers"):
        resolve_layers(spec, 8)


@pytest.mark.parametrize("spec", ["middle", "a-b", "4-2", [], [1.5], None, True])
def test_bad_specs_raise_config_error(spec):
    with pytest.raises(ConfigError):
        resolve_layers(spec, 8)


def test_validate_spec_is_syntax_only():
    validate_spec("20-27")
    validate_spec([100])
    with pytest.raises(ConfigError, match="cannot parse"):
        validate_spec("twenty")


def test_named_prompts_render_and_pool_the_last_copy():
    echo = resolve_prompt("echo")
    text, start, end = echo.render("hi there")
    assert text == "hi there hi there"
    assert text[start:end] == "hi there" and start == 9
    eol, start, end = resolve_prompt("PromptEOL").render("A cat.")
    assert eol == 'This sentence: "A cat." means in one word:"'
    assert eol[start:end] == "A cat."
    assert resolve_prompt("metaeol").passes == 8 == len(NAMED_PROMPTS["metaeol"])
    assert all('"{text}"' in t for t in NAMED_PROMPTS["metaeol"])


def test_custom_prompt_keeps_braces_and_spec_round_trips():
    prompt = resolve_prompt("Query {x}: {text}")
    assert prompt.render("q")[0] == "Query {x}: q"
    assert resolve_prompt(prompt.spec) == prompt
    assert resolve_prompt(None) is None


@pytest.mark.parametrize("spec", ["promptEOLX", "no placeholder", 3])
def test_bad_prompts(spec):
    with pytest.raises(ConfigError):
        resolve_prompt(spec)
    with pytest.raises(ConfigError, match="placeholder"):
        Prompt("x", ("no text here",))
