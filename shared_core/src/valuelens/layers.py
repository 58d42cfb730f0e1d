"""Layer specifications: which decoder layers a recipe reads, as 0-based indices into ``model.layers``.

Usage: ``resolve_layers("20-27", n_layers=32)`` → ``(20, 21, ..., 27)``.

Accepted specs: ``"all"``, ``"half"`` (the deeper half), ``"last"``, ``"auto"`` (per-model defaults,
else the 50–85 % depth band), an int, a list of ints (negative ints count from the end), or a string
of ranges and ints such as ``"20-27"`` or ``"26,27,29-31"``, or of relative depths such as
``"70%-100%"`` (layer ``round(p / 100 * (n_layers - 1))``: the same band on any depth, as the presets
for untuned models use it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from valuelens.errors import ConfigError
from valuelens.presets.bands import AUTO_LAYERS
from valuelens.recipes import Recipe

LayerSpec = str | int | Sequence[int]

NAMED_SPECS = ("auto", "all", "half", "last", "band")


def auto_layers(model_type: str, n_layers: int, hidden_size: int, recipe: str) -> tuple[int, ...] | None:
    """The per-model ``"auto"`` layers for ``recipe`` (:data:`valuelens.presets.AUTO_LAYERS`), or
    ``None`` if the model has no entry."""
    table = AUTO_LAYERS.get((model_type, n_layers, hidden_size))
    if table is None:
        return None
    return table.get(recipe, table.get("*"))


def depth_band(n_layers: int, low: float = 0.5, high: float = 0.85) -> tuple[int, ...]:
    """Layers between ``low`` and ``high`` of the depth (the paper's best band in a Llama-2 ablation)."""
    start = min(n_layers - 1, math.floor(low * n_layers))
    stop = max(start + 1, math.floor(high * n_layers) + 1)
    return tuple(range(start, min(stop, n_layers)))


def _check_index(index: object, n_layers: int, spec: object) -> int:
    if isinstance(index, bool) or not isinstance(index, int):
        msg = f"layer indices must be ints, got {index!r} in layers={spec!r}"
        raise ConfigError(msg)
    normalized = index + n_layers if index < 0 else index
    if not 0 <= normalized < n_layers:
        msg = (
            f"layer {index} in layers={spec!r} is out of range: the model has {n_layers} decoder layers "
            f"(valid indices 0..{n_layers - 1}, or -{n_layers}..-1 from the end)"
        )
        raise ConfigError(msg)
    return normalized


def _relative(value: str, n_layers: int, spec: str) -> int:
    """The layer at ``value`` (``"70%"``) of the depth: ``round(0.70 * (n_layers - 1))``."""
    percent = float(value.removesuffix("%"))
    if not 0 <= percent <= 100:
        msg = f"relative depth {value!r} in layers={spec!r} must be between 0% and 100%"
        raise ConfigError(msg)
    return round(percent / 100 * (n_layers - 1))


def _parse_string(spec: str, n_layers: int) -> list[int]:
    indices: list[int] = []
    for part in spec.replace(" ", "").split(","):
        if not part:
            continue
        try:
            if "%" in part:
                ends = part.split("-")
                if len(ends) > 2 or not all(end.endswith("%") for end in ends):
                    raise ValueError(part)
                lo_n, hi_n = (_relative(end, n_layers, spec) for end in (ends[0], ends[-1]))
                if hi_n < lo_n:
                    msg = f"empty layer range {part!r} in layers={spec!r}"
                    raise ConfigError(msg)
                indices.extend(range(lo_n, hi_n + 1))
            elif "-" in part.lstrip("-"):
                lead = "-" if part.startswith("-") else ""
                left, right = part.lstrip("-").split("-", 1)
                lo, hi = int(lead + left), int(right)
                lo_n, hi_n = _check_index(lo, n_layers, spec), _check_index(hi, n_layers, spec)
                if hi_n < lo_n:
                    msg = f"empty layer range {part!r} in layers={spec!r}"
                    raise ConfigError(msg)
                indices.extend(range(lo_n, hi_n + 1))
            else:
                indices.append(_check_index(int(part), n_layers, spec))
        except ValueError as exc:
            if isinstance(exc, ConfigError):
                raise
            choices = ", ".join(repr(name) for name in NAMED_SPECS)
            msg = (
                f"cannot parse layers={spec!r}: use one of {choices}, an int, a list of ints, "
                "or ranges such as '20-27', '26,27,29-31' or '70%-100%' (relative depth)"
            )
            raise ConfigError(msg) from exc
    return indices


def resolve_layers(
    spec: LayerSpec,
    n_layers: int,
    *,
    auto: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """Resolve ``spec`` to sorted, unique, 0-based layer indices for a model with ``n_layers`` layers.

    ``auto`` is the default used for ``"auto"`` (the caller's per-model/per-recipe choice); without it,
    ``"auto"`` means the 50–85 % depth band.
    """
    if n_layers < 1:
        msg = f"the model reports {n_layers} decoder layers"
        raise ConfigError(msg)
    if isinstance(spec, str):
        key = spec.strip().lower()
        if key == "all":
            indices = list(range(n_layers))
        elif key == "half":
            indices = list(range(n_layers // 2, n_layers))
        elif key == "last":
            indices = [n_layers - 1]
        elif key == "band":
            indices = list(depth_band(n_layers))
        elif key == "auto":
            indices = list(auto) if auto is not None else list(depth_band(n_layers))
            indices = [_check_index(i, n_layers, spec) for i in indices]
        else:
            indices = _parse_string(spec, n_layers)
    elif isinstance(spec, int) and not isinstance(spec, bool):
        indices = [_check_index(spec, n_layers, spec)]
    elif isinstance(spec, Sequence):
        indices = [_check_index(i, n_layers, spec) for i in spec]
    else:
        msg = f"layers must be a string, an int or a list of ints, got {type(spec).__name__}"
        raise ConfigError(msg)
    if not indices:
        msg = f"layers={spec!r} selects no layer"
        raise ConfigError(msg)
    return tuple(sorted(set(indices)))


def validate_spec(spec: LayerSpec) -> None:
    """Check a spec's syntax before the model (and so its layer count) is known."""
    if isinstance(spec, str):
        if spec.strip().lower() in NAMED_SPECS:
            return
        _parse_string(spec, n_layers=10**6)  # syntax only; ranges are checked against the model later
    elif isinstance(spec, int) and not isinstance(spec, bool):
        return
    elif isinstance(spec, Sequence) and all(isinstance(i, int) and not isinstance(i, bool) for i in spec):
        if not spec:
            msg = "layers=[] selects no layer"
            raise ConfigError(msg)
    else:
        msg = f"layers must be a string, an int or a list of ints, got {spec!r}"
        raise ConfigError(msg)


def prepend_default(n_layers: int) -> tuple[int, ...]:
    """What ``prepend_layers="auto"`` means: Token Prepending's layers 1 to 6 of 32 (its paper's
    Llama-2-7B setting), scaled to the model's depth (at least layer 1)."""
    end = max(2, round(n_layers * 7 / 32))
    return tuple(range(1, min(end, n_layers)))


def default_layers(recipe: Recipe, model_type: str, n_layers: int, hidden_size: int) -> tuple[int, ...]:
    """What ``layers="auto"`` means for ``recipe`` on a model: the last layer for last-token/WMP
    recipes, else a per-model, per-recipe default (:data:`valuelens.presets.AUTO_LAYERS`) or the 50–85 % band."""
    if recipe.auto_layers == "last":
        return (n_layers - 1,)
    return auto_layers(model_type, n_layers, hidden_size, recipe.name) or depth_band(n_layers)


def layers_label(layers: Sequence[int]) -> str:
    """``(8, 9, 10)`` → ``"8-10"``; other sets as a comma list."""
    layers = tuple(layers)
    if len(layers) > 2 and layers == tuple(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}-{layers[-1]}"
    return ",".join(map(str, layers))
