"""Unit tests of ValueLensEmbedding beyond the generic contract (tiny offline model)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core.callbacks import CallbackManager, LlamaDebugHandler
from llama_index.core.callbacks.schema import CBEventType
from llama_index.core.embeddings.utils import resolve_embed_model
from llama_index.core.settings import Settings
from pydantic import ValidationError

import llama_index.embeddings.valuelens as package
import valuelens
from llama_index.embeddings.valuelens import ValueLensEmbedding
from tiny_models import CORPUS, tune_tiny_preset


@pytest.fixture(scope="module")
def tiny_va(tiny_model_dir: Path) -> ValueLensEmbedding:
    return ValueLensEmbedding(str(tiny_model_dir))


@pytest.fixture(scope="module")
def tiny_encoder(tiny_model_dir: Path) -> valuelens.Encoder:
    return valuelens.Encoder.from_pretrained(tiny_model_dir, recipe="aligned-wva", prompt="futureeol")


def test_public_api_is_locked() -> None:
    assert package.__all__ == [
        "DEFAULT_EMBED_BATCH_SIZE",
        "ValueLensEmbedding",
        "__version__",
        "bm25_sparse_fns",
    ]
    assert package.__version__ == importlib.metadata.version("llama-index-embeddings-valuelens")
    assert ValueLensEmbedding.class_name() == "ValueLensEmbedding"
    folder = Path(package.__file__).parent
    assert (folder / "py.typed").is_file()


def test_namespace_layout_is_shared_with_llama_index_core() -> None:
    """No ``__init__.py`` above ``valuelens/``: ``llama_index`` stays one namespace with core's."""
    src = Path(package.__file__).parents[2]  # .../src/llama_index
    assert src.name == "llama_index"
    assert not (src / "__init__.py").exists()
    assert not (src / "embeddings" / "__init__.py").exists()
    import llama_index.core

    portions = [Path(p).resolve() for p in llama_index.__path__]
    assert src.resolve() in portions
    assert Path(llama_index.core.__file__).parent.parent.resolve() in portions


def test_field_defaults() -> None:
    fields = ValueLensEmbedding.model_fields
    assert fields["model_name"].default == valuelens.models.DEFAULT_MODEL == "smollm2-135m"
    assert fields["recipe"].default == "va"
    assert fields["layers"].default == "auto"
    assert fields["normalize"].default is True
    assert fields["embed_batch_size"].default == package.DEFAULT_EMBED_BATCH_SIZE == 256
    assert fields["batch_size"].default == 32
    for name in (
        "prompt",
        "query_instruction",
        "text_instruction",
        "embed_filter",
        "device",
        "dtype",
        "max_length",
    ):
        assert fields[name].default is None, name


def test_vectors_equal_the_core_encoder(tiny_model_dir: Path) -> None:
    """The adapter adds nothing: its vectors are ``Encoder.encode``'s, computed independently."""
    reference = valuelens.Encoder.from_pretrained(tiny_model_dir, recipe="va")
    raw = reference.encode(CORPUS)
    normalized = ValueLensEmbedding(str(tiny_model_dir), recipe="va")
    np.testing.assert_allclose(
        normalized.get_text_embedding_batch(CORPUS),
        raw / np.linalg.norm(raw, axis=1, keepdims=True),
        atol=1e-6,
    )
    plain = ValueLensEmbedding(str(tiny_model_dir), recipe="va", normalize=False)
    np.testing.assert_allclose(plain.get_text_embedding_batch(CORPUS), raw, atol=1e-6)
    np.testing.assert_allclose(plain.get_query_embedding(CORPUS[0]), raw[0], atol=1e-6)
    assert normalized.dimension == reference.dimension == len(raw[0])


