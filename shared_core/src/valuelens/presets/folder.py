"""A tuned preset folder, as ``valuelens tune MODEL -o DIR`` writes it and ``preset=DIR`` reads it.

Usage::

    enc = Encoder.from_pretrained("smollm2-135m", preset="tuned/smollm2")   # any surface takes the folder
    folder = PresetFolder.read("tuned/smollm2")
    folder.fields(("llama", 30, 576))                                       # the spec's fields, paths absolute

A folder holds ``preset.json`` (:data:`PRESET_FILE`): the model it was tuned for (name and key), the
objective, and the spec's fields, whose ``postprocess`` names a state file in the folder by its bare
name (``"state.safetensors"``), so the folder can be moved or copied whole (or ``builtin:NAME``, or a
``fit:`` reference fitted at first use, :mod:`valuelens.states`). ``report.md`` (every
candidate's dev scores) and the ``cache/`` of ``valuelens tune`` sit beside it and are not read here.
A folder tuned for one model is refused for another (its layers and fitted state belong to the first).
Data only: imports nothing from valuelens but :mod:`valuelens.errors` and :mod:`valuelens.presets.builtin`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from valuelens.errors import ConfigError
from valuelens.presets.builtin import BUILTIN_PREFIX, FIT_PREFIX

__all__ = ["FORMAT", "PRESET_FILE", "PresetFolder", "is_preset_folder"]

#: The file that makes a folder a preset folder.
PRESET_FILE = "preset.json"
#: ``preset.json``'s ``"format"`` value (a later layout gets a new one).
FORMAT = "valuelens-preset/1"


def is_preset_folder(value: Any) -> bool:
    """Whether ``value`` is a path (``str`` or path-like) to a folder holding ``preset.json``."""
    if not isinstance(value, (str, os.PathLike)):
        return False
    return (Path(value).expanduser() / PRESET_FILE).is_file()


@dataclass(frozen=True)
class PresetFolder:
    """The contents of a preset folder's ``preset.json`` (see the module docstring)."""

    path: Path
    model: str
    model_key: tuple[str, int, int]
    spec: Mapping[str, Any]
    objective: str = "balanced"
    info: Mapping[str, Any] = field(default_factory=dict)
    """Anything else ``valuelens tune`` recorded (dev scores, cost, data), shown in its report."""

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> PresetFolder:
        """Read ``path/preset.json``; ``ConfigError`` naming the file and what is wrong with it."""
        folder = Path(path).expanduser().resolve()
        file = folder / PRESET_FILE
        if not file.is_file():
            msg = f"{str(folder)!r} is not a preset folder (no {PRESET_FILE}): write one with `valuelens tune MODEL -o DIR`"
            raise ConfigError(msg)
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            msg = f"cannot read {str(file)!r}: {exc}"
            raise ConfigError(msg) from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            msg = f"{str(file)!r} is not a {FORMAT} file (format {got!r}); rewrite it with `valuelens tune`"
            raise ConfigError(msg)
        try:
            key = data["model_key"]
            model_key = (str(key[0]), int(key[1]), int(key[2]))
            spec = dict(data["spec"])
            model = str(data["model"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            msg = f"{str(file)!r} lacks a valid model, model_key or spec ({exc!r})"
            raise ConfigError(msg) from exc
        known = {"format", "model", "model_key", "spec", "objective"}
        info = {k: v for k, v in data.items() if k not in known}
        return cls(folder, model, model_key, spec, str(data.get("objective", "balanced")), info)

    def write(self) -> Path:
        """Write ``preset.json`` into :attr:`path` (created if needed); returns the file."""
        self.path.mkdir(parents=True, exist_ok=True)
        data = {
            "format": FORMAT,
            "model": self.model,
            "model_key": list(self.model_key),
            "objective": self.objective,
            "spec": dict(self.spec),
            **self.info,
        }
        file = self.path / PRESET_FILE
        file.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        return file

    def fields(self, key: tuple[str, int, int], *, label: str | None = None) -> dict[str, Any]:
        """The spec's fields for the model ``key`` (a copy; a state file named in the folder becomes its
        absolute path). ``ConfigError`` when the folder was tuned for another model."""
        if tuple(key) != self.model_key:
            mine = f"{self.model_key[0]}, {self.model_key[1]} layers, hidden size {self.model_key[2]}"
            theirs = f"{key[0]}, {key[1]} layers, hidden size {key[2]}"
            msg = (
                f"preset folder {str(self.path)!r} was tuned for {self.model} ({mine}), not for "
                f"{label or 'this model'} ({theirs}): tune one for it with `valuelens tune MODEL -o DIR`"
            )
            raise ConfigError(msg)
        fields = dict(self.spec)
        path = self.state_file()
        if path is not None and not Path(fields["postprocess"]).is_absolute():
            if not path.is_file():
                msg = f"preset folder {str(self.path)!r} names the state {fields['postprocess']!r}, which is not in it"
                raise ConfigError(msg)
            fields["postprocess"] = str(path)
        lexical = fields.get("lexical_corpus")
        if isinstance(lexical, str) and not Path(lexical).expanduser().is_absolute():
            inside = self.path / lexical
            if not inside.is_file():
                msg = f"preset folder {str(self.path)!r} names the lexical statistics {lexical!r}, which are not in it"
                raise ConfigError(msg)
            fields["lexical_corpus"] = str(inside)
        return fields

    def state_file(self) -> Path | None:
        """The state file the spec's ``postprocess`` names (relative to the folder, or absolute);
        ``None`` when it names none, a ``builtin:`` state or a ``fit:`` reference."""
        state = self.spec.get("postprocess")
        if not isinstance(state, str) or state.startswith((BUILTIN_PREFIX, FIT_PREFIX)):
            return None
        return self.path / state
