"""The analysis subcommands of ``valuelens``: ``lens``, ``spectrum``, ``segments``.

Usage::

    valuelens lens "A man is playing a guitar." --recipe last-token --prompt prompteol --out out/lens
    valuelens spectrum --model gemma3-270m --corpus all --tau 2 --out out/spectrum
    valuelens segments lee --model smollm2-135m --limit 200 --out out/segments

Each writes ``OUT.md``, ``OUT.json`` and ``OUT.png`` and prints the markdown. :func:`register` adds them
to the main app (``valuelens.cli``); the shared option types and error helper come from
:mod:`valuelens.options`, as the main app's do.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from valuelens.errors import ValueLensError
from valuelens.options import BatchOpt, DeviceOpt, DTypeOpt, ModelOpt, fail, layers_arg

__all__ = ["lens", "register", "segments", "spectrum"]

CorpusHelp = (
    "stsb, lee, scifact, banking77, emotion (the benchmark sets' texts, docs/data.md), all, "
    "or a .txt file (one text per line)."
)


def _command() -> str:
    return "valuelens " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _done(markdown: str, paths: list[Path]) -> None:
    typer.echo(markdown)
    typer.echo("wrote " + ", ".join(str(p) for p in paths), err=True)


def lens(
    texts: Annotated[list[str], typer.Argument(metavar="TEXT...", help="Texts to embed and decode.")],
    model: ModelOpt = None,
    recipe: Annotated[
        str, typer.Option(help="A residual-space recipe: last-token, hs, wmp, aligned-wva, aligned-va.")
    ] = "last-token",
    layers: Annotated[str, typer.Option(help="Layers: auto, all, half, last, 20-27, 3,5,7.")] = "auto",
    prompt: Annotated[
        str | None, typer.Option(help="Prompt: prompteol, futureeol, echo, or a template with {text}.")
    ] = None,
    embed_filter: Annotated[
        float, typer.Option("--embed-filter", help="EmbedFilter tau for the 'after' column.")
    ] = 2.0,
    offset: Annotated[int, typer.Option(help="EmbedFilter band offset.")] = 0,
    k: Annotated[int, typer.Option("-k", min=1, help="Tokens shown per embedding.")] = 10,
    corpus: Annotated[str, typer.Option(help="Reference corpus for frequent tokens: " + CorpusHelp)] = "stsb",
    n_frequent: Annotated[int, typer.Option(min=1, help="How many of its most frequent tokens count.")] = 100,
    out: Annotated[Path, typer.Option(help="Output stem: OUT.md/.json/.png.")] = Path("out/lens"),
    max_length: Annotated[int | None, typer.Option("--max-length", min=1)] = None,
    batch_size: BatchOpt = 32,
    device: DeviceOpt = None,
    dtype: DTypeOpt = None,
) -> None:
    """Logit Lens of an embedding: its top-k tokens through the final norm and W_U, before and after EmbedFilter."""
    from valuelens import Encoder
    from valuelens.embed_filter import band

    from .common import unembedding
    from .corpus import load_corpus, token_counts
    from .lens import logit_lens

    command = _command()
    try:
        band(10**6, embed_filter)
        reference = load_corpus(corpus)
        encoder = Encoder.from_pretrained(
            model,
            recipe=recipe,
            layers=layers_arg(layers),
            prompt=prompt,
            max_length=max_length,
            device=device,
            dtype=dtype,
        )
        w_u = unembedding(encoder.model)
        counts = token_counts(encoder.tokenizer, reference, w_u.shape[0], progress=True)
        result = logit_lens(
            encoder,
            texts,
            tau=embed_filter,
            offset=offset,
            k=k,
            w_u=w_u,
            counts=counts,
            n_frequent=n_frequent,
            corpus=corpus,
            batch_size=batch_size,
            show_progress=True,
        )
        paths = result.write(out, command=command)
    except (ValueLensError, ValueError) as exc:
        raise fail(exc) from exc
    _done(result.to_markdown(command), paths)


def spectrum(
    model: ModelOpt = None,
    corpus: Annotated[str, typer.Option(help="Text whose token counts give p̂: " + CorpusHelp)] = "all",
    tau: Annotated[float, typer.Option(help="EmbedFilter tau: the band shaded in the plot.")] = 2.0,
    offset: Annotated[int, typer.Option(help="EmbedFilter band offset.")] = 0,
    top: Annotated[int, typer.Option(min=1, help="Frequent tokens whose mean log-prob is tracked.")] = 100,
    center: Annotated[
        bool, typer.Option(help="Centre log p̂ before W_U⁺ (--no-center: the paper's literal formula).")
    ] = True,
    out: Annotated[Path, typer.Option(help="Output stem: OUT.md/.json/.png.")] = Path("out/spectrum"),
) -> None:
    """Average token ĥ = W_U⁺ log p̂ and Logit Spectroscopy Δπ for every singular direction of W_U."""
    from transformers import AutoTokenizer

    from valuelens import models
    from valuelens.embed_filter import band, load_unembedding

    from .common import token_label
    from .corpus import load_corpus, token_counts
    from .spectrum import logit_spectroscopy

    command = _command()
    try:
        band(10**6, tau)
        texts = load_corpus(corpus)
        local = models.path(model)
        tokenizer = AutoTokenizer.from_pretrained(local)
        w_u = load_unembedding(local)
        counts = token_counts(tokenizer, texts, w_u.shape[0], progress=True)
        result = logit_spectroscopy(
            w_u,
            counts,
            tau=tau,
            offset=offset,
            n_top=top,
            center=center,
            model=model or models.DEFAULT_MODEL,
            corpus=corpus,
            n_texts=len(texts),
            labels=lambda t: token_label(tokenizer, t),
            progress=True,
        )
        paths = result.write(out, command=command)
    except (ValueLensError, ValueError) as exc:
        raise fail(exc) from exc
    _done(result.to_markdown(command), paths)


def segments(
    corpus: Annotated[str, typer.Argument(metavar="CORPUS", help=CorpusHelp)],
    model: ModelOpt = None,
    layers: Annotated[str, typer.Option(help="Layers: all, half, 8-14, 3,5,7.")] = "all",
    recipes: Annotated[str, typer.Option(help="Mean-pooled recipes, comma-separated.")] = "va,hs",
    limit: Annotated[int, typer.Option(min=2, help="Texts drawn (seeded) from CORPUS.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed of the text sample and of the split points.")] = 0,
    max_length: Annotated[int, typer.Option("--max-length", min=8, help="Tokens kept per text.")] = 256,
    min_tokens: Annotated[int, typer.Option(min=4, help="Shorter texts are left out.")] = 16,
    out: Annotated[Path, typer.Option(help="Output stem: OUT.md/.json/.png.")] = Path("out/segments"),
    batch_size: BatchOpt = 16,
    device: DeviceOpt = None,
    dtype: DTypeOpt = None,
) -> None:
    """Segment matching (Value Aggregation paper, Fig. 2): recall@1/5/10 of each prefix's own suffix, per layer."""
    from valuelens.evaluation.compare import load_probe

    from .corpus import load_corpus
    from .segments import segment_matching

    command = _command()
    names = [r.strip() for r in recipes.split(",") if r.strip()]
    try:
        texts = load_corpus(corpus)
        probe = load_probe(model, device=device, dtype=dtype)
        result = segment_matching(
            probe,
            texts,
            recipes=names,
            layers=layers_arg(layers),
            limit=limit,
            seed=seed,
            max_length=max_length,
            min_tokens=min_tokens,
            batch_size=batch_size,
            corpus=corpus,
            show_progress=True,
        )
        paths = result.write(out, command=command)
    except (ValueLensError, ValueError) as exc:
        raise fail(exc) from exc
    _done(result.to_markdown(command), paths)


def register(app: typer.Typer) -> None:
    """Add ``lens``, ``spectrum`` and ``segments`` to the ``valuelens`` app."""
    app.command("lens")(lens)
    app.command("spectrum")(spectrum)
    app.command("segments")(segments)
