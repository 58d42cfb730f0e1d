"""``pip install valuelens`` without extras is a tested configuration: every core path (presets, first-use
fits on the package's corpus and on a file of one's own, the lexical part, chunking, the command line's
embed and search) works, and what needs an extra says which in one line (tests/base_install/base_paths.py).

Fast tier: the script runs here with every extra's package made unimportable. Slow tier: it runs in a
fresh virtual environment holding the base install alone (torch, then ``shared_core``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("base_paths.py")
ROOT = Path(__file__).resolve().parents[2]


def _run(python: str, model: str, work: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VALUELENS_FIT_CACHE": str(work / "fit-cache"), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [python, str(SCRIPT), model, str(work), *extra],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
        cwd=work,
    )


def test_every_core_path_runs_without_the_extras(tiny_checkpoint, tmp_path):
    done = _run(sys.executable, tiny_checkpoint, tmp_path, "--block-extras")
    assert done.returncode == 0 and done.stdout.strip().endswith("BASE OK"), done.stderr[-4000:]
    assert '"modules": []' in done.stdout  # no extra's package was imported along the way


@pytest.mark.slow
def test_a_fresh_virtual_environment_with_the_base_install_runs_them(tiny_checkpoint, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-compile", "-q"]
    torch = os.environ.get("VALUELENS_TEST_TORCH", "torch==2.13.0")  # the Makefile's pin (a CPU wheel here)
    for args in ([*torch.split()], [str(ROOT / "shared_core")]):
        done = subprocess.run([*pip, *args], capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-4000:]
    listed = subprocess.run([python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    names = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert "valuelens" in names and not names & {"scipy", "scikit-learn", "pyarrow", "fastapi", "gguf", "ray"}
    done = _run(python, tiny_checkpoint, tmp_path)
    assert done.returncode == 0 and done.stdout.strip().endswith("BASE OK"), done.stderr[-4000:]
