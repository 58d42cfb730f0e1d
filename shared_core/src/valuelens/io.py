"""The files the command line reads and writes: texts in, vectors out and back, report paths.

Usage::

    texts, ids = read_texts(Path("sentences.jsonl"), field="body", id_field="key")
    texts = unlabeled_texts("train.jsonl", ("sentence1", "sentence2"), limit=2000)  # to fit a Postprocess on
    texts = unlabeled_texts("my_docs/")          # a folder: one text per .txt/.md file, rows of the others

:func:`read_records` is the one reader of texts: ``embed``, ``fit``, ``tune --corpus``, a first-use fit's
``@FILE``, ``lexical_corpus`` and ``serve --warm-up`` all go through it.
    write_vectors(Path("vectors.parquet"), vectors, ids=ids, texts=texts, settings={"recipe": "va"})
    vectors, ids, texts, settings = read_vectors(Path("vectors.parquet"))
    report_path(Path("out/qwen2.5-0.5b-sts"), ".md")  # out/qwen2.5-0.5b-sts.md
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import gzip
import io as io_module
import json
import os
import re
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from valuelens.errors import ConfigError, ValueLensError
from valuelens.extras import require

__all__ = [
    "OUTPUT_SUFFIXES",
    "BadLine",
    "InputFileError",
    "Records",
    "check_output",
    "read_records",
    "read_texts",
    "read_vectors",
    "replace_atomically",
    "report_path",
    "unlabeled_texts",
    "write_vectors",
]

_REPORT_SUFFIXES = frozenset({".md", ".json", ".png"})
#: In a folder, files read whole as one text each (the others are read as rows: .jsonl, .csv, .parquet).
TEXT_FILE_SUFFIXES = (".txt", ".md", ".rst", ".text")
#: The row formats :func:`read_records` reads (each may also be gzip-compressed: ``.jsonl.gz``).
ROW_SUFFIXES = (".jsonl", ".csv", ".parquet")
#: The vector files :func:`write_vectors` writes (and :func:`read_vectors` reads back).
OUTPUT_SUFFIXES = (".npy", ".parquet")


@dataclasses.dataclass(frozen=True)
class BadLine:
    """One input line (or row) that holds no usable text: where it is (1-based) and why."""

    line: int
    reason: str
    unit: str = "line"  # "row" for .parquet inputs

    def __str__(self) -> str:
        return f"{self.unit} {self.line}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class Records:
    """What :func:`read_records` found: the good texts with their ids, and the bad lines."""

    texts: list[str]
    ids: list[Any]
    bad: list[BadLine] = dataclasses.field(default_factory=list)


class InputFileError(ValueLensError, ValueError):
    """An input file with malformed lines (bad JSON, a missing field, undecodable bytes)."""

    def __init__(self, path: Path, bad: list[BadLine]) -> None:
        self.path = path
        self.bad = bad
        more = f" ({len(bad) - 1} more malformed after it)" if len(bad) > 1 else ""
        msg = (
            f"{path.name} {bad[0]}{more}; fix the input, or pass --on-error skip to leave the bad "
            "lines out (the other rows keep their ids)"
        )
        super().__init__(msg)


def read_records(path: Path, *, field: str = "text", id_field: str | None = None) -> Records:
    """Texts and ids of .txt (one per non-blank line), .jsonl, .csv or .parquet (``field`` column),
    and every malformed line: undecodable bytes, bad JSON, a missing or non-string field.

    Ids are 0-based line numbers of .txt files and row numbers of the others (blank .jsonl lines are
    no rows) unless ``id_field`` names a column; a bad line keeps its number, so the ids of the other
    rows do not shift when it is left out. Line numbers in :class:`BadLine` are 1-based, as editors
    show them. A ``field`` that no row has is an error of the whole file, not of each line.

    A folder gives one text per ``.txt``/``.md``/``.rst`` file (read whole; its id is its path inside the
    folder) and the rows of its ``.jsonl``/``.csv``/``.parquet`` files (id ``FILE:ROW``), in path order;
    hidden files are skipped. A ``.gz`` file is read as the file inside it (``docs.jsonl.gz``).

    Usage: ``records = read_records(Path("in.jsonl"), field="body"); records.bad`` lists what is wrong.
    """
    if not path.exists():
        msg = f"input file {str(path)!r} does not exist"
        raise ValueLensError(msg)
    if path.is_dir():
        return _read_folder(path, field=field, id_field=id_field)
    suffix = _suffix(path)
    if suffix == ".txt":
        return _read_txt(path)
    rows: list[tuple[int, dict[str, Any]]] = []  # (1-based line or row number, row)
    bad: list[BadLine] = []
    if suffix == ".jsonl":
        for number, raw in enumerate(_read_bytes(path).split(b"\n"), start=1):
            text, error = _decode(raw)
            if error is not None:
                bad.append(BadLine(number, error))
                rows.append((number, {}))
                continue
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                bad.append(BadLine(number, f"not valid JSON ({exc.msg}, column {exc.colno})"))
                row = {}
            else:
                if not isinstance(row, dict):
                    bad.append(BadLine(number, f"a JSON {type(row).__name__}, not an object"))
                    row = {}
            rows.append((number, row))
    elif suffix == ".csv":
        handle = io_module.StringIO(_read_bytes(path).decode("utf-8", errors="surrogateescape"), newline="")
        reader = csv.DictReader(handle)
        for row in reader:
            rows.append((reader.line_num, row))
    elif suffix == ".parquet":
        pq = require("pyarrow.parquet", "eval", "reading .parquet files")
        rows = list(enumerate(pq.read_table(io_module.BytesIO(_read_bytes(path))).to_pylist(), start=1))
    else:
        msg = (
            f"unsupported input {path.suffix!r}: use .txt (one text per line), .jsonl, .csv or .parquet "
            "(or a .gz of one), or a folder of such files"
        )
        raise ValueLensError(msg)
    broken = {b.line for b in bad}
    good_rows = [row for number, row in rows if number not in broken]
    if good_rows and not any(field in row for row in good_rows):
        msg = (
            f"{path.name} has no field {field!r}; its fields are {sorted(good_rows[0])} "
            "(choose one with --field)"
        )
        raise ValueLensError(msg)
    texts: list[str] = []
    ids: list[Any] = []
    for index, (number, row) in enumerate(rows):
        if number in broken:
            continue
        value = row.get(field)
        unit = "row" if suffix == ".parquet" else "line"
        if field not in row:
            bad.append(BadLine(number, f"no field {field!r}", unit))
        elif not isinstance(value, str):
            bad.append(BadLine(number, f"field {field!r} is {value!r}, not a string", unit))
        elif suffix == ".csv" and _UNDECODED.search(value):
            bad.append(BadLine(number, "not valid UTF-8"))
        else:
            texts.append(value)
            ids.append(row.get(id_field, index) if id_field else index)
            continue
    bad.sort(key=lambda b: b.line)
    return Records(texts, ids, bad)


def _suffix(path: Path) -> str:
    """The format suffix of ``path``: ``.jsonl`` for ``docs.jsonl.gz`` too."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed when it is a ``.gz``."""
    data = path.read_bytes()
    if path.suffix.lower() == ".gz":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError) as exc:
            msg = f"{path.name} is not a readable gzip file: {exc}"
            raise ValueLensError(msg) from None
    return data


