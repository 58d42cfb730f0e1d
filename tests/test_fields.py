"""The spec's fields are defined once: the adapters' fields, ValuePooling's keywords and docs/fields.md
agree with ``valuelens.EncoderConfig`` (name, default, description); misspelled fields get a hint."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import re
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from langchain_valuelens import ValueLensEmbeddings
from llama_index.embeddings.valuelens import ValueLensEmbedding
from valuelens.config import FIELDS, EncoderConfig, field_descriptions
from valuelens.settings import EncoderSettings
from valuelens_sentence_transformers import ValuePooling

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(EncoderConfig)}
SETTINGS_ONLY = ("preset", "device", "dtype")
ADAPTER_PAGES = ("docs/sentence-transformers.md", "docs/langchain.md", "docs/llama-index.md")


def _docs_outputs():
    """tools/docs_outputs.py as a module (tools/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("docs_outputs", ROOT / "tools" / "docs_outputs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("name", FIELDS)
def test_pydantic_field_matches_the_config(name):
    field = EncoderSettings.model_fields[name]
    assert _plain(field.get_default(call_default_factory=True)) == _plain(CONFIG_DEFAULTS[name])
    description = field_descriptions()[name]
    assert description and field.description == description
    assert field.frozen


@pytest.mark.parametrize("name", FIELDS)
def test_value_pooling_keyword_matches_the_config(name):
    parameter = inspect.signature(ValuePooling).parameters[name]
    assert _plain(parameter.default) == _plain(CONFIG_DEFAULTS[name])


def test_no_field_beyond_the_config():
    assert [n for n in EncoderSettings.model_fields if n not in SETTINGS_ONLY] == list(FIELDS)
    assert set(inspect.signature(ValuePooling).parameters) == {*FIELDS, "preset"}


FIELDS_PAGE = (ROOT / "docs" / "fields.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", [*FIELDS, *SETTINGS_ONLY])
def test_every_field_is_in_the_docs_table(name):
    assert re.search(rf"^\| `{name}` \| ", FIELDS_PAGE, re.M), f"docs/fields.md has no row for {name!r}"


def test_docs_table_is_the_generated_one():
    tool = _docs_outputs()
    assert tool.with_fields_table(FIELDS_PAGE) == FIELDS_PAGE, "run: python tools/docs_outputs.py --write"


@pytest.mark.parametrize("page", ADAPTER_PAGES)
def test_adapter_pages_link_the_table(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    assert "(fields.md)" in text
    assert re.search(r"unit length", text), f"{page} does not say whether its vectors are unit length"


@pytest.mark.parametrize("adapter", [ValueLensEmbeddings, ValueLensEmbedding, ValuePooling])
def test_adapter_docstrings_point_to_the_table(adapter):
    assert "docs/fields.md" in (adapter.__doc__ or "")


@pytest.mark.parametrize(
    ("adapter", "given", "meant"),
    [
        (ValueLensEmbeddings, "model_name", "model"),
        (ValueLensEmbeddings, "query_instruction", "query_prompt"),
        (ValueLensEmbeddings, "text_instruction", "document_prompt"),
        (ValueLensEmbeddings, "normalize_embeddings", "normalize"),
        (ValueLensEmbeddings, "torch_dtype", "dtype"),
        (ValueLensEmbeddings, "recipee", "recipe"),
        (ValueLensEmbedding, "model", "model_name"),
        (ValueLensEmbedding, "query_prompt", "query_instruction"),
        (ValueLensEmbedding, "document_prompt", "text_instruction"),
        (ValueLensEmbedding, "max_seq_length", "max_length"),
    ],
)
def test_other_spellings_name_the_right_one(adapter, given, meant):
    with pytest.raises(ValidationError, match=rf"has no field '{given}': did you mean '{meant}'\?"):
        adapter(**{given: "x"})


def test_host_option_dicts_are_explained():
    with pytest.raises(ValidationError, match=r"takes no 'encode_kwargs'"):
        ValueLensEmbeddings(encode_kwargs={"normalize_embeddings": True})


def test_a_name_far_from_every_field_still_gets_pydantics_error():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        ValueLensEmbeddings(zzz=1)
