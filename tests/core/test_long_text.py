"""``long_text="chunk"``: a text longer than ``max_length`` is embedded as overlapping windows of its
text tokens, and their vectors are averaged (weighted by text tokens) before the combine step.

Every numeric claim is checked against the windows embedded by hand, one by one, as plain texts of a
``long_text="truncate"`` encoder (or through ``Encoder.forward`` per readout when fusion is on)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

from tiny_models import CORPUS
from valuelens import Encoder, EncoderConfig, TruncationWarning, encode_many, fit_texts
from valuelens.chunking import OVERLAP, ChunkPlan, split, window_size, windows
from valuelens.errors import ConfigError
from valuelens.tokenization import prompted_length

#: About 300 text tokens for the tiny tokenizer: several windows at max_length=48.
LONG = " ".join(CORPUS * 3)
LONGER = " ".join(reversed(CORPUS * 4))
SHORT = [CORPUS[0], CORPUS[3]]
MAX_LENGTH = 48


def _pair(model, tokenizer, max_length=MAX_LENGTH, **spec):
    """A chunking encoder and a truncating one over the same model and spec."""
    config = EncoderConfig(max_length=max_length, long_text="chunk", **spec)
    return Encoder(model, tokenizer, config), Encoder(model, tokenizer, config.replace(long_text="truncate"))


def _by_hand(truncating: Encoder, text_windows) -> np.ndarray:
    """The token-weighted mean of the windows' vectors, each window embedded alone as a plain text."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncationWarning)  # a window always fits
        vectors = [truncating.encode(w.text) for w in text_windows]
    weights = np.array([w.tokens for w in text_windows], dtype=np.float64)
    return (np.stack(vectors) * weights[:, None]).sum(axis=0) / weights.sum()


@pytest.mark.parametrize(
    "spec",
    [
        {"recipe": "va", "layers": "all"},
        {"recipe": "aligned-wva", "layers": "all", "prompt": "prompteol"},
        {"recipe": "hs", "layers": [1, 3], "prompt": "echo"},
        # MetaEOL's longest template is ~270 tiny-tokenizer tokens
        {"recipe": "va", "layers": "all", "prompt": "metaeol", "max_length": 300},
        {"recipe": "aligned-wva", "layers": [2, 3], "prompt": "prompteol", "prepend_layers": [1]},
        # the auxiliary prompt ("irrelevant") is ~45 tokens: CORPUS[0] fits in it at 64
        {
            "recipe": "aligned-wva",
            "layers": [2, 3],
            "prompt": "prompteol",
            "contrast_layer": 2,
            "max_length": 64,
        },
    ],
    ids=["va", "aligned-wva-prompteol", "hs-echo", "metaeol", "token-prepending", "contrastive"],
)
def test_a_long_text_is_the_token_weighted_mean_of_its_windows(tiny_llama, tiny_tokenizer, spec):
    chunking, truncating = _pair(tiny_llama, tiny_tokenizer, **spec)
    found = windows(chunking.reader, LONG)
    assert len(found) > 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncationWarning)
        got = chunking.encode([LONG, CORPUS[0]])
    np.testing.assert_allclose(got[0], _by_hand(truncating, found), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], truncating.encode(CORPUS[0]), rtol=0, atol=1e-6)
    with pytest.warns(TruncationWarning):
        cut = truncating.encode(LONG)
    assert np.abs(got[0] - cut).max() > 1e-3  # truncation reads less of the text


@pytest.mark.parametrize(
    ("prompt", "max_length"), [(None, 48), ("prompteol", 48), ("echo", 64), ("metaeol", 300)]
)
@pytest.mark.parametrize("prepend", [None, [1]])
def test_windows_cover_the_text_overlap_and_each_fit(tiny_llama, tiny_tokenizer, prompt, max_length, prepend):
    enc, _ = _pair(
        tiny_llama,
        tiny_tokenizer,
        max_length,
        recipe="va",
        layers="all",
        prompt=prompt,
        prepend_layers=prepend,
    )
    size = window_size(enc.reader)
    found = windows(enc.reader, LONGER)
    n_tokens = len(tiny_tokenizer(LONGER, add_special_tokens=False)["input_ids"])
    assert found[0].first == 0 and found[-1].end == n_tokens
    for before, after in itertools.pairwise(found):
        assert before.first < after.first <= before.end - int(before.tokens * OVERLAP)  # overlap ≥ ¼
        assert after.end - after.first <= size
    assert found[-1].end - found[-2].end > 0  # the last window reads new tokens
    items, n_truncated = enc.reader.tokenize([w.text for w in found])
    assert n_truncated == 0 and all(not item.truncated for item in items)
    for template in range(enc.reader.passes):
        placeholder = 1 if prepend else 0
        assert all(
            prompted_length(tiny_tokenizer, w.text, enc.prompt, template) + placeholder <= max_length
            for w in found
        )


