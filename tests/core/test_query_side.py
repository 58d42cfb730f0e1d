"""The query side of a spec (``query_template``): queries under their own prompt, in the documents' space."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

from tiny_models import CORPUS
from valuelens import ConfigError, Encoder, EncoderConfig, TruncationWarning
from valuelens.fitting import fit_texts
from valuelens.presets.resolution import resolve

QUERY = 'Find the passage for this query: "{text}" in one word:"'


def test_queries_go_under_the_query_template_and_documents_do_not(tiny_checkpoint):
    enc = Encoder.from_pretrained(
        tiny_checkpoint, recipe="aligned-wva", prompt="futureeol", query_template=QUERY
    )
    assert enc.config.query_template == QUERY and enc.for_queries() is enc.for_queries()
    as_documents = Encoder.from_pretrained(tiny_checkpoint, recipe="aligned-wva", prompt="futureeol")
    as_queries = Encoder.from_pretrained(tiny_checkpoint, recipe="aligned-wva", prompt=QUERY)
    np.testing.assert_allclose(enc.encode(CORPUS), as_documents.encode(CORPUS), atol=1e-5)
    np.testing.assert_allclose(enc.encode_query(CORPUS), as_queries.encode(CORPUS), atol=1e-5)
    assert not np.allclose(enc.encode_query(CORPUS), enc.encode(CORPUS), atol=1e-3)
    single = enc.encode_query(CORPUS[0], normalize=True)
    assert single.shape == (enc.dimension,) and abs(float(np.linalg.norm(single)) - 1) < 1e-5
    plain = Encoder.from_pretrained(tiny_checkpoint, recipe="va")
    assert plain.for_queries() is plain  # no query side: queries are documents
    np.testing.assert_allclose(plain.encode_query(CORPUS), plain.encode(CORPUS), atol=1e-6)


def test_a_fitted_state_serves_both_sides(tiny_checkpoint, tmp_path):
    spec = EncoderConfig(recipe="va", layers=[1, 2], prompt="futureeol")
    state = fit_texts(Encoder.from_pretrained(tiny_checkpoint, spec), CORPUS * 3, kind="center")
    state.save(tmp_path / "s.safetensors")
    enc = Encoder.from_pretrained(
        tiny_checkpoint, spec.replace(postprocess=str(tmp_path / "s.safetensors"), query_template=QUERY)
    )
    raw = Encoder.from_pretrained(tiny_checkpoint, spec.replace(prompt=QUERY)).encode(CORPUS)
    np.testing.assert_allclose(enc.encode_query(CORPUS), state.transform(raw), atol=1e-5)
    with pytest.raises(ConfigError, match="query_template: unknown prompt"):  # a bad template is named
        EncoderConfig(query_template="no placeholder here")


def test_the_adapters_embed_queries_under_the_query_template(tiny_checkpoint):
    from langchain_valuelens import ValueLensEmbeddings
    from llama_index.embeddings.valuelens import ValueLensEmbedding

    fields = {"recipe": "aligned-wva", "prompt": "futureeol", "query_template": QUERY}
    reference = Encoder.from_pretrained(tiny_checkpoint, **fields)
    lc = ValueLensEmbeddings(model=tiny_checkpoint, device="cpu", **fields)
    np.testing.assert_allclose(
        lc.embed_query(CORPUS[0]), reference.encode_query(CORPUS[0], normalize=True), atol=1e-5
    )
    np.testing.assert_allclose(
        np.array(lc.embed_documents(CORPUS)), reference.encode(CORPUS, normalize=True), atol=1e-5
    )
    li = ValueLensEmbedding(tiny_checkpoint, device="cpu", **fields)
    np.testing.assert_allclose(
        li.get_query_embedding(CORPUS[1]), reference.encode_query(CORPUS[1], normalize=True), atol=1e-5
    )
    np.testing.assert_allclose(
        li.get_text_embedding(CORPUS[1]), reference.encode(CORPUS[1], normalize=True), atol=1e-5
    )


def test_sentence_transformers_encode_query_uses_it(tiny_checkpoint):
    from sentence_transformers.base.modules import Transformer

    from sentence_transformers import SentenceTransformer
    from valuelens_sentence_transformers import ValuePooling

    fields = {"recipe": "aligned-wva", "prompt": "futureeol", "query_template": QUERY}
    model = SentenceTransformer(modules=[Transformer(tiny_checkpoint), ValuePooling(**fields)], device="cpu")
    reference = Encoder.from_pretrained(tiny_checkpoint, **fields)
    np.testing.assert_allclose(model.encode_query(CORPUS), reference.encode_query(CORPUS), atol=1e-5)
    np.testing.assert_allclose(model.encode_document(CORPUS), reference.encode(CORPUS), atol=1e-5)
    np.testing.assert_allclose(model.encode(CORPUS), reference.encode(CORPUS), atol=1e-5)


def test_overriding_the_query_template_keeps_a_presets_fitted_state(
    tiny_checkpoint, monkeypatch, tmp_path, caplog
):
    from tiny_models import tune_tiny_preset

    entry = tune_tiny_preset(monkeypatch, tiny_checkpoint, tmp_path)
    caplog.set_level(logging.WARNING, logger="valuelens")
    config = resolve("best", tiny_checkpoint, {"query_template": QUERY})
    assert config.query_template == QUERY and config.postprocess == entry["postprocess"]
    assert not [r for r in caplog.records if "dropped" in r.getMessage()]


def test_shared_passes_read_queries_through_the_query_side(tiny_checkpoint):
    """``valuelens eval`` shares forward passes among recipes (``SharedEncoding``); its queries must go
    through each spec's query side (template and lexical weight), as ``Encoder.encode_query`` does."""
    from valuelens.batching import SharedEncoding
    from valuelens.evaluation import evaluate, load_task
    from valuelens.evaluation.compare import evaluate_variants

    sided = Encoder.from_pretrained(
        tiny_checkpoint,
        recipe="va",
        layers=[1, 2],
        prompt="futureeol",
        query_template=QUERY,
        lexical=0.2,
        lexical_query=0.9,
        lexical_corpus=None,
    )
    plain = Encoder.from_pretrained(tiny_checkpoint, recipe="va", layers=[1, 2], prompt="futureeol")
    shared = SharedEncoding([plain, sided])
    for i, enc in enumerate((plain, sided)):
        np.testing.assert_allclose(shared.view(i).encode_query(CORPUS), enc.encode_query(CORPUS), atol=1e-5)
        np.testing.assert_allclose(shared.view(i).encode(CORPUS), enc.encode(CORPUS), atol=1e-5)
    assert not np.allclose(shared.view(1).encode_query(CORPUS), shared.view(1).encode(CORPUS), atol=1e-3)
    assert shared.view(1).encode_query([]).shape == (0, sided.dimension)

    task = load_task("scifact")
    with warnings.catch_warnings():  # the tiny tokenizer makes every abstract longer than max_length
        warnings.simplefilter("ignore", TruncationWarning)
        alone = evaluate(sided, task, split="dev", limit=4).main_score
        together = evaluate_variants({"plain": plain, "sided": sided}, [(task, 4)], split="dev")
    assert abs(together["sided"][0].main_score - alone) < 1e-4


def test_a_bm25_part_gives_queries_their_own_weights_even_at_one_shared_weight(tiny_checkpoint):
    """``lexical=w`` alone means queries weigh the part at w too, on the query side: BM25 term presence,
    not the documents' saturated, length-normalised weights (the tuned search scores it so)."""
    shared = Encoder.from_pretrained(tiny_checkpoint, recipe="va", lexical=0.6)
    spelled = Encoder.from_pretrained(tiny_checkpoint, recipe="va", lexical=0.6, lexical_query=0.6)
    assert shared.for_queries() is not shared
    queries = ["the cat sat on the mat", "stocks fell"]
    np.testing.assert_allclose(shared.encode_query(queries), spelled.encode_query(queries), atol=1e-6)
    assert not np.allclose(shared.encode_query(queries), shared.encode(queries), atol=1e-3)
    embeddings = Encoder.from_pretrained(tiny_checkpoint, recipe="va", lexical=0.6, lexical_kind="embeddings")
    assert embeddings.for_queries() is embeddings  # one weighting for both sides
