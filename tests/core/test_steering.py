"""Beyond the papers: Token Prepending, Contrastive Prompting, fusion and post-processing (presets: test_presets.py).

Each edit of the forward is checked against an independent implementation written here with plain
PyTorch hooks and ``output_hidden_states`` on a tiny random model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tiny_models import CORPUS, build_tiny_model
from valuelens import (
    ConfigError,
    Encoder,
    EncoderConfig,
    FusionPart,
    encode_many,
    fit_texts,
)
from valuelens.pooling import last_index
from valuelens.prompts import resolve_prompt
from valuelens.tokenization import placeholder_token, tokenize

TEXTS = CORPUS[:6]


@pytest.fixture(scope="module")
def llama(tiny_tokenizer_session):
    torch.manual_seed(0)
    return build_tiny_model("llama", len(tiny_tokenizer_session)).eval(), tiny_tokenizer_session


def _hidden_after(model, batch, layer: int, pre_hooks: dict) -> torch.Tensor:
    """Reference: the residual stream after ``layer`` at each row's last token, with ``pre_hooks``
    (``{module: fn}``) installed and removed here."""
    handles = [module.register_forward_pre_hook(fn, with_kwargs=True) for module, fn in pre_hooks.items()]
    try:
        with torch.no_grad():
            out = model.model(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                position_ids=batch.position_ids,
                output_hidden_states=True,
            )
    finally:
        for handle in handles:
            handle.remove()
    last = last_index(batch.attention_mask)
    return out.hidden_states[layer + 1][torch.arange(len(last)), last]


def _prepend_hook(marker, last):
    def hook(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        edited = hidden.clone()
        for row in range(hidden.shape[0]):
            edited[row, marker[row]] = hidden[row, last[row]]
        if args:
            return (edited, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": edited}

    return hook


def test_token_prepending_equals_a_hand_written_reference(llama):
    model, tok = llama
    enc = Encoder(model, tok, recipe="last-token", prompt="prompteol", layers=(2,), prepend_layers=(1, 2))
    batch = enc.reader.collate(enc.reader.tokenize(TEXTS)[0])
    marker, last = batch.marker, last_index(batch.attention_mask)
    hook = _prepend_hook(marker, last)
    expected = _hidden_after(model, batch, 2, {model.model.layers[1]: hook, model.model.layers[2]: hook})
    got = enc.encode(TEXTS, convert_to_tensor=True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    plain = _hidden_after(model, batch, 2, {})
    assert (got - plain).abs().max() > 1e-3  # the edit changes the embedding


def test_the_placeholder_sits_before_the_text_and_is_not_pooled(tiny_tokenizer_session):
    tok = tiny_tokenizer_session
    pad = placeholder_token(tok)
    prompt = resolve_prompt("prompteol")
    plain, _ = tokenize(tok, ["A cat sits."], prompt=prompt, max_length=64)
    marked, _ = tokenize(tok, ["A cat sits."], prompt=prompt, max_length=64, placeholder=pad)
    (p,), (m,) = plain, marked
    assert m.marker == p.span[0] and m.ids[m.marker] == pad
    assert m.span == (p.span[0] + 1, p.span[1] + 1)
    assert m.ids[: m.marker] + m.ids[m.marker + 1 :] == p.ids
    # no prompt: the span covers the text after the placeholder only
    (bare,), _ = tokenize(tok, ["A cat sits."], prompt=None, max_length=64, placeholder=pad)
    assert bare.span == (bare.marker + 1, len(bare.ids))
    # the placeholder counts in max_length
    (cut,), n = tokenize(tok, [" ".join(CORPUS)], prompt=prompt, max_length=30, placeholder=pad)
    assert n == 1 and len(cut.ids) <= 30


def test_contrastive_prompting_equals_a_hand_written_reference(llama):
    model, tok = llama
    layer, scale = 1, 0.7
    enc = Encoder(
        model,
        tok,
        recipe="last-token",
        prompt="prompteol",
        layers=(2,),
        contrast_layer=layer,
        contrast_scale=scale,
    )
    items = enc.reader.tokenize(TEXTS)[0]
    batch = enc.reader.collate(items)
    aux = batch.aux
    o_proj = model.model.layers[layer].self_attn.o_proj
    seen = {}

    def grab(module, args, kwargs):
        seen["z"] = args[0][torch.arange(args[0].shape[0]), last_index(aux.attention_mask)].clone()

    _hidden_after(model, aux, layer, {o_proj: grab})
    last = last_index(batch.attention_mask)

    def steer(module, args, kwargs):
        z = args[0].clone()
        rows = torch.arange(z.shape[0])
        z[rows, last] = scale * (args[0][rows, last] - seen["z"])
        return (z, *args[1:]), kwargs

    expected = _hidden_after(model, batch, 2, {o_proj: steer})
    got = enc.encode(TEXTS, convert_to_tensor=True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    # the auxiliary prompt is the CP paper's
    assert "irrelevant information" in tok.decode(list(items[0].aux.ids))


def test_contrast_and_prepending_compose_and_keep_batch_invariance(llama):
    model, tok = llama
    enc = Encoder(
        model,
        tok,
        recipe="aligned-wva",
        prompt="pcot",
        layers=(2, 3),
        prepend_layers="auto",
        contrast_layer=1,
    )
    a = enc.encode(TEXTS, batch_size=2)
    b = enc.encode(TEXTS[::-1], batch_size=6)[::-1]
    np.testing.assert_allclose(a, b, atol=1e-5)
    assert np.isfinite(a).all()


def test_fusion_is_the_weighted_concatenation_of_normalized_recipes(llama):
    model, tok = llama
    fused = Encoder(
        model,
        tok,
        recipe="aligned-wva",
        prompt="futureeol",
        layers=(2,),
        fusion=[{"recipe": "va", "layers": [1, 2], "weight": 0.5}, "hs"],
    )
    parts = [
        Encoder(model, tok, recipe="aligned-wva", prompt="futureeol", layers=(2,)),
        Encoder(model, tok, recipe="va", prompt="futureeol", layers=(1, 2)),
        Encoder(model, tok, recipe="hs", prompt="futureeol"),
    ]
    got = fused.encode(TEXTS, convert_to_tensor=True)
    pieces = [torch.nn.functional.normalize(p.encode(TEXTS, convert_to_tensor=True), dim=-1) for p in parts]
    expected = torch.cat([pieces[0], 0.5 * pieces[1], pieces[2]], dim=-1)
    expected = expected * (expected.shape[1] / (1 + 0.5**2 + 1)) ** 0.5  # unit root-mean-square coordinates
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got.pow(2).mean(dim=1), torch.ones(len(TEXTS)), atol=1e-5, rtol=1e-4)
    assert fused.dimension == got.shape[1]
    # one forward pass serves every part: the shared path gives the same
    (shared,) = encode_many([fused], TEXTS, convert_to_tensor=True)
    torch.testing.assert_close(shared, got, atol=1e-5, rtol=1e-4)


def test_encode_many_keeps_edited_and_plain_forwards_apart(llama):
    model, tok = llama
    plain = Encoder(model, tok, recipe="last-token", prompt="prompteol", layers=(2,))
    tp = Encoder(model, tok, recipe="last-token", prompt="prompteol", layers=(2,), prepend_layers=(1,))
    a, b = encode_many([plain, tp], TEXTS)
    np.testing.assert_allclose(a, plain.encode(TEXTS), atol=1e-5)
    np.testing.assert_allclose(b, tp.encode(TEXTS), atol=1e-5)


def test_named_prompts_of_the_newer_methods():
    assert resolve_prompt("ck").passes == 2
    assert resolve_prompt("pcot").render("x")[0].startswith("After thinking step by step")
    assert "Equestrian" in resolve_prompt("prompteol-icl").render("x")[0]


def test_config_round_trip_and_errors():
    config = EncoderConfig(
        recipe="aligned-wva",
        prompt="knowledge",
        prepend_layers=[1, 2],
        contrast_layer=3,
        contrast_scale=0.8,
        fusion=[FusionPart("va", weight=0.3), {"recipe": "last-token", "layers": "20-22"}],
    )
    assert EncoderConfig.from_dict(config.to_dict()) == config
    assert config.prepend_layers == (1, 2)
    resolved = config.resolved("llama", 30, 576)
    assert resolved.fusion[0].layers == (21, 22, 23) and resolved.deepest_layer == 27
    with pytest.raises(ConfigError, match="contrast_layer=29"):
        config.replace(contrast_layer=29).resolved("llama", 30, 576)
    with pytest.raises(ConfigError, match="fusion"):
        EncoderConfig(fusion=[{"recipe": "va", "scale": 1}])
    with pytest.raises(ConfigError, match="fusion weight"):
        EncoderConfig(fusion=[{"recipe": "va", "weight": 0}])
    with pytest.raises(ConfigError, match="contrast_prompt"):
        EncoderConfig(contrast_prompt="ck")
    with pytest.raises(ConfigError, match="prepend_layers"):
        EncoderConfig(prepend_layers="1-x")


def test_drop_prefix_spec_checks_and_where_it_applies(llama):
    model, tok = llama
    config = EncoderConfig(recipe="aligned-wva", prompt="futureeol", drop_prefix=True)
    assert EncoderConfig.from_dict(config.to_dict()) == config and config.to_dict()["drop_prefix"] is True
    assert EncoderConfig().to_dict()["drop_prefix"] is False  # specs saved before the field load as before
    with pytest.raises(ConfigError, match=r"drop_prefix=True applies to .*not 'va'"):
        EncoderConfig(recipe="va", drop_prefix=True)
    with pytest.raises(ConfigError, match="drop_prefix must be a bool"):
        EncoderConfig(recipe="wva", drop_prefix="yes")
    # fusion parts that read the last token's attention drop the prefix too; the others are unchanged
    enc = Encoder(model, tok, config.replace(fusion=["wva-lt", "va"], layers=[1, 2]))
    assert [r.plan.drop_prefix for r in enc.readouts] == [True, True, False]
    assert enc.readout.plan.pool == "last_heads" and enc.readout.project_out
    # Contrastive Prompting edits the heads that drop_prefix would recompute at the same layer
    with pytest.raises(ConfigError, match="Contrastive Prompting edits at layer 1"):
        Encoder(model, tok, config.replace(layers=[1, 2], contrast_layer=1))
    # with Token Prepending the placeholder (text-dependent from the first prepend layer) is kept
    tp = Encoder(model, tok, config.replace(layers=[2], prepend_layers=[1]))
    vectors = tp.encode(TEXTS)
    assert np.isfinite(vectors).all() and vectors.shape == (len(TEXTS), tp.dimension)
    items, _ = tp.reader.tokenize(TEXTS)
    assert all(item.marker == item.span[0] - 1 for item in items)


def test_deepest_layer_bounds_what_is_loaded(tiny_checkpoint):
    path = tiny_checkpoint
    enc = Encoder.from_pretrained(path, recipe="va", layers=(0,), fusion=[{"recipe": "hs", "layers": [2]}])
    assert enc.parts.n_layers == 3  # layers 0-2 loaded, not the fourth


def test_a_fitted_postprocess_is_applied_last_and_saved_with_the_spec(llama, tmp_path):
    model, tok = llama
    raw = Encoder(model, tok, recipe="va", layers=(1, 2))
    state = fit_texts(raw, CORPUS, kind="abtt", k=1)
    file = state.save(tmp_path / "abtt.safetensors")
    enc = Encoder(model, tok, recipe="va", layers=(1, 2), postprocess=str(file))
    expected = state.transform(raw.encode(TEXTS, convert_to_tensor=True))
    torch.testing.assert_close(enc.encode(TEXTS, convert_to_tensor=True), expected, atol=1e-5, rtol=1e-4)
    with pytest.raises(ConfigError, match="fitted for another spec"):
        Encoder(model, tok, recipe="hs", layers=(1, 2), postprocess=str(file))
    with pytest.raises(ConfigError, match=r"fitted for another spec: layers: \(1, 2\) != \(2, 3\)"):
        Encoder(model, tok, recipe="va", layers=(2, 3), postprocess=str(file))  # same width, other layers
