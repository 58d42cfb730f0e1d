"""The command line reads the spec: one option per :class:`valuelens.EncoderConfig` field, generated from
the field list (:mod:`valuelens.options`), on every command that builds an encoder; and it starts at
once: ``--help`` and argument errors import neither torch nor transformers nor any extra."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from valuelens import cli
from valuelens.config import FIELDS, EncoderConfig, field_descriptions
from valuelens.options import NONE, command_spec, spec_option_names
from valuelens.server.command import serve
from valuelens.tuning.command import FIXED_FIELDS, tune_command
from valuelens.tuning.search import CHOSEN_FIELDS

runner = CliRunner()

#: Modules that --help must not import: the model stack and every extra's packages.
HEAVY = (
    "torch",
    "transformers",
    "scipy",
    "sklearn",
    "pandas",
    "pyarrow",
    "matplotlib",
    "ray",
    "fastapi",
    "uvicorn",
    "prometheus_client",
    "gguf",
    "accelerate",
)


def test_embed_serve_and_fit_take_every_spec_field():
    assert spec_option_names(cli.embed) == set(FIELDS)
    assert spec_option_names(serve) == set(FIELDS)
    assert spec_option_names(cli.fit) == set(FIELDS) - {"postprocess"}  # it fits the raw vectors


def test_search_takes_the_query_side_and_tune_accounts_for_every_field():
    assert spec_option_names(cli.search) == set(cli.QUERY_FIELDS)
    assert spec_option_names(tune_command) == set(FIXED_FIELDS)
    assert not set(FIXED_FIELDS) & set(CHOSEN_FIELDS)
    assert set(CHOSEN_FIELDS) <= set(FIELDS)


@pytest.mark.parametrize("command", ["embed", "serve", "fit"])
def test_help_lists_every_option_with_its_field_description(command):
    result = runner.invoke(cli.app, [command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    for name in FIELDS:
        if command == "fit" and name == "postprocess":
            continue
        assert "--" + name.replace("_", "-") in result.output, name
    # the field's docstring, as typer shows it
    opening = " ".join(field_descriptions()["lexical"].split()[:6])
    assert opening and opening in " ".join(result.output.split()), opening


def test_options_parse_into_the_spec_and_none_overrides_a_preset(tiny_checkpoint):
    spec = {name: None for name in FIELDS}
    parsed = {
        "lexical": 0.3,
        "lexical_query": 0.9,
        "query_template": "futureeol",
        "fusion": ["hs"],
        "layers": "1-2",
        "drop_prefix": False,
    }
    config = command_spec(str(tiny_checkpoint), None, None, {**spec, **parsed})
    assert (config.lexical, config.lexical_query, config.query_template) == (0.3, 0.9, "futureeol")
    assert [part.recipe for part in config.fusion] == ["hs"]
    best = command_spec(str(tiny_checkpoint), "untuned", None, spec)
    assert best.lexical is not None and best.postprocess is not None
    nones = {"lexical": NONE, "lexical_query": NONE, "postprocess": NONE}
    off = command_spec(str(tiny_checkpoint), "untuned", None, {**spec, **nones})
    assert off.lexical is None and off.postprocess is None
    back = {name: getattr(best, name) for name in nones}
    assert off.replace(**back) == best


def test_a_bad_value_is_refused_by_its_option_before_anything_loads(tmp_path):
    texts = tmp_path / "t.txt"
    texts.write_text("a text\n", encoding="utf-8")
    result = runner.invoke(cli.app, ["embed", str(texts), "-o", str(tmp_path / "v.npy"), "--lexical", "lots"])
    assert result.exit_code == 2
    assert "'lots' is not NUMBER or none" in result.output
    fusion = runner.invoke(
        cli.app,
        ["embed", str(texts), "-o", str(tmp_path / "v.npy"), "--fusion", '[{"recipe": "va"'],
    )
    assert fusion.exit_code == 2 and "is not RECIPES|JSON" in fusion.output


def test_a_config_file_and_options_merge(tmp_path, tiny_checkpoint):
    file = tmp_path / "spec.json"
    file.write_text(json.dumps({"recipe": "hs", "layers": [1], "lexical": 0.2}), encoding="utf-8")
    spec = {name: None for name in FIELDS} | {"lexical": NONE, "final_norm": True}
    config = command_spec(str(tiny_checkpoint), None, file, spec)
    assert config == EncoderConfig(recipe="hs", layers=(1,), final_norm=True)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["embed", "--help"],
        ["serve", "--help"],
        ["tune", "--help"],
        ["embed", "in.txt"],  # an argument error: -o is missing
        ["embed", "in.txt", "-o", "v.npy", "--long-text", "fold"],  # a bad choice
        ["search", "--lexical-query", "x", "v.parquet", "q"],  # a bad number
    ],
)
def test_the_command_line_answers_without_importing_torch_or_an_extra(args, tmp_path):
    probe = (
        "import sys\n"
        "from valuelens.cli import app\n"
        "try:\n"
        f"    app({args!r})\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "heavy = sorted(m for m in " + repr(HEAVY) + " if m in sys.modules)\n"
        "print('HEAVY', heavy, 'CODE', code, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("HEAVY [] CODE"), done.stderr[-2000:]
    assert last.endswith("CODE 0") == (args[-1] == "--help"), last


def test_import_valuelens_imports_no_model_code_or_extra():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, valuelens; print(sorted(m for m in " + repr(HEAVY) + " if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == "[]", done.stderr
