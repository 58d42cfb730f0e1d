"""The lexical part (``lexical=``, ``lexical_query=``, ``lexical_corpus=``; :mod:`valuelens.lexical`): the
texts' tokens through the model's input embeddings, joined after the model's part, on every surface."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

from tiny_models import CORPUS
from valuelens import ConfigError, Encoder, EncoderConfig
from valuelens.lexical import LexicalPart, LexicalState
from valuelens.presets.resolution import resolve
from valuelens.states import FIT_CACHE_ENV

FIELDS = {"recipe": "va", "layers": [1, 2], "prompt": "prompteol", "lexical_kind": "embeddings"}
QUERIES = ["who plays the guitar?", "where is the cat?", "what fell today?"]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def pair(tiny_checkpoint):
    """An encoder with a lexical part and the same spec without one."""
    enc = Encoder.from_pretrained(tiny_checkpoint, lexical=0.2, lexical_query=0.9, **FIELDS)
    plain = Encoder.from_pretrained(tiny_checkpoint, **FIELDS)
    return enc, plain


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"lexical": 0.0}, "between 0 and 1"),
        ({"lexical": 1}, "between 0 and 1"),
        ({"lexical": -0.2}, "between 0 and 1"),
        ({"lexical": float("nan")}, "finite number"),
        ({"lexical": True}, "finite number"),
        ({"lexical": "0.5"}, "finite number"),
        ({"lexical": 0.5, "lexical_query": 1.5}, "lexical_query must be a weight"),
        ({"lexical_query": 0.5}, "needs a lexical part"),
        ({"lexical_corpus": "texts.txt"}, "needs a lexical part"),
        ({"lexical": 0.5, "lexical_corpus": " "}, "path to a text file"),
    ],
)
def test_bad_lexical_settings_are_named(fields, why):
    with pytest.raises(ConfigError, match=why):
        EncoderConfig(**fields)


def test_the_embedding_is_the_models_part_then_the_lexical_part(pair):
    enc, plain = pair
    hidden = enc.parts.backbone.get_input_embeddings().weight.shape[1]
    assert enc.dimension == plain.dimension + hidden
    docs = enc.encode(CORPUS)
    assert docs.shape == (len(CORPUS), enc.dimension) and np.isfinite(docs).all()
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)  # two unit parts, weighted
    dense = _unit(plain.encode(CORPUS))
    lexical = enc.lexical.encode(CORPUS).numpy()  # type: ignore[union-attr]
    np.testing.assert_allclose(docs[:, : plain.dimension], math.sqrt(0.8) * dense, atol=1e-5)
    np.testing.assert_allclose(docs[:, plain.dimension :], math.sqrt(0.2) * lexical, atol=1e-5)
    # between documents: (1 - w) cos(model) + w cos(lexical)
    np.testing.assert_allclose(docs @ docs.T, 0.8 * dense @ dense.T + 0.2 * lexical @ lexical.T, atol=1e-5)


def test_queries_carry_their_own_weight_in_the_documents_space(pair):
    enc, plain = pair
    queries, docs = enc.encode_query(QUERIES), enc.encode(CORPUS)
    dense_q, dense_d = _unit(plain.encode(QUERIES)), _unit(plain.encode(CORPUS))
    lens = enc.lexical
    assert lens is not None
    lex_q, lex_d = lens.encode(QUERIES).numpy(), lens.encode(CORPUS).numpy()
    expected = math.sqrt(0.1 * 0.8) * dense_q @ dense_d.T + math.sqrt(0.9 * 0.2) * lex_q @ lex_d.T
    np.testing.assert_allclose(queries @ docs.T, expected, atol=1e-5)
    # without lexical_query the queries take the documents' weight
    same = Encoder.from_pretrained(enc.name_or_path, lexical=0.2, **FIELDS)
    assert same.for_queries() is same
    np.testing.assert_allclose(same.encode_query(QUERIES), same.encode(QUERIES), atol=1e-6)


def test_the_lexical_part_reads_the_whole_text_without_the_prompt(tiny_checkpoint):
    enc = Encoder.from_pretrained(tiny_checkpoint, lexical=0.5, max_length=40, **FIELDS)
    head = "The cat sits on the mat and looks at the garden for a long time"
    texts = [head + " while it rains.", head + " before the stocks fell sharply today."]
    with pytest.warns(UserWarning, match="truncated"):
        out = enc.encode(texts)
    half = out.shape[1] - enc.lexical.dimension  # type: ignore[union-attr]
    np.testing.assert_allclose(out[0, :half], out[1, :half], atol=1e-6)  # cut at the same token
    assert not np.allclose(out[0, half:], out[1, half:], atol=1e-3)  # the tails differ
    # the prompt is not read: the lexical part is the same under another prompt
    other = Encoder.from_pretrained(tiny_checkpoint, lexical=0.5, **{**FIELDS, "prompt": "futureeol"})
    np.testing.assert_allclose(
        enc.lexical.encode(CORPUS).numpy(),
        other.lexical.encode(CORPUS).numpy(),
        atol=1e-6,  # type: ignore[union-attr]
    )


def test_batching_and_chunking_keep_the_lexical_part(tiny_checkpoint):
    enc = Encoder.from_pretrained(tiny_checkpoint, lexical=0.3, **FIELDS)
    np.testing.assert_allclose(enc.encode(CORPUS, batch_size=1), enc.encode(CORPUS, batch_size=8), atol=1e-5)
    long = " ".join(CORPUS * 4)
    chunked = Encoder.from_pretrained(
        tiny_checkpoint, lexical=0.3, max_length=48, long_text="chunk", **FIELDS
    )
    vector = chunked.encode([long])
    half = vector.shape[1] - chunked.lexical.dimension  # type: ignore[union-attr]
    np.testing.assert_allclose(
        vector[0, half:],
        math.sqrt(0.3) * chunked.lexical.encode([long]).numpy()[0],
        atol=1e-5,  # type: ignore[union-attr]
    )


def test_a_text_without_tokens_gives_a_zero_lexical_part_not_nan(pair):
    enc, _ = pair
    assert enc.lexical is not None
    empty = enc.lexical.encode([""]).numpy()
    assert np.isfinite(empty).all() and not empty.any()
    joined = LexicalPart(torch.zeros(1, 64), 0.5).join(torch.ones(1, 8))
    assert torch.isfinite(joined).all()
    with pytest.raises(ValueError, match="2 model vectors but 1 lexical"):
        LexicalPart(torch.zeros(1, 64), 0.5).join(torch.ones(2, 8))
    with pytest.raises(ConfigError, match="pass the texts' lexical_part"):
        enc.composition.join(torch.ones(1, 8), None)


def test_the_state_is_fitted_once_and_cached(tiny_checkpoint, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(FIT_CACHE_ENV, str(tmp_path))
    caplog.set_level(logging.INFO, logger="valuelens")
    first = Encoder.from_pretrained(tiny_checkpoint, lexical=0.5, **FIELDS)
    files = list(tmp_path.glob("lexical-*.safetensors"))
    assert len(files) == 1 and any("fitting idf" in r.getMessage() for r in caplog.records)
    caplog.clear()
    second = Encoder.from_pretrained(tiny_checkpoint, lexical=0.5, **FIELDS)
    assert not any("fitting idf" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(first.encode(CORPUS), second.encode(CORPUS), atol=1e-6)
    files[0].write_bytes(b"not a safetensors file")  # a damaged cache is fitted again, with a warning
    caplog.clear()
    third = Encoder.from_pretrained(tiny_checkpoint, lexical=0.5, **FIELDS)
    assert any("cannot be used" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(first.encode(CORPUS), third.encode(CORPUS), atol=1e-6)
    with pytest.raises(ConfigError, match="cannot read the lexical state"):
        LexicalState.load(tmp_path / "missing.safetensors")


def test_idf_comes_from_the_corpus_named(tiny_checkpoint, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(f"the cat number {i} sits on the mat" for i in range(12)), encoding="utf-8")
    own = Encoder.from_pretrained(tiny_checkpoint, lexical=0.5, lexical_corpus=str(texts), **FIELDS)
    shipped = Encoder.from_pretrained(tiny_checkpoint, lexical=0.5, **FIELDS)
    assert own.lexical is not None and shipped.lexical is not None
    cat = own.tokenizer(" cat", add_special_tokens=False)["input_ids"][0]
    assert own.lexical.idf[cat] < shipped.lexical.idf[cat]  # in every text of the named corpus
    assert not np.allclose(own.encode(CORPUS), shipped.encode(CORPUS), atol=1e-3)
    (tmp_path / "few.txt").write_text("one\ntwo\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"lexical_corpus .* at least 10"):
        Encoder.from_pretrained(
            tiny_checkpoint, lexical=0.5, lexical_corpus=str(tmp_path / "few.txt"), **FIELDS
        )


def test_a_fitted_post_processing_reads_the_models_part_only(tiny_checkpoint):
    enc = Encoder.from_pretrained(tiny_checkpoint, lexical=0.4, postprocess="fit:center", **FIELDS)
    plain = Encoder.from_pretrained(tiny_checkpoint, postprocess="fit:center", **FIELDS)
    out = enc.encode(CORPUS)
    assert out.shape[1] == plain.dimension + enc.lexical.dimension  # type: ignore[union-attr]
    np.testing.assert_allclose(
        out[:, : plain.dimension], math.sqrt(0.6) * _unit(plain.encode(CORPUS)), atol=1e-5
    )


def test_adding_a_lexical_part_to_a_preset_keeps_its_fitted_state(
    tiny_checkpoint, monkeypatch, tmp_path, caplog
):
    from tiny_models import tune_tiny_preset

    entry = tune_tiny_preset(monkeypatch, tiny_checkpoint, tmp_path)
    caplog.set_level(logging.WARNING, logger="valuelens")
    config = resolve("best", tiny_checkpoint, {"lexical": 0.1, "lexical_query": 0.9})
    assert config.lexical == 0.1 and config.postprocess == entry["postprocess"]
    assert not [r for r in caplog.records if "dropped" in r.getMessage()]


def test_the_adapters_embed_both_sides_with_the_lexical_part(tiny_checkpoint, tmp_path):
    from sentence_transformers.base.modules import Transformer

    from langchain_valuelens import ValueLensEmbeddings
    from llama_index.embeddings.valuelens import ValueLensEmbedding
    from sentence_transformers import SentenceTransformer
    from valuelens_sentence_transformers import ValuePooling

    fields = {**FIELDS, "lexical": 0.2, "lexical_query": 0.9}
    reference = Encoder.from_pretrained(tiny_checkpoint, **fields)
    queries, docs = reference.encode_query(QUERIES, normalize=True), reference.encode(CORPUS, normalize=True)
    lc = ValueLensEmbeddings(model=tiny_checkpoint, device="cpu", **fields)
    np.testing.assert_allclose(lc.embed_query(QUERIES[0]), queries[0], atol=1e-5)
    np.testing.assert_allclose(np.array(lc.embed_documents(CORPUS)), docs, atol=1e-5)
    li = ValueLensEmbedding(tiny_checkpoint, device="cpu", **fields)
    np.testing.assert_allclose(li.get_query_embedding(QUERIES[1]), queries[1], atol=1e-5)
    np.testing.assert_allclose(li.get_text_embedding(CORPUS[1]), docs[1], atol=1e-5)
    model = SentenceTransformer(modules=[Transformer(tiny_checkpoint), ValuePooling(**fields)], device="cpu")
    assert model.get_embedding_dimension() == reference.dimension
    np.testing.assert_allclose(model.encode_query(QUERIES), reference.encode_query(QUERIES), atol=1e-5)
    np.testing.assert_allclose(model.encode_document(CORPUS), reference.encode(CORPUS), atol=1e-5)
    # an instruction prompt of sentence-transformers' own is read by the model's part, not the lexical one
    prompted = model.encode(CORPUS, prompt="Represent this: ")
    half = reference.dimension - reference.lexical.dimension  # type: ignore[union-attr]
    np.testing.assert_allclose(prompted[:, half:], reference.encode(CORPUS)[:, half:], atol=1e-5)
    model.save(str(tmp_path / "st"))
    reloaded = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    np.testing.assert_allclose(reloaded.encode_query(QUERIES), reference.encode_query(QUERIES), atol=1e-5)


def test_a_saved_sentence_transformers_model_carries_its_lexical_state(tiny_checkpoint, tmp_path):
    """The idf and whitening travel with the saved model: it embeds the same after the corpus is gone."""
    from sentence_transformers.base.modules import Transformer

    from sentence_transformers import SentenceTransformer
    from valuelens_sentence_transformers import ValuePooling

    corpus = tmp_path / "mine.txt"
    corpus.write_text("\n".join(f"the dog number {i} runs in the park" for i in range(12)), encoding="utf-8")
    fields = {**FIELDS, "lexical": 0.3, "lexical_corpus": str(corpus)}
    model = SentenceTransformer(modules=[Transformer(tiny_checkpoint), ValuePooling(**fields)], device="cpu")
    expected = model.encode(CORPUS)
    model.save(str(tmp_path / "st"))
    corpus.unlink()
    assert (tmp_path / "st" / "1_ValuePooling" / "lexical.safetensors").is_file()
    assert model[1].lexical_corpus == str(corpus)  # the live module keeps its spec
    reloaded = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    np.testing.assert_allclose(reloaded.encode(CORPUS), expected, atol=1e-5)
    (tmp_path / "st" / "1_ValuePooling" / "lexical.safetensors").unlink()
    with pytest.raises(ConfigError, match=r"names .lexical\.safetensors. but the file is missing"):
        SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)


def test_valuelens_search_embeds_queries_on_the_query_side(tiny_checkpoint, tmp_path):
    """``valuelens embed --config`` with a lexical part, then ``valuelens search``: the printed scores are
    the query side's (``encode_query``) against the stored documents."""
    import json

    from typer.testing import CliRunner

    from valuelens.cli import app

    fields = {**FIELDS, "lexical": 0.2, "lexical_query": 0.9}
    (tmp_path / "spec.json").write_text(json.dumps(fields), encoding="utf-8")
    (tmp_path / "in.txt").write_text("\n".join(CORPUS), encoding="utf-8")
    out = tmp_path / "v.parquet"
    runner = CliRunner()
    embed = ["embed", str(tmp_path / "in.txt"), "-o", str(out), "--model", tiny_checkpoint]
    result = runner.invoke(app, [*embed, "--config", str(tmp_path / "spec.json")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["search", str(out), QUERIES[1], "-k", "1"])
    assert result.exit_code == 0, result.output
    reference = Encoder.from_pretrained(tiny_checkpoint, **fields)
    scores = reference.encode(CORPUS, normalize=True) @ reference.encode_query(QUERIES[1], normalize=True)
    top = result.output.strip().splitlines()[-1].split(maxsplit=1)
    assert top[1] == CORPUS[int(np.argmax(scores))]
    assert float(top[0]) == pytest.approx(float(scores.max()), abs=2e-3)