def test_instructions_go_inside_the_prompt_template(tiny_model_dir: Path) -> None:
    """``query_instruction`` is prepended to the text before the template is filled."""
    embedding = ValueLensEmbedding(
        str(tiny_model_dir),
        recipe="aligned-wva",
        prompt='This sentence: "{text}" means in one word:"',
        query_instruction="Question: ",
        text_instruction="Passage: ",
        normalize=False,
    )
    by_hand = valuelens.Encoder.from_pretrained(
        tiny_model_dir, recipe="aligned-wva", prompt='This sentence: "Question: {text}" means in one word:"'
    )
    np.testing.assert_allclose(embedding.get_query_embedding(CORPUS[0]), by_hand.encode(CORPUS[0]), atol=1e-6)
    plain = valuelens.Encoder.from_pretrained(tiny_model_dir, recipe="aligned-wva", prompt="prompteol")
    np.testing.assert_allclose(
        embedding.get_text_embedding(CORPUS[1]), plain.encode("Passage: " + CORPUS[1]), atol=1e-6
    )


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"recipe": "nope"}, valuelens.ConfigError, "unknown recipe 'nope'"),
        ({"prompt": "zzz"}, valuelens.ConfigError, "unknown prompt 'zzz'"),
        ({"layers": "deepest"}, valuelens.ConfigError, "deepest"),
        ({"embed_filter": 2}, valuelens.SpaceMismatchError, "residual"),
        ({"final_norm": True}, valuelens.ConfigError, "final_norm"),
        ({"combine": "max"}, valuelens.ConfigError, "combine must be one of"),
        ({"max_length": 0}, valuelens.ConfigError, "max_length must be a positive int"),
        ({"dtype": "fp8"}, valuelens.ConfigError, "unknown dtype 'fp8'"),
        ({"device": "gpu"}, valuelens.ConfigError, "unknown device 'gpu'"),
        ({"embed_batch_size": 0}, ValidationError, "embed_batch_size"),
        ({"recipie": "va"}, ValidationError, "has no field 'recipie': did you mean 'recipe'"),
    ],
)
def test_configuration_errors_come_before_any_loading(
    fields: dict[str, Any], error: type, match: str
) -> None:
    """A folder that does not exist is never reached: the settings are checked first."""
    with pytest.raises(error, match=match):
        ValueLensEmbedding("/nonexistent/model/folder", **fields)


def test_unknown_model_name_lists_the_registered_models() -> None:
    with pytest.raises(ValueError, match="smollm2-135m"):
        ValueLensEmbedding("smollm2-135", recipe="va")


def test_encoder_sharing_reads_the_settings_from_the_encoder(tiny_encoder: valuelens.Encoder) -> None:
    embedding = ValueLensEmbedding(encoder=tiny_encoder, query_instruction="Q: ")
    assert embedding.encoder is tiny_encoder
    assert embedding.model_name == str(tiny_encoder.name_or_path)
    data = embedding.to_dict()
    assert data["recipe"] == "aligned-wva"
    assert data["prompt"] == "futureeol"
    assert data["layers"] == list(tiny_encoder.layers)
    assert data["device"] is None and data["dtype"] is None  # not the encoder's: a GPU dict loads on a CPU
    shared = ValueLensEmbedding.from_dict(data, encoder=tiny_encoder)
    assert shared.encoder is tiny_encoder
    assert shared.to_dict() == data
    # agreeing values (aliases included) are accepted
    ValueLensEmbedding(
        encoder=tiny_encoder, recipe="ALIGNED_WVA", prompt="FutureEOL", device="cpu", dtype="fp32"
    )


def test_deep_copies_own_their_model(tiny_encoder: valuelens.Encoder) -> None:
    import copy

    embedding = ValueLensEmbedding(encoder=tiny_encoder, query_instruction="Q: ", num_workers=2)
    want = embedding.get_query_embedding("a cat")
    for clone in (copy.deepcopy(embedding), embedding.model_copy(deep=True)):
        assert clone.encoder is not embedding.encoder and clone.encoder.model is not tiny_encoder.model
        assert clone.to_dict() == embedding.to_dict()
        assert clone.get_query_embedding("a cat") == pytest.approx(want, abs=1e-6)
        np.testing.assert_allclose(
            asyncio.run(clone.aget_text_embedding_batch(["a", "b", "c"])),
            embedding.get_text_embedding_batch(["a", "b", "c"]),
            atol=1e-6,
        )


