"""The ``valuelens tune`` command (registered by :mod:`valuelens.cli`): :func:`valuelens.tuning.tune`.

Usage::

    valuelens tune smollm2-135m -o tuned/smollm2                 # quick mode, balanced objective
    valuelens tune ./my-model -o tuned/mine --objective retrieval --corpus my_docs.txt --mode full
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
            help="Unlabeled texts of your own to fit post-processing on (.txt, one per line, or .jsonl with 'text')."
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
    """Tune a preset for MODEL on dev data (STS-B dev, SciFact's dev split) and write it to OUT.

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
    typer.echo(
        f"wrote {result.folder} ({best.candidate.label()}): STS-B dev {best.sts:.2f}, "
        f"SciFact dev nDCG@10 {best.retrieval:.2f}, {objective} {best.objective:.2f}, "
        f"{result.seconds['total']:.0f} s; report: {result.folder / 'report.md'}"
    )
    for name, scores in result.references.items():
        typer.echo(
            f"  preset {name}: STS-B dev {scores['sts']:.2f}, SciFact dev nDCG@10 {scores['retrieval']:.2f}, "
            f"{objective} {scores['objective']:.2f} "
            f"({'from the cache' if scores.get('scored') == 'cache' else 'embedded'})"
        )
    typer.echo(f'use it: --preset {result.folder}  (or preset="{result.folder}")')