def _read_folder(folder: Path, *, field: str, id_field: str | None) -> Records:
    """The records of every text and row file under ``folder`` (see :func:`read_records`)."""
    texts: list[str] = []
    ids: list[Any] = []
    bad: list[BadLine] = []
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    readable = [p for p in files if _suffix(p) in (*TEXT_FILE_SUFFIXES, *ROW_SUFFIXES)]
    if not readable:
        msg = (
            f"the folder {str(folder)!r} holds no {', '.join(TEXT_FILE_SUFFIXES)} file (one text each) and no "
            f"{', '.join(ROW_SUFFIXES)} file (one text per row)"
        )
        raise ValueLensError(msg)
    for number, path in enumerate(readable, start=1):
        name = path.relative_to(folder).as_posix()
        if _suffix(path) in TEXT_FILE_SUFFIXES:
            text, error = _decode(_read_bytes(path))
            if error is not None:
                bad.append(BadLine(number, f"{name} is {error}", "file"))
            elif text.strip():
                texts.append(text)
                ids.append(name)
            continue
        records = read_records(path, field=field, id_field=id_field)
        texts += records.texts
        ids += [f"{name}:{i}" for i in records.ids]
        bad += [BadLine(number, f"{name} {b}", "file") for b in records.bad]
    return Records(texts, ids, bad)


