"""ValuePooling in a real SentenceTransformer: conformance against valuelens.Encoder, and the rest."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from conformance import TEXTS, SentenceTransformerModuleConformance
from sentence_transformers.base.modules import Normalize, Transformer

from sentence_transformers import SentenceTransformer
from tiny_models import tune_tiny_preset
from valuelens import Encoder, fit_texts
from valuelens.errors import ConfigError, UnsupportedModelError
from valuelens_sentence_transformers import ValuePooling, ValueTransformer

CASES = [
    ("llama", {"recipe": "va", "layers": "all"}),
    ("llama", {"recipe": "aligned-wva", "layers": [1, 2], "prompt": "futureeol"}),
    ("llama", {"recipe": "last-token", "prompt": "prompteol", "embed_filter": 2}),
    ("qwen3", {"recipe": "wva-lt", "layers": "half"}),
    ("qwen3", {"recipe": "aligned-va", "layers": [0, 3], "embed_filter": 2, "prompt": "echo"}),
    ("gpt2", {"recipe": "hs", "layers": "auto"}),
    # beyond the papers: Token Prepending, Contrastive Prompting and fusion in one forward
    (
        "llama",
        {
            "recipe": "last-token",
            "prompt": "pcot",
            "layers": [2],
            "prepend_layers": [1, 2],
            "contrast_layer": 1,
            "fusion": [{"recipe": "va", "layers": [1, 2], "weight": 0.5}],
        },
    ),
    (
        "qwen3",
        {"recipe": "aligned-wva", "prompt": "futureeol", "prepend_layers": "auto", "contrast_layer": 0},
    ),
    # the last token's attention without the prompt's head, with a fused WVA-LT that drops it too
    (
        "llama",
        {"recipe": "aligned-wva", "prompt": "futureeol", "drop_prefix": True, "fusion": ["wva-lt"]},
    ),
]


def _st(path: str, **kwargs) -> SentenceTransformer:
    return SentenceTransformer(modules=[Transformer(path), ValuePooling(**kwargs)], device="cpu")


@pytest.fixture(params=CASES, ids=[f"{a}-{c['recipe']}" for a, c in CASES], scope="module")
def case(request):
    return request.param


@pytest.fixture
def st_model(case, tiny_model_dir):
    arch, kwargs = case
    return _st(tiny_model_dir[arch], **kwargs)


@pytest.fixture
def reference(case, tiny_model_dir):
    arch, kwargs = case
    path = tiny_model_dir[arch]
    return Encoder.from_pretrained(path, device="cpu", dtype="float32", **kwargs).encode


class TestValuePoolingConformance(SentenceTransformerModuleConformance):
    pass


def test_layers_after_the_deepest_never_run(tiny_model_dir):
    model = _st(tiny_model_dir["llama"], recipe="va", layers=[0, 1])
    backbone = model[0].auto_model
    assert len(backbone.layers) == 2 and backbone.config.num_hidden_layers == 2  # layers 2 and 3 are gone
    assert model[1].layers == [0, 1]
    calls: list[int] = []
    handles = [
        layer.register_forward_pre_hook(lambda m, a, i=i: calls.append(i))
        for i, layer in enumerate(backbone.layers)
    ]
    model.encode(TEXTS)
    for handle in handles:
        handle.remove()
    assert sorted(set(calls)) == [0, 1]


def test_backbone_weights_are_listed_once(tiny_model_dir, tmp_path):
    from safetensors.torch import save_file

    model = _st(tiny_model_dir["llama"], recipe="va")
    state = model.state_dict()
    assert not [key for key in state if key.startswith("1.")]  # ValuePooling holds no copy of the backbone
    assert len(state) == len(model[0].state_dict())
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "all.safetensors"))


def test_features_can_be_reused_for_a_second_forward(tiny_model_dir):
    model = _st(tiny_model_dir["llama"], recipe="va", prompt="prompteol")
    features = model.tokenize(TEXTS[:3])
    with torch.no_grad():
        first = model(features)["sentence_embedding"].clone()
        second = model(features)["sentence_embedding"]
    torch.testing.assert_close(second, first)  # still pooled over the text only, not the prompt
    np.testing.assert_allclose(first.numpy(), model.encode(TEXTS[:3]), atol=1e-5)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_interrupted_encode_leaves_no_capture_behind(tiny_model_dir, error):
    from valuelens.capture import is_instrumented

    model = _st(tiny_model_dir["llama"], recipe="wva-lt")
    backbone = model[0].auto_model
    want = model.encode(TEXTS)

    def stop(module, args):
        raise error("stop")

    handle = backbone.layers[1].register_forward_pre_hook(stop)
    with pytest.raises(error):
        model.encode(TEXTS)
    handle.remove()
    assert not is_instrumented(backbone) and backbone.config._attn_implementation == "sdpa"
    np.testing.assert_array_equal(model.encode(TEXTS), want)


def test_auto_layers_are_resolved_and_saved(tiny_model_dir, tmp_path):
    model = _st(tiny_model_dir["llama"], recipe="va", layers="auto")
    assert model[1].get_config_dict()["layers"] == [2, 3]  # 50-85 % of 4 layers
    model.save(str(tmp_path / "m"))
    reloaded = SentenceTransformer(str(tmp_path / "m"), trust_remote_code=True, device="cpu")
    assert reloaded[1].layers == [2, 3]
    np.testing.assert_array_equal(reloaded.encode(TEXTS), model.encode(TEXTS))


def test_embed_filter_projection_is_saved_in_safetensors(tiny_model_dir, tmp_path):
    model = _st(tiny_model_dir["llama"], recipe="aligned-wva", layers="all", embed_filter=2)
    model.save(str(tmp_path / "m"))
    files = sorted(p.name for p in (tmp_path / "m" / "1_ValuePooling").iterdir())
    assert files == ["config.json", "model.safetensors"]
    from safetensors.torch import load_file

    stored = load_file(str(tmp_path / "m" / "1_ValuePooling" / "model.safetensors"))
    assert stored["embed_filter_projection"].shape == (32, 64)
    # the backbone is saved once, by the Transformer module
    assert not list((tmp_path / "m" / "1_ValuePooling").glob("*.bin"))


def test_half_precision_and_device_moves(tiny_model_dir):
    model = _st(tiny_model_dir["qwen3"], recipe="aligned-wva", layers="all", prompt="prompteol")
    want = model.encode(TEXTS, normalize_embeddings=True)
    model.to("cpu")
    model.to(torch.bfloat16)
    got = model.encode(TEXTS, normalize_embeddings=True)
    assert np.isfinite(got).all()
    assert (got * want).sum(1).min() > 0.99


def test_multi_process_pool(tiny_model_dir):
    model = _st(tiny_model_dir["llama"], recipe="va", layers="all", prompt="prompteol")
    want = model.encode(TEXTS * 3)
    pool = model.start_multi_process_pool(["cpu", "cpu"])
    try:
        got = model.encode(TEXTS * 3, pool=pool, batch_size=4)
    finally:
        model.stop_multi_process_pool(pool)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_bad_configuration_fails_before_any_forward():
    with pytest.raises(ConfigError, match="unknown recipe"):
        ValuePooling(recipe="mean")
    with pytest.raises(ConfigError, match="cannot parse"):
        ValuePooling(layers="middle")
    with pytest.raises(ConfigError, match="aligned-va"):
        ValuePooling(recipe="va", embed_filter=2)
    with pytest.raises(ConfigError, match="metaeol"):
        ValuePooling(prompt="metaeol")


def test_chunking_long_texts_is_refused_with_the_surfaces_that_do_it():
    """The host's Transformer tokenizes one row per text, cut at max_seq_length: no windows here."""
    for kwargs in ({"long_text": "chunk"}, {"long_text": "chunk", "preset": "best"}):
        with pytest.raises(
            ConfigError, match=r"long_text='chunk'.*use valuelens\.Encoder, the LangChain or LlamaIndex"
        ):
            ValuePooling(**kwargs)
    with pytest.raises(ConfigError, match="long_text must be one of 'truncate', 'chunk', got 'split'"):
        ValuePooling(long_text="split")
    assert ValuePooling().get_config_dict()["long_text"] == "truncate"


