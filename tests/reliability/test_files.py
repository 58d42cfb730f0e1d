"""`valuelens embed` files: killed midway it leaves no half-written output, `--resume` finishes the job
row for row, malformed lines are reported by number and `--on-error` decides what happens to them."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tiny_models import CORPUS
from valuelens.cli import app
from valuelens.embedding_job import EmbedJob, ResumeError, read_input, work_dir
from valuelens.io import InputFileError, read_records, read_vectors

runner = CliRunner()
VALUELENS = str(Path(sys.executable).with_name("valuelens"))  # the console script of this environment
FAST = ["--recipe", "va", "--layers", "0"]  # one decoder layer runs: the cheapest real spec


def _lines(n: int) -> list[str]:
    return [f"{CORPUS[i % len(CORPUS)]} ({i})" for i in range(n)]


def _fake_encode(texts: list[str]) -> np.ndarray:
    """Deterministic 8-d vectors from each text's hash: the job's bookkeeping without a model."""
    rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:32], dtype=np.uint32) for t in texts]
    out = np.asarray(rows, dtype=np.float32).reshape(len(texts), 8)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _job(source: Path, out: Path, **kwargs) -> EmbedJob:
    job = EmbedJob(source, out, **kwargs)
    job.check_input(field="text", id_field=None)
    return job


def _invoke(*args: str):
    return runner.invoke(app, list(args))


# ------------------------------------------------------------------------------ kill and resume
#: Enough chunks (of 50) that the run cannot finish between the first part and the signal: with 1500
#: lines the tiny model's run took about 0.2 s and once completed before the signal on a loaded machine.
N_LINES = 15000


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_run_leaves_no_output_and_resume_equals_an_uninterrupted_run(tiny_checkpoint, tmp_path, sig):
    source = tmp_path / "in.txt"
    lines = _lines(N_LINES)
    lines[10] = "   "  # a blank line: no text, but its number still counts for the ids after it
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "v.parquet"
    common = [str(source), "-o", str(out), "--model", tiny_checkpoint, *FAST, "--batch-size", "50"]
    proc = subprocess.Popen(
        [VALUELENS, "embed", *common, "--chunk-size", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    work = work_dir(out)
    deadline = time.monotonic() + 120
    while not list(work.glob("part-*.npy")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before a part was written: {proc.communicate()}"
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM, stderr
        assert "rerun the same command with --resume" in stderr
    else:
        assert proc.returncode == -signal.SIGKILL
    assert not out.exists()  # nothing under the target name, not even a partial file
    parts = sorted(work.glob("part-*.npy"))
    assert 1 <= len(parts) < N_LINES // 50
    if sig == signal.SIGTERM:  # the handler removed the part it was writing; SIGKILL may leave one
        assert not list(work.glob("*.tmp"))

    # the interrupted run is protected: no silent restart, no resume with another spec
    refused = _invoke("embed", *common)
    assert refused.exit_code == 2 and "add --resume to continue it" in refused.output
    other = _invoke("embed", *common[:-2], "--recipe", "hs", "--layers", "0", "--resume")
    assert other.exit_code == 2 and "another embedding spec" in other.output, other.output
    assert "config.recipe: 'va' then, 'hs' now" in other.output

    resumed = _invoke("embed", *common, "--resume", "--chunk-size", "500")  # the saved chunk size wins
    assert resumed.exit_code == 0, resumed.output
    assert f"reused {len(parts)} of {N_LINES // 50} chunks" in resumed.output
    assert not work.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "v.parquet"]

    whole = tmp_path / "whole" / "v.parquet"
    assert _invoke("embed", *common[:2], str(whole), *common[3:]).exit_code == 0
    got, want = read_vectors(out), read_vectors(whole)
    assert got[1] == want[1] and got[2] == want[2] and got[3] == want[3]  # ids, texts, settings exact
    assert got[1][10:12] == ["11", "12"] and len(got[1]) == N_LINES - 1
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)


def test_an_error_while_writing_the_output_leaves_no_file_and_keeps_the_parts(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    source = tmp_path / "in.txt"
    source.write_text("\n".join(_lines(250)))
    out = tmp_path / "v.parquet"
    real = pq.write_table

    def half_then_fail(table, where, **kwargs):
        real(table.slice(0, 10), where, **kwargs)  # some bytes on disk, then the crash
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", half_then_fail)
    with pytest.raises(KeyboardInterrupt):
        _job(source, out, chunk_size=100).run(
            read_input(source), encode=_fake_encode, spec={"m": 1}, settings={}
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == [".v.parquet.partial", "in.txt"]
    assert len(list(work_dir(out).glob("part-*.npy"))) == 3
    monkeypatch.setattr(pq, "write_table", real)
    calls: list[int] = []

    def counting(texts):
        calls.append(len(texts))
        return _fake_encode(texts)

    result = _job(source, out, chunk_size=100, resume=True).run(
        read_input(source), encode=counting, spec={"m": 1}, settings={}
    )
    assert calls == [] and result.reused == 3  # every chunk came from the parts
    vectors, ids, texts, _ = read_vectors(out)
    np.testing.assert_array_equal(vectors, _fake_encode(_lines(250)))
    assert ids == [str(i) for i in range(250)] and texts == _lines(250)


def test_resume_refuses_another_input_and_starts_when_there_is_nothing_to_resume(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(_lines(300)))
    out = tmp_path / "v.npy"

    def stop_at_third(texts, seen=[]):  # noqa: B006 - a call counter
        seen.append(1)
        if len(seen) == 3:
            raise KeyboardInterrupt
        return _fake_encode(texts)

    with pytest.raises(KeyboardInterrupt):
        _job(source, out, chunk_size=100).run(read_input(source), encode=stop_at_third, spec={}, settings={})
    assert not out.exists() and not out.with_suffix(".json").exists()
    source.write_text("\n".join(_lines(301)))
    with pytest.raises(ResumeError, match=r"another input or other options \(input\.sha256: '"):
        _job(source, out, chunk_size=100, resume=True)
    source.write_text("\n".join(_lines(300)))
    os.utime(source, (1, 1))  # touched, same bytes: still the same input
    with pytest.raises(ResumeError, match=r"another embedding spec \(spec\.model: None then, 'b' now\)"):
        job = _job(source, out, chunk_size=100, resume=True)
        job.run(read_input(source), encode=_fake_encode, spec={"model": "b"}, settings={})
    job = _job(source, out, chunk_size=100, resume=True)
    result = job.run(read_input(source), encode=_fake_encode, spec={}, settings={})
    assert result.reused == 2 and np.load(out, allow_pickle=False).shape == (300, 8)

    fresh = tmp_path / "fresh.npy"  # --resume with no work folder just starts
    result = _job(source, fresh, resume=True).run(
        read_input(source), encode=_fake_encode, spec={}, settings={}
    )
    assert result.reused == 0 and json.loads(fresh.with_suffix(".json").read_text())["ids"] == list(
        range(300)
    )


def test_100k_lines_in_chunks_assemble_in_order(tmp_path):
    """The job's bookkeeping at the issue's scale (a hash for a model): every row, in input order."""
    source = tmp_path / "in.txt"
    lines = [f"line {i}" if i % 997 else "" for i in range(100_000)]  # blank lines keep their numbers
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "v.parquet"
    records = read_input(source)
    _job(source, out, chunk_size=4096).run(records, encode=_fake_encode, spec={}, settings={"dimension": 8})
    vectors, ids, texts, settings = read_vectors(out)
    kept = [i for i, line in enumerate(lines) if line]
    assert (
        ids == [str(i) for i in kept] and texts == [lines[i] for i in kept] and settings == {"dimension": 8}
    )
    np.testing.assert_array_equal(vectors, _fake_encode(texts))


def test_embed_100k_lines_with_a_real_model_writes_complete_valid_output(tiny_checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    lines = [f"t{i}" for i in range(100_000)]
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "v.parquet"
    result = _invoke(
        "embed", str(source), "-o", str(out), "--model", tiny_checkpoint, *FAST, "--batch-size", "1024"
    )
    assert result.exit_code == 0, result.output
    vectors, ids, texts, _ = read_vectors(out)
    assert vectors.shape == (100_000, 32) and texts == lines and ids == [str(i) for i in range(100_000)]
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert not work_dir(out).exists()


# ------------------------------------------------------------------------------ malformed lines
def _messy(tmp_path: Path, suffix: str) -> tuple[Path, list[int], dict[int, str]]:
    """A file with good rows and bad ones: the bad (1-based) line numbers, and id → text of the good."""
    if suffix == ".txt":
        raw = [b"good zero", b"bad \xff byte", b"", b"good three", b"\xc3( broken", b"good five"]
        path = tmp_path / "in.txt"
        path.write_bytes(b"\n".join(raw) + b"\n")
        return path, [2, 5], {0: "good zero", 3: "good three", 5: "good five"}
    if suffix == ".jsonl":
        raw = [
            b'{"text": "good zero"}',
            b'{"text": "unterminated',
            b"",
            b'{"body": "no text field"}',
            b'{"text": 7}',
            b'{"text": "good four"}',
            b'{"text": "bad \xff"}',
            b"[1, 2]",
            b'{"text": "good seven"}',
        ]
        path = tmp_path / "in.jsonl"
        path.write_bytes(b"\n".join(raw) + b"\n")
        return path, [2, 4, 5, 7, 8], {0: "good zero", 4: "good four", 7: "good seven"}
    if suffix == ".csv":
        path = tmp_path / "in.csv"
        path.write_bytes(b'text,other\n"good zero",1\n"bad \xfe",2\n"good two",3\nno-other-column\n')
        return path, [3], {0: "good zero", 2: "good two", 3: "no-other-column"}
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["good zero", None, "good two"]}), path)
    return path, [2], {0: "good zero", 2: "good two"}


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".csv", ".parquet"])
def test_malformed_lines_are_reported_by_number(tmp_path, suffix):
    path, bad, good = _messy(tmp_path, suffix)
    records = read_records(path)
    assert [b.line for b in records.bad] == bad
    assert dict(zip(records.ids, records.texts, strict=True)) == good
    with pytest.raises(InputFileError, match=rf"(line|row) {bad[0]}: ") as caught:
        read_input(path, on_error="fail")
    assert [b.line for b in caught.value.bad] == bad
    notes: list[str] = []
    skipped = read_input(path, on_error="skip", note=notes.append)
    assert skipped.ids == records.ids and len(notes) == 1
    assert (
        f"skipped {len(bad)} malformed line(s) of {path.name} (lines {', '.join(map(str, bad))})" in notes[0]
    )


def test_on_error_through_the_command_line(tiny_checkpoint, tmp_path):
    path, _, good = _messy(tmp_path, ".jsonl")
    out = tmp_path / "v.parquet"
    failed = _invoke("embed", str(path), "-o", str(out), "--model", tiny_checkpoint, *FAST)
    assert failed.exit_code == 2
    assert "in.jsonl line 2: not valid JSON (Unterminated string" in failed.output
    assert "(4 more malformed after it)" in failed.output and "--on-error skip" in failed.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]  # nothing written
    skipped = _invoke(
        "embed", str(path), "-o", str(out), "--model", tiny_checkpoint, *FAST, "--on-error", "skip"
    )
    assert skipped.exit_code == 0, skipped.output
    assert "warning: skipped 5 malformed line(s) of in.jsonl (lines 2, 4, 5, 7, 8)" in skipped.output
    vectors, ids, texts, _ = read_vectors(out)
    assert ids == [str(i) for i in good] and texts == list(good.values())  # ids of the original rows
    clean = tmp_path / "clean.txt"
    clean.write_text("\n".join(good.values()))
    want = tmp_path / "clean.parquet"
    assert _invoke("embed", str(clean), "-o", str(want), "--model", tiny_checkpoint, *FAST).exit_code == 0
    np.testing.assert_allclose(vectors, read_vectors(want)[0], atol=1e-5)


def test_on_error_takes_only_skip_or_fail(tmp_path):
    (tmp_path / "in.txt").write_text("a\n")
    result = _invoke("embed", str(tmp_path / "in.txt"), "-o", str(tmp_path / "v.npy"), "--on-error", "ignore")
    shown = " ".join(result.output.replace("│", " ").split())  # rich wraps the usage error in a box
    assert result.exit_code == 2 and "'ignore' is not one of 'skip', 'fail'" in shown
