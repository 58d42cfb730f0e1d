"""The core's import graph, read with ``ast`` (nothing is imported): no cycle, function-level imports
included; no core module reaching up into the layers above it (tuning, evaluation, server, analysis,
the command line); no imports inside functions where layering should hold (issue 27: post-processing,
presets and the encoder used to import each other lazily); and the encoder depended on by nothing below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import valuelens

ROOT = Path(valuelens.__file__).parent

#: Modules that import valuelens modules at the top only (function-level imports are for optional
#: dependencies), and between which no import of any kind (lazy, TYPE_CHECKING) may form a cycle.
LAYERED = (
    "valuelens.config",
    "valuelens.layers",
    "valuelens.io",
    "valuelens.postprocess",
    "valuelens.fitting",
    "valuelens.presets",
    "valuelens.presets.bands",
    "valuelens.presets.builtin",
    "valuelens.presets.resolution",
    "valuelens.presets.table",
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, *, top_only: bool, typing: bool | None = None) -> set[str]:
    """The valuelens modules ``name`` imports: at the top (``top_only``: outside functions), or
    anywhere; ``if TYPE_CHECKING:`` imports count when ``typing`` (default: ``not top_only``)."""
    typing = not top_only if typing is None else typing
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(module: str, names: list[str]) -> None:
        for item in names:
            sub = f"{module}.{item}"
            found.add(sub if sub in MODULES else module)

    def visit(node: ast.AST) -> None:
        if top_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "valuelens")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([module] if module else [])])
            if module.split(".")[0] == "valuelens":
                add(module, [a.name for a in node.names])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in MODULES and m != name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path, or ``None``."""
    state: dict[str, int] = {}
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := walk(start)):
            return found
    return None


#: The layers above the core: what uses the encoder (and what a base install may lack).
UPPER = ("valuelens.tuning", "valuelens.evaluation", "valuelens.server", "valuelens.analysis")
UPPER_MODULES = ("valuelens.cli", "valuelens.options", "valuelens.__main__")
#: Above the core too, beside the encoder: the adapters' pydantic fields, the file and Ray jobs, variants.
BESIDE = ("valuelens.settings", "valuelens.embedding_job", "valuelens.distributed", "valuelens.variants")


def _upper(name: str) -> bool:
    return name in UPPER_MODULES or any(name == p or name.startswith(p + ".") for p in UPPER)


CORE = sorted(name for name in MODULES if not _upper(name) and name not in BESIDE and name != "valuelens")


def test_the_graph_sees_the_modules_that_matter():
    assert set(LAYERED) <= set(MODULES)
    assert "valuelens.presets.bands" in _imports("valuelens.layers", top_only=True)
    assert {"valuelens.composition", "valuelens.states", "valuelens.forward"} <= _imports(
        "valuelens.encoder", top_only=True
    )
    assert "valuelens.tuning.run" in MODULES and "valuelens.states" in CORE


def test_no_import_cycle_among_the_modules_even_lazily():
    # a package's __init__ loads its names lazily (valuelens.lazy): an import of a name from it is no edge
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    graph = {name: _imports(name, top_only=False, typing=False) - packages for name in MODULES}
    assert _cycle(graph) is None


@pytest.mark.parametrize("name", CORE)
def test_core_modules_do_not_reach_into_the_layers_above(name):
    above = {m for m in _imports(name, top_only=False) if _upper(m) or m in BESIDE}
    assert not above, f"{name} imports {sorted(above)}"


@pytest.mark.parametrize(
    "name",
    [
        "valuelens.batching",
        "valuelens.chunking",
        "valuelens.fitting",
        "valuelens.lexical",
        "valuelens.states",
    ],
)
def test_the_pieces_depend_on_protocols_not_on_the_encoder(name):
    assert "valuelens.encoder" not in _imports(name, top_only=False)


def test_postprocess_presets_and_encoder_do_not_import_each_other_in_a_cycle_even_lazily():
    core = {*LAYERED, "valuelens.encoder"}
    graph = {name: _imports(name, top_only=False) & core for name in core}
    assert _cycle(graph) is None
    assert "valuelens.encoder" not in _imports("valuelens.postprocess", top_only=False)
    assert not {m for m in _imports("valuelens.presets", top_only=False) if m != "valuelens.errors"} - {
        f"valuelens.presets.{sub}" for sub in ("bands", "builtin", "table")
    }  # the package itself holds data only: valuelens.layers and valuelens.postprocess read it


@pytest.mark.parametrize("name", LAYERED)
def test_layered_modules_import_valuelens_at_the_top_only(name):
    assert _imports(name, top_only=False) == _imports(name, top_only=True, typing=True)