def test_out_of_range_layers_name_the_layer_count(tiny_model_dir):
    with pytest.raises(ConfigError, match="has 4 decoder layers"):
        _st(tiny_model_dir["llama"], layers=[7])


def test_needs_a_transformer_in_front():
    with pytest.raises(UnsupportedModelError, match="must follow a sentence_transformers Transformer"):
        SentenceTransformer(modules=[Normalize(), ValuePooling()], device="cpu")


def test_encoder_only_backbone_is_refused(tmp_path):
    from transformers import BertConfig, BertModel

    from tiny_models import build_tokenizer

    tokenizer = build_tokenizer()
    BertModel(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
        )
    ).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModelError, match="decoder LLM"):
        _st(str(tmp_path), recipe="va")


def test_non_text_input_is_a_clear_error(tiny_model_dir):
    model = _st(tiny_model_dir["llama"], recipe="va")
    with pytest.raises(TypeError, match=r"inputs\[1\]"):
        model.encode(["fine", 3])
    assert model.encode(["still works"]).shape[0] == 1


def test_unbound_module_explains_itself():
    module = ValuePooling()
    assert module.get_embedding_dimension() is None
    with pytest.raises(RuntimeError, match="not bound"):
        module.encoder  # noqa: B018


def test_a_plain_transformer_becomes_a_value_transformer_over_the_same_weights(tiny_model_dir):
    host = Transformer(tiny_model_dir["llama"])
    model = SentenceTransformer(modules=[host, ValuePooling(recipe="va")], device="cpu")
    first = model[0]
    assert isinstance(first, ValueTransformer) and first is not host
    assert first.auto_model is host.auto_model and first.tokenizer is host.tokenizer
    # nothing is patched on the instances: the methods are the classes' own
    assert not {"forward", "preprocess"} & (set(vars(first)) | set(vars(host)))
    features = model.preprocess(TEXTS[:2])
    assert "valuelens_batch" in features  # the data travels in the features dict


