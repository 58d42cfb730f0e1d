"""Encoder behaviour: inputs, batching, padding, threads, hook hygiene, early exit, dtypes, loading."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import valuelens
from tiny_models import CORPUS, build_tiny_model
from valuelens import RECIPES, Encoder, TruncationWarning
from valuelens.capture import _INSTRUMENTED, is_instrumented
from valuelens.errors import ConfigError, SpaceMismatchError
from valuelens.settings import adopt


def _hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.fixture
def enc(tiny_llama, tiny_tokenizer):
    return Encoder(tiny_llama, tiny_tokenizer, recipe="va", layers="all")


def test_shapes_single_string_and_empty_list(enc):
    assert enc.encode(CORPUS[:3]).shape == (3, enc.dimension)
    single = enc.encode(CORPUS[0])
    assert single.shape == (enc.dimension,)
    np.testing.assert_allclose(single, enc.encode([CORPUS[0]])[0], atol=1e-6)
    empty = enc.encode([])
    assert empty.shape == (0, enc.dimension) and empty.dtype == np.float32
    assert enc.encode(t for t in CORPUS[:2]).shape == (2, enc.dimension)


def test_convert_to_tensor_and_normalize(enc):
    t = enc.encode(CORPUS[:2], convert_to_tensor=True, normalize=True)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.device == enc.device
    assert torch.allclose(t.norm(dim=1), torch.ones(2), atol=1e-5)
    assert enc.encode([], convert_to_tensor=True).shape == (0, enc.dimension)


@pytest.mark.parametrize("bad", [None, 3, b"bytes"])
def test_bad_container_types(enc, bad):
    with pytest.raises(TypeError, match="string or a list of strings"):
        enc.encode(bad)


@pytest.mark.parametrize(("texts", "index"), [(["ok", None], 1), (["ok", "fine", 7], 2), ([["nested"]], 0)])
def test_bad_items_name_the_index(enc, texts, index):
    with pytest.raises(TypeError, match=rf"texts\[{index}\]"):
        enc.encode(texts)


def test_bad_batch_size(enc):
    with pytest.raises(ValueError, match="batch_size"):
        enc.encode(["a"], batch_size=0)


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_empty_and_whitespace_texts_are_finite(tiny_llama, tiny_tokenizer, recipe):
    enc = Encoder(tiny_llama, tiny_tokenizer, recipe=recipe, layers="all")
    out = enc.encode(["", "   ", "\n", CORPUS[0]], normalize=True)
    assert np.isfinite(out).all()
    assert (np.linalg.norm(out, axis=1) > 0.99).all()


def test_order_restored_and_batch_size_invariant(enc):
    texts = [*CORPUS, "short", "a much longer sentence about many different things " * 3]
    full = enc.encode(texts, batch_size=len(texts))
    for bs in (1, 3):
        np.testing.assert_allclose(enc.encode(texts, batch_size=bs), full, atol=1e-5)
    one_by_one = np.stack([enc.encode(t) for t in texts])
    np.testing.assert_allclose(one_by_one, full, atol=1e-5)


@pytest.mark.parametrize("recipe", ["va", "wva-lt", "last-token", "aligned-wva"])
def test_padding_side_invariant(tiny_model, tiny_tokenizer, recipe):
    texts = CORPUS[:5]
    right = Encoder(tiny_model, tiny_tokenizer, recipe=recipe, layers="all", prompt="prompteol").encode(texts)
    tiny_tokenizer.padding_side = "left"
    left = Encoder(tiny_model, tiny_tokenizer, recipe=recipe, layers="all", prompt="prompteol").encode(texts)
    np.testing.assert_allclose(left, right, atol=1e-4)


def test_truncation_warns_once_per_call(tiny_llama, tiny_tokenizer):
    enc = Encoder(tiny_llama, tiny_tokenizer, recipe="va", max_length=16)
    with pytest.warns(TruncationWarning, match="2 of 3 texts") as record:
        out = enc.encode([CORPUS[4] * 5, "cat", CORPUS[5] * 5])
    assert len(record) == 1 and np.isfinite(out).all()


def test_hooks_and_attention_restored(tiny_llama, tiny_tokenizer):
    before = _hook_count(tiny_llama)
    impl = tiny_llama.config._attn_implementation
    during = []
    probe = tiny_llama.model.layers[0].register_forward_pre_hook(
        lambda module, args: during.append(is_instrumented(tiny_llama))
    )
    Encoder(tiny_llama, tiny_tokenizer, recipe="wva-lt").encode(CORPUS)
    probe.remove()
    assert during and all(during)
    assert _hook_count(tiny_llama) == before
    assert tiny_llama.config._attn_implementation == impl
    assert not _INSTRUMENTED and not is_instrumented(tiny_llama)


def test_hooks_removed_when_forward_raises(tiny_llama, tiny_tokenizer):
    enc = Encoder(tiny_llama, tiny_tokenizer, recipe="va", layers="all")
    before = _hook_count(tiny_llama)

    def boom(module, args):
        raise RuntimeError("boom in layer 1")

    handle = enc.parts.layers[1].register_forward_pre_hook(boom)
    with pytest.raises(RuntimeError, match="boom"):
        enc.encode(CORPUS[:2])
    handle.remove()
    assert _hook_count(tiny_llama) == before and not _INSTRUMENTED and not is_instrumented(tiny_llama)
    assert tiny_llama.config._attn_implementation == "sdpa"
    assert enc.encode(CORPUS[:2]).shape == (2, enc.dimension)  # still usable


@pytest.mark.parametrize(
    ("recipe", "layers", "ran"), [("va", [1], [0, 1]), ("hs", [0, 2], [0, 1, 2]), ("aligned-wva", [0], [0])]
)
def test_early_exit_skips_later_layers(tiny_llama, tiny_tokenizer, recipe, layers, ran):
    enc = Encoder(tiny_llama, tiny_tokenizer, recipe=recipe, layers=layers)
    calls: list[int] = []
    handles = [
        layer.register_forward_pre_hook(lambda m, a, i=i: calls.append(i))
        for i, layer in enumerate(enc.parts.layers)
    ]
    mlp_calls: list[int] = []
    handles.append(tiny_llama.model.norm.register_forward_pre_hook(lambda m, a: mlp_calls.append(1)))
    try:
        enc.encode(CORPUS[:2])
    finally:
        for h in handles:
            h.remove()
    assert sorted(set(calls)) == ran
    assert not mlp_calls  # the final norm (and so the LM head) never runs


def test_threads_share_one_model(tiny_llama, tiny_tokenizer):
    encoders = [
        Encoder(tiny_llama, tiny_tokenizer, recipe=r, layers="all")
        for r in ("va", "hs", "wva-lt", "aligned-wva")
    ]
    expected = [e.encode(CORPUS) for e in encoders]
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [
            (i, pool.submit(encoders[i].encode, CORPUS, 2)) for _ in range(6) for i in range(len(encoders))
        ]
        for i, fut in futures:
            np.testing.assert_allclose(fut.result(), expected[i], atol=1e-5)
    assert not _INSTRUMENTED and tiny_llama.config._attn_implementation == "sdpa"


def test_asyncio_to_thread_callers(enc):
    expected = enc.encode(CORPUS)

    async def main():
        return await asyncio.gather(*(asyncio.to_thread(enc.encode, CORPUS) for _ in range(5)))

    for got in asyncio.run(main()):
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_plain_forward_during_capture_is_untouched(tiny_llama, tiny_tokenizer):
    enc = Encoder(tiny_llama, tiny_tokenizer, recipe="va", layers="all")
    ids = tiny_tokenizer(CORPUS[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        want = tiny_llama(**ids).logits
    results = {}
    start = threading.Barrier(2)

    def plain():
        start.wait()
        with torch.no_grad():
            results["logits"] = tiny_llama(**ids).logits

    thread = threading.Thread(target=plain)
    thread.start()
    start.wait()
    enc.encode(CORPUS * 4, batch_size=1)
    thread.join()
    torch.testing.assert_close(results["logits"], want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_runs_in_fp32_accumulation(tiny_tokenizer, dtype):
    model = build_tiny_model("qwen3", len(tiny_tokenizer)).to(dtype)
    fp32 = build_tiny_model("qwen3", len(tiny_tokenizer))
    half = Encoder(model, tiny_tokenizer, recipe="wva-lt", layers="all").encode(CORPUS, normalize=True)
    full = Encoder(fp32, tiny_tokenizer, recipe="wva-lt", layers="all").encode(CORPUS, normalize=True)
    assert half.dtype == np.float32 and np.isfinite(half).all()
    cos = (half * full).sum(1)
    assert cos.min() > 0.99


def test_metaeol_is_the_mean_of_eight_normalized_passes(tiny_llama, tiny_tokenizer):
    from valuelens.prompts import NAMED_PROMPTS

    meta = Encoder(
        tiny_llama, tiny_tokenizer, recipe="aligned-wva", layers="all", prompt="metaeol", max_length=1024
    )
    got = meta.encode(CORPUS[:2])
    parts = [
        Encoder(
            tiny_llama, tiny_tokenizer, recipe="aligned-wva", layers="all", prompt=t, max_length=1024
        ).encode(CORPUS[:2], normalize=True)
        for t in NAMED_PROMPTS["metaeol"]
    ]
    np.testing.assert_allclose(got, np.mean(parts, axis=0), atol=1e-5)


def test_config_errors_before_any_forward(tiny_llama, tiny_tokenizer):
    with pytest.raises(ConfigError, match=r"unknown recipe 'vaa'.*'va'"):
        Encoder(tiny_llama, tiny_tokenizer, recipe="vaa")
    with pytest.raises(ConfigError, match="unknown prompt"):
        Encoder(tiny_llama, tiny_tokenizer, prompt="eol")
    with pytest.raises(ConfigError, match="has 4 decoder layers"):
        Encoder(tiny_llama, tiny_tokenizer, layers=[9])
    with pytest.raises(SpaceMismatchError, match="aligned-va"):
        Encoder(tiny_llama, tiny_tokenizer, recipe="va", embed_filter=2)
    with pytest.raises(ConfigError, match="tau"):
        Encoder(tiny_llama, tiny_tokenizer, recipe="hs", embed_filter=0.5)
    with pytest.raises(ConfigError, match="max_length"):
        Encoder(tiny_llama, tiny_tokenizer, max_length=0)
    with pytest.raises(ConfigError, match="final_norm"):
        Encoder(tiny_llama, tiny_tokenizer, recipe="va", final_norm=True)


@pytest.mark.parametrize("arch_name", ["llama", "gemma3_text", "gpt2"])
@pytest.mark.parametrize("recipe", ["va", "hs", "aligned-wva"])
def test_from_pretrained_loads_only_needed_layers(tmp_path, tiny_tokenizer, arch_name, recipe):
    model = build_tiny_model(arch_name, len(tiny_tokenizer))
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    full = Encoder(model, tiny_tokenizer, recipe=recipe, layers=[1]).encode(CORPUS)
    loaded = Encoder.from_pretrained(tmp_path, recipe=recipe, layers=[1], device="cpu", dtype="float32")
    assert loaded.parts.n_layers == 2  # layers 2.. were never loaded
    np.testing.assert_allclose(loaded.encode(CORPUS), full, atol=1e-5)
    keep_all = Encoder.from_pretrained(
        tmp_path, recipe=recipe, layers=[1], truncate_layers=False, dtype="float32"
    )
    assert keep_all.parts.n_layers == 4
    np.testing.assert_allclose(keep_all.encode(CORPUS), full, atol=1e-5)


def test_a_pruned_model_keeps_the_checkpoints_auto_layers(monkeypatch, tmp_path, tiny_tokenizer):
    from valuelens import layers

    monkeypatch.setitem(layers.AUTO_LAYERS, ("llama", 4, 64), {"va": (1,), "hs": (0, 1)})
    model = build_tiny_model("llama", len(tiny_tokenizer))
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    pruned = Encoder.from_pretrained(tmp_path, recipe="va", dtype="float32")
    assert pruned.parts.n_layers == 2 and pruned.parts.full_depth == 4
    # a second encoder on the pruned model resolves "auto" for the 4-layer checkpoint, not for 2 layers
    again = Encoder(pruned.model, pruned.tokenizer, recipe="hs")
    assert again.layers == (0, 1)
    np.testing.assert_allclose(
        again.encode(CORPUS), Encoder(model, tiny_tokenizer, recipe="hs").encode(CORPUS), atol=1e-5
    )
    with pytest.raises(ConfigError, match=r"\(layers=3\): only its first 2 of 4 layers"):
        Encoder(pruned.model, pruned.tokenizer, recipe="hs", layers="last")
    with pytest.raises(ConfigError, match=r"\(fusion\[0\]\.layers=2\)"):
        Encoder(
            pruned.model, pruned.tokenizer, recipe="hs", layers=[1], fusion=[{"recipe": "va", "layers": [2]}]
        )
    # the recorded depth survives save_pretrained: a reload of the cut model still knows it
    pruned.model.save_pretrained(tmp_path / "cut")
    tiny_tokenizer.save_pretrained(tmp_path / "cut")
    reloaded = Encoder.from_pretrained(tmp_path / "cut", recipe="hs", dtype="float32")
    assert reloaded.parts.full_depth == 4 and reloaded.layers == (0, 1)


def test_repr_and_public_api(enc):
    assert "recipe='va'" in repr(enc) and f"dim={enc.dimension}" in repr(enc)
    assert set(valuelens.__all__) >= {"Encoder", "EmbedFilter", "RECIPES", "__version__", "ValueLensError"}
    assert valuelens.__version__ == "0.1.0"


def test_encode_many_shares_forward_passes(tiny_llama, tiny_tokenizer):
    from valuelens.batching import encode_many

    recipes = [
        ("va", None),
        ("hs", None),
        ("wva-lt", None),
        ("aligned-wva", "prompteol"),
        ("last-token", "prompteol"),
    ]
    encoders = [Encoder(tiny_llama, tiny_tokenizer, recipe=r, layers="all", prompt=p) for r, p in recipes]
    separate = [e.encode(CORPUS) for e in encoders]
    calls: list[int] = []
    handle = encoders[0].parts.layers[0].register_forward_pre_hook(lambda m, a: calls.append(a[0].shape[0]))
    try:
        together = encode_many(encoders, CORPUS, batch_size=4)
    finally:
        handle.remove()
    for got, want in zip(together, separate, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
    # two prompt groups (none, prompteol) x two batches of 4 = 4 forwards for 5 recipes
    assert len(calls) == 4
    assert encode_many(encoders[:2], [])[0].shape == (0, encoders[0].dimension)


def test_config_rebuilds_the_encoder_and_adopt_names_conflicts(tmp_path, tiny_tokenizer):
    model = build_tiny_model("llama", len(tiny_tokenizer))
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    enc = Encoder(
        model, tiny_tokenizer, recipe="aligned-wva", layers="half", prompt="PromptEOL", embed_filter=2
    )
    data = enc.config.to_dict()
    assert data["layers"] == [2, 3] and data["prompt"] == "prompteol" and data["embed_filter"] == 2.0
    assert json.loads(json.dumps(data)) == data  # JSON-safe
    config = valuelens.EncoderConfig.from_dict(data)
    assert config == enc.config and config.diff(enc.config) == []
    rebuilt = Encoder.from_pretrained(tmp_path, config, dtype="float32", truncate_layers=False)
    np.testing.assert_allclose(rebuilt.encode(CORPUS), enc.encode(CORPUS), atol=1e-5)
    keyword = Encoder.from_pretrained(tmp_path, dtype="float32", **data)
    np.testing.assert_allclose(keyword.encode(CORPUS), enc.encode(CORPUS), atol=1e-5)
    assert (
        adopt(enc, {"recipe": "aligned_wva", "layers": "auto", "prompt": "prompteol", "max_length": None})
        is enc.config
    )
    assert adopt(enc, {"layers": "2-3", "embed_filter": 2}, device="cpu", dtype="fp32") is enc.config
    with pytest.raises(ConfigError) as info:
        adopt(enc, {"recipe": "hs", "prompt": None, "layers": [0], "embed_filter": 4}, dtype="bf16")
    message = str(info.value)
    for part in (
        "recipe='hs' (the encoder has 'aligned-wva')",
        "prompt=None",
        "layers=[0]",
        "embed_filter=4",
        "dtype='bf16'",
    ):
        assert part in message
    with pytest.raises(ConfigError, match="unknown setting"):
        adopt(enc, {"colour": "red"})
    with pytest.raises(ConfigError, match="either config= or"):
        Encoder(model, tiny_tokenizer, config, recipe="va")


def test_config_validation_serialisation_and_diff():
    config = valuelens.EncoderConfig(recipe="WVA_LT", layers=[3, 1], max_length=64)
    assert config.recipe == "wva-lt" and config.layers == (3, 1)
    assert valuelens.EncoderConfig.from_dict(config.to_dict()) == config
    assert valuelens.EncoderConfig(max_length=512).diff(valuelens.EncoderConfig()) == []  # None means 512
    assert valuelens.EncoderConfig(recipe="hs").diff(valuelens.EncoderConfig()) == ["recipe: 'hs' != 'va'"]
    with pytest.raises(ConfigError, match="unknown EncoderConfig field"):
        valuelens.EncoderConfig.from_dict({"recipe": "va", "pooling": "mean"})
    for bad in ({"combine": "max"}, {"final_norm": "yes"}, {"embed_filter_offset": 1.5}, {"max_length": 0}):
        with pytest.raises(ConfigError):
            valuelens.EncoderConfig(**bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.recipe = "va"  # type: ignore[misc]


def test_auto_layers_table_per_recipe(monkeypatch, tiny_llama, tiny_tokenizer):
    from valuelens import layers

    monkeypatch.setitem(layers.AUTO_LAYERS, ("llama", 4, 64), {"va": (0, 1), "*": (3,)})
    assert Encoder(tiny_llama, tiny_tokenizer, recipe="va").layers == (0, 1)
    assert Encoder(tiny_llama, tiny_tokenizer, recipe="hs").layers == (3,)
    assert Encoder(tiny_llama, tiny_tokenizer, recipe="last-token").layers == (
        3,
    )  # last layer, not the table


def test_device_map_model_from_accelerate(tmp_path, tiny_tokenizer):
    model = build_tiny_model("qwen2", len(tiny_tokenizer))
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    want = Encoder(model, tiny_tokenizer, recipe="aligned-wva", layers="all", prompt="futureeol").encode(
        CORPUS
    )
    enc = Encoder.from_pretrained(
        tmp_path,
        recipe="aligned-wva",
        layers="all",
        prompt="futureeol",
        dtype="float32",
        device_map={"": "cpu"},
    )
    np.testing.assert_allclose(enc.encode(CORPUS), want, atol=1e-5)


def test_plan_batches_respects_the_token_budget_and_the_batch_size():
    from valuelens.batching import plan_batches

    lengths = [5, 3, 9, 1, 1, 1]
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    assert plan_batches(order, lengths, batch_size=32) == [order]
    assert plan_batches(order, lengths, batch_size=4) == [order[:4], order[4:]]
    batches = plan_batches(order, lengths, batch_size=32, max_tokens=12)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))  # each text once
    assert batches[0] == [2]  # 9 tokens: a second row would make 18 padded tokens
    for batch in batches:
        assert len(batch) == 1 or len(batch) * lengths[batch[0]] <= 12
    assert plan_batches(order, lengths, batch_size=32, max_tokens=1) == [[i] for i in order]


@pytest.mark.parametrize("recipe", ["va", "aligned-wva", "wva-lt"])
def test_token_budget_batching_gives_the_same_vectors(tiny_llama, tiny_tokenizer, recipe):
    enc = Encoder(tiny_llama, tiny_tokenizer, recipe=recipe, layers="all", prompt="prompteol")
    texts = [*CORPUS, "word " * 60, "short", "a medium sentence about several things " * 3]
    fixed = enc.encode(texts, batch_size=64, max_tokens_per_batch=None)
    shapes: list[tuple[int, int]] = []
    handle = enc.parts.layers[0].register_forward_pre_hook(lambda m, a: shapes.append(tuple(a[0].shape[:2])))
    try:
        budgeted = enc.encode(texts, batch_size=64, max_tokens_per_batch=96)
    finally:
        handle.remove()
    np.testing.assert_allclose(budgeted, fixed, atol=1e-5)
    assert len(shapes) > 1 and all(rows == 1 or rows * width <= 96 for rows, width in shapes)
    with pytest.raises(ValueError, match="max_tokens_per_batch"):
        enc.encode(texts, max_tokens_per_batch=0)


def test_the_token_budget_is_on_by_default(tiny_llama, tiny_tokenizer):
    """On CPU ``max_tokens_per_batch="auto"`` is 2048 padded tokens: long texts go in smaller batches."""
    from valuelens.inputs import token_budget

    enc = Encoder(tiny_llama, tiny_tokenizer, recipe="va", layers="all", max_length=200)
    texts = ["word " * 60] * 40 + CORPUS
    shapes: list[tuple[int, int]] = []
    handle = enc.parts.layers[0].register_forward_pre_hook(lambda m, a: shapes.append(tuple(a[0].shape[:2])))
    try:
        default = enc.encode(texts, batch_size=64)
    finally:
        handle.remove()
    assert token_budget("auto", "cpu") == 2048 and token_budget(None, "cpu") is None
    assert len(shapes) > 1 and all(rows * width <= 2048 for rows, width in shapes)
    np.testing.assert_allclose(
        default, enc.encode(texts, batch_size=64, max_tokens_per_batch=None), atol=1e-5
    )
