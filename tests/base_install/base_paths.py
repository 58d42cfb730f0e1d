"""Every path a base install (``pip install valuelens``, no extras) promises, run as a script.

Usage: ``python base_paths.py MODEL_FOLDER WORK_FOLDER [--block-extras]``; it prints ``BASE OK`` last.
With ``--block-extras`` the extras' packages cannot be imported (``sys.modules[name] = None``: an import
raises ``ModuleNotFoundError`` and ``importlib.util.find_spec`` answers ``None``, as when they are not
installed), so the script proves the same in any environment; ``tests/base_install`` runs it so, and in
a fresh virtual environment with the base install alone (slow tier).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

#: The import names of every extra's packages (shared_core/pyproject.toml's optional dependencies) and
#: the adapters' hosts.
EXTRAS = (
    "scipy",
    "sklearn",
    "pandas",
    "pyarrow",
    "matplotlib",
    "gguf",
    "accelerate",
    "ray",
    "fastapi",
    "starlette",
    "uvicorn",
    "prometheus_client",
    "orjson",
    "mteb",
    "datasets",
    "sentence_transformers",
    "langchain_core",
    "llama_index",
)


def block() -> None:
    for name in EXTRAS:
        sys.modules[name] = None  # type: ignore[assignment]


@dataclass
class Ran:
    """What a command line run in this process printed, and its exit code."""

    returncode: int
    stdout: str
    stderr: str


def cli(*args: str) -> Ran:
    """``valuelens ARGS`` in this process (under the same blocker): its output and exit code."""
    from valuelens.cli import app

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            app(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Ran(code, out.getvalue(), err.getvalue())


def main(model: str, work: Path, *, blocked: bool) -> None:
    if blocked:
        block()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    import numpy as np

    import valuelens
    from valuelens import Encoder

    texts = [f"Text number {i} is about {topic}." for i, topic in enumerate(["cats", "rain", "stocks"] * 6)]
    own = work / "mine.txt"
    own.write_text("\n".join(texts) + "\n", encoding="utf-8")
    folder = work / "docs"
    folder.mkdir(exist_ok=True)
    for i, text in enumerate(texts[:12]):
        (folder / f"{i:02d}.md").write_text(text * 3, encoding="utf-8")

    # the untuned rule (first-use abtt on the package's corpus, the word-frequency lexical part) and
    # every piece of advice its log line gives that a base install can follow
    best = Encoder.from_pretrained(model, preset="best")
    assert best.postprocess is not None and best.lexical is not None, best
    vectors = best.encode(texts[:4], normalize=True)
    queries = best.encode_query(texts[:2], normalize=True)
    assert np.isfinite(vectors).all() and np.isfinite(queries).all()
    for reference in (f"fit:abtt:2@{own}", f"fit:center@{own}", f"fit:standardize@{folder}"):
        fitted = Encoder.from_pretrained(model, preset="untuned", postprocess=reference)
        assert np.isfinite(fitted.encode(texts[:3])).all(), reference
    lexical = Encoder.from_pretrained(model, recipe="va", lexical=0.3, lexical_corpus=str(own))
    assert np.isfinite(lexical.encode(texts[:3])).all()
    chunked = Encoder.from_pretrained(model, recipe="va", max_length=8, long_text="chunk")
    assert np.isfinite(chunked.encode([" ".join(texts)])).all()
    state = valuelens.fit_texts(
        Encoder.from_pretrained(model, recipe="va"), valuelens.unlabeled_texts(own), "abtt", 1
    )
    state.save(work / "state.safetensors")
    saved = Encoder.from_pretrained(model, recipe="va", postprocess=str(work / "state.safetensors"))
    assert saved.encode(texts[:2]).shape == (2, saved.dimension)

    # the command line: what runs, and one line naming the extra for what does not
    out = work / "v.npy"
    done = cli("embed", str(own), "-o", str(out), "--model", model, "--preset", "untuned")
    assert done.returncode == 0, done.stderr[-3000:]
    done = cli("search", str(out), "cats", "-k", "2")
    assert done.returncode == 0 and "cats" in done.stdout, done.stderr[-3000:]
    refused = {
        (
            "embed",
            str(own),
            "-o",
            str(work / "v.parquet"),
            "--model",
            model,
        ): "writing .parquet vectors needs the eval extra",
        ("tune", model, "-o", str(work / "t")): "valuelens tune needs the eval extra",
        ("eval", "stsb", "--model", model): "valuelens eval needs the eval extra",
    }
    refused[("serve", "--model", model, "--port", "0")] = "valuelens serve needs the serve extra"
    for args, message in refused.items():
        done = cli(*args)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and lines and message in lines[-1], (args, done.stderr[-3000:])
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert cli("--help").returncode == 0
    print(
        json.dumps({"dimension": best.dimension, "modules": sorted(m for m in EXTRAS if sys.modules.get(m))})
    )
    print("BASE OK")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), blocked="--block-extras" in sys.argv[3:])
