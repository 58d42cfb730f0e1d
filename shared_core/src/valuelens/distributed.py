"""Embed a corpus on Ray Data: a pool of actors, each loading the model once and encoding batches.

Usage::

    import ray
    from valuelens.distributed import embed_dataset

    ray.init()                                             # or ray.init(address="ray://head:10001")
    ds = ray.data.read_parquet("corpus/")                  # any ray.data.Dataset with a text column
    out = embed_dataset(ds, "text", model="smollm2-135m", config={"recipe": "va"}, concurrency=4)
    out.write_parquet("vectors/")                          # every input column + ``embedding``

The spec travels to the workers as :meth:`EncoderConfig.to_dict` output and is validated on the
driver first; each actor builds one :class:`valuelens.Encoder` and runs ``Encoder.encode`` on its
batches. Needs the ``ray`` extra: ``pip install 'valuelens[ray]'``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from valuelens.config import EncoderConfig
from valuelens.errors import ConfigError, ValueLensError
from valuelens.inputs import check_batch_size
from valuelens.io import read_texts
from valuelens.loading import resolve_device, resolve_dtype

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data

__all__ = ["EMBEDDING_COLUMN", "EmbedBatches", "embed_dataset", "embed_files", "read_dataset", "require_ray"]

#: The column :func:`embed_dataset` adds: a fixed-size list of float32 per row.
EMBEDDING_COLUMN = "embedding"

_STRING_TYPES = ("string", "large_string", "string_view")


def require_ray() -> Any:
    """Import and return ``ray`` (with Ray Data), or raise an error naming the install command."""
    try:
        import ray
        import ray.data  # Ray Data is a separate extra of ray (pandas, pyarrow)
    except ImportError as exc:
        msg = "valuelens.distributed needs Ray Data: pip install 'valuelens[ray]' (ray[data])"
        raise ImportError(msg) from exc
    return ray


def _check_model(model: str | os.PathLike[str] | None) -> str | None:
    """The model reference the workers will load: names and hub ids as given, folders made absolute.

    Checked here, on the driver, without provisioning anything (the workers do that).
    """
    from valuelens import models

    if model is None:
        return None
    ref = os.fspath(model)
    if not isinstance(model, os.PathLike) and (ref in models.MODELS or ref in models.ALIASES):
        return ref
    resolved = models.path(ref, progress=False)  # folders and hub ids only: raises for anything else
    return os.path.abspath(resolved) if os.path.isdir(resolved) else resolved


def _torch_threads(cpus: float | None) -> int:
    """Intra-op threads for a worker holding ``cpus`` CPUs (at least one)."""
    return max(1, math.floor(cpus)) if cpus else 1


class EmbedBatches:
    """The callable class each Ray actor runs: loads the model once, embeds ``column`` of each batch.

    Usage (what :func:`embed_dataset` does)::

        ds.map_batches(EmbedBatches, fn_constructor_kwargs={"model": None, "config": config.to_dict(),
                       "column": "text"}, batch_format="pyarrow",
                       compute=ray.data.ActorPoolStrategy(size=2))

    Batches are ``pyarrow.Table``; the result is the same table with a ``fixed_size_list<float32>``
    column :data:`EMBEDDING_COLUMN` appended. Subclass it to add per-batch work.
    """

    def __init__(
        self,
        *,
        model: str | None,
        config: dict[str, Any],
        column: str,
        batch_size: int = 32,
        normalize: bool = False,
        device: str | None = None,
        dtype: str | None = None,
        num_cpus: float | None = None,
        id_column: str | None = None,
        query: bool = False,
    ) -> None:
        import torch

        from valuelens import Encoder

        cpus = num_cpus
        try:
            import ray

            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", num_cpus)
        except (ImportError, RuntimeError):  # outside a Ray worker (tests, direct use)
            pass
        self.threads = _torch_threads(cpus)
        torch.set_num_threads(self.threads)  # the actor's CPU share, not the whole node
        self.column = column
        self.id_column = id_column
        self.batch_size = batch_size
        self.normalize = normalize
        encoder = Encoder.from_pretrained(model, EncoderConfig.from_dict(config), device=device, dtype=dtype)
        self.encoder = encoder.for_queries() if query else encoder

    def texts(self, batch: pa.Table) -> list[str]:
        """The batch's texts; a non-string value raises ``TypeError`` naming its row (by id if any)."""
        values = batch.column(self.column).to_pylist()
        for i, value in enumerate(values):
            if not isinstance(value, str):
                where = (
                    f"the row with {self.id_column}={batch.column(self.id_column)[i].as_py()!r}"
                    if self.id_column and self.id_column in batch.column_names
                    else f"row {i} of a batch starting with {values[0]!r}"
                )
                msg = f"{where}: column {self.column!r} is {value!r} ({type(value).__name__}), not a string"
                raise TypeError(msg)
        return values

    def __call__(self, batch: pa.Table) -> pa.Table:
        import numpy as np
        import pyarrow as pa

        texts = self.texts(batch)
        vectors = np.asarray(
            self.encoder.encode(texts, batch_size=self.batch_size, normalize=self.normalize),
            dtype=np.float32,
        ).reshape(len(texts), self.encoder.dimension)
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        return batch.append_column(
            EMBEDDING_COLUMN, pa.FixedSizeListArray.from_arrays(flat, self.encoder.dimension)
        )