def test_saved_model_loads_in_a_fresh_process(tiny_model_dir, tmp_path):
    model = _st(tiny_model_dir["llama"], recipe="aligned-wva", layers=[1, 2], prompt="futureeol")
    want = model.encode(TEXTS)
    saved, out = tmp_path / "saved", tmp_path / "vectors.npy"
    model.save(str(saved))
    types = [m["type"] for m in json.loads((saved / "modules.json").read_text())]
    assert types == [
        "valuelens_sentence_transformers.ValueTransformer",
        "valuelens_sentence_transformers.ValuePooling",
    ]
    script = (
        "import sys, numpy as np\n"
        "from sentence_transformers import SentenceTransformer\n"
        "m = SentenceTransformer(sys.argv[1], trust_remote_code=True, device='cpu')\n"
        "np.save(sys.argv[2], m.encode(sys.argv[3:]))\n"
    )
    subprocess.run([sys.executable, "-c", script, str(saved), str(out), *TEXTS], check=True, timeout=300)
    np.testing.assert_allclose(np.load(out), want, atol=1e-5)


def test_a_saved_config_with_unknown_keys_is_refused(tiny_model_dir, tmp_path):
    model = _st(tiny_model_dir["llama"], recipe="va")
    model.save(str(tmp_path / "saved"))
    config_file = next((tmp_path / "saved").glob("*ValuePooling*/config.json"), None) or next(
        p for p in (tmp_path / "saved").rglob("config.json") if "recipe" in p.read_text()
    )
    config = json.loads(config_file.read_text())
    config["__import__"] = "os"
    config_file.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="unknown EncoderConfig field\\(s\\) '__import__'"):
        SentenceTransformer(str(tmp_path / "saved"), trust_remote_code=True, device="cpu")


def test_two_pass_prompts_are_refused():
    with pytest.raises(ConfigError, match="2 forward passes"):
        ValuePooling(recipe="aligned-wva", prompt="ck")


