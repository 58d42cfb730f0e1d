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

import typer

from valuelens.analysis.commands import register as _register_analysis
from valuelens.config import FIELDS
from valuelens.embedding_job import DEFAULT_CHUNK_SIZE, JobInterrupted, OnError
from valuelens.errors import ValueLensError
from valuelens.options import (
    BatchOpt,
    ConfigFileOpt,
    DeviceOpt,
    DTypeOpt,
    ModelOpt,
    PresetOpt,
    SpecFields,
    ThreadsOpt,
    command_spec,
    extra_imports,
    fail,
    spec_options,
    use_threads,
)
from valuelens.server.command import serve as _serve
from valuelens.tuning.command import tune_command as _tune

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

PromptOpt = Annotated[
    str | None,
    typer.Option(
        help="Prompt: prompteol, futureeol, echo, metaeol, pcot, knowledge, ck, prompteol-icl, futureeol-icl, "
        "or a template with {text}."
    ),
]
#: The spec fields ``valuelens search`` takes: they shape the queries only, so the stored documents stay valid.
QUERY_FIELDS = ("query_template", "lexical_query")


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
    query: bool = False,
) -> None:
    import numpy as np
    from tqdm.auto import tqdm

    from valuelens.embedding_job import EmbedJob, job_spec, read_input
    from valuelens.encoder import Encoder
    from valuelens.io import check_output

    check_output(output)  # a bad output fails before any text is read or embedded
    records = read_input(input_path, field=field, id_field=id_field, on_error=on_error, note=_note)
    if not records.texts:
        msg = f"{input_path} holds no texts to embed (field {field!r}): nothing written"
        raise ValueLensError(msg)
    job = EmbedJob(input_path, output, chunk_size=chunk_size, resume=resume, note=_note)
    job.check_input(field=field, id_field=id_field)  # before the model loads
    encoder = Encoder.from_pretrained(
        settings["model"], device=device, dtype=dtype, **{k: v for k, v in settings.items() if k != "model"}
    )
    stored = {**settings, "dimension": encoder.dimension}
    if query:  # search queries: the spec's query side (query_template, lexical_query)
        encoder = encoder.for_queries()
        stored["side"] = "query"
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
    query: bool = False,
) -> None:
    import time

    from valuelens import EncoderConfig

    with extra_imports("ray", "valuelens embed --ray"):
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
        query=query,
    )
    elapsed = time.perf_counter() - start
    typer.echo(
        f"{n} texts -> {output}/ ({workers} Ray workers; {elapsed:.1f} s, {n / max(elapsed, 1e-9):.0f} texts/s)"
    )