def test_the_auxiliary_prompt_fits_too(tiny_llama, tiny_tokenizer):
    enc, _ = _pair(
        tiny_llama, tiny_tokenizer, recipe="va", layers="all", prompt="prompteol", contrast_layer=1
    )
    assert len(windows(enc.reader, LONG)) > 2
    items, _ = enc.reader.tokenize([w.text for w in windows(enc.reader, LONG)])
    assert all(item.aux is not None and not item.aux.truncated for item in items)


def test_no_warning_with_chunk_the_warning_with_truncate(tiny_llama, tiny_tokenizer):
    chunking, truncating = _pair(tiny_llama, tiny_tokenizer, recipe="va", layers="all", prompt="prompteol")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chunking.encode([LONG, LONGER, *SHORT])
        encode_many([chunking], [LONG])
    with pytest.warns(TruncationWarning, match="2 of 4 texts"):
        truncating.encode([LONG, LONGER, *SHORT])


def test_texts_that_fit_are_unchanged(tiny_llama, tiny_tokenizer):
    chunking, truncating = _pair(
        tiny_llama, tiny_tokenizer, recipe="aligned-wva", layers="all", prompt="prompteol"
    )
    texts = [*CORPUS, "", "   ", "\n\t"]
    reference = truncating.encode(texts)
    np.testing.assert_allclose(chunking.encode(texts), reference, rtol=0, atol=1e-6)
    mixed = chunking.encode([LONG, *texts, LONGER])  # long texts' windows share the batches
    np.testing.assert_allclose(mixed[1:-1], reference, rtol=0, atol=1e-6)
    assert np.isfinite(mixed).all()
    plan = split(chunking.reader, texts)
    assert plan.items == tuple(texts) and plan.n_chunked == 0


def test_batch_order_and_batch_size_do_not_matter(tiny_llama, tiny_tokenizer):
    chunking, _ = _pair(tiny_llama, tiny_tokenizer, recipe="va", layers="all", prompt="prompteol")
    texts = [LONG, CORPUS[0], LONGER, CORPUS[5], ""]
    reference = chunking.encode(texts)
    order = [3, 0, 4, 2, 1]
    for batch_size, budget in ((1, None), (3, 200), (32, "auto")):
        shuffled = chunking.encode(
            [texts[i] for i in order], batch_size=batch_size, max_tokens_per_batch=budget
        )
        np.testing.assert_allclose(shuffled, reference[order], rtol=1e-5, atol=1e-6)


def test_windows_are_pooled_per_readout_before_fusion_and_post_processing(tiny_llama, tiny_tokenizer):
    chunking, _ = _pair(
        tiny_llama,
        tiny_tokenizer,
        recipe="aligned-wva",
        layers=[2, 3],
        prompt="prompteol",
        fusion=[{"recipe": "va", "weight": 0.5}],
    )
    found = windows(chunking.reader, LONG)
    with torch.inference_mode():
        items = chunking.reader.tokenize([w.text for w in found])[0]
        per_readout = chunking.runner.run(chunking.reader.collate(items), chunking.readouts)
    weights = torch.tensor([float(w.tokens) for w in found])
    pooled = [(v * weights[:, None]).sum(0, keepdim=True) / weights.sum() for v in per_readout]
    expected = chunking.composition.dense(pooled)[0].numpy()
    np.testing.assert_allclose(chunking.encode(LONG), expected, rtol=1e-5, atol=1e-6)
    # fusing each window first, then averaging, is a different vector: the order matters
    fused_first = chunking.composition.dense(per_readout)
    averaged = ((fused_first * weights[:, None]).sum(0) / weights.sum()).numpy()
    assert np.abs(averaged - expected).max() > 1e-4


def test_a_post_processing_state_fitted_while_truncating_serves_chunking(
    tiny_llama, tiny_tokenizer, tmp_path
):
    _, truncating = _pair(tiny_llama, tiny_tokenizer, recipe="va", layers="all")
    state = fit_texts(truncating, CORPUS * 4, "center")
    path = tmp_path / "state.safetensors"
    state.save(path)
    config = truncating.config.replace(postprocess=str(path), long_text="chunk")
    enc = Encoder(tiny_llama, tiny_tokenizer, config)
    raw = Encoder(tiny_llama, tiny_tokenizer, config.replace(postprocess=None)).encode(LONG)
    np.testing.assert_allclose(enc.encode(LONG), state.transform(torch.from_numpy(raw[None]))[0], atol=1e-5)


def test_encoders_that_differ_in_long_text_do_not_share_batches(tiny_llama, tiny_tokenizer):
    chunking, truncating = _pair(tiny_llama, tiny_tokenizer, recipe="va", layers="all")
    texts = [LONG, CORPUS[1]]
    with pytest.warns(TruncationWarning, match="1 of 2 texts"):
        together = encode_many([chunking, truncating], texts)
    np.testing.assert_allclose(together[0], chunking.encode(texts), atol=1e-6)
    with pytest.warns(TruncationWarning):
        alone = truncating.encode(texts)
    np.testing.assert_allclose(together[1], alone, atol=1e-6)


