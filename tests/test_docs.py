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
