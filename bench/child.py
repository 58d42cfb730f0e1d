"""One benchmark row in a fresh process: ``python -m bench... --one ...`` run from the repository root,
its last stdout line read as JSON.

Usage: ``result = run_child(["-m", "bench.dtype", "--one", model, dtype])`` → the row's dict, or
``{"failed": "rc=1: <last stderr line>"}`` when the child fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from bench.texts import ROOT

__all__ = ["run_child"]


def run_child(args: Sequence[str], *, timeout: float | None = None) -> dict[str, Any]:
    """Run ``python ARGS`` in the repository root (``bench`` importable) and return its last stdout line
    as a dict; on failure ``{"failed": "rc=N: LAST STDERR LINE"}``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"failed": f"rc={done.returncode}: {tail}"}
