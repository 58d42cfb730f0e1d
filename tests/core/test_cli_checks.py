"""The CLI checks what it can before any model loads, and says what is wrong in one line (no traceback).

Each case failed on the code before these checks: ``embed -o x.csv`` embedded every text first, an
empty input wrote a file that ``search`` then could not read, ``search`` of a missing file printed a
traceback, and ``search`` of the ``.npy`` that ``embed`` writes failed with pyarrow's "magic bytes".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tiny_models import CORPUS
from valuelens import Encoder
from valuelens.cli import app
from valuelens.errors import ValueLensError
from valuelens.io import check_output, read_vectors

runner = CliRunner()


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if the command gets as far as loading a model."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the check")

    monkeypatch.setattr(Encoder, "from_pretrained", classmethod(refuse))


def _one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0]


def test_a_bad_output_fails_before_any_model_loads(tmp_path, no_model_load):
    source = tmp_path / "in.txt"
    source.write_text("a cat\na dog\n")
    _one_line_error(
        runner.invoke(app, ["embed", str(source), "-o", str(tmp_path / "x.csv")]), "'.csv'", ".npy"
    )
    (tmp_path / "folder.npy").mkdir()
    _one_line_error(
        runner.invoke(app, ["embed", str(source), "-o", str(tmp_path / "folder.npy")]), "is a folder"
    )
    if Path("/proc/self").is_dir():  # a folder no one can write a file in, root included (Linux)
        _one_line_error(
            runner.invoke(app, ["embed", str(source), "-o", "/proc/x.parquet"]), "not a writable folder"
        )
    assert not list(tmp_path.glob(".*partial"))


def test_an_empty_input_is_an_error_and_writes_nothing(tmp_path, no_model_load):
    for name, body in [("empty.txt", ""), ("blank.txt", "\n  \n\n"), ("empty.jsonl", "")]:
        source = tmp_path / name
        source.write_text(body)
        out = tmp_path / f"{name}.parquet"
        _one_line_error(runner.invoke(app, ["embed", str(source), "-o", str(out)]), "holds no texts")
        assert not out.exists()


def test_search_of_a_missing_or_foreign_file_is_one_line(tmp_path, no_model_load):
    _one_line_error(runner.invoke(app, ["search", str(tmp_path / "missing.parquet"), "q"]), "no such file")
    text = tmp_path / "notes.txt"
    text.write_text("a\n")
    _one_line_error(runner.invoke(app, ["search", str(text), "q"]), "not a vector file", ".parquet")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet at all")
    _one_line_error(runner.invoke(app, ["search", str(broken), "q"]), "cannot read")
    lonely = tmp_path / "lonely.npy"
    np.save(lonely, np.ones((2, 3), dtype=np.float32))
    _one_line_error(runner.invoke(app, ["search", str(lonely), "q"]), "lonely.json")


def test_search_reads_the_npy_that_embed_writes(tiny_checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(CORPUS))
    npy = tmp_path / "v.npy"
    assert (
        runner.invoke(app, ["embed", str(source), "-o", str(npy), "--model", tiny_checkpoint]).exit_code == 0
    )
    vectors, ids, texts, _ = read_vectors(npy)
    assert (
        vectors.shape == (len(CORPUS), 32)
        and ids == list(range(len(CORPUS)))
        and texts == list(map(str, ids))
    )
    result = runner.invoke(app, ["search", str(npy), CORPUS[2], "-k", "1"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[lines.index(CORPUS[2]) + 1].split()[-1] == "2"  # its own row, shown by id


def test_an_empty_vector_file_is_refused_by_name(tmp_path):
    import json

    npy = tmp_path / "none.npy"
    np.save(npy, np.zeros((0, 4), dtype=np.float32))
    npy.with_suffix(".json").write_text(json.dumps({"valuelens": {}, "ids": []}))
    with pytest.raises(ValueLensError, match="holds no vectors"):
        read_vectors(npy)


def test_check_output_accepts_a_new_nested_folder(tmp_path):
    check_output(tmp_path / "a" / "b" / "v.parquet")  # created when written
    with pytest.raises(ValueLensError, match="unsupported output"):
        check_output(tmp_path / "v")


def test_eval_and_sweep_check_the_split_and_recipes_before_any_model_loads(no_model_load):
    """Before: ``eval stsb --split nosplit`` printed a traceback after loading the model, and ``sweep
    --recipe bogus`` loaded the model before refusing the recipe."""
    _one_line_error(runner.invoke(app, ["eval", "stsb", "--split", "nosplit"]), "no split 'nosplit'", "'dev'")
    _one_line_error(runner.invoke(app, ["sweep", "stsb", "--split", "nosplit"]), "no split 'nosplit'")
    _one_line_error(runner.invoke(app, ["sweep", "stsb", "--recipe", "va,bogus"]), "unknown recipe 'bogus'")
