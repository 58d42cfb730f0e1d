"""The command line's shared options: one option per spec field, generated from the field list, and the
options every model command takes (``--model``, ``--preset``, ``--device``, ...).

Usage::

    @app.command()
    @spec_options()                                  # --recipe, --layers, ... one per EncoderConfig field
    def embed(input_path: Path, model: ModelOpt = None, preset: PresetOpt = None, *, spec: SpecFields):
        config = command_spec(model, preset, None, spec)   # a preset, then the fields given
    raise fail(exc)                                  # one `error:` line, exit 2

Every field of :class:`valuelens.EncoderConfig` gets ``--field-name`` (underscores become dashes), its
help from the field's description in ``config.py`` and its type from the field's annotation
(:data:`OPTION_TYPES`): ``none`` turns an optional field off (``--prompt none``, ``--lexical none``), so a
preset's value can be dropped; a bool is a ``--flag/--no-flag`` pair; ``fusion`` takes recipe names
(``va,hs``) or a JSON list of parts. An option left out is not given: the preset's or config file's value
stands. Nothing here imports torch: ``--help`` and an argument error answer at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from valuelens.config import FIELDS, Combine, EncoderConfig, LexicalKind, LongText, field_descriptions
from valuelens.errors import ConfigError
from valuelens.extras import hint

__all__ = [
    "NONE",
    "OPTION_TYPES",
    "BatchOpt",
    "ConfigFileOpt",
    "DTypeOpt",
    "DeviceOpt",
    "ModelOpt",
    "PresetOpt",
    "SpecFields",
    "ThreadsOpt",
    "command_spec",
    "extra_imports",
    "fail",
    "layers_arg",
    "spec_option_names",
    "spec_options",
    "use_threads",
]

#: The spec fields a command line gave (``None`` for those left out), collected by :func:`spec_options`.
SpecFields = dict[str, Any]

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="Bundled model name, local folder or hub id (default: smollm2-135m)."),
]
PresetOpt = Annotated[
    str | None,
    typer.Option(
        help="Start from a named spec for the model: 'best' (recommended: sentences and documents), "
        "'sts' (short-sentence similarity alone), 'untuned' (the rule for models without a preset), 'generic' "
        "(the paper's AlignedWVA), or a folder written by `valuelens tune`."
    ),
]
ConfigFileOpt = Annotated[
    Path | None,
    typer.Option("--config", help="A JSON file of EncoderConfig fields (the options given override it)."),
]
DeviceOpt = Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 ... (default: cuda if available).")]
DTypeOpt = Annotated[str | None, typer.Option(help="float32, bfloat16, float16 (default: float32 on CPU).")]
BatchOpt = Annotated[int, typer.Option("--batch-size", "-b", min=1)]
ThreadsOpt = Annotated[
    str,
    typer.Option(
        help="CPU threads: auto (the idle part of this process's CPU share, at least 1: does not collapse "
        "when other jobs share the CPUs), torch (torch's default, one per core) or a number."
    ),
]

_PANEL = "Spec fields (EncoderConfig; left out: the preset's or --config's value)"


def fail(message: object) -> typer.Exit:
    """Print ``error: MESSAGE`` on stderr and return the exit (code 2) to raise: a user error, no traceback."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code=2)


@contextlib.contextmanager
def extra_imports(extra: str, what: str) -> Iterator[None]:
    """Imports in the ``with`` body that need ``extra``: a missing package is one ``error:`` line naming
    the extra and its pip command (exit 2), not a traceback. Usage:
    ``with extra_imports("eval", "valuelens eval"): from valuelens.evaluation import evaluate``."""
    try:
        yield
    except ImportError as exc:
        missing = getattr(exc, "name", None) or ""
        if missing == "valuelens" or missing.startswith("valuelens."):
            raise  # a bug of ours, not a missing extra
        raise fail(f"{hint(extra, what)} ({exc})") from None


def layers_arg(layers: str) -> Any:
    """A layer spec from the command line: an int when it is one (``"-1"``, ``"20"``), else the string."""
    return int(layers) if layers.lstrip("-").isdigit() else layers


def use_threads(threads: str) -> None:
    """Set torch's CPU threads for this command (:func:`valuelens.cpu.parse_threads`); ``torch`` leaves them."""
    from valuelens.cpu import parse_threads

    count = parse_threads(threads)
    if count is not None:
        import torch

        torch.set_num_threads(count)


#: What an option given as ``none`` parses to: the field's ``None``, given (it overrides a preset's value).
NONE = type("NoneGiven", (), {"__repr__": lambda self: "none", "__slots__": ()})()


