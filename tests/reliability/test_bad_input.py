"""Bad and odd input through ``Encoder.encode`` and each adapter: a documented result or a clear error.

Every case checks that no hook is left on the model and no capture is left active, error or not, and
that every vector returned is finite.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from reliability.support import Surface, run_async
from tiny_models import CORPUS

# (texts, exception, message pattern): errors name the bad index (or the whole argument) and why
BAD_LISTS = [
    pytest.param(None, TypeError, r"None", id="none"),
    pytest.param(3, TypeError, r"int", id="int"),
    pytest.param(b"bytes", TypeError, r"bytes", id="bytes"),
    pytest.param([["nested"]], TypeError, r"\[0\].*list", id="nested-list"),
    pytest.param(["ok", "fine", 7], TypeError, r"\[2\].*int", id="int-item"),
    pytest.param(["ok", None], TypeError, r"\[1\].*None", id="none-item"),
    pytest.param(["ok", b"raw"], TypeError, r"\[1\].*bytes", id="bytes-item"),
    pytest.param(["ok", "a\ud800b"], ValueError, r"\[1\].*surrogate.*position 1", id="lone-surrogate"),
    pytest.param(["ok", "\udcff"], ValueError, r"\[1\].*surrogate", id="surrogateescape-byte"),
]

ODD_TEXTS = {
    "empty": "",
    "whitespace": " \t\n\r  ",
    "control": "a\x00b\x01c\x07\x1b[31m\x7f\u200b\ufeff",
    "nul-only": "\x00\x00\x00",
    "emoji-cjk-rtl": "👩‍👩‍👧‍👦 猫が座っている 🐈 القطة تجلس שלום עולם \u202eabc\u202c",
    "combining": "e\u0301" * 50,
    "replacement-char": "\ufffd\ufffd",
    "max-codepoint": "\U0010ffff\U000e0001",
}


def _assert_finite(vectors: np.ndarray, rows: int, dim: int) -> None:
    assert vectors.shape == (rows, dim)
    assert np.isfinite(vectors).all()


@pytest.mark.parametrize(("texts", "error", "pattern"), BAD_LISTS)
def test_bad_lists_raise_naming_the_index(surface: Surface, texts, error, pattern):
    if surface.name == "sentence-transformers":
        # the host sorts texts by length and hands batches to ValueTransformer.preprocess: the index is
        # the one in that batch (the message shows the text's type, or the text for a surrogate)
        pattern = re.sub(r"\\\[\d\\\]", r"\\[\\d+\\]", pattern)
    with pytest.raises(error, match=pattern):
        surface.embed(texts)
    assert surface.clean()
    assert surface.embed(CORPUS[:2]).shape[0] == 2  # still usable


@pytest.mark.parametrize(
    ("text", "error", "pattern"),
    [(None, TypeError, "None"), (7, TypeError, "int"), ("\ud800", ValueError, "surrogate.*position 0")],
)
def test_bad_single_text(surface: Surface, text, error, pattern):
    with pytest.raises(error, match=pattern):
        surface.embed_one(text)
    assert surface.clean()


def test_bad_input_async(async_surface: Surface):
    surface = async_surface
    assert surface.aembed is not None and surface.aembed_one is not None
    with pytest.raises(TypeError, match=r"\[1\]"):
        run_async(surface.aembed(["ok", None]))
    with pytest.raises(ValueError, match=r"\[1\].*surrogate"):
        run_async(surface.aembed(["ok", "\ud800"]))
    with pytest.raises(ValueError, match="surrogate"):
        run_async(surface.aembed_one("\ud800"))
    assert surface.clean()


def test_bare_string_and_empty_list(surface: Surface, encoder):
    dim = encoder.dimension
    if surface.accepts_bare_string:
        one = surface.embed("A cat sits.")
        assert one.shape == (dim,)
        np.testing.assert_allclose(one, surface.embed(["A cat sits."])[0], atol=1e-5)
    else:  # LangChain / LlamaIndex: a list method given a str is a mistake (their hosts' contract)
        with pytest.raises(TypeError, match="single str"):
            surface.embed("A cat sits.")
    assert surface.embed_one("A cat sits.").shape == (dim,)
    empty = surface.embed([])
    assert empty.size == 0  # [0, dim] from valuelens; sentence-transformers returns its own empty array
    assert surface.clean()


def test_odd_texts_give_finite_vectors(surface: Surface, encoder):
    texts = list(ODD_TEXTS.values())
    out = surface.embed(texts)
    _assert_finite(out, len(texts), encoder.dimension)
    for i, text in enumerate(texts):  # alone, each gives what it gives in the batch
        np.testing.assert_allclose(surface.embed_one(text), out[i], atol=1e-4)
    assert surface.clean()


def test_100k_character_text_is_truncated_with_one_warning(surface: Surface, encoder):
    from valuelens import TruncationWarning

    long_text = ("The cat sits on the mat. 猫 🐈 " * 4000)[:100_000]
    assert len(long_text) == 100_000
    if surface.name == "sentence-transformers":  # the host truncates to max_seq_length silently
        out = surface.embed([long_text, "short"])
    else:
        with pytest.warns(TruncationWarning, match="1 of 2 texts"):
            out = surface.embed([long_text, "short"])
    _assert_finite(out, 2, encoder.dimension)
    assert surface.clean()


def test_core_truncation_keeps_the_prompt(tiny_llama, tiny_tokenizer):
    from valuelens import Encoder, TruncationWarning

    enc = Encoder(tiny_llama, tiny_tokenizer, recipe="last-token", prompt="prompteol", max_length=32)
    long_text = "word " * 20_000
    with pytest.warns(TruncationWarning):
        out = enc.encode([long_text, long_text + "tail"])
    # both are cut to the same first tokens and keep the prompt's end: the same vector
    np.testing.assert_allclose(out[0], out[1], atol=1e-5)
    assert np.isfinite(out).all()


def test_ten_thousand_short_texts_in_one_call(surface: Surface, encoder):
    texts = [f"{CORPUS[i % len(CORPUS)][:12]} {i}" for i in range(10_000)]
    out = surface.embed(texts)
    _assert_finite(out, 10_000, encoder.dimension)
    for i in (0, 4_321, 9_999):  # order kept
        np.testing.assert_allclose(out[i], surface.embed_one(texts[i]), atol=1e-4)
    assert surface.clean()


def test_surrogate_check_is_cheap_on_clean_text():
    """The Unicode check runs on every text: it must not cost more than tokenizing would."""
    import time

    from valuelens.inputs import check_texts

    texts = ["naïve café 猫 " * 20] * 20_000
    start = time.perf_counter()
    check_texts(texts)
    assert time.perf_counter() - start < 1.0
