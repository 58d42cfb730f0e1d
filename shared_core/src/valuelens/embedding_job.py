"""``valuelens embed`` as a resumable job: chunks saved as parts, the output renamed into place at the end.

Usage::

    records = read_records(Path("in.txt"))
    job = EmbedJob(Path("in.txt"), Path("out.parquet"), chunk_size=2048, resume=True)
    job.check_input(field="text", id_field=None)          # before the model loads
    result = job.run(records, encode=lambda t: enc.encode(t, normalize=True), spec=job_spec(enc),
                     settings={"recipe": "va", "dimension": enc.dimension})

While it runs, every finished chunk of ``chunk_size`` texts is an ``.npy`` part in a hidden work folder
next to the output (``.out.parquet.partial/``), written under a temporary name and renamed when
complete, beside a ``manifest.json`` that records the input (size, mtime, sha256), the reading options
and the embedding spec. When all parts exist they are joined and the output file is written under a
temporary name in the same folder and renamed over the target (:func:`valuelens.io.replace_atomically`),
then the work folder is removed. A run killed at any moment (SIGTERM, SIGKILL, Ctrl-C, a power cut)
therefore leaves either no file or the complete file under the target name, and ``resume=True``
continues from the last complete part; a resume with another input or spec is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import numpy as np

from valuelens.errors import ValueLensError
from valuelens.io import InputFileError, Records, read_records, replace_atomically, write_vectors

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "EmbedJob",
    "JobInterrupted",
    "JobResult",
    "OnError",
    "ResumeError",
    "job_spec",
    "read_input",
    "work_dir",
]

DEFAULT_CHUNK_SIZE = 2048
OnError = Literal["skip", "fail"]
MANIFEST = "manifest.json"
_VERSION = 1


class ResumeError(ValueLensError, ValueError):
    """A work folder that cannot be continued: another input, spec or options, or none asked for."""


class JobInterrupted(ValueLensError):
    """SIGTERM arrived while the job ran; the finished chunks are kept for ``--resume``."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


@dataclasses.dataclass(frozen=True)
class JobResult:
    """What a finished job did: texts written, chunks computed now and reused from an earlier run."""

    n_texts: int
    n_chunks: int
    reused: int
    seconds: float


def read_input(
    path: Path,
    *,
    field: str = "text",
    id_field: str | None = None,
    on_error: OnError = "fail",
    note: Callable[[str], None] = lambda line: None,
) -> Records:
    """The texts of ``path`` (:func:`valuelens.io.read_records`) with its malformed lines handled:
    ``"fail"`` raises :class:`~valuelens.io.InputFileError` naming the first (before anything is
    written), ``"skip"`` leaves them out with one warning through ``note`` listing their numbers; the
    other rows keep their ids either way."""
    if on_error not in ("skip", "fail"):
        msg = f"on_error must be 'skip' or 'fail', got {on_error!r}"
        raise ValueError(msg)
    records = read_records(path, field=field, id_field=id_field)
    if records.bad and on_error == "fail":
        raise InputFileError(path, records.bad)
    if records.bad:
        shown = "; ".join(str(b) for b in records.bad[:10])
        more = f"; and {len(records.bad) - 10} more" if len(records.bad) > 10 else ""
        numbers = ", ".join(str(b.line) for b in records.bad)
        note(
            f"warning: skipped {len(records.bad)} malformed line(s) of {path.name} (lines {numbers}): "
            f"{shown}{more}"
        )
    return records


def work_dir(output: Path) -> Path:
    """The hidden work folder of ``output``: ``out/v.parquet`` → ``out/.v.parquet.partial``."""
    return output.with_name(f".{output.name}.partial")


def job_spec(encoder: Any) -> dict[str, Any]:
    """What decides the vectors of an :class:`~valuelens.Encoder`: model, resolved spec and dtype."""
    param = next(encoder.model.parameters(), None)
    return {
        "model": encoder.name_or_path,
        "config": encoder.config.to_dict(),
        "dtype": str(param.dtype).removeprefix("torch.") if param is not None else None,
    }