def _check_column(ds: ray.data.Dataset, column: str) -> None:
    schema = ds.schema()
    if schema is None:  # an empty dataset: nothing to check
        return
    names = list(schema.names)
    if column not in names:
        msg = f"the dataset has no column {column!r}; its columns are {names} (pass column=...)"
        raise ValueError(msg)
    if EMBEDDING_COLUMN in names:
        msg = f"the dataset already has a column {EMBEDDING_COLUMN!r}; drop or rename it first"
        raise ValueError(msg)
    kind = schema.types[names.index(column)]
    name = str(kind)
    if name not in _STRING_TYPES and not name.startswith("object") and "python_object" not in name:
        msg = f"column {column!r} holds {name} values, not strings (cast it, or choose column=...)"
        raise TypeError(msg)


def embed_dataset(
    ds: ray.data.Dataset,
    column: str = "text",
    *,
    model: str | os.PathLike[str] | None = None,
    config: EncoderConfig | Mapping[str, Any] | None = None,
    batch_size: int = 32,
    num_gpus: float = 0,
    num_cpus: float | None = None,
    concurrency: int | tuple[int, int] = 1,
    normalize: bool = False,
    device: str | None = None,
    dtype: Any = None,
    id_column: str | None = "id",
    max_restarts: int | None = None,
    max_task_retries: int | None = None,
    worker: type[EmbedBatches] = EmbedBatches,
    query: bool = False,
) -> ray.data.Dataset:
    """``ds`` with an ``embedding`` column (``fixed_size_list<float32>[dimension]``) for ``column``.

    Usage: ``embed_dataset(ds, "text", config={"recipe": "va"}, concurrency=2).write_parquet("out/")``.

    A pool of ``concurrency`` actors (an int, or ``(min, max)`` for an autoscaling pool), each loading
    ``model`` (a bundled name, a folder every node can read, or a hub id; ``None``: the default model)
    with ``config`` once. ``batch_size`` rows go to each call and through each forward. Every other
    column is kept; row order is not (key rows by an id column). ``num_cpus`` per actor (default 1,
    0 with ``num_gpus``) is also its torch thread count; ``num_gpus`` reserves GPUs per actor (the
    device defaults to CUDA where one is visible). An actor that dies is restarted (``max_restarts``)
    and its unfinished batch resubmitted (``max_task_retries``), so no row is lost or duplicated;
    ``None`` keeps Ray Data's actor-pool defaults (both ``-1``: restart and resubmit without limit),
    a number is passed to the actors' remote options. ``id_column`` names rows in errors. ``query``
    embeds the texts as search queries (the spec's query side, as ``Encoder.encode_query``). Returns a lazy dataset: nothing runs
    until it is consumed (``write_parquet``, ``materialize``, ``iter_batches`` ...).
    """
    require_ray()
    if isinstance(config, EncoderConfig):
        spec = config
    elif config is None or isinstance(config, Mapping):
        spec = EncoderConfig.from_dict(config or {})
    else:
        msg = f"config must be an EncoderConfig, a mapping of its fields or None, got {type(config).__name__}"
        raise ConfigError(msg)
    check_batch_size(batch_size)
    resolve_device(device)
    if dtype is not None and not isinstance(dtype, str):  # a torch.dtype travels by name
        dtype = str(dtype).removeprefix("torch.")
    resolve_dtype(dtype)
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, float)) or num_gpus < 0:
        msg = f"num_gpus must be a number >= 0, got {num_gpus!r}"
        raise ValueError(msg)
    if num_cpus is None:
        num_cpus = 0 if num_gpus else 1
    if isinstance(num_cpus, bool) or not isinstance(num_cpus, (int, float)) or num_cpus < 0:
        msg = f"num_cpus must be a number >= 0, got {num_cpus!r}"
        raise ValueError(msg)
    sizes = concurrency if isinstance(concurrency, tuple) else (concurrency,)
    if not 1 <= len(sizes) <= 2 or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        msg = f"concurrency must be a positive int or a (min, max) pair, got {concurrency!r}"
        raise ValueError(msg)
    if not isinstance(query, bool):
        msg = f"query must be True or False, got {query!r}"
        raise TypeError(msg)
    if not (isinstance(worker, type) and issubclass(worker, EmbedBatches)):
        msg = f"worker must be EmbedBatches or a subclass, got {worker!r}"
        raise TypeError(msg)
    reference = _check_model(model)
    _check_column(ds, column)
    import ray.data

    pool = (
        ray.data.ActorPoolStrategy(min_size=sizes[0], max_size=sizes[-1])
        if isinstance(concurrency, tuple)
        else ray.data.ActorPoolStrategy(size=concurrency)
    )
    # Ray Data's actor pools already default to max_restarts=-1, max_task_retries=-1; remote options
    # passed by keyword are deprecated from Ray 2.60, so they are passed only when asked for.
    retries: dict[str, Any] = {
        key: value
        for key, value in (("max_restarts", max_restarts), ("max_task_retries", max_task_retries))
        if value is not None
    }
    return ds.map_batches(
        worker,
        fn_constructor_kwargs={
            "model": reference,
            "config": spec.to_dict(),
            "column": column,
            "batch_size": batch_size,
            "normalize": normalize,
            "device": None if device is None else str(device),
            "dtype": None if dtype is None else str(dtype),
            "num_cpus": num_cpus,
            "id_column": id_column,
            "query": query,
        },
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=pool,
        num_cpus=num_cpus,
        num_gpus=num_gpus or None,
        **retries,
    )


