"""The files the command line reads and writes: texts in, vectors out and back, report paths.

Usage::

    texts, ids = read_texts(Path("sentences.jsonl"), field="body", id_field="key")
    write_vectors(Path("vectors.parquet"), vectors, ids=ids, texts=texts, settings={"recipe": "va"})
    vectors, ids, texts, settings = read_vectors(Path("vectors.parquet"))
    report_path(Path("out/qwen2.5-0.5b-sts"), ".md")  # out/qwen2.5-0.5b-sts.md
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from valuelens.errors import ValueLensError

__all__ = ["read_texts", "read_vectors", "report_path", "write_vectors"]

_REPORT_SUFFIXES = frozenset({".md", ".json", ".png"})


def read_texts(
    path: Path, *, field: str = "text", id_field: str | None = None
) -> tuple[list[str], list[Any]]:
    """Texts (and ids) from .txt (one per non-blank line), .jsonl, .csv or .parquet (``field`` column).

    Usage: ``texts, ids = read_texts(Path("in.csv"), field="body")``; ids are row (or line) numbers
    unless ``id_field`` names a column.
    """
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


def write_vectors(
    path: Path, vectors: np.ndarray, *, ids: list[Any], texts: list[str], settings: dict[str, Any]
) -> None:
    """Write ``vectors`` as .npy (the matrix, with ids and settings in a .json beside it) or .parquet
    (columns id, text, vector; the settings in the file's metadata).

    Usage: ``write_vectors(Path("v.parquet"), vectors, ids=[0, 1], texts=texts, settings={"recipe": "va"})``
    """
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
    """Read a .parquet written by :func:`write_vectors`: vectors, ids, texts, settings.

    Usage: ``vectors, ids, texts, settings = read_vectors(Path("v.parquet"))``
    """
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


def report_path(stem: Path, ext: str) -> Path:
    """``stem`` + ``ext`` for report files: dots in a stem stay (``qwen2.5-0.5b-sts`` has no suffix to
    replace), and a report extension typed on the stem (``out.md``) is not doubled.

    Usage: ``report_path(Path("out/sweep.md"), ".json")`` is ``out/sweep.json``.
    """
    if stem.suffix.lower() in _REPORT_SUFFIXES:
        stem = stem.with_suffix("")
    return stem.with_name(stem.name + ext)