def _parser(kind: str, parse: Callable[[str], Any], *, optional: bool) -> Callable[[Any], Any]:
    """Read a field's text with ``parse``; ``none`` is :data:`NONE` when the field is optional."""

    def read(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if optional and value.strip().lower() == "none":
            return NONE
        try:
            return parse(value)
        except (ValueError, TypeError) as exc:
            what = f"{kind} or none" if optional else kind
            msg = f"{value!r} is not {what} ({exc})"
            raise typer.BadParameter(msg) from None

    return read


def _fusion(text: str) -> Any:
    """``va,hs`` (recipe names) or a JSON list of parts (``[{"recipe": "va", "weight": 0.5}]``)."""
    if text.lstrip().startswith(("[", "{")):
        return json.loads(text)
    return [name.strip() for name in text.split(",") if name.strip()]


_LAYERS = ("LAYERS", layers_arg)
#: How a field's annotation (as ``config.py`` writes it) is read from the command line: a metavar and a
#: parser, ``bool`` (a flag pair), or the ``Literal`` whose values are the choices.
OPTION_TYPES: dict[str, Any] = {
    "str": ("TEXT", str),
    "str | None": ("TEXT", str),
    "float": ("NUMBER", float),
    "float | None": ("NUMBER", float),
    "int": ("INTEGER", int),
    "int | None": ("INTEGER", int),
    "LayerSpec": _LAYERS,
    "LayerSpec | None": _LAYERS,
    "tuple[FusionPart, ...]": ("RECIPES|JSON", _fusion),
    "bool": bool,
    "LongText": LongText,
    "Combine": Combine,
    "LexicalKind": LexicalKind,
}


def _option(field: dataclasses.Field[Any], description: str) -> Any:
    """The ``Annotated`` type of the option for spec ``field`` (default ``None``: not given)."""
    flag = "--" + field.name.replace("_", "-")
    kind = OPTION_TYPES.get(str(field.type))
    if kind is None:
        msg = f"EncoderConfig.{field.name} has the type {field.type!r}, which OPTION_TYPES cannot read from a command line"
        raise TypeError(msg)
    short = (
        re.split(r"(?<!\.)\.\s+(?=[A-Z])", description)[0].rstrip(".") + "." if description else field.name
    )
    if kind is bool:
        return Annotated[
            bool | None, typer.Option(f"{flag}/--no-{flag[2:]}", help=short, rich_help_panel=_PANEL)
        ]
    if isinstance(kind, tuple):
        name, parse = kind
        optional = str(field.type).endswith("| None") or field.name == "fusion"
        read = _parser(name, parse, optional=optional)
        shown = f"{name}|none" if optional else name
        return Annotated[
            Any, typer.Option(flag, parser=read, metavar=shown, help=short, rich_help_panel=_PANEL)
        ]
    return Annotated[kind | None, typer.Option(flag, help=short, rich_help_panel=_PANEL)]


F = TypeVar("F", bound=Callable[..., Any])


def spec_options(fields: Sequence[str] = FIELDS) -> Callable[[F], F]:
    """Give a typer command one option per spec field of ``fields`` (default: all); the command receives
    them as one keyword argument, ``spec``: ``{field: value or None}`` (see the module docstring)."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        msg = f"not spec fields: {unknown}"
        raise ValueError(msg)
    descriptions = field_descriptions()
    declared = {f.name: f for f in dataclasses.fields(EncoderConfig)}

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        own = [p for name, p in signature.parameters.items() if name != "spec"]
        added = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=_option(declared[name], descriptions.get(name, "")),
            )
            for name in fields
        ]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name, None) for name in fields}
            return command(*args, spec=given, **kwargs)

        parameters = [*own, *added]
        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        run.spec_fields = tuple(fields)  # type: ignore[attr-defined]
        return run  # type: ignore[return-value]

    return decorate


def spec_option_names(command: Callable[..., Any]) -> set[str]:
    """The spec fields a command built with :func:`spec_options` takes as options (the parity tests read it)."""
    return set(getattr(command, "spec_fields", ()))


def command_spec(
    model: str | None, preset: str | None, config_file: Path | None, spec: SpecFields | None = None
) -> EncoderConfig:
    """The spec of a command: a preset or a JSON config file (not both), then the fields given.

    A field left out (``None`` in ``spec``) is not given; one given as ``none`` (:data:`NONE`) is ``None``,
    given: it overrides the preset's value. A preset and the fields given
    are merged by :func:`valuelens.presets.resolution.resolve`."""
    if preset is not None and config_file is not None:
        msg = "pass either --preset or --config, not both"
        raise ConfigError(msg)
    given = {k: None if v is NONE else v for k, v in (spec or {}).items() if v is not None}
    if config_file is not None:
        data = json.loads(Path(config_file).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            msg = f"{config_file} holds no JSON object (a --config file holds EncoderConfig's fields)"
            raise ConfigError(msg)
        return EncoderConfig.from_dict({**data, **given})
    from valuelens.presets.resolution import resolve  # reads the model's config: only when a command runs

    return resolve(preset, model, given)
