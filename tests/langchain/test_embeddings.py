"""``ValueLensEmbeddings`` on a tiny random decoder: types, references, instructions, bad input, async.

Every numeric check compares with ``valuelens.Encoder.encode`` called directly (the reference path).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings

import numpy as np
import pytest
from pydantic import ValidationError

import valuelens
from langchain_valuelens import ValueLensEmbeddings
from tiny_models import CORPUS, tune_tiny_preset


@pytest.fixture(scope="module")
def encoder(tiny_model_dir: str) -> valuelens.Encoder:
    return valuelens.Encoder.from_pretrained(tiny_model_dir, device="cpu")


@pytest.fixture(scope="module")
def embeddings(encoder: valuelens.Encoder) -> ValueLensEmbeddings:
    return ValueLensEmbeddings(model=encoder)


def _reference(encoder: valuelens.Encoder, texts: list[str], normalize: bool = True) -> np.ndarray:
    return encoder.encode(texts, normalize=normalize)


# ---------------------------------------------------------------------- results
def test_python_floats_and_shapes(embeddings: ValueLensEmbeddings) -> None:
    docs = embeddings.embed_documents(CORPUS[:3])
    query = embeddings.embed_query("a cat")
    assert isinstance(docs, list) and len(docs) == 3
    for vector in [*docs, query]:
        assert isinstance(vector, list) and len(vector) == embeddings.dimension
        assert all(type(x) is float for x in vector)
    assert np.allclose(np.linalg.norm(np.array(docs), axis=1), 1.0, atol=1e-5)


def test_loaded_by_path_matches_encoder(tiny_model_dir: str, encoder: valuelens.Encoder) -> None:
    by_path = ValueLensEmbeddings(model=tiny_model_dir, device="cpu")
    assert isinstance(by_path.encoder, valuelens.Encoder)
    got = np.array(by_path.embed_documents(CORPUS))
    np.testing.assert_allclose(got, _reference(encoder, CORPUS), rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_path.embed_query(CORPUS[2]), _reference(encoder, [CORPUS[2]])[0], atol=1e-6)


def test_normalize_false_and_batch_size(encoder: valuelens.Encoder) -> None:
    raw = ValueLensEmbeddings(model=encoder, normalize=False, batch_size=1)
    got = np.array(raw.embed_documents(CORPUS))
    np.testing.assert_allclose(got, _reference(encoder, CORPUS, normalize=False), rtol=1e-5, atol=1e-6)
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0)


def test_settings_pass_through(tiny_model_dir: str, tiny_tokenizer, tiny_llama) -> None:
    emb = ValueLensEmbeddings(model=tiny_model_dir, recipe="aligned-wva", layers=[1, 3], prompt="prompteol")
    reference = valuelens.Encoder(
        tiny_llama, tiny_tokenizer, recipe="aligned-wva", layers=[1, 3], prompt="prompteol"
    )
    assert emb.encoder.layers == (1, 3)
    np.testing.assert_allclose(
        emb.embed_documents(CORPUS[:4]), reference.encode(CORPUS[:4], normalize=True), atol=1e-5
    )


# ---------------------------------------------------------------------- instructions
def test_query_and_document_prompts_are_prepended(encoder: valuelens.Encoder) -> None:
    emb = ValueLensEmbeddings(model=encoder, query_prompt="query: ", document_prompt="passage: ")
    np.testing.assert_allclose(emb.embed_query("a cat"), _reference(encoder, ["query: a cat"])[0], atol=1e-6)
    np.testing.assert_allclose(
        emb.embed_documents(["a cat", "a dog"]),
        _reference(encoder, ["passage: a cat", "passage: a dog"]),
        atol=1e-6,
    )
    plain = ValueLensEmbeddings(model=encoder)
    assert not np.allclose(emb.embed_query("a cat"), plain.embed_query("a cat"), atol=1e-4)


def test_instruction_goes_inside_the_valuelens_prompt(
    tiny_model_dir: str, tiny_tokenizer, tiny_llama
) -> None:
    emb = ValueLensEmbeddings(model=tiny_model_dir, prompt="prompteol", query_prompt="Find: ")
    reference = valuelens.Encoder(tiny_llama, tiny_tokenizer, prompt="prompteol")
    # 'This sentence: "Find: a cat" means in one word:"'
    np.testing.assert_allclose(
        emb.embed_query("a cat"), reference.encode(["Find: a cat"], normalize=True)[0], atol=1e-5
    )


# ---------------------------------------------------------------------- bad input
def test_empty_list(embeddings: ValueLensEmbeddings) -> None:
    assert embeddings.embed_documents([]) == []
    assert asyncio.run(embeddings.aembed_documents([])) == []


@pytest.mark.parametrize(
    ("texts", "match"),
    [
        (None, "embed_documents expects a list of strings, got None"),
        ("one string", "single str"),
        (b"bytes", "got bytes"),
        (42, "got int"),
        (["ok", None], r"texts\[1\] is None"),
        (["ok", "fine", 3.5], r"texts\[2\] is 3.5 \(float\)"),
        ([["nested"]], r"texts\[0\] is \['nested'\] \(list\)"),
    ],
)
def test_bad_documents(embeddings: ValueLensEmbeddings, texts, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        embeddings.embed_documents(texts)
    with pytest.raises(TypeError, match=match):
        asyncio.run(embeddings.aembed_documents(texts))


@pytest.mark.parametrize("text", [None, ["a list"], 7, b"bytes"])
def test_bad_query(embeddings: ValueLensEmbeddings, text) -> None:
    with pytest.raises(TypeError, match="embed_query expects a str"):
        embeddings.embed_query(text)
    with pytest.raises(TypeError, match="embed_query expects a str"):
        asyncio.run(embeddings.aembed_query(text))


def test_tuples_and_empty_strings_are_accepted(embeddings: ValueLensEmbeddings) -> None:
    got = embeddings.embed_documents(("a cat", ""))
    assert len(got) == 2 and all(np.isfinite(v).all() for v in got)
    assert np.isfinite(embeddings.embed_query("")).all()


def test_error_then_usable(embeddings: ValueLensEmbeddings, encoder: valuelens.Encoder) -> None:
    before = embeddings.embed_documents(CORPUS[:3])
    with pytest.raises(TypeError):
        embeddings.embed_documents(["fine", None])

    # A failure inside the forward pass (mid-capture) must not leave hooks or state behind.
    def explode(*args, **kwargs):
        raise RuntimeError("boom inside the forward")

    handle = encoder.parts.layers[1].register_forward_hook(explode)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            embeddings.embed_documents(CORPUS[:3])
        with pytest.raises(RuntimeError, match="boom"):
            asyncio.run(embeddings.aembed_query("a cat"))
    finally:
        handle.remove()
    np.testing.assert_allclose(embeddings.embed_documents(CORPUS[:3]), before, rtol=0, atol=1e-6)
    np.testing.assert_allclose(embeddings.embed_query(CORPUS[0]), before[0], rtol=0, atol=1e-6)


# ---------------------------------------------------------------------- async
def test_async_concurrency_matches_sequential(
    embeddings: ValueLensEmbeddings, encoder: valuelens.Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many concurrent calls on one shared model give the sequential results, computed off the loop."""
    batches = [CORPUS[i % len(CORPUS) :] + CORPUS[: i % 3] for i in range(12)]
    queries = [f"{CORPUS[i % len(CORPUS)]} {'again ' * i}" for i in range(12)]
    expected_docs = [embeddings.embed_documents(batch) for batch in batches]
    expected_queries = [embeddings.embed_query(q) for q in queries]

    threads: set[int] = set()
    inner = encoder.encode

    def recording(*args, **kwargs):
        threads.add(threading.get_ident())
        return inner(*args, **kwargs)

    monkeypatch.setattr(encoder, "encode", recording)

    async def main():
        loop_thread = threading.get_ident()
        calls = [embeddings.aembed_documents(b) for b in batches] + [
            embeddings.aembed_query(q) for q in queries
        ]
        return loop_thread, await asyncio.gather(*calls)

    loop_thread, results = asyncio.run(main())
    assert loop_thread not in threads and len(threads) >= 2  # off the event loop, in parallel
    for got, want in zip(results[: len(batches)], expected_docs, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    for got, want in zip(results[len(batches) :], expected_queries, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
        assert all(type(x) is float for x in got)


# ---------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    ("settings", "error", "match"),
    [
        ({"recipe": "nope"}, valuelens.ConfigError, "unknown recipe 'nope'"),
        ({"layers": "x-y"}, valuelens.ConfigError, "cannot parse layers='x-y'"),
        ({"layers": [0, 99]}, valuelens.ConfigError, "layer 99"),
        ({"prompt": "nope"}, valuelens.ConfigError, "unknown prompt 'nope'"),
        ({"embed_filter": 2}, valuelens.SpaceMismatchError, "residual"),
        ({"dtype": "int8"}, valuelens.ConfigError, "unknown dtype 'int8'"),
        ({"device": "gpu"}, valuelens.ConfigError, "unknown device 'gpu'"),
        ({"batch_size": 0}, ValidationError, "greater than 0"),
        ({"batch_size": True}, ValidationError, "batch_size"),
        ({"max_length": 0}, valuelens.ConfigError, "max_length must be a positive int"),
        ({"combine": "max"}, valuelens.ConfigError, "combine must be one of"),
        ({"final_norm": True}, valuelens.ConfigError, "final_norm=True applies to hidden-state recipes"),
        ({"normalise": True}, ValidationError, "has no field 'normalise': did you mean 'normalize'"),
    ],
)
def test_invalid_settings(tiny_model_dir: str, settings: dict, error: type[Exception], match: str) -> None:
    assert issubclass(error, ValueError)
    with pytest.raises(error, match=match):
        ValueLensEmbeddings(model=tiny_model_dir, **settings)


def test_settings_checked_before_loading() -> None:
    with pytest.raises(valuelens.ConfigError, match="unknown recipe"):
        ValueLensEmbeddings(model="/nonexistent/folder", recipe="nope")
    with pytest.raises(ValueError, match="neither a registered model"):
        ValueLensEmbeddings(model="no-such-model")
    with pytest.raises(TypeError, match="model must be None, a model name"):
        ValueLensEmbeddings(model=123)


def test_prebuilt_encoder_settings(encoder: valuelens.Encoder) -> None:
    emb = ValueLensEmbeddings(model=encoder)
    assert emb.encoder is encoder
    assert (emb.recipe, emb.layers, emb.prompt, emb.max_length) == ("va", list(encoder.layers), None, None)
    assert emb.encoder_config() == encoder.config
    # Settings that agree with the Encoder are accepted.
    ValueLensEmbeddings(
        model=encoder, recipe="VA", layers=list(encoder.layers), device="cpu", dtype="float32"
    )
    ValueLensEmbeddings(model=encoder, layers="auto")
    with pytest.raises(valuelens.ConfigError, match=r"recipe='hs' \(the encoder has 'va'\)"):
        ValueLensEmbeddings(model=encoder, recipe="hs")
    with pytest.raises(valuelens.ConfigError, match=r"layers=\[0\].*prompt|prompt=.*layers=\[0\]"):
        ValueLensEmbeddings(model=encoder, layers=[0], prompt="echo")
    with pytest.raises(valuelens.ConfigError, match="max_length=64"):
        ValueLensEmbeddings(model=encoder, max_length=64)
    with pytest.raises(valuelens.ConfigError, match="device='cuda'"):
        ValueLensEmbeddings(model=encoder, device="cuda")
    with pytest.raises(valuelens.ConfigError, match="dtype='bfloat16'"):
        ValueLensEmbeddings(model=encoder, dtype="bfloat16")


def test_pipeline_fields_are_frozen_the_rest_validated(encoder: valuelens.Encoder) -> None:
    import pydantic

    embeddings = ValueLensEmbeddings(model=encoder)  # its own instance: the test changes batch_size

    for field, value in (("recipe", "hs"), ("layers", "all"), ("prompt", "prompteol"), ("model", "x")):
        with pytest.raises(pydantic.ValidationError, match="frozen"):
            setattr(embeddings, field, value)
    with pytest.raises(pydantic.ValidationError, match="greater than 0"):
        embeddings.batch_size = 0
    embeddings.batch_size = 2  # the rest stays live
    assert len(embeddings.embed_documents(CORPUS[:3])) == 3


def test_sentence_transformer_model(tiny_model_dir: str) -> None:
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    from sentence_transformers import SentenceTransformer

    transformer = Transformer(tiny_model_dir)
    st = SentenceTransformer(
        modules=[transformer, Pooling(transformer.get_embedding_dimension())], device="cpu"
    )
    emb = ValueLensEmbeddings(model=st, query_prompt="query: ")
    assert emb.dimension == 64
    got = emb.embed_documents(CORPUS[:3])
    np.testing.assert_allclose(got, st.encode(CORPUS[:3], normalize_embeddings=True), atol=1e-6)
    np.testing.assert_allclose(
        emb.embed_query("x"), st.encode(["query: x"], normalize_embeddings=True)[0], atol=1e-6
    )
    # the model's own query/document prompts apply, as with st.encode_query / st.encode_document
    st.prompts = {"query": "Find: ", "document": "Passage: "}
    np.testing.assert_allclose(
        emb.embed_query("x"), st.encode(["Find: query: x"], normalize_embeddings=True)[0], atol=1e-6
    )
    np.testing.assert_allclose(
        emb.embed_documents(["y"]), st.encode(["Passage: y"], normalize_embeddings=True), atol=1e-6
    )
    assert all(type(x) is float for x in got[0])
    with pytest.raises(
        valuelens.ConfigError, match="recipe, layers cannot be set when `model` is a SentenceTransformer"
    ):
        ValueLensEmbeddings(model=st, recipe="va", layers="all")


def test_preset_and_the_newer_methods_pass_through(tiny_model_dir: str) -> None:
    fields = {
        "prepend_layers": [1],
        "contrast_layer": 1,
        "fusion": [{"recipe": "va", "weight": 0.5}],
        "drop_prefix": True,
    }
    emb = ValueLensEmbeddings(model=tiny_model_dir, device="cpu", preset="best", **fields)
    untuned = valuelens.presets.UNTUNED  # the tiny model has no entry: the rule for untuned models, recorded
    assert emb.recipe == untuned["recipe"] and emb.prompt == untuned["prompt"]
    assert emb.prepend_layers == [1] and emb.fusion[0]["recipe"] == "va" and emb.drop_prefix
    reference = valuelens.Encoder.from_pretrained(tiny_model_dir, device="cpu", preset="best", **fields)
    np.testing.assert_allclose(
        np.array(emb.embed_documents(CORPUS)), reference.encode(CORPUS, normalize=True), atol=1e-5
    )
    with pytest.raises((ValidationError, valuelens.ConfigError), match="preset"):
        ValueLensEmbeddings(model=tiny_model_dir, preset="fastest")


# ---------------------------------------------------------------------- presets with overrides
class _Loaded(Exception):
    """Raised in place of loading a model: what happened before it happened before any model loaded."""


def test_preset_overrides_win_by_key_even_none_and_defaults(
    tiny_model_dir, tmp_path, monkeypatch, caplog
) -> None:
    path = str(tiny_model_dir)
    entry = tune_tiny_preset(monkeypatch, path, tmp_path)
    plain = ValueLensEmbeddings(model=path, device="cpu", preset="best")
    assert plain.drop_prefix and plain.postprocess == entry["postprocess"]
    caplog.set_level(logging.WARNING, logger="valuelens")
    emb = ValueLensEmbeddings(
        model=path, device="cpu", preset="best", drop_prefix=False
    )  # the default value, passed
    assert not emb.drop_prefix and emb.postprocess is None and emb.encoder.postprocess is None
    assert "drop_prefix= changed it" in caplog.text
    emb = ValueLensEmbeddings(model=path, device="cpu", preset="best", prompt=None)
    assert emb.prompt is None and emb.drop_prefix and emb.postprocess is None
    emb = ValueLensEmbeddings(model=path, device="cpu", preset="best", postprocess=None)
    assert emb.postprocess is None and emb.drop_prefix and emb.recipe == "aligned-wva"
    reference = valuelens.Encoder.from_pretrained(path, device="cpu", **{**entry, "postprocess": None})
    np.testing.assert_allclose(
        np.array(emb.embed_documents(CORPUS)), reference.encode(CORPUS, normalize=True), atol=1e-5
    )


def test_preset_parts_an_override_invalidates_are_dropped_before_the_model_loads(
    tiny_model_dir, tmp_path, monkeypatch, caplog
) -> None:
    path = str(tiny_model_dir)
    entry = tune_tiny_preset(monkeypatch, path, tmp_path)
    caplog.set_level(logging.WARNING, logger="valuelens")

    def refuse(*args, **kwargs):
        raise _Loaded

    monkeypatch.setattr("valuelens.encoder.load_model", refuse)
    with pytest.raises(_Loaded):  # a ConfigError about drop_prefix before
        ValueLensEmbeddings(model=path, device="cpu", preset="best", recipe="va")
    assert "dropped drop_prefix=True (recipe='va' does not read the last token's attention)" in caplog.text
    with pytest.raises(_Loaded):  # failed after loading the model before
        ValueLensEmbeddings(model=path, device="cpu", preset="best", prompt="prompteol")
    assert "prompt= changed it" in caplog.text
    with pytest.raises(valuelens.ConfigError, match="Pass postprocess=None"):  # passed: kept, so refused
        ValueLensEmbeddings(
            model=path, device="cpu", preset="best", prompt="prompteol", postprocess=entry["postprocess"]
        )


def test_a_preset_instance_shares_its_encoder(tiny_model_dir, tmp_path, monkeypatch) -> None:
    path = str(tiny_model_dir)
    tune_tiny_preset(monkeypatch, path, tmp_path)
    emb = ValueLensEmbeddings(model=path, device="cpu", preset="best")
    shared = ValueLensEmbeddings(model=emb.encoder, preset="best", drop_prefix=True)
    assert shared.encoder is emb.encoder and shared.postprocess == emb.postprocess
    with pytest.raises(valuelens.ConfigError, match="disagree"):
        ValueLensEmbeddings(
            model=emb.encoder, preset="best", drop_prefix=False
        )  # the preset's spec without it
    plain = valuelens.Encoder.from_pretrained(path, device="cpu")
    with pytest.raises(valuelens.ConfigError, match="disagree"):
        ValueLensEmbeddings(model=plain, preset="best")


# ---------------------------------------------------------------------- long texts
def test_long_text_chunk_is_a_field_like_the_others(tiny_model_dir: str) -> None:
    """``long_text="chunk"`` reaches the core: a long document is embedded whole, with no warning."""
    long = " ".join(CORPUS * 3)
    spec = {"recipe": "va", "layers": "all", "max_length": 48}
    emb = ValueLensEmbeddings(model=tiny_model_dir, long_text="chunk", **spec)
    assert emb.long_text == "chunk" and emb.encoder.config.long_text == "chunk"
    reference = valuelens.Encoder.from_pretrained(tiny_model_dir, long_text="chunk", **spec)
    with warnings.catch_warnings():
        warnings.simplefilter("error", valuelens.TruncationWarning)
        docs = emb.embed_documents([long, CORPUS[0]])
    np.testing.assert_allclose(docs, reference.encode([long, CORPUS[0]], normalize=True), atol=1e-6)
    with pytest.raises(valuelens.ConfigError, match="disagree"):
        ValueLensEmbeddings(model=reference, long_text="truncate")
    with pytest.raises(
        valuelens.ConfigError, match="long_text must be one of 'truncate', 'chunk', got 'split'"
    ):
        ValueLensEmbeddings(model="/nonexistent/folder", long_text="split")


def test_a_tuned_preset_folder(tiny_checkpoint: str, tuned_folder) -> None:
    """``preset=DIR`` (a ``valuelens tune`` folder): the folder's spec, recorded in the fields."""
    emb = ValueLensEmbeddings(model=tiny_checkpoint, device="cpu", preset=str(tuned_folder))
    reference = valuelens.Encoder.from_pretrained(tiny_checkpoint, device="cpu", preset=str(tuned_folder))
    assert emb.recipe == reference.config.recipe and emb.postprocess == reference.config.postprocess
    np.testing.assert_allclose(
        np.array(emb.embed_documents(CORPUS)), reference.encode(CORPUS, normalize=True), atol=1e-5
    )
    np.testing.assert_allclose(
        emb.embed_query(CORPUS[0]), reference.encode(CORPUS[0], normalize=True), atol=1e-5
    )


def test_documents_in_hand_to_a_tuned_preset_to_a_retriever(
    tiny_model_dir: str, tmp_path, monkeypatch
) -> None:
    """The documented short path: LangChain documents → ``tune(corpus=docs)`` (no labels) → a preset folder
    → ``ValueLensEmbeddings(preset=DIR)`` → a vector store that finds a document by its own words."""
    from langchain_core.documents import Document
    from langchain_core.vectorstores import InMemoryVectorStore

    from valuelens.tuning import tune

    monkeypatch.setattr("valuelens.tuning.data.default_data_dir", lambda: None)
    docs = [
        Document(
            page_content=f"Entry {i} of the log. {CORPUS[i % 8]} {CORPUS[(i + 3) % 8]}", metadata={"i": i}
        )
        for i in range(24)
    ]
    folder = tune(
        tiny_model_dir, tmp_path / "tuned", corpus=docs, pseudo_queries=10, show_progress=False
    ).folder
    embeddings = ValueLensEmbeddings(model=tiny_model_dir, device="cpu", preset=str(folder))
    store = InMemoryVectorStore.from_documents(docs, embeddings)
    reference = valuelens.Encoder.from_pretrained(tiny_model_dir, device="cpu", preset=str(folder))
    np.testing.assert_allclose(
        embeddings.embed_query(docs[5].page_content),
        reference.encode_query([docs[5].page_content], normalize=True)[0],
        atol=1e-5,
    )
    hits = store.similarity_search(docs[5].page_content, k=3)
    assert len(hits) == 3 and all(hit.metadata["i"] in range(24) for hit in hits)
