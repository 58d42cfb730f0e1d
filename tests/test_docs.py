"""Every documentation page starts with code that runs: execute the first Python block of each."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FIRST_BLOCKS = {
    page.relative_to(ROOT).as_posix(): match.group(1)
    for page in PAGES
    if (match := re.search(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S))
}


def test_every_page_with_code_is_covered():
    assert {
        "README.md",
        "docs/recipes.md",
        "docs/sentence-transformers.md",
        "docs/langchain.md",
        "docs/llama-index.md",
    } <= set(FIRST_BLOCKS)


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(FIRST_BLOCKS))
def test_first_code_block_runs(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(FIRST_BLOCKS[page], page, "exec"), {"__name__": "__docs__"})
    assert capsys.readouterr().out.strip(), f"the first example of {page} prints nothing"


def _docs_outputs():
    """tools/docs_outputs.py as a module (tools/ is a folder of scripts, not a package)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("docs_outputs", ROOT / "tools" / "docs_outputs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_pages_with_printed_outputs_have_snippets_for_them():
    tool = _docs_outputs()
    for page in tool.PAGES:
        assert tool.snippets((ROOT / page).read_text(encoding="utf-8")), f"{page} shows no printed output"


def test_output_comparison_tolerates_rounding_only():
    tool = _docs_outputs()
    assert not tool.differences("576 tensor([[0.7504, 0.9002]])", "576 tensor([[0.7508, 0.9000]])")
    assert tool.differences("576 tensor([[0.8053, 0.8939]])", "576 tensor([[0.7504, 0.9002]])")
    assert tool.differences("0.899  Jupiter", "0.911  Jupiter")
    assert tool.differences("True", "False")


@pytest.mark.slow
@pytest.mark.parametrize(
    "page", ["README.md", "docs/sentence-transformers.md", "docs/langchain.md", "docs/llama-index.md"]
)
def test_printed_outputs_match_the_page(page, tmp_path):
    """Each snippet with an output block prints what the page shows (numbers within 1e-3); regenerate
    with ``python tools/docs_outputs.py --write``."""
    tool = _docs_outputs()
    text = (ROOT / page).read_text(encoding="utf-8")
    printed = tool.run_page(text, tmp_path)
    problems = [
        line
        for snippet, out in zip(tool.snippets(text), printed, strict=True)
        for line in tool.differences(snippet.output, out)
    ]
    assert not problems, "\n".join(problems) + "\n(python tools/docs_outputs.py --write)"


def test_the_architecture_table_lists_every_core_module():
    """docs/architecture.md has a row for every module and subpackage of shared_core/src/valuelens."""
    core = ROOT / "shared_core" / "src" / "valuelens"
    table = {
        cell
        for line in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| ")
        for cell in re.findall(r"`([\w./]+)`", line.split("|")[2])
    }
    modules = {p.name for p in core.glob("*.py")} | {
        f"{p.name}/" for p in core.iterdir() if p.is_dir() and p.name != "__pycache__"
    }
    assert modules - table == set(), "modules missing from docs/architecture.md's table"
    assert table - modules == set(), "rows of docs/architecture.md's table name no module"