def read_texts(
    path: Path, *, field: str = "text", id_field: str | None = None
) -> tuple[list[str], list[Any]]:
    """Texts (and ids) from .txt (one per non-blank line), .jsonl, .csv or .parquet (``field`` column).

    Usage: ``texts, ids = read_texts(Path("in.csv"), field="body")``; ids are row (or line) numbers
    unless ``id_field`` names a column. A malformed line raises :class:`InputFileError` naming it
    (:func:`read_records` collects them instead).
    """
    records = read_records(path, field=field, id_field=id_field)
    if records.bad:
        raise InputFileError(path, records.bad)
    return records.texts, records.ids


_UNDECODED = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by "surrogateescape"


def unlabeled_texts(
    path: str | os.PathLike[str],
    fields: str | Iterable[str] = ("text",),
    *,
    limit: int | None = None,
    seed: int = 0,
) -> list[str]:
    """The distinct texts of a file or folder (first occurrence order, each stripped of surrounding white
    space, blank ones left out): what a post-processing or a lexical part is fitted on, and what tune reads.

    ``.txt`` files give one text per non-blank line; ``.jsonl``, ``.csv`` and ``.parquet`` the
    ``fields`` (all of them, in turn: ``("sentence1", "sentence2")`` for STS pair files); a folder
    what :func:`read_records` reads there. With ``limit``, a seeded random sample of that many texts (in
    file order). A malformed line raises :class:`InputFileError`. Usage:
    ``unlabeled_texts("../shared/data/stsb/train.jsonl", ("sentence1", "sentence2"), limit=2000)``.
    """
    names = [fields] if isinstance(fields, str) else list(fields)
    if not names:
        msg = "fields must name at least one text field"
        raise ConfigError(msg)
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1
    ):
        msg = f"limit must be a positive int or None, got {limit!r}"
        raise ConfigError(msg)
    found: list[str] = []
    for name in names:
        found += read_texts(Path(path), field=name)[0]
    texts = list(dict.fromkeys(t.strip() for t in found if t.strip()))
    if limit is not None and limit < len(texts):
        keep = np.sort(np.random.default_rng(seed).choice(len(texts), size=limit, replace=False))
        texts = [texts[int(i)] for i in keep]
    return texts


def _decode(raw: bytes) -> tuple[str, str | None]:
    """One line's bytes as text (a trailing carriage return dropped), or why they are not UTF-8."""
    try:
        return raw.decode("utf-8").removesuffix("\r"), None
    except UnicodeDecodeError as exc:
        return "", f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"


def _read_txt(path: Path) -> Records:
    texts: list[str] = []
    ids: list[Any] = []
    bad: list[BadLine] = []
    data = _read_bytes(path)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line starts no line
    for index, raw in enumerate(lines):
        text, error = _decode(raw)
        if error is not None:
            bad.append(BadLine(index + 1, error))
        elif text.strip():
            texts.append(text)
            ids.append(index)
    return Records(texts, ids, bad)


