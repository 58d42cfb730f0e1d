"""The post-processing states shipped in ``valuelens/presets/states/``, named ``"builtin:NAME"``.

Usage: ``builtin_path("smollm2-135m-best-v3")`` → the ``.safetensors`` file (``ConfigError`` if absent).

Compatibility rule: a state stays in the package as long as a preset names it, and after that as long
as a spec saved with it may exist (a saved sentence-transformers ``ValuePooling`` config, a JSON spec,
the spec stored with ``valuelens embed`` output all name ``builtin:NAME``). Such retired states are
listed in :data:`RETIRED_STATES`; every shipped state is named by a preset or listed there (a test
checks both ways), so a state nobody can reference is not shipped.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from valuelens.errors import ConfigError

__all__ = ["BUILTIN_PREFIX", "RETIRED_STATES", "builtin_path", "shipped_states"]

BUILTIN_PREFIX = "builtin:"

#: States no preset names any more, kept for the specs saved with them (round 4/5/6 presets of 0.1.0).
RETIRED_STATES = (
    "smollm2-135m-best",  # round 5 best
    "smollm2-135m-sts",  # round 5 sts
    "smollm2-135m-best-v2",  # round 6 best
    "qwen2.5-coder-0.5b-sts",  # round 4 sts
)


def _states_dir() -> Path:
    return Path(str(resources.files(__package__ or "valuelens.presets") / "states"))


def shipped_states() -> list[str]:
    """The names of the states in the package (``builtin:NAME`` for each)."""
    return sorted(path.stem for path in _states_dir().glob("*.safetensors"))


def builtin_path(name: str) -> Path:
    """The file of the shipped state ``name`` (the part after ``builtin:``)."""
    path = _states_dir() / f"{name}.safetensors"
    if not path.is_file():
        msg = (
            f"no built-in post-processing state {name!r} (looked for {path}); the package ships "
            f"{', '.join(shipped_states())}"
        )
        raise ConfigError(msg)
    return path
