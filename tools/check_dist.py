"""Check the built distributions: contents, metadata, and a clean install that imports and embeds.

Usage (after ``python -m build --outdir dist <project>`` for the four projects; ``make dist`` does both)::

    python tools/check_dist.py --dist dist --torch "torch==2.13.0"

For each of the four distributions it checks that ``dist/`` holds exactly one wheel and one sdist of
the version in its pyproject.toml, that the wheel has ``py.typed``, the license and the same
dependencies as the pyproject (and, for the LlamaIndex integration, no ``__init__.py`` in the
``llama_index`` namespace), that the sdist has the pyproject, README and ``py.typed``, and that neither
carries a benchmark set (docs/data.md). Then, per
distribution, it creates a fresh virtual environment in a temporary folder, installs torch first
(``--torch``: the CPU wheel on this machine's disk; a bare ``torch`` requirement would pull a CUDA
build), then the wheel together with the ``valuelens`` wheel from ``dist/`` (so the adapters never
take ``valuelens`` from PyPI; the check verifies where it came from), runs ``pip check``, and runs a
snippet outside the repository that builds a tiny random Llama offline and embeds two texts, for
the adapters through the host framework. ``python -m build`` builds each wheel from its sdist, so a
passing run also shows that the sdists are complete.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
#: the benchmark sets' folders (docs/data.md): no distribution may carry a file of them
BENCHMARK_SETS = ("stsb", "lee", "banking77", "emotion", "scifact")
_DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".tsv", ".csv", ".txt")


def benchmark_files(names: list[str]) -> list[str]:
    """The archive members that look like a benchmark set's data: a data file under a folder named for a set.

    Usage: ``benchmark_files(["pkg/stsb/test.jsonl", "pkg/x.py"])`` is ``["pkg/stsb/test.jsonl"]``.
    """
    found = []
    for name in names:
        parts = name.split("/")
        if any(part in BENCHMARK_SETS for part in parts[:-1]) and parts[-1].endswith(_DATA_SUFFIXES):
            found.append(name)
    return found


@dataclass(frozen=True)
class Project:
    """One distribution: its source folder and the snippet that embeds through it."""

    folder: str
    snippet: str

    @property
    def pyproject(self) -> dict:
        with (ROOT / self.folder / "pyproject.toml").open("rb") as file:
            return tomllib.load(file)

    @property
    def name(self) -> str:
        return self.pyproject["project"]["name"]

    @property
    def version(self) -> str:
        return self.pyproject["project"]["version"]

    @property
    def stem(self) -> str:
        """The file name prefix of its wheel and sdist (``langchain_valuelens-0.1.0``)."""
        return f"{canonicalize_name(self.name).replace('-', '_')}-{self.version}"


# A tiny random Llama and a byte-level BPE tokenizer trained on a few sentences (as tests/tiny_models.py
# builds them): nothing is downloaded. Defines `folder` (the saved model), `TEXTS` and `check(vectors)`.
PRELUDE = """
import math, tempfile, warnings
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

TEXTS = ["A man is playing a guitar.", "Someone plays music on a stage."]
CORPUS = TEXTS + ["The cat sits on the mat.", "Stocks fell sharply today amid fears of inflation."]
backend = Tokenizer(models.BPE(unk_token="<unk>"))
backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
backend.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=300, special_tokens=["<unk>", "<pad>", "<eos>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
)
backend.train_from_iterator(CORPUS * 10, trainer)
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
)
config = LlamaConfig(
    vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256,
)
torch.manual_seed(0)
folder = tempfile.mkdtemp(prefix="tiny-llama-")
LlamaForCausalLM(config).eval().save_pretrained(folder)
tokenizer.save_pretrained(folder)

def check(vectors):
    rows = [[float(x) for x in row] for row in vectors]
    assert len(rows) == 2 and len(rows[0]) == len(rows[1]) > 0, [len(r) for r in rows]
    assert all(math.isfinite(x) for row in rows for x in row), "non-finite values"
    assert rows[0] != rows[1], "two different texts got the same vector"
    print(f"embedded {len(rows)} texts into {len(rows[0])} dimensions")