def test_pool_keeps_single_items_and_averages_windows():
    plan = ChunkPlan(
        items=("a", "b1", "b2", "c"), owners=(0, 1, 1, 2), weights=(1.0, 3.0, 1.0, 1.0), n_texts=3
    )
    vectors = torch.tensor([[1.0, 2.0], [4.0, 0.0], [0.0, 8.0], [-1.0, 5.0]])
    pooled = plan.pool(vectors)
    assert torch.equal(pooled[0], vectors[0]) and torch.equal(pooled[2], vectors[3])
    torch.testing.assert_close(pooled[1], torch.tensor([3.0, 2.0]))
    assert plan.n_chunked == 1


@pytest.mark.parametrize("bad", ["split", "Chunk", None, 1])
def test_a_bad_value_names_itself_and_the_choices(bad):
    with pytest.raises(ConfigError, match=rf"long_text must be one of 'truncate', 'chunk', got {bad!r}"):
        EncoderConfig(long_text=bad)


@pytest.mark.parametrize("long_text", ["truncate", "chunk"])
def test_max_length_too_small_for_the_prompt_still_errors(tiny_llama, tiny_tokenizer, long_text):
    enc = Encoder(
        tiny_llama, tiny_tokenizer, recipe="va", prompt="prompteol", max_length=4, long_text=long_text
    )
    with pytest.raises(ConfigError, match=r"the prompt template alone is \d+ tokens.*raise max_length"):
        enc.encode(LONG)


def test_the_field_round_trips():
    config = EncoderConfig(long_text="chunk")
    assert config.to_dict()["long_text"] == "chunk"
    assert EncoderConfig.from_dict(config.to_dict()) == config
    assert config.diff(EncoderConfig()) == ["long_text: 'chunk' != 'truncate'"]


def test_truncating_the_auxiliary_prompt_counts_in_the_warning(tiny_llama, tiny_tokenizer):
    # CORPUS[0] fits under PromptEOL at 48 tokens, not under the ~45-token auxiliary prompt
    _, truncating = _pair(
        tiny_llama, tiny_tokenizer, recipe="va", layers="all", prompt="prompteol", contrast_layer=1
    )
    assert not truncating.reader.tokenize([CORPUS[0]])[0][0].truncated
    with pytest.warns(TruncationWarning, match="1 of 1 texts"):
        truncating.encode([CORPUS[0]])


def test_recipe_variants_take_long_text(tiny_llama, tiny_tokenizer):
    """``valuelens eval``'s variants (``variant_encoders``) all get the ``long_text`` asked for."""
    from valuelens.evaluation.compare import variant_encoders
    from valuelens.variants import parse_variants

    probe = Encoder(tiny_llama, tiny_tokenizer, recipe="va", layers="all")
    variants = parse_variants("va,hs:prompteol")
    chunking = variant_encoders(probe, variants, max_length=MAX_LENGTH, long_text="chunk")
    assert {enc.config.long_text for enc in chunking.values()} == {"chunk"}
    assert {enc.config.long_text for enc in variant_encoders(probe, variants).values()} == {"truncate"}


def test_the_command_line_chunks_with_long_text(tiny_checkpoint, tmp_path):
    from typer.testing import CliRunner

    from valuelens.cli import app

    long = " ".join(CORPUS)  # far past 24 tokens
    source = tmp_path / "docs.txt"
    source.write_text(long + "\n" + CORPUS[0] + "\n", encoding="utf-8")
    got = {}
    for mode in ("truncate", "chunk"):
        out = tmp_path / f"{mode}.npy"
        args = ["embed", str(source), "-o", str(out), "--model", tiny_checkpoint, "--recipe", "va"]
        with warnings.catch_warnings():  # truncating says so (a TruncationWarning): expected here
            warnings.simplefilter("ignore", TruncationWarning)
            result = CliRunner().invoke(app, [*args, "--max-length", "24", "--long-text", mode])
        assert result.exit_code == 0, result.output
        got[mode] = np.load(out)
    enc = Encoder.from_pretrained(
        tiny_checkpoint, device="cpu", recipe="va", max_length=24, long_text="chunk"
    )
    np.testing.assert_allclose(
        got["chunk"], enc.encode([long, CORPUS[0]], normalize=True), rtol=1e-4, atol=1e-5
    )
    assert not np.allclose(got["chunk"][0], got["truncate"][0], atol=1e-3)  # the long text differs
    np.testing.assert_allclose(
        got["chunk"][1], got["truncate"][1], rtol=1e-4, atol=1e-5
    )  # a short one does not
