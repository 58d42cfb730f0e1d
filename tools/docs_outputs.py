"""Keep the docs true: the field table of docs/fields.md and the printed outputs of the adapter pages.

Usage::

    python tools/docs_outputs.py --check          # run every snippet that has an output block, compare
    python tools/docs_outputs.py --write          # rewrite the output blocks and the field table in place
    python tools/docs_outputs.py --write README.md docs/langchain.md   # only these pages

A snippet is a ```` ```python ```` block followed by a paragraph that starts with ``Output`` and a
fenced block: that block is what the snippet prints (stdout, run on CPU with the bundled model). The
comparison takes every number within a tolerance (``1e-3``, or one unit of the last digit printed)
and the rest of the text exactly. The snippets of one page run in one namespace, in order, so a later
one may use what an earlier one built. ``tests/test_docs.py`` runs the check (marked slow); the field
table (``--write`` regenerates it from ``valuelens.settings.EncoderSettings``) is checked by the fast
``tests/test_fields.py``.

Prose that quotes an output: a paragraph right after a ``<!-- quotes-output -->`` line may only quote
numbers that an output block of the same page shows (within one unit of the quoted number's last digit,
or the tolerance): a number written in the text does not drift from the output it describes.
Inline code and link targets are not quotes; a range takes an en dash (``0.61–0.64``), a minus may be
``-`` or ``−``. Both ``--check`` and ``--write`` report the quotes the output blocks no longer show;
the fast ``tests/test_docs.py`` checks them without running anything.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The pages whose printed outputs are checked.
PAGES = ("README.md", "docs/sentence-transformers.md", "docs/langchain.md", "docs/llama-index.md")
FIELDS_PAGE = "docs/fields.md"
TABLE_START, TABLE_END = "<!-- fields:start -->", "<!-- fields:end -->"
TOLERANCE = 1e-3

_SNIPPET = re.compile(
    r"```python\n(?P<code>.*?)```\n\n(?P<intro>Output[^\n]*(?:\n[^\n`][^\n]*)*)\n\n```(?P<lang>[a-z]*)\n"
    r"(?P<out>.*?)```",
    re.S,
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
QUOTES_MARK = "<!-- quotes-output -->"
#: A number in prose: not part of a word or name (``L6``, ``v2``, ``135M``), sentence dots left out.
_PROSE_NUMBER = re.compile(r"(?<![\w.])[-−]?\d+(?:\.\d+)?(?![\w]|\.\d)")
_INLINE = re.compile(r"`[^`\n]*`|\]\([^)]*\)")  # inline code, a link's target


@dataclass(frozen=True)
class Snippet:
    """A python block of a page and the output block that follows it (``span``: the output's offsets)."""

    code: str
    output: str
    span: tuple[int, int]


def snippets(text: str) -> list[Snippet]:
    """The snippets of a page's text that have an output block, in order."""
    return [Snippet(m["code"], m["out"], m.span("out")) for m in _SNIPPET.finditer(text)]


def run_page(text: str, workdir: str | os.PathLike[str]) -> list[str]:
    """Run each snippet of a page (one namespace, in ``workdir``) and return what each printed."""
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    printed = []
    here = os.getcwd()
    os.chdir(workdir)
    try:
        for snippet in snippets(text):
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                exec(compile(snippet.code, "<docs>", "exec"), namespace)
            printed.append(buffer.getvalue())
    finally:
        os.chdir(here)
    return printed


def differences(expected: str, actual: str, tolerance: float = TOLERANCE) -> list[str]:
    """How ``actual`` differs from ``expected``: numbers beyond the tolerance, any other text."""
    found = []
    want_lines, got_lines = expected.strip().splitlines(), actual.strip().splitlines()
    if len(want_lines) != len(got_lines):
        return [f"{len(got_lines)} lines printed, the page shows {len(want_lines)}:\n{actual}"]
    for want, got in zip(want_lines, got_lines, strict=True):
        want_numbers, got_numbers = _NUMBER.findall(want), _NUMBER.findall(got)
        if _NUMBER.sub("#", want) != _NUMBER.sub("#", got) or len(want_numbers) != len(got_numbers):
            found.append(f"printed {got!r}, the page shows {want!r}")
            continue
        for a, b in zip(want_numbers, got_numbers, strict=True):
            digits = len(a.split(".")[1]) if "." in a and "e" not in a else 0
            if abs(float(a) - float(b)) > max(tolerance, 10.0**-digits) + 1e-12:
                found.append(f"printed {got!r}, the page shows {want!r} ({b} vs {a})")
    return found


def quoting_paragraphs(text: str) -> list[str]:
    """The paragraphs of a page marked as quoting its outputs: each one right after a ``QUOTES_MARK`` line."""
    found = []
    for part in text.split(QUOTES_MARK)[1:]:
        found.append(part.lstrip("\n").split("\n\n", 1)[0])
    return found


def quote_differences(text: str, tolerance: float = TOLERANCE) -> list[str]:
    """The numbers a marked paragraph of ``text`` quotes that no output block of ``text`` shows."""
    shown = [float(n) for snippet in snippets(text) for n in _NUMBER.findall(snippet.output)]
    found = []
    for paragraph in quoting_paragraphs(text):
        for quoted in _PROSE_NUMBER.findall(_INLINE.sub(" ", paragraph)):
            value = float(quoted.replace("−", "-"))
            digits = len(quoted.split(".")[1]) if "." in quoted else 0
            if not any(abs(value - s) <= max(tolerance, 10.0**-digits) + 1e-12 for s in shown):
                found.append(f"the text quotes {quoted}, which no output block of the page shows")
    return found


def fields_table() -> str:
    """The table of docs/fields.md: every spec field, ``preset`` and the load options."""
    from valuelens.settings import EncoderSettings

    rows = ["| field | default | meaning |", "|---|---|---|"]
    for name, field in EncoderSettings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        shown = json.dumps(default) if isinstance(default, str) else repr(default)
        description = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{name}` | `{shown}` | {description} |")
    return "\n".join(rows) + "\n"


def with_fields_table(text: str) -> str:
    """``text`` (docs/fields.md) with the generated table between its markers."""
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    return text[:start] + "\n" + fields_table() + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare the printed outputs with the pages")
    mode.add_argument("--write", action="store_true", help="rewrite the output blocks and the field table")
    parser.add_argument("pages", nargs="*", default=list(PAGES), help="pages relative to the repository")
    args = parser.parse_args(argv)
    failed = False
    if args.write:
        page = ROOT / FIELDS_PAGE
        page.write_text(with_fields_table(page.read_text(encoding="utf-8")), encoding="utf-8")
    for name in args.pages:
        page = ROOT / name
        text = page.read_text(encoding="utf-8")
        with tempfile.TemporaryDirectory() as workdir:
            printed = run_page(text, workdir)
        found = snippets(text)
        if args.write:
            for snippet, out in reversed(list(zip(found, printed, strict=True))):
                start, end = snippet.span
                text = text[:start] + out + text[end:]
            page.write_text(text, encoding="utf-8")
            print(f"{name}: {len(found)} output block(s) written")
        else:
            for i, (snippet, out) in enumerate(zip(found, printed, strict=True)):
                for line in differences(snippet.output, out):
                    failed = True
                    print(f"{name}, snippet {i + 1}: {line}")
            print(f"{name}: {len(found)} output block(s) checked")
        for line in quote_differences(text):  # the text against the blocks as they now are
            failed = True
            print(f"{name}: {line} (edit the text after {QUOTES_MARK})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