def test_preset_is_resolved_when_the_model_is_known(tiny_model_dir, tmp_path):
    model = _st(tiny_model_dir["llama"], preset="best", max_length=128)
    pooling = model[1]
    from valuelens.presets import UNTUNED  # the tiny model has no entry: the rule for untuned models

    assert (
        pooling.encoder_config.recipe == UNTUNED["recipe"]
        and pooling.encoder_config.prompt == UNTUNED["prompt"]
    )
    assert pooling.encoder_config.max_length == 128
    reference = Encoder.from_pretrained(tiny_model_dir["llama"], preset="best", max_length=128)
    np.testing.assert_allclose(model.encode(TEXTS), reference.encode(TEXTS), atol=1e-5)


def test_a_preset_on_a_cut_checkpoint_is_the_full_models(tiny_model_dir, tmp_path, monkeypatch):
    from valuelens import presets

    monkeypatch.setitem(presets.PRESETS, ("llama", 4, 64), {"best": {"recipe": "hs", "layers": [0, 1]}})
    cut = Encoder.from_pretrained(tiny_model_dir["llama"], recipe="va", layers=[1])  # keeps 2 of 4 layers
    cut.model.save_pretrained(tmp_path / "cut")
    cut.tokenizer.save_pretrained(tmp_path / "cut")
    model = _st(str(tmp_path / "cut"), preset="best")
    assert model[1].encoder_config.recipe == "hs"  # the 4-layer checkpoint's preset, not the generic one
    assert model[1].encoder_config.layers == (0, 1)
    reference = Encoder.from_pretrained(tiny_model_dir["llama"], recipe="hs", layers=[0, 1])
    np.testing.assert_allclose(model.encode(TEXTS), reference.encode(TEXTS), atol=1e-5)


def test_preset_overrides_win_by_key_even_none_and_defaults(tiny_model_dir, tmp_path, monkeypatch, caplog):
    path = tiny_model_dir["llama"]
    entry = tune_tiny_preset(monkeypatch, path, tmp_path)
    assert _st(path, preset="best")[1].encoder_config.postprocess == entry["postprocess"]
    caplog.set_level(logging.WARNING, logger="valuelens")
    config = _st(path, preset="best", drop_prefix=False)[1].encoder_config  # the default value, passed
    assert not config.drop_prefix and config.postprocess is None and config.recipe == "aligned-wva"
    config = _st(path, preset="best", prompt=None)[1].encoder_config
    assert config.prompt is None and config.drop_prefix and config.postprocess is None
    model = _st(path, preset="best", postprocess=None)
    assert model[1].encoder_config.postprocess is None and model[1].encoder_config.drop_prefix
    reference = Encoder.from_pretrained(path, preset="best", postprocess=None)
    np.testing.assert_allclose(model.encode(TEXTS), reference.encode(TEXTS), atol=1e-5)
    # positional fields count as passed too
    positional = ValuePooling("aligned-wva", [2, 3], None, preset="best")
    assert positional.get_config_dict() == {
        "recipe": "aligned-wva",
        "layers": [2, 3],
        "prompt": None,
        "preset": "best",
    }


def test_preset_parts_an_override_invalidates_are_dropped_before_the_encoder_is_built(
    tiny_model_dir, tmp_path, monkeypatch, caplog
):
    from valuelens_sentence_transformers import pooling

    path = tiny_model_dir["llama"]
    tune_tiny_preset(monkeypatch, path, tmp_path)
    caplog.set_level(logging.WARNING, logger="valuelens")
    seen: list[str] = []
    real = pooling.Encoder

    def building(*args, **kwargs):
        seen.append(caplog.text)
        return real(*args, **kwargs)

    monkeypatch.setattr(pooling, "Encoder", building)
    model = _st(path, preset="best", recipe="va")  # a ConfigError about drop_prefix before
    config = model[1].encoder_config
    assert config.recipe == "va" and not config.drop_prefix and config.postprocess is None
    assert "dropped drop_prefix=True (recipe='va'" in seen[0] and "postprocess=" in seen[0]
    assert model.encode(TEXTS).shape == (len(TEXTS), model[1].get_embedding_dimension())
    with pytest.raises(ConfigError, match="drop_prefix=True applies to"):
        _st(path, preset="best", recipe="va", drop_prefix=True)  # passed: kept, so refused


