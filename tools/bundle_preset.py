"""Ship a preset folder written by ``valuelens tune`` as a bundled preset of the package.

Usage::

    valuelens tune smollm2-135m -o tuned/smollm2                       # objective balanced → "best"
    python tools/bundle_preset.py tuned/smollm2 --state smollm2-135m-best-v5

The folder's ``preset.json`` goes to ``valuelens/presets/tuned/<model>-<preset>/`` unchanged but for its
fitted state, which is copied into ``valuelens/presets/states/`` as ``--state`` and named there as
``builtin:<state>`` (a name saved specs keep pointing at, so a shipped state is never overwritten: give
a regenerated preset a new name and list the old one in ``RETIRED_STATES``; a rerun that fitted the same
state, tensors and metadata, keeps the shipped name). The preset name follows
the objective (:data:`valuelens.presets.table.TUNED_NAMES`); :data:`valuelens.presets.PRESETS` reads
every folder under ``tuned/`` at import.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
from safetensors import safe_open

from valuelens.errors import ConfigError
from valuelens.presets.builtin import BUILTIN_PREFIX
from valuelens.presets.folder import PresetFolder
from valuelens.presets.table import TUNED_NAMES

PACKAGE_PRESETS = Path(__file__).resolve().parents[1] / "shared_core" / "src" / "valuelens" / "presets"


def bundle(folder: str | Path, state: str, into: Path = PACKAGE_PRESETS) -> Path:
    """Copy the tuned ``folder`` into the presets package ``into``; returns the bundled folder."""
    preset = PresetFolder.read(folder)
    if preset.objective not in TUNED_NAMES:
        msg = f"{preset.path}: objective {preset.objective!r} has no bundled preset name (one of {sorted(TUNED_NAMES)})"
        raise ConfigError(msg)
    spec = dict(preset.spec)
    source = preset.state_file()
    if source is not None:
        target = into / "states" / f"{state}.safetensors"
        if not target.exists():
            shutil.copyfile(source, target)
        elif not _same_state(source, target):
            msg = f"{target} exists: a shipped state keeps its name for the specs saved with it; choose a new name"
            raise ConfigError(msg)
        spec["postprocess"] = BUILTIN_PREFIX + state
    path = into / "tuned" / f"{preset.model}-{TUNED_NAMES[preset.objective]}"
    replace(preset, path=path, spec=spec).write()
    return path


def _same_state(a: Path, b: Path) -> bool:
    """Whether two state files hold the same tensors and metadata (their bytes may differ in order)."""
    with safe_open(a, "np") as x, safe_open(b, "np") as y:
        if x.metadata() != y.metadata() or set(x.keys()) != set(y.keys()):
            return False
        return all(np.array_equal(x.get_tensor(k), y.get_tensor(k)) for k in x.keys())  # noqa: SIM118


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a folder written by `valuelens tune MODEL -o DIR`")
    parser.add_argument("--state", required=True, help="the new built-in state's name (builtin:NAME)")
    args = parser.parse_args()
    print(bundle(args.folder, args.state))


if __name__ == "__main__":
    main()