def _fingerprint(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest.hexdigest()}


def _differences(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    found = []
    for key in sorted(set(saved) | set(current)):
        mine, theirs = saved.get(key), current.get(key)
        if isinstance(mine, dict) and isinstance(theirs, dict):
            found += _differences(mine, theirs, f"{prefix}{key}.")
        elif mine != theirs:
            found.append(f"{prefix}{key}: {mine!r} then, {theirs!r} now")
    return found


class EmbedJob:
    """One ``valuelens embed INPUT -o OUTPUT`` run in chunks of ``chunk_size`` texts (see the module)."""

    def __init__(
        self,
        input_path: Path,
        output: Path,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        resume: bool = False,
        note: Callable[[str], None] = lambda line: None,
    ) -> None:
        if chunk_size < 1:
            msg = f"chunk_size must be at least 1, got {chunk_size!r}"
            raise ValueError(msg)
        self.input_path = input_path
        self.output = output
        self.work = work_dir(output)
        self.chunk_size = chunk_size
        self.resume = resume
        self.note = note
        self._manifest: dict[str, Any] = {}

    # ------------------------------------------------------------------ checks before the model loads
    def check_input(self, *, field: str, id_field: str | None) -> None:
        """Start a new work folder, or check that the one there was started for this input and these
        options (``resume=True``). Raises :class:`ResumeError` saying what differs and what to do."""
        current: dict[str, Any] = {
            "version": _VERSION,
            "input": {"name": self.input_path.name, **_fingerprint(self.input_path)},
            # on_error needs no check: "fail" never gets here with bad lines, and the input's sha256
            # fixes which lines "skip" leaves out
            "options": {"field": field, "id_field": id_field},
        }
        manifest_path = self.work / MANIFEST
        if not self.work.exists():
            self._manifest = {**current, "chunk_size": self.chunk_size}
            return
        if not self.resume:
            msg = (
                f"{self.work} holds the finished chunks of an interrupted run for {self.output.name}: "
                "add --resume to continue it, or delete that folder to start again"
            )
            raise ResumeError(msg)
        if not manifest_path.exists():  # killed before the manifest was written: nothing to keep
            self.note(f"{self.work} has no manifest; starting again")
            shutil.rmtree(self.work)
            self._manifest = {**current, "chunk_size": self.chunk_size}
            return
        saved = json.loads(manifest_path.read_text(encoding="utf-8"))
        saved_input = dict(saved.get("input", {}))
        saved_input.pop("mtime_ns", None)  # a touched file with the same bytes is the same input
        now_input = {k: v for k, v in current["input"].items() if k != "mtime_ns"}
        differs = [f"version: {saved.get('version')!r} then, {_VERSION!r} now"] * (
            saved.get("version") != _VERSION
        )
        differs += _differences({"input": saved_input}, {"input": now_input})
        differs += _differences({"options": saved.get("options", {})}, {"options": current["options"]})
        if differs:
            msg = (
                f"cannot resume from {self.work}: it was started for another input or other options "
                f"({'; '.join(differs)}); rerun with the same input and options, or delete that folder "
                "to start again"
            )
            raise ResumeError(msg)
        if saved["chunk_size"] != self.chunk_size:
            self.note(f"resuming with the chunk size of the interrupted run, {saved['chunk_size']}")
        self.chunk_size = int(saved["chunk_size"])
        self._manifest = saved

    # ------------------------------------------------------------------ the run
    def run(
        self,
        records: Records,
        *,
        encode: Callable[[list[str]], np.ndarray],
        spec: dict[str, Any],
        settings: dict[str, Any],
        progress: Callable[[int], None] = lambda n: None,
    ) -> JobResult:
        """Embed ``records.texts`` chunk by chunk with ``encode`` (skipping parts already there), then
        write the output atomically and remove the work folder. ``spec`` (:func:`job_spec`) must equal
        the interrupted run's when resuming; ``settings`` go into the output file."""
        if not self._manifest:
            msg = "call check_input() before run()"
            raise RuntimeError(msg)
        start = time.perf_counter()
        texts, ids = records.texts, records.ids
        chunks = [(i, min(i + self.chunk_size, len(texts))) for i in range(0, len(texts), self.chunk_size)]
        self._check_spec(spec, len(texts))
        self.work.mkdir(parents=True, exist_ok=True)
        for stale in self.work.glob("*.tmp"):  # a part being written when the run was killed
            stale.unlink(missing_ok=True)
        for stale in self.output.parent.glob(f".{self.output.name}.*.tmp"):  # the output, likewise
            stale.unlink(missing_ok=True)
        with replace_atomically(self.work / MANIFEST) as tmp:
            tmp.write_text(json.dumps(self._manifest, indent=2) + "\n", encoding="utf-8")
        parts: list[np.ndarray] = []
        reused = 0
        with _sigterm_raises(lambda: self._interrupted_message(len(parts), len(chunks))):
            try:
                for index, (lo, hi) in enumerate(chunks):
                    part = self._load_part(index, hi - lo)
                    if part is not None:
                        reused += 1
                    else:
                        part = np.ascontiguousarray(encode(texts[lo:hi]), dtype=np.float32)
                        with replace_atomically(self._part_path(index)) as tmp, tmp.open("wb") as handle:
                            np.save(handle, part, allow_pickle=False)
                    parts.append(part)
                    progress(hi - lo)
            except KeyboardInterrupt:
                self.note(self._interrupted_message(len(parts), len(chunks)))
                raise
            if reused:
                self.note(f"reused {reused} of {len(chunks)} chunks finished by an interrupted run")
            dim = parts[0].shape[1] if parts else int(settings.get("dimension", 0))
            vectors = np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)
            write_vectors(self.output, vectors, ids=ids, texts=texts, settings=settings)
        shutil.rmtree(self.work, ignore_errors=True)
        return JobResult(len(texts), len(chunks), reused, time.perf_counter() - start)

    def _check_spec(self, spec: dict[str, Any], n_texts: int) -> None:
        current = {"spec": json.loads(json.dumps(spec)), "n_texts": n_texts}
        if "spec" not in self._manifest:
            self._manifest.update(current)
            return
        differs = _differences({k: self._manifest[k] for k in current}, current)
        if differs:
            msg = (
                f"cannot resume from {self.work}: it was started with another embedding spec "
                f"({'; '.join(differs)}); rerun with the same --model/--recipe/--layers/--prompt/"
                "--embed-filter/--max-length/--dtype, or delete that folder to start again"
            )
            raise ResumeError(msg)

    def _part_path(self, index: int) -> Path:
        return self.work / f"part-{index:06d}.npy"

    def _load_part(self, index: int, rows: int) -> np.ndarray | None:
        """A part finished earlier, if it is there and whole (else ``None``: compute it again)."""
        path = self._part_path(index)
        if not path.exists():
            return None
        try:
            part = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            self.note(f"{path.name} is unreadable ({exc}); computing it again")
            return None
        if part.ndim != 2 or part.shape[0] != rows or part.dtype != np.float32:
            self.note(f"{path.name} has shape {part.shape}, not ({rows}, dim); computing it again")
            return None
        return part

    def _interrupted_message(self, done: int, total: int) -> str:
        return (
            f"interrupted after {done} of {total} chunks; nothing was written to {self.output}. The "
            f"finished chunks are in {self.work}: rerun the same command with --resume to continue"
        )


@contextlib.contextmanager
def _sigterm_raises(message: Callable[[], str]) -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`JobInterrupted` (so temporary files are removed on the
    way out) instead of ending the process on the spot; only in the main thread, where Python runs
    signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise JobInterrupted(message(), signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
