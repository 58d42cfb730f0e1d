"""Quality on the real default model (SmolLM2-135M-Instruct) and real STS-B data.

The EmbedFilter check reproduces the figures of the official EmbedFilter code re-run on this model
(design notes: fp32, STS-B test, 1379 pairs, Spearman x100: 67.93 -> tau=2 70.64 -> tau=4 69.98) with
the official recipe: prompt 'Summarize the sentence: "{text}" in one word:"', final norm, last token.
"""

from __future__ import annotations

import pytest

from valuelens import EmbedFilter, Encoder
from valuelens.batching import SharedEncoding
from valuelens.evaluation import evaluate

pytestmark = pytest.mark.slow

OFFICIAL_PROMPT = 'Summarize the sentence: "{text}" in one word:"'
#: research/results/smollm2-135m-tuned-presets-test.md (test splits), against AlignedWVA(FutureEOL)
#: 71.4 / 57.4: the tuned preset="sts" (drop_prefix, layers 21-25, HS-mean fusion, all-but-the-top 4)
#: STS-B 76.0; the tuned preset="best" (the same over layers 21-29, EmbedFilter on the HS part, then a
#: lexical part: with the input-embedding part at 0.2 / 0.95, research/results/smollm2-135m-wordidf-best-test.md,
#: STS-B 73.4, Lee 49.6; with the BM25 part at 0.05 / 0.7 STS-B 74.2, research/rounds/bm25_hybrid/, and Lee
#: 47.4: the model part alone gives 47.3, the earlier part's word overlap at weight 0.2 had lifted documents)
#: (its all-but-the-top costs documents: research/results/README.md; floors, so that it gets no worse).
MIN_STS_PRESET_GAIN = 3.0
MIN_BEST_PRESET_GAIN_STSB = 1.5
MIN_BEST_LEE = 46.9
#: the issue's STS-B target for SmolLM2 (75), less what batching noise can move
STS_TARGET = 74.9


@pytest.fixture(scope="module")
def smollm2():
    return Encoder.from_pretrained(
        "smollm2-135m", recipe="hs", layers="all", truncate_layers=False, dtype="float32"
    )


def test_embed_filter_reproduces_the_official_figures(smollm2):
    model, tok = smollm2.model, smollm2.tokenizer
    encoders = [Encoder(model, tok, recipe="last-token", prompt=OFFICIAL_PROMPT, final_norm=True)]
    encoders += [
        Encoder(
            model,
            tok,
            recipe="last-token",
            prompt=OFFICIAL_PROMPT,
            final_norm=True,
            embed_filter=EmbedFilter.from_model(model, tau=tau),
        )
        for tau in (2, 4)
    ]
    shared = SharedEncoding(encoders)
    scores = [100 * evaluate(shared.view(i), "stsb").main_score for i in range(3)]
    assert scores == pytest.approx([67.93, 70.64, 69.98], abs=0.15)
    assert encoders[1].dimension == 288 and encoders[2].dimension == 144


def test_values_beat_hidden_states_on_stsb(smollm2):
    model, tok = smollm2.model, smollm2.tokenizer
    encoders = [
        Encoder(model, tok, recipe="va", layers="all"),
        Encoder(model, tok, recipe="hs", layers="all"),
    ]
    shared = SharedEncoding(encoders)
    va, hs = (100 * evaluate(shared.view(i), "stsb", limit=400).main_score for i in range(2))
    # design notes (all 1379 pairs): VA all layers 53.6, HS all layers 15.5
    assert va > hs + 20


def test_presets_beat_the_papers_best_recipe_on_test_splits(smollm2):
    """The shipped presets (chosen on dev, post-processing fitted on train) must carry over to test:
    "sts" and the tuned "best" on sentences; "best" on documents (Lee) no lower than measured."""
    from valuelens import preset_config

    model, tok = smollm2.model, smollm2.tokenizer
    base = Encoder(model, tok, recipe="aligned-wva", prompt="futureeol")
    best = Encoder(model, tok, preset_config("best", "smollm2-135m"))
    sts = Encoder(model, tok, preset_config("sts", "smollm2-135m"))
    assert best.postprocess is not None and best.postprocess.kind == "abtt"
    assert sts.postprocess is not None and sts.postprocess.k == 4
    shared = SharedEncoding([base, best, sts])  # one forward pass serves all three
    stsb = [100 * evaluate(shared.view(i), "stsb").main_score for i in range(3)]
    lee = [100 * evaluate(shared.view(i), "lee").main_score for i in range(2)]
    assert stsb[0] == pytest.approx(71.4, abs=0.2)  # docs/results.md
    assert lee[0] == pytest.approx(57.4, abs=0.3)
    assert stsb[2] >= stsb[0] + MIN_STS_PRESET_GAIN
    assert stsb[2] >= STS_TARGET
    assert stsb[1] >= stsb[0] + MIN_BEST_PRESET_GAIN_STSB, (stsb, lee)
    assert lee[1] >= MIN_BEST_LEE, (stsb, lee)
