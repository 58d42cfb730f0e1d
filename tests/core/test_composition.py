"""What a vector is made of (:mod:`valuelens.composition`) and the states it is built from
(:mod:`valuelens.states`): the encoder assembles from them and fits nothing itself; the parts join,
split, save and load back."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import torch

from tiny_models import CORPUS
from valuelens import ConfigError, Encoder, EncoderConfig, ValueLensError, states as states_module
from valuelens.composition import STATE_FILES, Composition, FittedStates
from valuelens.io import read_records, unlabeled_texts
from valuelens.states import RawEncoder, build_states

#: the input-embedding lexical part: its state needs the model's embeddings, and its join has a closed form
SPEC = EncoderConfig(
    recipe="va",
    layers=[1, 2],
    postprocess="fit:center",
    lexical=0.3,
    lexical_query=0.8,
    lexical_kind="embeddings",
)


@pytest.fixture
def encoder(tiny_llama, tiny_tokenizer):
    return Encoder(tiny_llama, tiny_tokenizer, SPEC)


def test_split_gives_back_the_model_part_and_the_lexical_part(encoder, tiny_llama, tiny_tokenizer):
    vectors = torch.from_numpy(encoder.encode(CORPUS))
    model_part, lexical = encoder.composition.split(vectors)
    plain = Encoder(tiny_llama, tiny_tokenizer, SPEC.replace(lexical=None, lexical_query=None))
    unit = torch.nn.functional.normalize(torch.from_numpy(plain.encode(CORPUS)), dim=-1)
    torch.testing.assert_close(model_part, unit, atol=1e-5, rtol=1e-4)
    assert lexical is not None
    torch.testing.assert_close(lexical, encoder.lexical.encode(CORPUS), atol=1e-5, rtol=1e-4)
    # the query side joins the same parts at its own weight: cos = √((1−q)(1−w))·cos(model) + √(qw)·cos(lex)
    queries = torch.from_numpy(encoder.encode_query(CORPUS[:2]))
    expected = (1 - 0.8) ** 0.5 * (1 - 0.3) ** 0.5 * unit[:2] @ unit.T + (0.8 * 0.3) ** 0.5 * (
        lexical[:2] @ lexical.T
    )
    torch.testing.assert_close(queries @ vectors.T, expected, atol=1e-4, rtol=1e-4)
    no_lexical = plain.composition.split(unit)
    assert no_lexical[1] is None and no_lexical[0] is unit
    with pytest.raises(ValueError, match=f"expected {encoder.dimension}-dim"):
        encoder.composition.split(unit)


def test_handed_states_are_used_as_they_are_and_nothing_is_fitted(
    encoder, tiny_llama, tiny_tokenizer, monkeypatch
):
    given = encoder.composition.states
    assert isinstance(given, FittedStates) and given.postprocess is not None and given.lexical is not None

    def refuse(*args, **kwargs):
        raise AssertionError("the encoder fitted a state although it was handed one")

    monkeypatch.setattr(states_module, "fitted_postprocess", refuse)
    monkeypatch.setattr(states_module, "lexical_state", refuse)
    again = Encoder(tiny_llama, tiny_tokenizer, SPEC, states=given)
    np.testing.assert_allclose(again.encode(CORPUS), encoder.encode(CORPUS), atol=1e-6)
    with pytest.raises(ConfigError, match="do not match"):
        Encoder(tiny_llama, tiny_tokenizer, SPEC, states=FittedStates(None, given.lexical))


def test_the_builder_fits_from_raw_vectors_without_an_encoder(encoder, tiny_llama, tiny_tokenizer):
    raw = RawEncoder(encoder, encoder.name_or_path, encoder.config.replace(max_length=None))
    assert raw.raw_dimension == encoder.raw_dimension
    built = build_states(encoder.config, model=tiny_llama, tokenizer=tiny_tokenizer, raw=raw)
    torch.testing.assert_close(built.postprocess.mean, encoder.postprocess.mean)  # read from the cache
    with pytest.raises(ConfigError, match="lexical part"):
        Composition.assemble(encoder.config, encoder.readouts, built)  # no input embeddings given
    bm25 = encoder.config.replace(lexical=0.05, lexical_query=0.7, lexical_kind="bm25")
    words = build_states(bm25, model=tiny_llama, tokenizer=tiny_tokenizer, raw=raw)
    composed = Composition.assemble(bm25, encoder.readouts, words)  # word-level: no embeddings needed
    assert composed.dimension == encoder.raw_dimension + bm25.lexical_dim + 1


def test_saved_states_load_back_as_the_same_vectors(encoder, tiny_llama, tiny_tokenizer, tmp_path):
    written = encoder.composition.save(tmp_path, encoder.config)
    assert written == STATE_FILES and all((tmp_path / name).is_file() for name in written.values())
    references = {field: str(tmp_path / name) for field, name in written.items()}
    loaded = Encoder(tiny_llama, tiny_tokenizer, encoder.config.replace(**references))
    np.testing.assert_allclose(loaded.encode(CORPUS), encoder.encode(CORPUS), atol=1e-5)
    builtin = encoder.config.replace(lexical=None, lexical_query=None)
    assert (
        Encoder(tiny_llama, tiny_tokenizer, builtin).composition.save(
            tmp_path / "b", builtin.replace(postprocess="builtin:smollm2-135m-best-v7")
        )
        == {}
    )


def test_the_one_reader_reads_folders_gzip_and_strips(tmp_path):
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("  First document, whole.\\nIts second line.  \n", encoding="utf-8")
    (folder / "sub" / "b.md").write_text("# Second\n\nA markdown file.", encoding="utf-8")
    (folder / ".hidden.txt").write_text("never read", encoding="utf-8")
    (folder / "c.jsonl.gz").write_bytes(gzip.compress(b'{"text": "row one"}\n{"text": "row two"}\n'))
    (folder / "notes.bin").write_bytes(b"\x00\x01")
    records = read_records(folder)
    assert records.ids == ["a.txt", "c.jsonl.gz:0", "c.jsonl.gz:1", "sub/b.md"]
    assert records.texts[1:3] == ["row one", "row two"] and not records.bad
    assert unlabeled_texts(folder)[0] == "First document, whole.\\nIts second line."
    (folder / "bad.txt").write_bytes(b"\xff\xfe broken")
    assert [str(b) for b in read_records(folder).bad] == [
        "file 2: bad.txt is not valid UTF-8 (byte 0xff at column 1)"
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueLensError, match=r"holds no \.txt"):
        read_records(empty)
    assert json.loads(json.dumps(records.ids))  # ids stay JSON-safe for the vector files