def test_the_fields_passed_with_a_preset_survive_a_save_before_binding(tiny_model_dir, tmp_path, monkeypatch):
    path = tiny_model_dir["llama"]
    tune_tiny_preset(monkeypatch, path, tmp_path)
    unbound = ValuePooling(preset="best", drop_prefix=False, prompt=None)
    assert unbound.get_config_dict() == {"drop_prefix": False, "prompt": None, "preset": "best"}
    (tmp_path / "pooling").mkdir()
    unbound.save(str(tmp_path / "pooling"))
    again = ValuePooling.load(str(tmp_path / "pooling"))
    assert again.get_config_dict() == unbound.get_config_dict()
    model = SentenceTransformer(modules=[Transformer(path), again], device="cpu")
    config = model[1].encoder_config
    assert config.prompt is None and not config.drop_prefix and config.postprocess is None
    assert config.recipe == "aligned-wva" and config.layers == (2, 3)  # the rest from the preset
    model.save(str(tmp_path / "saved"))  # bound: the whole spec is saved, no preset left
    saved = json.loads((tmp_path / "saved" / "1_ValuePooling" / "config.json").read_text())
    assert "preset" not in saved and saved["prompt"] is None


def test_a_postprocess_state_travels_with_the_saved_model(tiny_model_dir, tmp_path):
    path = tiny_model_dir["llama"]
    raw = Encoder.from_pretrained(path, recipe="va", layers=[1, 2])
    state = fit_texts(raw, TEXTS * 3, kind="whiten", dim=8)
    file = state.save(tmp_path / "state.safetensors")
    model = _st(path, recipe="va", layers=[1, 2], postprocess=str(file))
    before = model.encode(TEXTS)
    assert before.shape == (len(TEXTS), 8)
    model.save(str(tmp_path / "saved"))
    file.unlink()  # the saved model has its own copy
    again = SentenceTransformer(str(tmp_path / "saved"), device="cpu", trust_remote_code=True)
    np.testing.assert_allclose(again.encode(TEXTS), before, atol=1e-5)


def test_a_tuned_preset_folder_ships_inside_a_saved_model(tiny_checkpoint, tuned_folder, tmp_path):
    """``ValuePooling(preset=DIR)``: the folder's spec once the model is known; a saved model carries its
    fitted state (it loads and embeds the same after the folder is gone)."""
    folder = tmp_path / "tuned"
    shutil.copytree(tuned_folder, folder)
    model = _st(tiny_checkpoint, preset=str(folder))
    reference = Encoder.from_pretrained(tiny_checkpoint, preset=str(folder))
    assert model[1].encoder_config.recipe == reference.config.recipe
    np.testing.assert_allclose(model.encode(TEXTS), reference.encode(TEXTS), atol=1e-5)
    model.save(str(tmp_path / "saved"))
    shutil.rmtree(folder)
    loaded = SentenceTransformer(str(tmp_path / "saved"), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(loaded.encode(TEXTS), reference.encode(TEXTS), atol=1e-5)


def test_an_untuned_model_fits_once_and_a_saved_model_carries_the_state(
    tiny_checkpoint, tmp_path, monkeypatch
):
    """``ValuePooling(preset="best")`` on a model without an entry: the untuned rule, its all-but-the-top
    fitted at ``on_model_ready`` (as ``Encoder`` fits it) and saved into the model folder, so the saved
    model loads without fitting again (an empty fit cache stays empty)."""
    from valuelens.states import FIT_CACHE_ENV

    monkeypatch.setenv(FIT_CACHE_ENV, str(tmp_path / "cache"))
    model = _st(tiny_checkpoint, preset="best")
    reference = Encoder.from_pretrained(tiny_checkpoint, preset="best")
    assert model[1].encoder_config.postprocess == "fit:abtt:2"
    np.testing.assert_allclose(model.encode(TEXTS), reference.encode(TEXTS), atol=1e-5)
    model.save(str(tmp_path / "saved"))
    assert any((tmp_path / "saved").rglob("postprocess.safetensors"))
    monkeypatch.setenv(FIT_CACHE_ENV, str(tmp_path / "empty"))
    loaded = SentenceTransformer(str(tmp_path / "saved"), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(loaded.encode(TEXTS), reference.encode(TEXTS), atol=1e-5)
    assert not (tmp_path / "empty").exists()
