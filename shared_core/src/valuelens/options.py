"""Command-line options → the spec of a command, shared by every command that builds an encoder
(``valuelens embed``, ``fit``, ``serve``, ...).

Usage::

    spec = command_spec("smollm2-135m", "best", None, recipe=None, prompt="none")   # preset, prompt off
    raise fail(exc)                                                                # one `error:` line, exit 2
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from valuelens.config import EncoderConfig
from valuelens.errors import ConfigError
from valuelens.presets.resolution import resolve

__all__ = ["NONE_OPTIONS", "command_spec", "fail", "layers_arg"]

#: Options whose value ``none`` means the field's ``None`` (given, so it overrides a preset's value).
NONE_OPTIONS = ("prompt", "postprocess")


def fail(message: object) -> typer.Exit:
    """Print ``error: MESSAGE`` on stderr and return the exit (code 2) to raise: a user error, no traceback."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code=2)


def layers_arg(layers: str) -> Any:
    """A ``--layers`` value: an int when it is one (``"-1"``, ``"20"``), else the spec string."""
    return int(layers) if layers.lstrip("-").isdigit() else layers


def command_spec(
    model: str | None, preset: str | None, config_file: Path | None, **explicit: Any
) -> EncoderConfig:
    """The spec of a command: a preset or a JSON config file (not both), then the options given.

    An option left out is ``None`` here (not given); ``--prompt none`` / ``--postprocess none`` give
    ``None``. A preset and the options given are merged by :func:`valuelens.presets.resolution.resolve`."""
    if preset is not None and config_file is not None:
        msg = "pass either --preset or --config, not both"
        raise ConfigError(msg)
    given = {k: v for k, v in explicit.items() if v is not None}
    for name in NONE_OPTIONS:
        if isinstance(given.get(name), str) and given[name].strip().lower() == "none":
            given[name] = None
    if config_file is not None:
        data = json.loads(Path(config_file).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            msg = f"{config_file} holds no JSON object (a --config file holds EncoderConfig's fields)"
            raise ConfigError(msg)
        return EncoderConfig.from_dict({**data, **given})
    return resolve(preset, model, given)