@app.command()
@spec_options()
def embed(
    input_path: Annotated[
        Path, typer.Argument(metavar="INPUT", help=".txt (one text per line), .jsonl, .csv or .parquet")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help=".npy or .parquet (id, text, vector)")],
    model: ModelOpt = None,
    preset: PresetOpt = None,
    config_file: ConfigFileOpt = None,
    field: Annotated[str, typer.Option(help="Text field/column of .jsonl/.csv/.parquet inputs.")] = "text",
    id_field: Annotated[str | None, typer.Option(help="Id field/column (default: the row number).")] = None,
    batch_size: BatchOpt = 32,
    device: DeviceOpt = None,
    dtype: DTypeOpt = None,
    threads: ThreadsOpt = "auto",
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
    query: Annotated[
        bool,
        typer.Option(
            "--query",
            help="Embed the texts as search queries: through the spec's query side "
            "(query_template, lexical_query), as encode_query does. Default: as documents.",
        ),
    ] = False,
    *,
    spec: SpecFields,
) -> None:
    """Embed every text of INPUT (L2-normalized) and write the vectors to OUTPUT.

    OUTPUT appears only when complete (written under a temporary name and renamed); finished chunks
    wait in a hidden folder beside it (.OUTPUT.partial) until then, for --resume."""
    try:
        use_threads(threads)
        config = command_spec(model, preset, config_file, spec)
    except (ValueLensError, ValueError, OSError) as exc:
        raise fail(exc) from exc
    settings = {"model": model, **config.to_dict()}
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
                query=query,
            )
        except (ValueLensError, ValueError, TypeError, ImportError) as exc:
            raise fail(exc) from exc
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
            query=query,
        )
    except JobInterrupted as exc:
        typer.secho(f"interrupted: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=128 + exc.signum) from exc
    except (ValueLensError, ValueError, TypeError, OSError) as exc:
        raise fail(exc) from exc


def _search(
    embeddings: Path,
    queries: list[str],
    k: int,
    device: str | None = None,
    query_fields: SpecFields | None = None,
) -> None:
    import numpy as np

    from valuelens.config import FIELDS
    from valuelens.encoder import Encoder
    from valuelens.io import read_vectors

    vectors, _, texts, settings = read_vectors(embeddings)
    options: dict[str, Any] = {key: settings[key] for key in FIELDS if key in settings}  # the whole spec
    options.update({key: value for key, value in (query_fields or {}).items() if value is not None})
    encoder = Encoder.from_pretrained(settings.get("model"), device=device, **options)
    # queries go through the spec's query side (query_template, lexical_query), as in every adapter
    scores = np.asarray(encoder.encode_query(queries, normalize=True)) @ vectors.T
    for row, query in zip(scores, queries, strict=True):
        typer.echo(f"\n{query}")
        for i in np.argsort(-row)[:k]:
            typer.echo(f"  {float(row[i]):6.3f}  {texts[i]}")


@app.command()
@spec_options(QUERY_FIELDS)
def search(
    embeddings: Annotated[
        Path, typer.Argument(help="A .parquet (or .npy: hits shown by id) written by `valuelens embed`.")
    ],
    queries: Annotated[list[str], typer.Argument(help="One or more queries.")],
    k: Annotated[int, typer.Option("-k", min=1, help="Hits per query.")] = 3,
    device: DeviceOpt = None,
    *,
    spec: SpecFields,
) -> None:
    """Semantic search: embed QUERIES with the settings stored in EMBEDDINGS and print the top-k texts.

    The queries go through the stored spec's query side; --query-template and --lexical-query change it
    (the documents' vectors stay as they were embedded)."""
    try:
        _search(embeddings, queries, k, device, spec)
    except (ValueLensError, ValueError, TypeError) as exc:
        raise fail(exc) from exc


@app.command("eval")
@spec_options(("max_length", "long_text"))
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
    threads: ThreadsOpt = "auto",
    *,
    spec: SpecFields,
) -> None:
    """Score recipes on local tasks with the MTEB metrics; recipes sharing a prompt share forward passes."""
    with extra_imports("eval", "valuelens eval"):
        from valuelens.evaluation import evaluate, load_task, parse_task_spec
        from valuelens.evaluation.compare import evaluate_variants, load_probe, time_alone, variant_encoders
        from valuelens.evaluation.reference import REFERENCE_LABEL, reference_model
        from valuelens.evaluation.report import EvalReport
    from valuelens.variants import parse_variants

    command = _command()
    try:
        use_threads(threads)
        variants = parse_variants(recipes)
        loaded = [(load_task(name), n) for name, n in (parse_task_spec(t, limit) for t in tasks)]
        for task, _ in loaded:
            task.check_split(split)  # before the model loads
        probe = load_probe(model, device=device, dtype=dtype)
        encoders = variant_encoders(
            probe, variants, max_length=spec["max_length"], long_text=spec["long_text"]
        )
    except (ValueLensError, ValueError) as exc:
        raise fail(exc) from exc
    results = evaluate_variants(encoders, loaded, split=split, batch_size=batch_size, progress=_note)
    if reference:
        try:
            trained = reference_model()
        except ValueLensError as exc:
            raise fail(exc) from exc
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
    propose: Annotated[
        bool,
        typer.Option(
            "--propose",
            help="Add the best band as a ready layers= value and AUTO_LAYERS entry to the report.",
        ),
    ] = False,
    batch_size: BatchOpt = 32,
    device: DeviceOpt = None,
    dtype: DTypeOpt = None,
    threads: ThreadsOpt = "auto",
) -> None:
    """Per-layer score curve (paper Fig. 3) and the best contiguous layer band, from one forward pass."""
    with extra_imports("eval", "valuelens sweep"):
        from valuelens.evaluation import load_task
        from valuelens.evaluation.compare import load_probe
        from valuelens.evaluation.sweep import LayerSweeper, sweep_stem
    from valuelens.recipes import get_recipe

    command = _command()
    names = [r.strip() for r in recipe.split(",") if r.strip()]
    try:
        use_threads(threads)
        task_obj = load_task(task)
        task_obj.check_split(split)
        for name in names:
            get_recipe(name)  # an unknown recipe fails before the model loads
        sweeper = LayerSweeper(load_probe(model, device=device, dtype=dtype), names, prompt=prompt)
    except (ValueLensError, ValueError) as exc:
        raise fail(exc) from exc
    for result in sweeper.run(
        task_obj, split=split, limit=limit, min_width=min_width, batch_size=batch_size, propose=propose
    ):
        typer.echo(result.to_markdown(command))
        result.write(sweep_stem(out, result.recipe, len(names)), command=command)
        if propose:
            typer.echo(f"proposed layers for {result.model} ({result.recipe}): {result.proposed_layers}")