# ------------------------------------------------------------------------------------------- files
def _parquet_files(path: Path) -> list[Path]:
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files:
        msg = f"no .parquet files under {str(path)!r}"
        raise ValueLensError(msg)
    return files


def _read_row_groups(batch: dict[str, Any], *, columns: list[str], id_column: str) -> pa.Table:
    """One row group of one file, with its rows numbered from the group's offset in the input."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for path, group, start in zip(batch["path"], batch["row_group"], batch["start"], strict=True):
        table = pq.ParquetFile(str(path)).read_row_group(int(group), columns=columns)
        ids = pa.array(range(int(start), int(start) + table.num_rows), type=pa.int64())
        tables.append(table.add_column(0, id_column, ids))
    return pa.concat_tables(tables)


def read_dataset(path: Path, *, column: str = "text", id_column: str | None = None) -> ray.data.Dataset:
    """A dataset of ``path`` keyed by ``id_column`` (default ``"id"``): kept when the input has it,
    else the row number (over the files of a folder in sorted order).

    Usage: ``ds = read_dataset(Path("corpus/"), column="body")``. A .parquet file or a folder of
    shards is read by Ray tasks (row numbers from the files' metadata, no text on the driver);
    .txt, .jsonl and .csv are read here with :func:`valuelens.io.read_texts`.
    """
    ray = require_ray()
    key = id_column or "id"
    if not path.exists():
        msg = f"input {str(path)!r} does not exist"
        raise ValueLensError(msg)
    if not (path.is_dir() or path.suffix.lower() == ".parquet"):
        texts, ids = read_texts(path, field=column, id_field=id_column)
        import pyarrow as pa

        return ray.data.from_arrow(pa.table({key: ids, column: texts}))
    import pyarrow.parquet as pq

    files = _parquet_files(path)
    names = pq.read_schema(files[0]).names
    if column not in names:
        msg = f"{files[0].name} has no column {column!r}; its columns are {names} (choose one with --field)"
        raise ValueLensError(msg)
    if key in names:
        return ray.data.read_parquet([str(f) for f in files])
    if id_column is not None:
        msg = f"{files[0].name} has no id column {id_column!r}; its columns are {names}"
        raise ValueLensError(msg)
    groups, start = [], 0
    for file in files:
        meta = pq.ParquetFile(file).metadata
        for group in range(meta.num_row_groups):
            groups.append({"path": str(file), "row_group": group, "start": start})
            start += meta.row_group(group).num_rows
    return ray.data.from_items(groups).map_batches(
        _read_row_groups, batch_size=1, fn_kwargs={"columns": names, "id_column": key}
    )


def embed_files(
    input_path: Path,
    output: Path,
    *,
    column: str = "text",
    id_column: str | None = None,
    model: str | None = None,
    config: EncoderConfig | Mapping[str, Any] | None = None,
    workers: int = 1,
    address: str | None = None,
    num_gpus: float = 0,
    batch_size: int = 32,
    normalize: bool = True,
    device: str | None = None,
    dtype: Any = None,
    query: bool = False,
) -> int:
    """Embed ``column`` of ``input_path`` on Ray and write ``output`` (a folder of parquet shards);
    return the number of rows written. What ``valuelens embed --ray`` runs.

    Usage: ``embed_files(Path("corpus/"), Path("vectors/"), config={"recipe": "va"}, workers=2)``.

    Without ``address`` a local Ray is started (``workers`` actors sharing this machine's cores, plus
    one logical CPU for Ray Data's read and write tasks) and shut down at the end; with an address
    (``"auto"``, ``"ray://head:10001"``) the job runs on that cluster, which must keep a CPU free
    for reading and writing besides the ``workers`` actors. Rows are keyed by ``id_column``
    (default ``"id"``: kept if present, else the row number). ``query``: embed them as search queries.
    """
    ray = require_ray()
    if output.exists() and (output.is_file() or any(output.iterdir())):
        msg = f"output {str(output)!r} already exists; Ray writes a folder of shards: choose a new one"
        raise ValueLensError(msg)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        msg = f"workers must be a positive int, got {workers!r}"
        raise ValueError(msg)
    cpus: float = 0 if num_gpus else 1
    if address is None:
        cpus = 0 if num_gpus else max(1, (os.cpu_count() or 1) // workers)
        ray.init(
            address="local",
            num_cpus=int(workers * cpus) + 1,
            include_dashboard=False,
            log_to_driver=False,
        )
    else:
        ray.init(address=address, log_to_driver=False)
    try:
        ds = read_dataset(input_path, column=column, id_column=id_column)
        embedded = embed_dataset(
            ds,
            column,
            model=model,
            config=config,
            batch_size=batch_size,
            num_gpus=num_gpus,
            num_cpus=cpus,
            concurrency=workers,
            normalize=normalize,
            device=device,
            dtype=dtype,
            id_column=id_column or "id",
            query=query,
        )
        embedded.write_parquet(str(output))
        import pyarrow.parquet as pq

        return int(pq.ParquetDataset(str(output)).read(columns=[id_column or "id"]).num_rows)
    finally:
        ray.shutdown()