def test_resolved_settings_are_recorded_for_an_exact_round_trip(tiny_model_dir: Path) -> None:
    embedding = ValueLensEmbedding(str(tiny_model_dir), recipe="Aligned_WVA", prompt="FutureEOL")
    data = embedding.to_dict()
    assert data["recipe"] == "aligned-wva"
    assert data["prompt"] == "futureeol"
    assert data["layers"] == list(embedding.encoder.layers)  # what "auto" meant for this model
    assert data["device"] is None and data["dtype"] is None  # kept as given: portable
    shared = ValueLensEmbedding.from_dict(data, encoder=embedding.encoder)
    assert shared.encoder is embedding.encoder
    assert shared.to_dict() == data


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (
            {"recipe": "va"},
            "recipe='va' \\(the encoder has 'aligned-wva'\\)",
        ),
        ({"prompt": None}, "prompt=None \\(the encoder has 'futureeol'\\)"),
        ({"layers": [0]}, "layers=\\[0\\].*leave them unset to use the Encoder's"),
        ({"max_length": 64}, "max_length=64"),
        ({"device": "cuda"}, "device='cuda' \\(the model is on 'cpu'\\)"),
        ({"dtype": "bfloat16"}, "dtype='bfloat16' \\(the model is float32\\)"),
    ],
)
def test_encoder_sharing_rejects_conflicting_settings(
    tiny_encoder: valuelens.Encoder, fields: dict[str, Any], match: str
) -> None:
    with pytest.raises(valuelens.ConfigError, match=match):
        ValueLensEmbedding(encoder=tiny_encoder, **fields)


def test_encoder_must_be_a_valuelens_encoder() -> None:
    with pytest.raises(TypeError, match=r"encoder must be a valuelens\.Encoder, got str"):
        ValueLensEmbedding(encoder="smollm2-135m")


def test_model_defining_fields_are_frozen_the_rest_is_live(tiny_va: ValueLensEmbedding) -> None:
    with pytest.raises(ValidationError, match="frozen"):
        tiny_va.recipe = "hs"  # type: ignore[misc]
    embedding = ValueLensEmbedding(encoder=tiny_va.encoder, model_name=tiny_va.model_name)
    normalized = embedding.get_text_embedding(CORPUS[0])
    embedding.normalize = False
    raw = embedding.get_text_embedding(CORPUS[0])
    np.testing.assert_allclose(normalized, np.asarray(raw) / np.linalg.norm(raw), atol=1e-6)
    embedding.query_instruction = "Query: "
    assert not np.allclose(embedding.get_query_embedding(CORPUS[0]), raw)


class _InFlight:
    """Wraps ``Encoder.encode`` to record how many calls overlap."""

    def __init__(self, encode: Any) -> None:
        self.encode, self.now, self.peak, self.lock = encode, 0, 0, threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            time.sleep(0.05)  # hold the slot long enough for the others to arrive
            return self.encode(*args, **kwargs)
        finally:
            with self.lock:
                self.now -= 1


@pytest.mark.parametrize(("num_workers", "peak"), [(None, 1), (3, 3)])
def test_async_batches_run_concurrently_up_to_num_workers(
    tiny_model_dir: Path, num_workers: int | None, peak: int
) -> None:
    encoder = valuelens.Encoder.from_pretrained(tiny_model_dir)
    embedding = ValueLensEmbedding(encoder=encoder, embed_batch_size=1, num_workers=num_workers)
    sequential = embedding.get_text_embedding_batch(CORPUS)
    probe = _InFlight(encoder.encode)
    encoder.encode = probe  # type: ignore[method-assign]
    concurrent = asyncio.run(embedding.aget_text_embedding_batch(CORPUS))
    assert probe.peak == peak
    np.testing.assert_allclose(concurrent, sequential, atol=1e-6)