def write_vectors(
    path: Path, vectors: np.ndarray, *, ids: list[Any], texts: list[str], settings: dict[str, Any]
) -> None:
    """Write ``vectors`` as .npy (the matrix, with ids and settings in a .json beside it) or .parquet
    (columns id, text, vector; the settings in the file's metadata).

    Each file is written under a temporary name in the same folder and renamed over ``path`` when
    complete (:func:`replace_atomically`): a run killed midway never leaves a half-written file there.

    Usage: ``write_vectors(Path("v.parquet"), vectors, ids=[0, 1], texts=texts, settings={"recipe": "va"})``
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        sidecar = json.dumps({"valuelens": settings, "ids": ids}, indent=2) + "\n"
        with replace_atomically(path.with_suffix(".json")) as tmp:
            tmp.write_text(sidecar, encoding="utf-8")
        with replace_atomically(path) as tmp, tmp.open("wb") as handle:
            np.save(handle, vectors.astype(np.float32), allow_pickle=False)
    elif suffix == ".parquet":
        pa = require("pyarrow", "eval", "writing .parquet vectors")
        pq = require("pyarrow.parquet", "eval", "writing .parquet vectors")
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
        with replace_atomically(path) as tmp:
            pq.write_table(table, tmp)
    else:
        check_output(path)  # raises, naming the suffixes


@functools.cache
def _new_file_mode() -> int:
    """The mode ``open()`` gives a new file under this process's umask (read once: from
    ``/proc/self/status`` on Linux, else by setting and restoring it)."""
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
        mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Umask:")), 8)
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def replace_atomically(path: Path) -> Iterator[Path]:
    """A temporary path in ``path``'s folder to write to; on success it is flushed to disk and renamed
    over ``path`` (``os.replace``, atomic on POSIX and Windows), on error it is removed.

    Usage: ``with replace_atomically(Path("out.json")) as tmp: tmp.write_text("{}")``
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        yield tmp
        with tmp.open("rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, _new_file_mode())  # some writers (safetensors) create 0600 files
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def check_output(path: Path) -> None:
    """Check, before any work, that :func:`write_vectors` can write ``path``: a known suffix, not a
    folder, and the nearest existing folder above it writable. Raises :class:`ValueLensError` naming what
    is wrong.

    Usage: ``check_output(Path("out/vectors.parquet"))``
    """
    if path.suffix.lower() not in OUTPUT_SUFFIXES:
        msg = f"unsupported output {path.suffix or path.name!r}: use {' or '.join(OUTPUT_SUFFIXES)}"
        raise ValueLensError(msg)
    if path.is_dir():
        msg = f"output {str(path)!r} is a folder: name a file ending in {' or '.join(OUTPUT_SUFFIXES)}"
        raise ValueLensError(msg)
    if path.suffix.lower() == ".parquet":
        require("pyarrow.parquet", "eval", "writing .parquet vectors")
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        if not folder.is_dir():
            raise NotADirectoryError(folder)
        with tempfile.TemporaryFile(dir=folder):  # a real write: permission bits lie to root and on /proc
            pass
    except OSError as exc:
        msg = f"cannot write {str(path)!r}: {str(folder)!r} is not a writable folder ({exc.strerror or exc})"
        raise ValueLensError(msg) from None


def read_vectors(path: Path) -> tuple[np.ndarray, list[str], list[str], dict[str, Any]]:
    """Read what :func:`write_vectors` wrote: vectors, ids, texts, settings. A .npy has no texts (its .json
    sidecar holds the ids and settings): its texts are the ids.

    Usage: ``vectors, ids, texts, settings = read_vectors(Path("v.parquet"))``
    """
    if not path.is_file():
        msg = f"no such file: {str(path)!r} (write one with `valuelens embed INPUT -o {path.name}`)"
        raise ValueLensError(msg)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        vectors, ids, settings = _read_npy(path)
        texts = [str(i) for i in ids]
    elif suffix == ".parquet":
        vectors, ids, texts, settings = _read_parquet(path)
    else:
        msg = (
            f"{str(path)!r} is not a vector file of `valuelens embed`: use its {' or '.join(OUTPUT_SUFFIXES)}"
        )
        raise ValueLensError(msg)
    if len(vectors) == 0:
        msg = f"{str(path)!r} holds no vectors (its input had no texts)"
        raise ValueLensError(msg)
    return vectors, ids, texts, settings


def _read_npy(path: Path) -> tuple[np.ndarray, list[Any], dict[str, Any]]:
    sidecar = path.with_suffix(".json")
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
        settings, ids = meta["valuelens"], list(meta["ids"])
        vectors = np.load(path, allow_pickle=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        msg = (
            f"{str(path)!r} needs the {sidecar.name} that `valuelens embed` writes beside it (ids and settings), "
            f"and both as written: {exc}"
        )
        raise ValueLensError(msg) from None
    if vectors.ndim != 2 or len(vectors) != len(ids):
        msg = f"{str(path)!r} holds {vectors.shape} vectors for {len(ids)} ids in {sidecar.name}: not as written"
        raise ValueLensError(msg)
    return np.asarray(vectors, dtype=np.float32), ids, settings


def _read_parquet(path: Path) -> tuple[np.ndarray, list[Any], list[str], dict[str, Any]]:
    pa = require("pyarrow", "eval", "reading .parquet vectors")
    pq = require("pyarrow.parquet", "eval", "reading .parquet vectors")

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        msg = f"cannot read {str(path)!r} as parquet: {exc}"
        raise ValueLensError(msg) from None
    meta = (table.schema.metadata or {}).get(b"valuelens")
    if meta is None or "vector" not in table.column_names:
        msg = f"{path} was not written by `valuelens embed` (no vector column / settings metadata)"
        raise ValueLensError(msg)
    if table.num_rows == 0:
        return np.zeros((0, 0), dtype=np.float32), [], [], json.loads(meta)
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