"""

CORE = """
import valuelens
encoder = valuelens.Encoder.from_pretrained(folder, recipe="va", layers="all")
check(encoder.encode(TEXTS))
"""

SENTENCE_TRANSFORMERS = """
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Transformer
from valuelens_sentence_transformers import ValuePooling
model = SentenceTransformer(modules=[Transformer(folder), ValuePooling(recipe="va", layers="all")], device="cpu")
check(model.encode(TEXTS))
"""

LANGCHAIN = """
import valuelens
from langchain_valuelens import ValueLensEmbeddings
embeddings = ValueLensEmbeddings(model=valuelens.Encoder.from_pretrained(folder, recipe="va", layers="all"))
vectors = embeddings.embed_documents(TEXTS)
assert all(type(x) is float for row in vectors for x in row), "LangChain wants lists of Python floats"
query = embeddings.embed_query(TEXTS[0])
assert len(query) == len(vectors[0]) and all(type(x) is float for x in query), "bad embed_query result"
check(vectors)
"""

LLAMA_INDEX = """
import valuelens
from llama_index.embeddings.valuelens import ValueLensEmbedding
embedding = ValueLensEmbedding(encoder=valuelens.Encoder.from_pretrained(folder, recipe="va", layers="all"))
vectors = embedding.get_text_embedding_batch(TEXTS)
query = embedding.get_query_embedding(TEXTS[0])
assert len(query) == len(vectors[0]), "query and text embeddings differ in size"
check(vectors)
"""

PROJECTS = [
    Project("shared_core", CORE),
    Project("packages/sentence-transformers", SENTENCE_TRANSFORMERS),
    Project("packages/langchain", LANGCHAIN),
    Project("packages/llama-index", LLAMA_INDEX),
]
CORE_PROJECT = PROJECTS[0]


class CheckFailed(Exception):
    """One check of one distribution failed; the message says which and why."""


def _one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    if len(found) != 1:
        msg = f"expected exactly one {pattern} in {dist}, found {[p.name for p in found]}: run `make dist`"
        raise CheckFailed(msg)
    return found[0]


def check_artefacts(project: Project, dist: Path) -> Path:
    """Check the wheel's and sdist's contents and metadata; return the wheel."""
    wheel = _one(dist, f"{project.stem}-py3-none-any.whl")
    sdist = _one(dist, f"{project.stem}.tar.gz")
    declared = project.pyproject["project"]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = Parser().parsestr(archive.read(f"{project.stem}.dist-info/METADATA").decode())
    problems = []
    if not any(name.endswith("/py.typed") for name in names):
        problems.append("the wheel has no py.typed")
    if metadata.get("License-Expression") != declared["license"]:
        problems.append(
            f"License-Expression is {metadata.get('License-Expression')!r}, not {declared['license']!r}"
        )
    if not (metadata.get_payload() or metadata.get("Description")):
        problems.append("the wheel's METADATA has no description (README)")
    base = {str(Requirement(r)) for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r}
    wanted = {str(Requirement(r)) for r in declared.get("dependencies", [])}
    if base != wanted:
        problems.append(
            f"Requires-Dist {sorted(base)} differs from the pyproject's dependencies {sorted(wanted)}"
        )
    if project.name == "llama-index-embeddings-valuelens":
        shared = {"llama_index/__init__.py", "llama_index/embeddings/__init__.py"} & set(names)
        if shared:
            problems.append(f"the wheel ships {sorted(shared)}: it would break the llama_index namespace")
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in ("pyproject.toml", "PKG-INFO", declared["readme"]):
        if needed not in members:
            problems.append(f"the sdist has no {needed}")
    if not any(name.endswith("/py.typed") for name in members):
        problems.append("the sdist has no py.typed")
    carried = benchmark_files(names) + benchmark_files(sorted(members))
    if carried:
        problems.append(f"ships benchmark data (docs/data.md: never distributed): {carried[:3]}")
    if problems:
        msg = f"{project.name}: " + "; ".join(problems)
        raise CheckFailed(msg)
    return wheel


def _run(command: list[str], *, cwd: Path, env: dict[str, str], what: str) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
        msg = f"{what} failed (exit {done.returncode}): {shlex.join(command)}\n{tail}"
        raise CheckFailed(msg)
    return done.stdout


def check_install(project: Project, wheels: list[Path], dist: Path, torch: list[str], workdir: Path) -> str:
    """Install ``wheels`` into a fresh venv under ``workdir`` (torch first) and run the snippet there."""
    venv = workdir / "venv"
    # no PYTHONPATH, no user site, no source tree: only what the venv holds is importable
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env.update(
        PYTHONNOUSERSITE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false"
    )
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", str(venv)], cwd=workdir, env=env, what="creating the venv")
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    install = [*pip, "install", "--no-compile"]  # imports compile what they use; saves ~20 s per venv
    _run([*install, *torch], cwd=workdir, env=env, what=f"{project.name}: installing torch")
    _run(
        [*install, "--find-links", str(dist.resolve()), *(str(w.resolve()) for w in wheels)],
        cwd=workdir,
        env=env,
        what=f"{project.name}: installing {', '.join(w.name for w in wheels)}",
    )
    _run([*pip, "check"], cwd=workdir, env=env, what=f"{project.name}: pip check")
    origin = textwrap.dedent(
        f"""
        import json
        from importlib.metadata import distribution
        for name in {sorted({canonicalize_name(p.name) for p in (CORE_PROJECT, project)})!r}:
            url = json.loads(distribution(name).read_text("direct_url.json") or "{{}}").get("url", "")
            print(name, distribution(name).version, url, sep="\t")
        """
    )
    for line in _run(
        [python, "-c", origin], cwd=workdir, env=env, what="reading where it came from"
    ).splitlines():
        name, version, url = line.split("\t")
        if not url.startswith(dist.resolve().as_uri() + "/"):
            msg = f"{project.name}: {name} {version} was installed from {url or 'an index'}, not from {dist}/"
            raise CheckFailed(msg)
    script = workdir / "embed.py"
    script.write_text(PRELUDE + project.snippet)
    return _run([python, str(script)], cwd=workdir, env=env, what=f"{project.name}: embedding").strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="the folder python -m build wrote")
    parser.add_argument("--torch", default="torch==2.13.0", help="what to pip-install torch as, first")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary venvs (their path is printed)"
    )
    parser.add_argument("--only", action="append", help="check only this distribution (repeatable)")
    args = parser.parse_args(argv)
    projects = [p for p in PROJECTS if not args.only or p.name in args.only]
    failures = []
    started = time.perf_counter()
    try:
        wheels = {p.name: check_artefacts(p, args.dist) for p in PROJECTS}
    except CheckFailed as exc:
        print(f"FAIL {exc}", file=sys.stderr)
        return 1
    print(f"ok   artefacts: {len(PROJECTS)} wheels and {len(PROJECTS)} sdists in {args.dist}")
    workdir = Path(tempfile.mkdtemp(prefix="valuelens-check-dist-"))
    try:
        for project in projects:
            needed = (
                [wheels[CORE_PROJECT.name]]
                if project is CORE_PROJECT
                else [wheels[CORE_PROJECT.name], wheels[project.name]]
            )
            folder = workdir / canonicalize_name(project.name)
            folder.mkdir()
            tic = time.perf_counter()
            try:
                said = check_install(project, needed, args.dist, shlex.split(args.torch), folder)
            except CheckFailed as exc:
                failures.append(project.name)
                print(f"FAIL {exc}", file=sys.stderr)
                continue
            finally:
                if not args.keep:  # a venv with torch takes ~1.5 GB: free it before the next one
                    shutil.rmtree(folder, ignore_errors=True)
            print(
                f"ok   {project.name}: clean venv install, pip check, {said} ({time.perf_counter() - tic:.0f} s)"
            )
    finally:
        if args.keep:
            print(f"venvs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"{len(projects) - len(failures)}/{len(projects)} distributions passed in {time.perf_counter() - started:.0f} s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
