"""The ``valuelens tune`` command (registered by :mod:`valuelens.cli`): :func:`valuelens.tuning.tune`.

Usage::

    valuelens tune ./my-model -o tuned/mine --corpus my_docs/       # label-free: your documents only
    valuelens tune ./my-model -o tuned/mine --dev my_beir_folder/ --dev pairs.tsv   # labelled data of yours
    valuelens tune smollm2-135m -o tuned/smollm2                 # this repository: STS-B dev, SciFact dev
    valuelens tune smollm2-135m -o tuned/smollm2-sts --objective sts --cache tuned/cache   # reuse passes
    valuelens embed docs.txt -o vectors.parquet --model ./my-model --preset tuned/mine
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from valuelens.errors import ValueLensError
from valuelens.options import (
    DeviceOpt,
    DTypeOpt,
    SpecFields,
    ThreadsOpt,
    extra_imports,
    fail,
    spec_options,
    use_threads,
)
from valuelens.tuning.data import OBJECTIVE_MEANING

__all__ = ["FIXED_FIELDS", "tune_command"]

#: The spec fields ``valuelens tune`` takes as given (the preset it writes carries them); it chooses the
#: others it varies (:data:`valuelens.tuning.search.CHOSEN_FIELDS`) and leaves the rest at their defaults.
FIXED_FIELDS = ("max_length",)


@spec_options(FIXED_FIELDS)
def tune_command(
    model: Annotated[
        str,
        typer.Argument(
            metavar="MODEL", help="Bundled model name (smollm2-135m, ...), local folder or hub id."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="The preset folder to write (preset.json, state, report.md).")
    ],
    objective: Annotated[
        str,
        typer.Option(help="; ".join(f"{name}: {what}" for name, what in OBJECTIVE_MEANING.items()) + "."),
    ] = "balanced",
    mode: Annotated[
        str,
        typer.Option(
            help="quick (600 STS-B dev pairs, all with --objective sts; a ~300-document dev corpus; one prompt) or full (all dev pairs, the whole corpus, 4 prompts)."
        ),
    ] = "quick",
    corpus: Annotated[
        Path | None,
        typer.Option(
            help="Your documents (.txt one per line; .jsonl/.csv/.parquet with 'text'; a folder of them). No labels needed: without --dev, tune makes pseudo-queries from them and scores candidates on finding their passages. They also fit the post-processing and count the BM25 statistics."
        ),
    ] = None,
    dev: Annotated[
        list[Path] | None,
        typer.Option(
            help="Labelled dev data of yours, repeatable: a BEIR folder (corpus.jsonl, queries.jsonl, qrels/dev.tsv) and/or STS pairs (.jsonl with sentence1/sentence2/score, .tsv, or a folder of <split>.jsonl), or a Hugging Face hub dataset in those layouts (e.g. mteb/scifact, mteb/stsbenchmark-sts)."
        ),
    ] = None,
    queries: Annotated[
        str,
        typer.Option(
            help="How pseudo-queries are made from --corpus: generate (the model writes one per passage through its chat template), cloze (a sentence taken out of its passage), auto (generate if the model has a chat template)."
        ),
    ] = "auto",
    pseudo_queries: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="How many pseudo-queries to make from --corpus (quick: 100; full: 300): the budget of generation.",
        ),
    ] = None,
    distractors: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="SciFact documents beside the dev queries' relevant ones in the dev corpus (quick: 200; full: all). More ranks closer to a real corpus, at about a second per document for a 135M model on 2 CPU cores.",
        ),
    ] = None,
    compare: Annotated[
        list[str] | None,
        typer.Option(
            help="An existing preset (best, sts, a folder) to score on the same dev data, for the report; repeatable."
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="The benchmark data folder (default: $VALUELENS_DATA_DIR or ../shared/data)."),
    ] = None,
    device: DeviceOpt = None,
    dtype: DTypeOpt = None,
    cache: Annotated[
        Path | None,
        typer.Option(
            help="Keep the per-layer vectors in this folder (default OUT/cache, removed after the run): later runs on the same model reuse what they share."
        ),
    ] = None,
    keep_cache: Annotated[
        bool, typer.Option("--keep-cache", help="Keep OUT/cache (the per-layer vectors) after the run.")
    ] = False,
    lexical: Annotated[
        bool,
        typer.Option(
            "--lexical/--no-lexical",
            help="Try a lexical part (the texts' tokens through the input embeddings, no forward pass) on the finalists.",
        ),
    ] = True,
    threads: ThreadsOpt = "auto",
    *,
    spec: SpecFields,
) -> None:
    """Tune a preset for MODEL and write it to OUT: on your documents alone (--corpus, no labels), on labelled
    data of yours (--dev), or in this repository on STS-B dev and SciFact's dev split.

    One forward pass per text and prompt; every recipe, layer band, EmbedFilter, fusion,
    post-processing, query side and lexical part is scored offline. Use the folder with --preset OUT (or preset="OUT")."""
    with extra_imports("eval", "valuelens tune"):  # it scores with the evaluation's metrics
        from valuelens.tuning.run import tune

    try:
        use_threads(threads)
        result = tune(
            model,
            out,
            objective=objective,  # type: ignore[arg-type]
            mode=mode,  # type: ignore[arg-type]
            corpus=corpus,
            dev=tuple(dev or ()),
            queries=queries,  # type: ignore[arg-type]
            pseudo_queries=pseudo_queries,
            distractors=distractors,
            compare=tuple(compare or ()),
            max_length=spec["max_length"],
            data_dir=data_dir,
            device=device,
            dtype=dtype,
            cache=cache,
            keep_cache=keep_cache,
            lexical=lexical,
        )
    except (ValueLensError, ValueError, OSError) as exc:
        raise fail(exc) from None
    best = result.best
    names = result.score_names

    def scores_text(sts: float, retrieval: float, value: float) -> str:
        parts = [
            f"{n} {x:.2f}" for n, x in zip(names, (sts, retrieval), strict=True) if x == x
        ]  # nan: absent
        return ", ".join([*parts, f"{objective} {value:.2f}"])

    if result.dev_source not in ("", "project"):
        typer.echo(f"dev data: {result.dev_source}")
    typer.echo(
        f"wrote {result.folder} ({best.candidate.label()}): {scores_text(best.sts, best.retrieval, best.objective)}, "
        f"{result.seconds['total']:.0f} s; report: {result.folder / 'report.md'}"
    )
    for name, scores in result.references.items():
        typer.echo(
            f"  preset {name}: {scores_text(scores['sts'], scores['retrieval'], scores['objective'])} "
            f"({'from the cache' if scores.get('scored') == 'cache' else 'embedded'})"
        )
    typer.echo(f'use it: --preset {result.folder}  (or preset="{result.folder}")')
