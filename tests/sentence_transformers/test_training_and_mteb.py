"""Finetune-VA (LoRA + MultipleNegativesRankingLoss through ValuePooling) and mteb on a local task."""

from __future__ import annotations

import json

import pytest
import torch
from sentence_transformers.base.modules import Transformer

from sentence_transformers import SentenceTransformer
from valuelens import Encoder
from valuelens.evaluation import evaluate
from valuelens_sentence_transformers import ValuePooling

PAIRS = [
    ("A man is playing a guitar.", "Someone plays music on a stage."),
    ("The cat sits on the mat.", "A kitten rests on a rug."),
    ("Stocks fell sharply today amid fears of inflation.", "Markets dropped on inflation worries."),
    ("She cooked pasta with tomatoes and basil for dinner.", "Dinner was pasta with tomato sauce."),
    ("Scientists found water ice near the moon's south pole.", "Ice was discovered at the lunar pole."),
    ("Dogs run in the park after the rain.", "Puppies play outside in the wet grass."),
    ("The new phone has a bigger screen and a faster chip.", "The latest smartphone is faster."),
    ("A plane takes off from the airport.", "An aircraft departs from the runway."),
]


def _loss(model, loss_fn) -> float:
    features = [model.preprocess([a for a, _ in PAIRS]), model.preprocess([p for _, p in PAIRS])]
    with torch.no_grad():
        return float(loss_fn(features, labels=None))


def test_gradients_flow_and_lora_training_lowers_the_loss(tiny_model_dir, tmp_path):
    from datasets import Dataset
    from peft import LoraConfig, inject_adapter_in_model
    from sentence_transformers.sentence_transformer import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )

    torch.manual_seed(0)
    model = SentenceTransformer(
        modules=[Transformer(tiny_model_dir["llama"]), ValuePooling(recipe="va", layers="all")], device="cpu"
    )
    # LoRA on the attention projections (peft >= 0.22 would allow model.add_adapter; PyPI has 0.21 here)
    lora = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0
    )
    inject_adapter_in_model(lora, model[0].auto_model)
    for name, param in model.named_parameters():
        param.requires_grad = "lora_" in name
    loss_fn = losses.MultipleNegativesRankingLoss(model)

    # gradients reach the LoRA weights through the capture hooks
    model.train()
    features = [model.preprocess([a for a, _ in PAIRS]), model.preprocess([p for _, p in PAIRS])]
    loss_fn(features, labels=None).backward()
    grads = {n: p.grad for n, p in model.named_parameters() if "lora_B" in n}
    # VA reads the values of every layer: each v_proj adapter gets a gradient; the last layer's q/k/o
    # adapters cannot influence its own values, so they get none (the graph is exact, not approximate)
    for layer in range(4):
        g = next(g for n, g in grads.items() if f"layers.{layer}.self_attn.v_proj" in n)
        assert g is not None and float(g.abs().sum()) > 0
    assert next(g for n, g in grads.items() if "layers.3.self_attn.q_proj" in n) is None
    assert next(g for n, g in grads.items() if "layers.0.self_attn.q_proj" in n) is not None
    model.zero_grad()

    before = _loss(model, loss_fn)
    data = Dataset.from_dict({"anchor": [a for a, _ in PAIRS], "positive": [p for _, p in PAIRS]})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        num_train_epochs=15,
        per_device_train_batch_size=8,
        learning_rate=5e-3,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        seed=0,
    )
    SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss_fn).train()
    after = _loss(model, loss_fn)
    assert after < before * 0.8, (before, after)


@pytest.fixture
def local_sts_dir(tmp_path):
    """The first 120 pairs of the real STS-B test split, as a task folder."""
    from valuelens.evaluation import load_task

    source = load_task("stsb").path / "test.jsonl"
    lines = source.read_text(encoding="utf-8").splitlines()[:120]
    folder = tmp_path / "stsb-mini"
    folder.mkdir()
    (folder / "test.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


# mteb 2.26 still calls sentence-transformers' deprecated get_sentence_embedding_dimension()
@pytest.mark.filterwarnings(
    "ignore:The `get_sentence_embedding_dimension` method has been renamed:FutureWarning"
)
def test_mteb_evaluate_equals_valuelens_eval(tiny_model_dir, local_sts_dir):
    import mteb
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata

    rows = [json.loads(line) for line in (local_sts_dir / "test.jsonl").read_text().splitlines()]

    class LocalSTSB(AbsTaskSTS):
        metadata = TaskMetadata(
            name="LocalSTSBMini",
            type="STS",
            main_score="cosine_spearman",
            description="The first 120 pairs of STS-B test, read from the repository's data folder.",
            reference="https://github.com/PhilipMay/stsb-multi-mt",
            dataset={"path": "NA", "revision": "NA"},
            category="t2t",
            eval_splits=["test"],
            eval_langs=["eng-Latn"],
            date=("2012-01-01", "2017-12-31"),
            dialect=["Written"],
            domains=[],
            task_subtypes=[],
            license="cc-by-sa-4.0",
            annotations_creators="human-annotated",
            modalities=["text"],
            sample_creation="found",
            bibtex_citation="",
        )
        min_score = 0
        max_score = 5

        def load_data(self, num_proc=None, **kwargs):
            columns = {k: [r[k] for r in rows] for k in ("sentence1", "sentence2", "score")}
            self.dataset = DatasetDict({"test": Dataset.from_dict(columns)})
            self.data_loaded = True

    settings = {"recipe": "aligned-wva", "layers": "all", "prompt": "futureeol"}
    st = SentenceTransformer(
        modules=[Transformer(tiny_model_dir["llama"]), ValuePooling(**settings)], device="cpu"
    )
    result = mteb.evaluate(st, LocalSTSB(), cache=None, show_progress_bar=False)
    mteb_score = result.task_results[0].scores["test"][0]["cosine_spearman"]

    ours = evaluate(
        Encoder.from_pretrained(tiny_model_dir["llama"], dtype="float32", **settings), local_sts_dir
    )
    assert ours.n_examples == 120
    assert mteb_score == pytest.approx(ours.main_score, abs=1e-6)
