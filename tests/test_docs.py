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


QUOTING_PAGE = """```python
print("pair", 0.398, "unrelated", -0.021, 0.02)
```

Output:

```text
pair 0.398 unrelated -0.021 0.02
```

<!-- quotes-output -->
The pair scores 0.40 (`abtt:4` and [a link](v2/x.md) are no quotes), the unrelated texts −0.02 and
0.02, far below all-MiniLM-L6-v2 on STS-B.

Not marked: 0.43.
"""


def test_quoted_numbers_must_appear_in_the_output_blocks():
    """A marked paragraph may quote only what an output block shows, rounded to the digits it quotes."""
    tool = _docs_outputs()
    assert tool.quoting_paragraphs(QUOTING_PAGE)[0].startswith("The pair scores 0.40")
    assert not tool.quote_differences(QUOTING_PAGE)  # 0.40 ~ 0.398, −0.02 ~ -0.021; L6, v2 are names
    drifted = QUOTING_PAGE.replace("scores 0.40", "scores only about 0.43").replace("−0.02 and", "0.81 and")
    assert tool.quote_differences(drifted) == [
        "the text quotes 0.43, which no output block of the page shows",
        "the text quotes 0.81, which no output block of the page shows",
    ]
    assert tool.quote_differences(QUOTING_PAGE.replace("scores 0.40", "scores −0.40"))  # the sign counts


def test_the_pages_quote_only_numbers_their_output_blocks_show():
    """Pure text: the marked paragraphs of the pages with printed outputs against their output blocks
    (``python tools/docs_outputs.py --check`` reports the same)."""
    tool = _docs_outputs()
    assert tool.quoting_paragraphs((ROOT / "README.md").read_text(encoding="utf-8")), "README.md marks none"
    problems = [
        f"{page}: {line}"
        for page in tool.PAGES
        for line in tool.quote_differences((ROOT / page).read_text(encoding="utf-8"))
    ]
    assert not problems, "\n".join(problems)


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


#: The pages whose relative links are checked: the user docs and the research record.
LINKED_PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "research").rglob("*.md")),
]
_CODE = re.compile(r"^(```|~~~).*?^\1[^\n]*$|`[^`\n]*`", re.S | re.M)
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _anchors(text: str) -> set[str]:
    """The heading anchors of a page as GitHub makes them: lower case, punctuation dropped, spaces to
    hyphens, ``-1``, ``-2`` ... on repeats."""
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of a markdown page (code blocks and spans left out) whose file is missing, or
    whose ``#anchor`` names no heading of the markdown page it points to."""
    text = page.read_text(encoding="utf-8")
    problems = []
    for target in _LINK.findall(_CODE.sub("", text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            problems.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif (
            anchor
            and resolved.suffix == ".md"
            and anchor not in _anchors(resolved.read_text(encoding="utf-8"))
        ):
            problems.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return problems


def test_link_check_finds_missing_files_and_headings(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("# B page\n\n## The `best` preset: retrieval\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](sub/b.md) [ok](sub/b.md#the-best-preset-retrieval) ![img](sub/) [web](https://x.org/a.md)\n"
        "[gone](sub/c.md) [bad anchor](sub/b.md#nothing) `[code](nowhere.md)`\n\n```\n[code](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page, tmp_path) == [
        "a.md: sub/c.md (no such file)",
        "a.md: sub/b.md#nothing (no such heading)",
    ]


def test_relative_links_resolve():
    """Every relative link of README.md, docs/*.md and research/**/*.md names a file that exists (and a
    heading of it, for a markdown page with an ``#anchor``)."""
    problems = [line for page in LINKED_PAGES for line in broken_links(page)]
    assert not problems, "\n".join(problems)
