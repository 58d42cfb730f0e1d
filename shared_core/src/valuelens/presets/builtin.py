"""The post-processing states shipped in ``valuelens/presets/states/``, named ``"builtin:NAME"``, and the
grammar of ``"fit:KIND[:K][@FILE]"``, a state the encoder fits at first use (:mod:`valuelens.states`).

Usage: ``builtin_path("smollm2-135m-best-v3")`` → the ``.safetensors`` file (``ConfigError`` if absent);
``FitRequest.parse("fit:abtt:2")`` → ``FitRequest(kind="abtt", k=2, corpus=None)``.

Compatibility rule: a state stays in the package as long as a preset names it, and after that as long
as a spec saved with it may exist (a saved sentence-transformers ``ValuePooling`` config, a JSON spec,
the spec stored with ``valuelens embed`` output all name ``builtin:NAME``). Such retired states are
listed in :data:`RETIRED_STATES`; every shipped state is named by a preset or listed there (a test
checks both ways), so a state nobody can reference is not shipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from valuelens.errors import ConfigError

__all__ = [
    "BUILTIN_PREFIX",
    "FIT_KINDS",
    "FIT_PREFIX",
    "RETIRED_STATES",
    "FitRequest",
    "builtin_path",
    "shipped_states",
]

BUILTIN_PREFIX = "builtin:"
#: A ``postprocess`` reference fitted by the encoder at first use (``fit:abtt:2``: :mod:`valuelens.states`).
FIT_PREFIX = "fit:"
#: The kinds a first-use fit may take (``whiten`` needs more texts than dimensions: fit it with ``valuelens fit``).
FIT_KINDS = ("center", "abtt", "standardize")

#: States no preset names any more, kept for the specs saved with them (earlier presets).
RETIRED_STATES = (
    "smollm2-135m-best",  # round 5 best
    "smollm2-135m-sts",  # round 5 sts
    "smollm2-135m-best-v2",  # round 6 best
    "qwen2.5-coder-0.5b-sts",  # round 4 sts
    "smollm2-135m-best-v3",  # round 8 best, replaced by the tuned best
    "gemma3-270m-best",  # round 4 best, replaced by the tuned best
    "smollm2-135m-best-v4",  # the first tuned best, replaced by a fresh valuelens tune run
    "gemma3-270m-best-v2",  # the first tuned best, replaced by a fresh valuelens tune run
    "smollm2-135m-sts-v2",  # round 6 sts, replaced by valuelens tune --objective sts
    "gemma3-270m-sts",  # round 4 sts, replaced by valuelens tune --objective sts
    "qwen2.5-coder-0.5b-sts-v2",  # round 7 sts, replaced by valuelens tune --objective sts
    "smollm2-135m-best-v5",  # the tuned best before tune's lexical stage
    "gemma3-270m-best-v3",  # the tuned best before tune's lexical stage
    "qwen2.5-coder-0.5b-best",  # the tuned best before tune's lexical stage
    "smollm2-135m-best-v6",  # the tuned best with the lexical part under the package-corpus idf
    "gemma3-270m-best-v4",  # the tuned best with the lexical part under the package-corpus idf (same tensors as v5)
    "qwen2.5-coder-0.5b-best-v2",  # the tuned best with the lexical part under the package-corpus idf
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


@dataclass(frozen=True)
class FitRequest:
    """A parsed ``fit:KIND[:K][@FILE]`` reference."""

    kind: str
    k: int
    corpus: Path | None = None

    @classmethod
    def parse(cls, reference: str) -> FitRequest | None:
        """The request ``reference`` makes, ``None`` when it is not a ``fit:`` reference; ``ConfigError``
        naming what is wrong with a malformed one."""
        if not reference.startswith(FIT_PREFIX):
            return None
        body, at, file = reference[len(FIT_PREFIX) :].partition("@")
        kind, _, count = body.partition(":")
        usage = "write fit:center, fit:abtt:K (K components), fit:standardize, each optionally @FILE"
        if kind not in FIT_KINDS:
            msg = f"postprocess={reference!r}: unknown kind {kind!r} to fit at first use; {usage}"
            raise ConfigError(msg)
        if kind == "abtt":
            if not count.isdigit() or int(count) < 1:
                msg = f"postprocess={reference!r}: abtt needs its component count K >= 1; {usage}"
                raise ConfigError(msg)
        elif count:
            msg = f"postprocess={reference!r}: {kind} takes no component count; {usage}"
            raise ConfigError(msg)
        if at and not file.strip():
            msg = f"postprocess={reference!r}: '@' must be followed by a text file; {usage}"
            raise ConfigError(msg)
        return cls(kind, int(count) if count else 1, Path(file.strip()).expanduser() if at else None)
