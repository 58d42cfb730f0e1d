"""``valuelens tune`` for a user who has only documents (label-free: pseudo-queries made from them) or
labelled data of their own (``--dev``), on the tiny random model; the project's data folder hidden."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from tests.tiny_models import CORPUS, build_tiny_model, build_tokenizer
from typer.testing import CliRunner

from valuelens import Encoder
from valuelens.cli import app
from valuelens.errors import ConfigError, ValueLensError
from valuelens.presets.folder import PresetFolder
from valuelens.tuning import tune
from valuelens.tuning.data import TuneData, read_dev, texts_of
from valuelens.tuning.pseudo import (
    MIN_DOCUMENTS,
    cloze_pair,
    drop_reason,
    pseudo_dev_set,
    sentences,
)
from valuelens.tuning.run import LEXICAL_FILE

#: A chat template of the simplest kind, for the tiny tokenizer (which has none).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def documents(n: int = 40) -> list[str]:
    """``n`` distinct documents of three or four sentences each (seeded)."""
    rng = np.random.default_rng(7)
    docs = []
    for i in range(n):
        picked = rng.choice(len(CORPUS), size=3 + i % 2, replace=False)
        docs.append(f"Report number {i} is here. " + " ".join(CORPUS[j] for j in picked))
    return docs


@pytest.fixture
def docs_file(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(documents()) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def chat_checkpoint(tmp_path_factory):
    """The tiny llama with a chat template, so that it can write pseudo-queries."""
    path = tmp_path_factory.mktemp("tiny-chat")
    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    build_tiny_model("llama", len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


# ---------------------------------------------------------------------- the pairs


def test_sentences_and_the_inverse_cloze_pair():
    text = "The cat sat down. Then it slept for an hour! Was it tired? 3 dogs barked."
    assert sentences(text) == [
        "The cat sat down.",
        "Then it slept for an hour!",
        "Was it tired?",
        "3 dogs barked.",
    ]
    query, rest = cloze_pair(text, np.random.default_rng(0))
    assert query in sentences(text) and query not in rest
    assert sorted([*sentences(rest), query]) == sorted(sentences(text))
    assert cloze_pair("One sentence only here.", np.random.default_rng(0)) is None


def test_degenerate_pairs_are_named():
    passage = "The quick brown fox jumps over the lazy dog near the river bank today."
    assert drop_reason("", passage) == "empty"
    assert drop_reason("fox", passage) == "too short"
    assert drop_reason(" ".join(["word"] * 60), passage) == "too long"
    assert drop_reason("the quick brown fox jumps over the lazy dog", passage) == "copied from its passage"
    assert drop_reason("which animal jumps over a dog", passage) is None


def test_a_cloze_dev_set_is_seeded_and_ranks_each_query_s_passage():
    docs = documents()
    made = pseudo_dev_set(docs, method="cloze", queries=10, distractors=5, seed=3)
    again = pseudo_dev_set(docs, method="cloze", queries=10, distractors=5, seed=3)
    assert made == again and made.method == "cloze"
    assert len(made.queries) == 10 and len(made.docs) == 15
    for qid, query in zip(made.query_ids, made.queries, strict=True):
        (doc_id,) = made.qrels[qid]
        passage = made.docs[made.doc_ids.index(doc_id)]
        assert query not in passage  # taken out of it
    assert pseudo_dev_set(docs, method="cloze", queries=10, distractors=5, seed=4) != made
    assert "10 pseudo-queries (cloze)" in made.report()


def test_generated_queries_are_cleaned_filtered_counted_and_cached(tmp_path):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    docs = documents(20)
    calls = []

    def writer(prompts):
        replies = []
        for n in range(sum(calls), sum(calls) + len(prompts)):  # n: the passage's place in the run
            if n % 4 == 0:
                replies.append("")  # empty
            elif n % 4 == 1:
                replies.append(f'Query: "where do dogs run after rain {n}"\nmore text')
            elif n == 2:
                replies.append("why was the great wall of china built so long")  # the prompt's example
            elif n in (3, 6):
                replies.append("what did the report say about the cat")  # given to two passages
            else:
                replies.append(f"what did report {n} say about the cat")
        calls.append(len(prompts))
        return replies

    cache = tmp_path / "q.json"
    made = pseudo_dev_set(
        docs,
        method="auto",
        queries=12,
        distractors=3,
        tokenizer=tokenizer,
        generator=writer,
        cache_file=cache,
    )
    assert made.method == "generate" and made.tried == 12
    assert made.dropped == {"empty": 3, "copies an example": 1, "the same for several passages": 2}
    assert "where do dogs run after rain 1" in made.queries
    assert sum(calls) == 12 and cache.is_file()

    def refuse(prompts):
        raise AssertionError("generated again")

    again = pseudo_dev_set(
        docs,
        method="auto",
        queries=12,
        distractors=3,
        tokenizer=tokenizer,
        generator=refuse,
        cache_file=cache,
    )
    assert again == made


def test_an_interrupted_generation_resumes_where_it_stopped(tmp_path):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    docs = documents(30)
    seen: list[str] = []

    def flaky(prompts):
        if len(seen) >= 8:
            raise KeyboardInterrupt
        seen.extend(prompts)
        return [f"query about passage {len(seen) - n} and its cat" for n in range(len(prompts))]

    cache = tmp_path / "q.json"
    with pytest.raises(KeyboardInterrupt):
        pseudo_dev_set(docs, queries=20, tokenizer=tokenizer, generator=flaky, cache_file=cache)
    assert len(json.loads(cache.read_text())) == 8
    rest: list[str] = []

    def steady(prompts):
        rest.extend(prompts)
        return [f"a query about the cat and dog {len(rest) - n}" for n in range(len(prompts))]

    made = pseudo_dev_set(docs, queries=20, tokenizer=tokenizer, generator=steady, cache_file=cache)
    assert len(rest) == 12 and not set(rest) & set(seen) and len(made.queries) == 20


def test_without_a_chat_template_auto_and_generate_fall_back_to_cloze_and_say_so(caplog):
    tokenizer = build_tokenizer()  # no chat template
    with caplog.at_level(logging.WARNING):
        made = pseudo_dev_set(
            documents(), method="generate", queries=5, tokenizer=tokenizer, generator=lambda p: p
        )
    assert made.method == "cloze" and "no chat template" in made.report()
    assert "no chat template" in caplog.text
    assert pseudo_dev_set(documents(), method="auto", queries=5, tokenizer=tokenizer).method == "cloze"


# ---------------------------------------------------------------------- bad input


def test_bad_corpora_fail_with_what_was_wrong_before_any_model_loads(
    tiny_checkpoint, tmp_path, monkeypatch, no_project_data
):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("valuelens.tuning.run.load_model", refuse)
    out = tmp_path / "out"
    with pytest.raises(
        ConfigError, match=r"nothing to tune on: give your documents with --corpus DOCS.*--dev"
    ):
        tune(tiny_checkpoint, out)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "one.txt").write_text("Just one document. With two sentences.\n")
    (tmp_path / "same.txt").write_text("The same text. Again and again.\n" * 50)
    for name, count in (("empty.txt", 0), ("one.txt", 1), ("same.txt", 1)):
        with pytest.raises(
            ConfigError, match=f"holds {count} distinct non-empty texts: at least {MIN_DOCUMENTS}"
        ):
            tune(tiny_checkpoint, out, corpus=tmp_path / name)
    (tmp_path / "latin1.txt").write_bytes("\n".join(documents()).encode("utf-8") + b"\ncaf\xe9 au lait\n")
    with pytest.raises(ValueLensError, match="not valid UTF-8"):
        tune(tiny_checkpoint, out, corpus=tmp_path / "latin1.txt")
    with pytest.raises(ConfigError, match="does not exist"):
        tune(tiny_checkpoint, out, corpus=tmp_path / "missing.txt")
    with pytest.raises(ConfigError, match="objective 'sts' needs scored sentence pairs"):
        tune(tiny_checkpoint, out, corpus=documents(), objective="sts")
    with pytest.raises(ConfigError, match=r"corpus\[1\] is a int"):
        tune(tiny_checkpoint, out, corpus=["a text", 3])
    with pytest.raises(ConfigError, match="queries must be one of"):
        tune(tiny_checkpoint, out, corpus=documents(), queries="ask")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="pseudo_queries must be a whole number"):
        tune(tiny_checkpoint, out, corpus=documents(), pseudo_queries=0)


def test_one_sentence_documents_make_no_pairs_and_say_so(tiny_checkpoint, tmp_path, no_project_data):
    texts = [f"Note {i} about the cat on the mat" for i in range(30)]
    with pytest.raises(ConfigError, match=r"no usable pseudo-query.*no sentence to take out"):
        tune(tiny_checkpoint, tmp_path / "out", corpus=texts, queries="cloze", show_progress=False)


# ---------------------------------------------------------------------- end to end


def test_label_free_tune_writes_a_folder_every_surface_loads_and_is_seeded(
    tiny_checkpoint, docs_file, tmp_path, no_project_data
):
    big = "The long report begins. " + "The cat sat on the mat again and again. " * 25_000  # ~1 MB
    (docs_file.parent / "docs.txt").write_text(docs_file.read_text() + big + "\n", encoding="utf-8")
    first = tune(tiny_checkpoint, tmp_path / "a", corpus=docs_file, pseudo_queries=12, show_progress=False)
    second = tune(tiny_checkpoint, tmp_path / "b", corpus=docs_file, pseudo_queries=12, show_progress=False)
    assert first.spec == second.spec
    assert first.best.retrieval == pytest.approx(second.best.retrieval, abs=1e-6)
    assert np.isnan(first.best.sts) and first.best.objective == first.best.retrieval
    assert first.dev_source.startswith("12 pseudo-queries (cloze)")
    folder = PresetFolder.read(first.folder)
    assert folder.info["data"]["retrieval_queries"] == 12 and folder.info["data"]["sts_pairs"] == 0
    report = (first.folder / "report.md").read_text()
    assert "pseudo-queries (cloze) of docs.txt nDCG@10" in report and "| – |" in report
    assert "Objective `balanced` (pseudo-queries (cloze) of docs.txt nDCG@10 alone, ×100)" in report
    if first.spec.get("lexical") is not None and first.spec.get("lexical_kind", "bm25") == "bm25":
        assert first.spec["lexical_corpus"] == LEXICAL_FILE and (first.folder / LEXICAL_FILE).is_file()
    moved = tmp_path / "moved"
    first.folder.rename(moved)  # a folder travels with its states
    encoder = Encoder.from_pretrained(tiny_checkpoint, preset=str(moved))
    vectors = encoder.encode(["A cat.", "A dog."], normalize=True)
    assert np.isfinite(vectors).all()


def test_label_free_tune_with_the_model_s_own_queries(
    chat_checkpoint, tmp_path, monkeypatch, no_project_data
):
    """The tiny random model writes gibberish: tune says so and falls back to the inverse cloze; a model
    whose queries pass the filters (its generator replaced) tunes on them."""
    result = tune(
        chat_checkpoint,
        tmp_path / "g",
        corpus=documents(),
        pseudo_queries=10,
        keep_cache=True,
        show_progress=False,
    )
    (cache,) = (tmp_path / "g" / "cache").glob("pseudo-queries-*.json")
    replies = json.loads(cache.read_text())
    assert len(replies) == 10 and all(isinstance(r, str) for r in replies.values())
    assert "(cloze)" in result.dev_source and "queries were unusable (10 of 10 dropped" in result.dev_source

    from valuelens.tuning import pseudo

    real = pseudo.make_generator
    written: list[str] = []

    def readable(path, tokenizer, **kwargs):
        generate = real(path, tokenizer, **kwargs)  # the real model runs; its words are replaced

        def write(prompts):
            replies = generate(prompts)
            written.extend(replies)
            return [
                f"which report number {len(written) - n} mentions cats and dogs" for n in range(len(replies))
            ]

        return write

    monkeypatch.setattr("valuelens.tuning.run.make_generator", readable)
    made = tune(chat_checkpoint, tmp_path / "h", corpus=documents(), pseudo_queries=10, show_progress=False)
    assert made.dev_source.startswith("10 pseudo-queries (generate) of 10 tried")
    assert (
        PresetFolder.read(made.folder).info["data"]["retrieval_set"].startswith("pseudo-queries (generate)")
    )
    Encoder.from_pretrained(chat_checkpoint, preset=str(made.folder)).encode(["A cat."])


def test_labelled_dev_data_of_ones_own(tiny_checkpoint, tiny_data_dir, tmp_path, no_project_data):
    pairs = tmp_path / "pairs.tsv"
    rows = (json.loads(line) for line in (tiny_data_dir / "stsb" / "dev.jsonl").read_text().splitlines())
    pairs.write_text(
        "sentence1\tsentence2\tscore\n"
        + "".join(f"{r['sentence1']}\t{r['sentence2']}\t{r['score']}\n" for r in rows)
    )
    kind, data, name = read_dev(tiny_data_dir / "scifact")
    assert kind == "retrieval" and name == "scifact (test)"
    assert read_dev(pairs)[0] == "sts" and len(read_dev(pairs)[1].scores) == 40
    result = tune(
        tiny_checkpoint, tmp_path / "t", dev=[tiny_data_dir / "scifact", pairs], show_progress=False
    )
    assert not np.isnan(result.best.sts) and not np.isnan(result.best.retrieval)
    assert result.score_names == ("pairs of pairs.tsv", "scifact (test) nDCG@10")
    assert (
        "(the mean of pairs of pairs.tsv Spearman and scifact (test) nDCG@10, ×100)"
        in (result.folder / "report.md").read_text()
    )
    data = TuneData.build(dev=[pairs], corpus=documents())
    assert data.fit_texts and set(data.fit_texts) <= set(documents()) and not data.retrieval.queries
    (tmp_path / "bad.tsv").write_text("a\tb\tc\nx\ty\tnot a number\n")
    with pytest.raises(ConfigError, match="row 2: expected sentence1, sentence2, score"):
        tune(tiny_checkpoint, tmp_path / "x", dev=[tmp_path / "bad.tsv"])
    with pytest.raises(ConfigError, match="is neither a file nor a folder"):
        tune(tiny_checkpoint, tmp_path / "x", dev=[tmp_path / "nowhere"])


def test_the_command_line_tunes_on_documents(tiny_checkpoint, docs_file, tmp_path, no_project_data):
    runner = CliRunner()
    bare = runner.invoke(app, ["tune", tiny_checkpoint, "-o", str(tmp_path / "x")])
    assert bare.exit_code == 2 and "--corpus" in bare.output and "--dev" in bare.output
    result = runner.invoke(
        app,
        [
            "tune",
            tiny_checkpoint,
            "-o",
            str(tmp_path / "t"),
            "--corpus",
            str(docs_file),
            "--pseudo-queries",
            "8",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "dev data: 8 pseudo-queries (cloze)" in result.output
    assert "pseudo-queries (cloze) of docs.txt nDCG@10" in result.output and "STS-B" not in result.output


def test_documents_of_either_framework_are_texts():
    from langchain_core.documents import Document
    from llama_index.core import Document as LlamaDocument

    assert texts_of(["a", Document(page_content="b"), LlamaDocument(text="c")]) == ["a", "b", "c"]