def _fit(
    texts_file: Path,
    out: Path,
    *,
    settings: dict[str, Any],
    kind: Any,
    k: int,
    dim: int | None,
    field: str,
    limit: int | None,
    batch_size: int,
    device: str | None,
    dtype: str | None,
) -> None:
    import time

    from valuelens.encoder import Encoder
    from valuelens.fitting import fit_texts
    from valuelens.io import unlabeled_texts
    from valuelens.postprocess import check_settings

    check_settings(kind, k, dim)  # before any reading or loading
    fields = [f.strip() for f in field.split(",") if f.strip()]
    texts = unlabeled_texts(texts_file, fields, limit=limit)
    if "test" in texts_file.stem.lower().replace("-", "_").split("_"):
        _note(f"note: {texts_file.name} looks like a test split; fit on unlabeled training text only")
    spec = {key: value for key, value in settings.items() if key != "model"}
    encoder = Encoder.from_pretrained(settings["model"], device=device, dtype=dtype, **spec)
    start = time.perf_counter()
    state = fit_texts(
        encoder,
        texts,
        kind=kind,
        k=k,
        dim=dim,
        batch_size=batch_size,
        fitted_on=f"{len(texts)} texts of {texts_file.name}",
    )
    state.save(out)
    elapsed = time.perf_counter() - start
    typer.echo(f"{state!r} -> {out} ({encoder!r}; {elapsed:.1f} s)")


@app.command()
@spec_options(tuple(name for name in FIELDS if name != "postprocess"))  # fitted on the raw vectors
def fit(
    texts_file: Annotated[
        Path,
        typer.Argument(metavar="TEXTS", help=".txt (one text per line), .jsonl, .csv or .parquet"),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="The fitted state (one .safetensors file).")],
    kind: Annotated[
        str,
        typer.Option(
            help="center, abtt (center, remove the top-k principal components), standardize, whiten."
        ),
    ] = "abtt",
    k: Annotated[int, typer.Option("-k", min=1, help="abtt: principal components removed.")] = 1,
    dim: Annotated[
        int | None, typer.Option(min=1, help="whiten: keep the first DIM components (default: all).")
    ] = None,
    model: ModelOpt = None,
    config_file: ConfigFileOpt = None,
    field: Annotated[
        str,
        typer.Option(
            help="Text field(s) of .jsonl/.csv/.parquet, comma-separated (STS pairs: sentence1,sentence2)."
        ),
    ] = "text",
    limit: Annotated[
        int | None, typer.Option(min=1, help="Fit on a seeded sample of this many distinct texts.")
    ] = None,
    batch_size: BatchOpt = 32,
    device: DeviceOpt = None,
    dtype: DTypeOpt = None,
    threads: ThreadsOpt = "auto",
    *,
    spec: SpecFields,
) -> None:
    """Fit a post-processing (valuelens.Postprocess) on the un-normalized embeddings of unlabeled TEXTS.

    Distinct texts only; fit on training text (e.g. ../shared/data/stsb/train.jsonl --field sentence1,sentence2),
    never on the texts a score is reported on. OUT stores the state with the encoder's spec."""
    try:
        use_threads(threads)
        config = command_spec(model, None, config_file, spec)
        settings = {"model": model, **config.replace(postprocess=None).to_dict()}
        _fit(
            texts_file,
            out,
            settings=settings,
            kind=kind,
            k=k,
            dim=dim,
            field=field,
            limit=limit,
            batch_size=batch_size,
            device=device,
            dtype=dtype,
        )
    except (ValueLensError, ValueError, TypeError, OSError) as exc:
        raise fail(exc) from exc


@app.command()
def demo(
    out_dir: Annotated[Path, typer.Option(help="Where the demo writes its embeddings.")] = Path("out/demo"),
    model: ModelOpt = None,
) -> None:
    """Provision the default model, embed a bundled sample and run a small semantic search over it."""
    from valuelens import models

    sample = Path(__file__).parent / "demo" / "sentences.txt"
    try:
        use_threads("auto")
        typer.echo(f"model: {models.path(model)}")
        output = out_dir / "sentences.parquet"
        settings = {"model": model, **command_spec(model, "best", None).to_dict()}
        typer.echo(f"$ valuelens embed {sample} -o {output} --preset best")
        _embed(sample, output, settings=settings, device=None, dtype=None, batch_size=32)
        typer.echo(f"$ valuelens search {output} " + " ".join(shlex.quote(q) for q in DEMO_QUERIES))
        _search(output, list(DEMO_QUERIES), 3)
    except (ValueLensError, ValueError) as exc:
        raise fail(exc) from exc


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
        raise fail(exc) from exc


@models_app.command("path")
def models_path(name: Annotated[str | None, typer.Argument()] = None) -> None:
    """Print the local folder of a model (provisioning it first if needed)."""
    from valuelens import models

    try:
        typer.echo(models.path(name))
    except (ValueLensError, ValueError) as exc:
        raise fail(exc) from exc


_register_analysis(app)  # valuelens lens | spectrum | segments (valuelens.analysis)
app.command("serve")(_serve)  # valuelens serve: the OpenAI-compatible server (valuelens.server)
app.command("tune")(_tune)  # valuelens tune: a preset folder tuned on dev data (valuelens.tuning)
