"""The four distributions' metadata agree: one version, one Python floor, one bound per shared dependency.

Usage: ``python -m pytest tests/test_packaging.py -q`` (fast: reads the pyproject.toml files only).
``make dist`` checks the built wheels and sdists themselves (tools/check_dist.py).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = {
    "valuelens": ROOT / "shared_core",
    "valuelens-sentence-transformers": ROOT / "packages" / "sentence-transformers",
    "langchain-valuelens": ROOT / "packages" / "langchain",
    "llama-index-embeddings-valuelens": ROOT / "packages" / "llama-index",
}
ADAPTERS = [name for name in PROJECTS if name != "valuelens"]
#: the host-framework majors the adapters are written against (docs: DESIGN §3)
PINNED = {"sentence-transformers": ">=6,<7", "transformers": ">=5,<6"}


def _project(name: str) -> dict:
    with (PROJECTS[name] / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def _requirements(name: str) -> list[tuple[str, Requirement]]:
    """``(where, requirement)`` for the dependencies and every extra of distribution ``name``."""
    project = _project(name)["project"]
    found = [("dependencies", Requirement(text)) for text in project.get("dependencies", [])]
    for extra, texts in project.get("optional-dependencies", {}).items():
        found += [(f"[{extra}]", Requirement(text)) for text in texts]
    return found


def _repo_requirements() -> list[tuple[str, Requirement]]:
    """The repository's own test requirements (requirements/test.txt), installed next to the extras."""
    lines = (ROOT / "requirements" / "test.txt").read_text().splitlines()
    texts = [line.split("#", 1)[0].strip() for line in lines]
    return [("requirements/test.txt", Requirement(text)) for text in texts if text]


def _all_requirements() -> dict[str, list[tuple[str, Requirement]]]:
    """Every requirement of the repository, by canonical project name."""
    by_name: dict[str, list[tuple[str, Requirement]]] = defaultdict(list)
    for name in PROJECTS:
        for where, req in _requirements(name):
            by_name[canonicalize_name(req.name)].append((f"{name} {where}", req))
    for where, req in _repo_requirements():
        by_name[canonicalize_name(req.name)].append((where, req))
    return by_name


def test_every_distribution_has_the_same_version_and_python_floor():
    versions = {name: _project(name)["project"]["version"] for name in PROJECTS}
    pythons = {name: _project(name)["project"]["requires-python"] for name in PROJECTS}
    assert len(set(versions.values())) == 1, f"versions differ: {versions}"
    assert len(set(pythons.values())) == 1, f"requires-python differs: {pythons}"


@pytest.mark.parametrize("name", ADAPTERS)
def test_every_adapter_depends_on_the_core_with_one_bound_that_admits_its_version(name):
    core_version = Version(_project("valuelens")["project"]["version"])
    on_core = [
        (where, req) for where, req in _requirements(name) if canonicalize_name(req.name) == "valuelens"
    ]
    assert any(where == "dependencies" for where, _ in on_core), f"{name} does not depend on valuelens"
    for where, req in on_core:
        assert req.specifier == SpecifierSet(">=0.1,<0.2"), (
            f"{name} {where}: {str(req)!r} should bound valuelens as 'valuelens>=0.1,<0.2' "
            "(the same bound in every adapter; move it on each minor release of the core)"
        )
        assert req.specifier.contains(core_version), (
            f"{name} {where}: {req} excludes valuelens {core_version}"
        )


def test_a_dependency_shared_by_several_places_has_the_same_bound_everywhere():
    conflicts = {}
    for project, found in _all_requirements().items():
        specifiers = {str(req.specifier) for _, req in found}
        if len(specifiers) > 1:
            conflicts[project] = [f"{where}: {req}" for where, req in found]
    assert not conflicts, f"one dependency, several bounds (use one everywhere): {conflicts}"


@pytest.mark.parametrize(("project", "bound"), sorted(PINNED.items()))
def test_host_frameworks_are_bounded_to_the_major_the_code_is_written_for(project, bound):
    found = _all_requirements().get(project, [])
    assert found, f"no distribution depends on {project}"
    for where, req in found:
        assert req.specifier == SpecifierSet(bound), f"{where}: {req} (expected {project}{bound})"


def test_no_test_extra_relists_a_runtime_dependency_with_another_bound():
    for name in PROJECTS:
        runtime = {
            canonicalize_name(req.name): req.specifier
            for where, req in _requirements(name)
            if where == "dependencies"
        }
        for where, req in _requirements(name):
            key = canonicalize_name(req.name)
            if where != "dependencies" and key in runtime:
                assert req.specifier == runtime[key], f"{name} {where}: {req} vs dependencies: {runtime[key]}"


@pytest.mark.parametrize("name", list(PROJECTS))
def test_every_distribution_ships_a_readme_py_typed_and_a_license(name):
    folder = PROJECTS[name]
    config = _project(name)
    project = config["project"]
    assert (folder / project["readme"]).is_file(), f"{name}: readme {project['readme']!r} is missing"
    assert isinstance(project.get("license"), str) and project["license"], f"{name}: no SPDX license"
    assert "Typing :: Typed" in project.get("classifiers", []), f"{name}: no 'Typing :: Typed' classifier"
    packages = config["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    marked = [
        path
        for path in folder.glob("src/**/py.typed")
        if any(path.is_relative_to(folder / p) for p in packages)
    ]
    assert marked, f"{name}: no py.typed under {packages}"


def test_the_llama_index_integration_keeps_the_namespace_layout():
    src = PROJECTS["llama-index-embeddings-valuelens"] / "src"
    assert not (src / "llama_index" / "__init__.py").exists()
    assert not (src / "llama_index" / "embeddings" / "__init__.py").exists()
    assert (src / "llama_index" / "embeddings" / "valuelens" / "__init__.py").is_file()


def _check_dist():
    """tools/check_dist.py as a module (tools/ is a folder of scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_dist", ROOT / "tools" / "check_dist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_dist", module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_file_check_flags_a_set_and_nothing_else():
    flag = _check_dist().benchmark_files
    assert flag(["valuelens/stsb/test.jsonl", "v-0.1/data/scifact/corpus.jsonl.gz", "x/lee/docs.jsonl"]) == [
        "valuelens/stsb/test.jsonl",
        "v-0.1/data/scifact/corpus.jsonl.gz",
        "x/lee/docs.jsonl",
    ]
    assert flag(["valuelens/presets/states/a.safetensors", "valuelens/demo/sentences.txt"]) == []


@pytest.mark.parametrize("name", list(PROJECTS))
def test_no_wheel_or_sdist_carries_a_benchmark_set(name, tmp_path):
    """Build the distribution (sdist, then the wheel from it, as `make dist` does) and list both."""
    import subprocess
    import tarfile
    import zipfile

    command = [
        sys.executable,
        "-m",
        "build",
        "--no-isolation",
        "--outdir",
        str(tmp_path),
        str(PROJECTS[name]),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    (sdist,) = tmp_path.glob("*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    with tarfile.open(sdist) as archive:
        names += archive.getnames()
    assert any(n.endswith(".py") for n in names)  # the listing is real
    assert _check_dist().benchmark_files(names) == []