def test_async_calls_do_not_block_the_event_loop(tiny_va: ValueLensEmbedding) -> None:
    probe = _InFlight(tiny_va.encoder.encode)
    embedding = ValueLensEmbedding(
        encoder=valuelens.Encoder(tiny_va.encoder.model, tiny_va.encoder.tokenizer)
    )
    embedding.encoder.encode = probe  # type: ignore[method-assign]

    async def run() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        await embedding.aget_query_embedding(CORPUS[0])
        task.cancel()
        return ticks

    assert asyncio.run(run()) >= 3  # the loop kept running during the ~50 ms forward


def test_batch_errors_name_the_global_index_and_open_no_event(
    tiny_model_dir: Path, tiny_va: ValueLensEmbedding
) -> None:
    handler = LlamaDebugHandler(print_trace_on_end=False)
    embedding = ValueLensEmbedding(
        encoder=tiny_va.encoder,
        model_name=tiny_va.model_name,
        embed_batch_size=2,
        callback_manager=CallbackManager([handler]),
    )
    texts: list[Any] = [*CORPUS[:5], None, CORPUS[6]]
    with pytest.raises(TypeError, match=r"texts\[5\] is None \(NoneType\); every item must be a str"):
        embedding.get_text_embedding_batch(texts)
    with pytest.raises(TypeError, match=r"texts\[5\]"):
        asyncio.run(embedding.aget_text_embedding_batch(texts))
    assert handler.get_events(CBEventType.EMBEDDING) == []
    with pytest.raises(TypeError, match="got a single str; use get_text_embedding"):
        embedding.get_text_embedding_batch("one text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="query must be a str, got None"):
        embedding.get_query_embedding(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be a str, got 3"):
        embedding.get_text_embedding(3)  # type: ignore[arg-type]
    assert len(embedding.get_text_embedding_batch(CORPUS[:2])) == 2  # still usable


def test_empty_text_is_embedded(tiny_va: ValueLensEmbedding) -> None:
    vector = tiny_va.get_text_embedding("")
    assert len(vector) == tiny_va.dimension
    assert np.isfinite(vector).all()


def test_truncation_is_reported(tiny_model_dir: Path) -> None:
    embedding = ValueLensEmbedding(str(tiny_model_dir), max_length=8)
    with pytest.warns(valuelens.TruncationWarning, match="max_length=8"):
        vector = embedding.get_text_embedding(" ".join(CORPUS))
    assert len(vector) == embedding.dimension


def test_settings_accept_the_embedding(tiny_va: ValueLensEmbedding) -> None:
    saved = Settings._embed_model  # the private slot: reading Settings.embed_model would resolve a default
    try:
        Settings.embed_model = tiny_va
        assert Settings.embed_model is tiny_va
        assert resolve_embed_model(tiny_va) is tiny_va
    finally:
        Settings._embed_model = saved


def test_preset_and_the_newer_methods_pass_through(tiny_model_dir: Path) -> None:
    fields = {"prepend_layers": "auto", "contrast_layer": 1, "contrast_scale": 0.8, "drop_prefix": True}
    emb = ValueLensEmbedding(str(tiny_model_dir), preset="best", device="cpu", **fields)
    assert emb.recipe == "aligned-wva" and emb.contrast_scale == 0.8 and emb.drop_prefix
    reference = valuelens.Encoder.from_pretrained(str(tiny_model_dir), device="cpu", preset="best", **fields)
    np.testing.assert_allclose(
        np.array(emb.get_text_embedding_batch(CORPUS)), reference.encode(CORPUS, normalize=True), atol=1e-5
    )


def test_chunks_and_forward_batches_are_separate_settings(
    tiny_encoder: valuelens.Encoder, monkeypatch
) -> None:
    """LlamaIndex cuts a batch into chunks of embed_batch_size; each chunk is one encode call whose
    forward passes hold at most batch_size texts."""
    calls: list[tuple[int, int]] = []
    encode = tiny_encoder.encode

    def spy(texts, **kwargs):
        calls.append((len(texts), kwargs["batch_size"]))
        return encode(texts, **kwargs)

    monkeypatch.setattr(tiny_encoder, "encode", spy)
    embedding = ValueLensEmbedding(encoder=tiny_encoder, embed_batch_size=4, batch_size=2)
    texts = [f"sentence number {i} about {'long ' * i}things" for i in range(10)]
    vectors = embedding.get_text_embedding_batch(texts)
    assert calls == [(4, 2), (4, 2), (2, 2)]
    single = ValueLensEmbedding(encoder=tiny_encoder)  # defaults: one chunk of up to 256 texts
    calls.clear()
    np.testing.assert_allclose(single.get_text_embedding_batch(texts), vectors, atol=1e-5, rtol=1e-4)
    assert calls == [(10, 32)]


# ---------------------------------------------------------------------- presets with overrides
class _Loaded(Exception):
    """Raised in place of loading a model: what happened before it happened before any model loaded."""


def test_preset_overrides_win_by_key_even_none_and_defaults(
    tiny_model_dir, tmp_path, monkeypatch, caplog
) -> None:
    path = str(tiny_model_dir)
    entry = tune_tiny_preset(monkeypatch, path, tmp_path)
    plain = ValueLensEmbedding(path, device="cpu", preset="best")
    assert plain.drop_prefix and plain.postprocess == entry["postprocess"]
    caplog.set_level(logging.WARNING, logger="valuelens")
    emb = ValueLensEmbedding(
        path, device="cpu", preset="best", drop_prefix=False
    )  # the default value, passed
    assert not emb.drop_prefix and emb.postprocess is None and emb.encoder.postprocess is None
    assert "drop_prefix= changed it" in caplog.text
    emb = ValueLensEmbedding(path, device="cpu", preset="best", prompt=None)
    assert emb.prompt is None and emb.drop_prefix and emb.postprocess is None
    emb = ValueLensEmbedding(path, device="cpu", preset="best", postprocess=None)
    assert emb.postprocess is None and emb.drop_prefix and emb.recipe == "aligned-wva"
    reference = valuelens.Encoder.from_pretrained(path, device="cpu", **{**entry, "postprocess": None})
    np.testing.assert_allclose(
        np.array(emb.get_text_embedding_batch(CORPUS)), reference.encode(CORPUS, normalize=True), atol=1e-5
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
        ValueLensEmbedding(path, device="cpu", preset="best", recipe="va")
    assert "dropped drop_prefix=True (recipe='va' does not read the last token's attention)" in caplog.text
    with pytest.raises(_Loaded):  # failed after loading the model before
        ValueLensEmbedding(path, device="cpu", preset="best", prompt="prompteol")
    assert "prompt= changed it" in caplog.text
    with pytest.raises(valuelens.ConfigError, match="Pass postprocess=None"):  # passed: kept, so refused
        ValueLensEmbedding(
            path, device="cpu", preset="best", prompt="prompteol", postprocess=entry["postprocess"]
        )


def test_a_preset_instance_shares_its_encoder(tiny_model_dir, tmp_path, monkeypatch) -> None:
    path = str(tiny_model_dir)
    tune_tiny_preset(monkeypatch, path, tmp_path)
    emb = ValueLensEmbedding(path, device="cpu", preset="best")
    shared = ValueLensEmbedding(encoder=emb.encoder, preset="best", drop_prefix=True)
    assert shared.encoder is emb.encoder and shared.postprocess == emb.postprocess
    with pytest.raises(valuelens.ConfigError, match="disagree"):
        ValueLensEmbedding(
            encoder=emb.encoder, preset="best", drop_prefix=False
        )  # the preset's spec without it
    plain = valuelens.Encoder.from_pretrained(path, device="cpu")
    with pytest.raises(valuelens.ConfigError, match="disagree"):
        ValueLensEmbedding(encoder=plain, preset="best")


def test_from_dict_with_the_encoder_works_for_a_preset_instance(
    tiny_model_dir, tmp_path, monkeypatch
) -> None:
    tune_tiny_preset(monkeypatch, str(tiny_model_dir), tmp_path)
    embedding = ValueLensEmbedding(str(tiny_model_dir), device="cpu", preset="best")
    data = embedding.to_dict()
    assert data["preset"] == "best" and data["drop_prefix"]
    shared = ValueLensEmbedding.from_dict(data, encoder=embedding.encoder)  # refused before
    assert shared.encoder is embedding.encoder
    assert shared.to_dict() == data


def test_long_text_chunk_is_a_field_like_the_others(tiny_model_dir: Path) -> None:
    """``long_text="chunk"`` reaches the core: a long document is embedded whole, with no warning."""
    long = " ".join(CORPUS * 3)
    spec: dict[str, Any] = {"recipe": "va", "layers": "all", "max_length": 48}
    embedding = ValueLensEmbedding(str(tiny_model_dir), long_text="chunk", normalize=False, **spec)
    assert embedding.long_text == "chunk" and embedding.to_dict()["long_text"] == "chunk"
    reference = valuelens.Encoder.from_pretrained(tiny_model_dir, long_text="chunk", **spec)
    with warnings.catch_warnings():
        warnings.simplefilter("error", valuelens.TruncationWarning)
        vectors = embedding.get_text_embedding_batch([long, CORPUS[0]])
    np.testing.assert_allclose(vectors, reference.encode([long, CORPUS[0]]), atol=1e-6)
    with pytest.raises(
        valuelens.ConfigError, match="long_text must be one of 'truncate', 'chunk', got 'split'"
    ):
        ValueLensEmbedding("/nonexistent/model/folder", long_text="split")


def test_a_tuned_preset_folder(tiny_checkpoint: str, tuned_folder: Path) -> None:
    """``preset=DIR`` (a ``valuelens tune`` folder): the folder's spec, recorded in the fields."""
    emb = ValueLensEmbedding(tiny_checkpoint, preset=str(tuned_folder), device="cpu")
    reference = valuelens.Encoder.from_pretrained(tiny_checkpoint, device="cpu", preset=str(tuned_folder))
    assert emb.recipe == reference.config.recipe and emb.postprocess == reference.config.postprocess
    np.testing.assert_allclose(
        np.array(emb.get_text_embedding_batch(CORPUS)), reference.encode(CORPUS, normalize=True), atol=1e-5
    )
    np.testing.assert_allclose(
        emb.get_query_embedding(CORPUS[1]), reference.encode(CORPUS[1], normalize=True), atol=1e-5
    )


def test_documents_in_hand_to_a_tuned_preset_to_an_index(tiny_model_dir: Path, tmp_path, monkeypatch) -> None:
    """The documented short path: LlamaIndex documents → ``tune(corpus=docs)`` (no labels) → a preset
    folder → ``ValueLensEmbedding(preset=DIR)`` → a ``VectorStoreIndex`` whose retriever answers."""
    from llama_index.core import Document, VectorStoreIndex

    from valuelens.tuning import tune

    monkeypatch.setattr("valuelens.tuning.data.default_data_dir", lambda: None)
    docs = [Document(text=f"Entry {i} of the log. {CORPUS[i % 8]} {CORPUS[(i + 3) % 8]}") for i in range(24)]
    folder = tune(
        str(tiny_model_dir), tmp_path / "tuned", corpus=docs, pseudo_queries=10, show_progress=False
    ).folder
    embedding = ValueLensEmbedding(model_name=str(tiny_model_dir), device="cpu", preset=str(folder))
    reference = valuelens.Encoder.from_pretrained(str(tiny_model_dir), device="cpu", preset=str(folder))
    np.testing.assert_allclose(
        embedding.get_query_embedding(docs[5].text),
        reference.encode_query([docs[5].text], normalize=True)[0],
        atol=1e-5,
    )
    index = VectorStoreIndex.from_documents(docs, embed_model=embedding)
    hits = index.as_retriever(similarity_top_k=3).retrieve(docs[5].text)
    assert len(hits) == 3 and all(hit.node.get_content() in {d.text for d in docs} for hit in hits)
