"""Post-processing fitted on embeddings of unlabeled texts: centering, all-but-the-top, standardisation, whitening.

Usage::

    texts = unlabeled_texts("../shared/data/stsb/train.jsonl", fields=("sentence1", "sentence2"))  # valuelens.io
    pp = fit_texts(encoder, texts, kind="abtt", k=1)   # valuelens.fitting: embeds (un-normalized), then fits
    emb = pp.transform(encoder.encode(queries, convert_to_tensor=True))   # [n, d] -> [n, pp.output_dim]
    pp.save("abtt.safetensors"); pp = Postprocess.load("abtt.safetensors")
    pp = Postprocess.fit(embeddings, kind="whiten", dim=256)       # from a [n, d] array or tensor
    pp = load_postprocess("builtin:smollm2-135m-best-v3", config)  # checked against the spec it serves

With μ the mean of the fitting embeddings and C = (X - μ)ᵀ(X - μ) / n = U Λ Uᵀ their covariance
(eigenvalues large to small), a fitted state maps an embedding x to:

- ``"center"``: (x - μ) / s;
- ``"abtt"``, all-but-the-top (Mu & Viswanath 2018): c = x - μ, then (c - U_k U_kᵀ c) / s, which removes
  the projections on the top ``k`` principal components;
- ``"standardize"``: (x - μ) / σ per dimension;
- ``"whiten"``, PCA whitening: (x - μ) U_m Λ_m^{-1/2} with the first m = ``dim`` components (all d by
  default). The output then has m dimensions and identity covariance on the fitting data.

``s`` (``rms``) is one number: the root-mean-square coordinate of the fitting embeddings after the map,
so that, like standardisation and whitening, every kind outputs coordinates of unit average variance on
its fitting data. Cosines do not change; a linear classifier with its usual regularisation (scikit-learn's
``C=1``) sees features on the scale it expects: without it, centering fused unit vectors left a norm of
0.35 and cost gemma-3-270m 20 points of Banking77 accuracy (research/rounds/README.md, round 5).

Statistics are population ones (divided by n), accumulated in fp64 and stored as fp32. Variances
(σ², and eigenvalues when whitening) are floored at ``eps`` × their mean over dimensions, so a
constant coordinate does not divide by zero. Eigenvector signs are fixed (largest entry positive), so
a fit is reproducible. Fit only on unlabeled training text (e.g. STS-B train sentences), never on the
texts a score is reported on.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, overload

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from valuelens.config import STATE_FREE_FIELDS, EncoderConfig
from valuelens.errors import ConfigError
from valuelens.io import replace_atomically
from valuelens.presets.builtin import BUILTIN_PREFIX, FIT_PREFIX, builtin_path

__all__ = [
    "DEFAULT_EPS",
    "FORMAT",
    "KINDS",
    "Postprocess",
    "PostprocessKind",
    "check_count",
    "check_settings",
    "load_postprocess",
]

PostprocessKind = Literal["center", "abtt", "standardize", "whiten"]
KINDS: tuple[str, ...] = get_args(PostprocessKind)
#: Variance floor, relative to the mean variance over dimensions.
DEFAULT_EPS = 1e-6
#: The ``format`` entry of a saved state's safetensors metadata, and its version.
FORMAT = "valuelens.postprocess"
FORMAT_VERSION = 2
#: Versions :meth:`Postprocess.load` reads (version 1 had no ``rms``: it loads with ``rms=1``).
READABLE_VERSIONS = ("1", "2")
_CHUNK = 4096  # rows per fp64 block when accumulating statistics
_TENSORS: dict[str, tuple[str, ...]] = {
    "center": ("mean",),
    "abtt": ("mean", "components"),
    "standardize": ("mean", "scale"),
    "whiten": ("mean", "matrix"),
}


def _check_kind(kind: Any) -> None:
    if kind not in KINDS:
        msg = f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}"
        raise ConfigError(msg)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_settings(
    kind: Any, k: Any = 1, dim: Any = None, eps: Any = DEFAULT_EPS, d: int | None = None
) -> None:
    """Validate ``kind``, ``k`` (abtt), ``dim`` (whiten) and ``eps``, and against ``d`` when known.

    Raises :class:`ConfigError` naming the bad value. Usage: ``check_settings("whiten", dim=256)``.
    """
    _check_kind(kind)
    if kind == "abtt":
        if not _is_int(k) or k < 1:
            msg = f"k (the principal components abtt removes) must be an int >= 1, got {k!r}; kind='center' removes none"
            raise ConfigError(msg)
        if d is not None and k >= d:
            msg = f"k={k} would remove every direction of a {d}-dim embedding: use k < {d}"
            raise ConfigError(msg)
    if dim is not None:
        if kind != "whiten":
            msg = f"dim={dim!r} cuts the dimensions of kind='whiten' only; {kind!r} keeps all of them"
            raise ConfigError(msg)
        if not _is_int(dim) or dim < 1:
            msg = f"dim must be a positive int or None (keep all), got {dim!r}"
            raise ConfigError(msg)
        if d is not None and dim > d:
            msg = f"dim={dim} exceeds the {d} dimensions of the embeddings: use dim <= {d}"
            raise ConfigError(msg)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        msg = f"eps (the variance floor, relative to the mean variance) must be in (0, 1), got {eps!r}"
        raise ConfigError(msg)


def min_samples(kind: str, k: int, dim: int | None, d: int) -> tuple[int, str]:
    """How many embeddings ``kind`` needs to be fitted, and why."""
    if kind == "abtt":
        return k + 1, f"kind='abtt' with k={k} needs more than {k}"
    if kind == "whiten":
        m = d if dim is None else dim
        cut = f"dim={dim}" if dim is not None else f"all {d} dimensions (dim=None)"
        return m + 1, f"kind='whiten' with {cut} needs more than {m}"
    return 2, f"kind={kind!r} needs at least 2"


def check_count(kind: str, k: int, dim: int | None, d: int, n: int, unit: str) -> None:
    """Raise :class:`ConfigError` when ``n`` embeddings (or texts: ``unit``) are too few to fit ``kind``."""
    need, why = min_samples(kind, k, dim, d)
    if n < need:
        fix = {"abtt": " or a smaller k", "whiten": " or a smaller dim"}.get(kind, "")
        msg = (
            f"{why} {unit} to fit (n {unit} span at most n - 1 directions around their mean); "
            f"got {n}: pass at least {need}{fix}"
        )
        raise ConfigError(msg)


def _as_matrix(embeddings: Any) -> Tensor:
    """``embeddings`` as a finite 2-D tensor (not copied when already one)."""
    if isinstance(embeddings, np.ndarray):
        x = torch.from_numpy(np.asarray(embeddings))
    elif isinstance(embeddings, Tensor):
        x = embeddings.detach()
    else:
        msg = f"embeddings must be a numpy array or a torch tensor [n, d], got {type(embeddings).__name__}"
        raise TypeError(msg)
    if x.dim() != 2 or x.shape[1] == 0:
        msg = f"embeddings must be 2-D [n_texts, dim], got shape {tuple(x.shape)}"
        raise ValueError(msg)
    if x.is_complex() or x.dtype == torch.bool:
        msg = f"embeddings must hold real numbers, got {x.dtype}"
        raise ValueError(msg)
    if x.is_floating_point():
        bad = (~torch.isfinite(x)).any(dim=1).nonzero().flatten()
        if len(bad):
            rows = ", ".join(str(int(i)) for i in bad[:5]) + (", ..." if len(bad) > 5 else "")
            msg = (
                f"embeddings hold NaN or inf in {len(bad)} of {x.shape[0]} rows (rows {rows}); a float16 "
                "model can overflow: load it in float32 or bfloat16, or leave those texts out"
            )
            raise ValueError(msg)
    if x.device.type not in ("cpu", "cuda"):  # e.g. MPS has no float64
        x = x.cpu()
    return x


def _moments(x: Tensor, full: bool) -> tuple[Tensor, Tensor]:
    """Mean ``[d]`` and population covariance ``[d, d]`` (``full``) or variances ``[d]``, in fp64 on CPU.

    Two passes over row blocks (mean first, then centered products), so no fp64 copy of ``x`` is made
    and a large mean does not cancel the variances."""
    n, d = x.shape
    total = torch.zeros(d, dtype=torch.float64, device=x.device)
    for start in range(0, n, _CHUNK):
        total += x[start : start + _CHUNK].to(torch.float64).sum(dim=0)
    mean = total / n
    second = torch.zeros((d, d) if full else (d,), dtype=torch.float64, device=x.device)
    for start in range(0, n, _CHUNK):
        block = x[start : start + _CHUNK].to(torch.float64) - mean
        second += block.T @ block if full else (block * block).sum(dim=0)
    return mean.cpu(), (second / n).cpu()


def _rms(total_variance: float, d: int) -> float:
    """The root-mean-square coordinate of centered data whose variances sum to ``total_variance``
    (1.0 when they are all zero, so identical embeddings stay zero instead of dividing by it)."""
    value = (max(total_variance, 0.0) / d) ** 0.5
    return value if value > torch.finfo(torch.float32).tiny else 1.0


def _principal(cov: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (large to small) and eigenvectors (columns) of ``cov``, each column's largest entry positive."""
    values, vectors = torch.linalg.eigh(cov)
    values, vectors = values.flip(0), vectors.flip(1)
    peak = vectors.abs().argmax(dim=0)
    signs = torch.sign(vectors[peak, torch.arange(vectors.shape[1])])
    return values, vectors * torch.where(signs == 0, 1.0, signs)


@dataclass(frozen=True, eq=False)
class Postprocess:
    """A fitted map of embeddings ``[..., input_dim] -> [..., output_dim]`` (see the module docstring).

    Build one with :meth:`fit` (embeddings) or :func:`valuelens.fitting.fit_texts` (an encoder and
    texts), or :meth:`load` a saved one (:func:`load_postprocess` for a spec's reference); apply it with :meth:`transform`. The tensors are fp32 on CPU:
    ``mean [d]`` always, plus ``components [k, d]`` (abtt), ``scale [d]`` (standardize, the floored
    standard deviations) or ``matrix [d, dim]`` (whiten); ``rms`` is the output divisor of center and
    abtt (1.0 for the other kinds).
    """

    kind: PostprocessKind
    mean: Tensor
    components: Tensor | None = None
    scale: Tensor | None = None
    matrix: Tensor | None = None
    eps: float = DEFAULT_EPS
    rms: float = 1.0
    """center / abtt: the root-mean-square output coordinate on the fitting data, divided out."""
    n_fitted: int = 0
    """How many embeddings the state was fitted on."""
    fitted_on: str | None = None
    """A free description of the fitting texts (``"11498 texts of train.jsonl"``)."""
    model: str | None = None
    """The model whose embeddings were fitted (name or path), when known."""
    encoder_config: Mapping[str, Any] | None = None
    """The fitting encoder's ``EncoderConfig.to_dict()``, when known: the spec this state belongs to."""
    _placed: dict[torch.device, tuple[Tensor, Tensor | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        _check_kind(self.kind)
        given = {name: getattr(self, name) for name in ("mean", "components", "scale", "matrix")}
        wanted = _TENSORS[self.kind]
        for name, value in given.items():
            if name in wanted and not isinstance(value, Tensor):
                msg = f"a {self.kind!r} Postprocess needs the tensor {name!r}, got {type(value).__name__}"
                raise ConfigError(msg)
            if name not in wanted and value is not None:
                msg = f"a {self.kind!r} Postprocess holds {', '.join(wanted)}, not {name!r}"
                raise ConfigError(msg)
        mean = given["mean"]
        if mean.dim() != 1 or mean.shape[0] == 0:
            msg = f"mean must be 1-D [d], got shape {tuple(mean.shape)}"
            raise ConfigError(msg)
        d = mean.shape[0]
        expected = {
            "components": "[k, d] with 1 <= k < d",
            "scale": "[d]",
            "matrix": "[d, dim] with 1 <= dim <= d",
        }
        for name in wanted[1:]:
            t = given[name]
            assert t is not None
            ok = {
                "components": t.dim() == 2 and 1 <= t.shape[0] < d and t.shape[1] == d,
                "scale": t.dim() == 1 and t.shape[0] == d,
                "matrix": t.dim() == 2 and t.shape[0] == d and 1 <= t.shape[1] <= d,
            }[name]
            if not ok:
                msg = f"{name} must be {expected[name]} for d={d}, got shape {tuple(t.shape)}"
                raise ConfigError(msg)
        for name in wanted:
            t = given[name]
            assert t is not None
            if not t.is_floating_point() or not bool(torch.isfinite(t).all()):
                msg = f"{name} must hold finite floats (got {t.dtype}, or NaN/inf values)"
                raise ConfigError(msg)
            object.__setattr__(self, name, t.detach().to("cpu", torch.float32).contiguous())
        if self.scale is not None and not bool((self.scale > 0).all()):
            msg = "scale (the standard deviations) must be positive"
            raise ConfigError(msg)
        check_settings(self.kind, self.k or 1, None, self.eps)
        object.__setattr__(self, "eps", float(self.eps))
        if (
            isinstance(self.rms, bool)
            or not isinstance(self.rms, (int, float))
            or not 0 < self.rms < float("inf")
        ):
            msg = f"rms must be a positive finite number, got {self.rms!r}"
            raise ConfigError(msg)
        if self.kind not in ("center", "abtt") and self.rms != 1.0:
            msg = (
                f"rms divides the output of kind='center' and 'abtt' only; a {self.kind!r} state has rms=1.0"
            )
            raise ConfigError(msg)
        object.__setattr__(self, "rms", float(self.rms))
        if not _is_int(self.n_fitted) or self.n_fitted < 0:
            msg = f"n_fitted must be an int >= 0, got {self.n_fitted!r}"
            raise ConfigError(msg)
        for name in ("fitted_on", "model"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                msg = f"{name} must be a str or None, got {type(value).__name__}"
                raise ConfigError(msg)
        if self.encoder_config is not None:
            if not isinstance(self.encoder_config, Mapping):
                msg = f"encoder_config must be a mapping (EncoderConfig.to_dict()), got {type(self.encoder_config).__name__}"
                raise ConfigError(msg)
            object.__setattr__(self, "encoder_config", dict(self.encoder_config))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (Ray, deepcopy) without the per-device copies: a CUDA copy must not travel."""
        return {**self.__dict__, "_placed": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(
        cls,
        embeddings: np.ndarray | Tensor,
        kind: PostprocessKind = "abtt",
        k: int = 1,
        dim: int | None = None,
        *,
        eps: float = DEFAULT_EPS,
        fitted_on: str | None = None,
        model: str | None = None,
        encoder_config: Mapping[str, Any] | None = None,
    ) -> Postprocess:
        """Fit ``kind`` on ``embeddings`` ``[n, d]`` (numpy or torch, any device and float dtype).

        ``k`` is the number of principal components ``"abtt"`` removes (other kinds ignore it);
        ``dim`` the number of components ``"whiten"`` keeps (``None``: all d). Raises
        :class:`ConfigError` for bad settings or too few rows, ``ValueError`` for NaN/inf rows.
        """
        check_settings(kind, k, dim, eps)
        x = _as_matrix(embeddings)
        n, d = x.shape
        check_settings(kind, k, dim, eps, d)
        check_count(kind, k, dim, d, n, "embeddings")
        mean, second = _moments(x, full=kind in ("abtt", "whiten"))
        if kind != "center" and not float(second.diagonal().sum() if second.dim() == 2 else second.sum()) > 0:
            msg = f"the {n} embeddings are all identical (zero variance): kind={kind!r} has nothing to fit"
            raise ConfigError(msg)
        tensors: dict[str, Tensor] = {}
        rms = 1.0
        if kind == "center":
            rms = _rms(float(second.sum()), d)
        if kind == "standardize":
            floor = eps * float(second.mean())
            tensors["scale"] = second.clamp_min(max(floor, torch.finfo(torch.float32).tiny)).sqrt()
        elif kind in ("abtt", "whiten"):
            values, vectors = _principal(second)
            if kind == "abtt":
                tensors["components"] = vectors[:, :k].T
                rms = _rms(float(values[k:].clamp_min(0).sum()), d)
            else:
                m = d if dim is None else dim
                floor = max(eps * float(values.clamp_min(0).mean()), torch.finfo(torch.float32).tiny)
                tensors["matrix"] = vectors[:, :m] / values[:m].clamp_min(floor).sqrt()
        return cls(
            kind,
            mean,
            **tensors,
            eps=float(eps),
            rms=rms,
            n_fitted=n,
            fitted_on=fitted_on,
            model=model,
            encoder_config=encoder_config,
        )

    # ------------------------------------------------------------------ shape
    @property
    def input_dim(self) -> int:
        """The dimension of the embeddings it was fitted on (and takes)."""
        return int(self.mean.shape[0])

    @property
    def output_dim(self) -> int:
        """The dimension :meth:`transform` returns (``dim`` for whitening, else ``input_dim``)."""
        return int(self.matrix.shape[1]) if self.matrix is not None else self.input_dim

    @property
    def k(self) -> int | None:
        """The principal components ``"abtt"`` removes (``None`` for the other kinds)."""
        return int(self.components.shape[0]) if self.components is not None else None

    @property
    def dim(self) -> int | None:
        """The components ``"whiten"`` keeps (``None`` for the other kinds)."""
        return self.output_dim if self.kind == "whiten" else None

    # ------------------------------------------------------------------ applying
    def _on(self, device: torch.device) -> tuple[Tensor, Tensor | None]:
        """The mean and the kind's tensor on ``device`` (copied once per device, as ordinary tensors)."""
        placed = self._placed.get(device)
        if placed is None:
            extra = self.components if self.components is not None else self.scale
            extra = extra if extra is not None else self.matrix
            with torch.inference_mode(False):  # not inference tensors, so autograd may use them later
                placed = (
                    self.mean.to(device),
                    None if extra is None else extra.to(device),
                )
            self._placed[device] = placed
        return placed

    @overload
    def transform(self, x: Tensor) -> Tensor: ...
    @overload
    def transform(self, x: np.ndarray) -> np.ndarray: ...

    def transform(self, x: Any) -> Any:
        """Map ``[..., input_dim]`` embeddings to ``[..., output_dim]`` fp32 on ``x``'s device.

        Rows are independent (any batching gives the same result) and ``x`` is not modified; numpy in
        gives numpy out. NaN/inf in a row stay in that row's output.
        """
        if isinstance(x, np.ndarray):
            return self.transform(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))).numpy()
        if not isinstance(x, Tensor):
            msg = f"Postprocess.transform takes a torch tensor or a numpy array, got {type(x).__name__}"
            raise TypeError(msg)
        if x.dim() == 0 or x.shape[-1] != self.input_dim:
            got = "a scalar" if x.dim() == 0 else f"{x.shape[-1]}-dim embeddings"
            source = f" of {self.model!r}" if self.model else ""
            msg = (
                f"this {self.kind!r} Postprocess was fitted on {self.input_dim}-dim embeddings{source}, got "
                f"{got}: fit it on embeddings of the same model, recipe and layers"
            )
            raise ConfigError(msg)
        mean, extra = self._on(x.device)
        centered = x.to(torch.float32) - mean
        if self.kind == "center":
            return centered / self.rms
        assert extra is not None
        if self.kind == "abtt":
            return (centered - (centered @ extra.T) @ extra) / self.rms
        if self.kind == "standardize":
            return centered / extra
        return centered @ extra

    # ------------------------------------------------------------------ persistence
    def config(self) -> dict[str, Any]:
        """The kind and its parameters (JSON-safe), as saved in the file's metadata."""
        return {
            "kind": self.kind,
            "k": self.k,
            "dim": self.dim,
            "eps": self.eps,
            "rms": self.rms,
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "n_fitted": self.n_fitted,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the state as one safetensors file (written aside, then renamed over ``path``); return it.

        The tensors are the fp32 state; the metadata holds ``format``, ``kind``, ``params`` (JSON of
        :meth:`config`) and, when known, ``fitted_on``, ``model`` and ``encoder_config`` (JSON).
        """
        target = Path(path)
        if target.is_dir():
            msg = f"{str(target)!r} is a folder: Postprocess.save writes one file (e.g. state.safetensors)"
            raise ConfigError(msg)
        metadata = {
            "format": FORMAT,
            "format_version": str(FORMAT_VERSION),
            "kind": self.kind,
            "params": json.dumps(self.config()),
        }
        if self.fitted_on is not None:
            metadata["fitted_on"] = self.fitted_on
        if self.model is not None:
            metadata["model"] = self.model
        if self.encoder_config is not None:
            metadata["encoder_config"] = json.dumps(self.encoder_config)
        tensors = {name: getattr(self, name) for name in _TENSORS[self.kind]}
        with replace_atomically(target) as tmp:
            save_file(tensors, str(tmp), metadata=metadata)
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Postprocess:
        """Load a state written by :meth:`save`; raises :class:`ConfigError` naming what is wrong."""
        source = Path(path)
        if not source.is_file():
            why = "is a folder" if source.is_dir() else "does not exist"
            msg = f"no saved Postprocess at {str(source)!r}: it {why} (write one with `valuelens fit`)"
            raise ConfigError(msg)
        try:
            with safe_open(str(source), framework="pt") as handle:
                metadata = handle.metadata() or {}
                tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            msg = (
                f"{str(source)!r} is not a readable safetensors file ({exc}); write one with `valuelens fit`"
            )
            raise ConfigError(msg) from exc
        if metadata.get("format") != FORMAT:
            msg = (
                f"{str(source)!r} is a safetensors file but not a saved valuelens Postprocess (its metadata "
                f"has no format={FORMAT!r}); write one with Postprocess.save or `valuelens fit`"
            )
            raise ConfigError(msg)
        version = metadata.get("format_version", "")
        if version not in READABLE_VERSIONS:
            msg = (
                f"{str(source)!r} has Postprocess format version {version!r}; this valuelens reads versions "
                f"{', '.join(READABLE_VERSIONS)}"
            )
            raise ConfigError(msg)
        kind: Any = metadata.get("kind")
        _check_kind(kind)
        try:
            params = json.loads(metadata.get("params", ""))
            config = json.loads(metadata["encoder_config"]) if "encoder_config" in metadata else None
        except json.JSONDecodeError as exc:
            msg = f"{str(source)!r} has corrupt Postprocess metadata ({exc})"
            raise ConfigError(msg) from exc
        if not isinstance(params, dict):
            msg = f"{str(source)!r} has corrupt Postprocess metadata (params is not a JSON object)"
            raise ConfigError(msg)
        wanted = set(_TENSORS[kind])
        if set(tensors) != wanted:
            msg = (
                f"{str(source)!r} holds the tensors {sorted(tensors)}, but a {kind!r} Postprocess "
                f"holds {sorted(wanted)}"
            )
            raise ConfigError(msg)
        state = cls(
            kind,
            tensors["mean"],
            tensors.get("components"),
            tensors.get("scale"),
            tensors.get("matrix"),
            eps=params.get("eps", DEFAULT_EPS),
            rms=params.get("rms", 1.0),
            n_fitted=params.get("n_fitted", 0),
            fitted_on=metadata.get("fitted_on"),
            model=metadata.get("model"),
            encoder_config=config,
        )
        saved = {key: params.get(key) for key in ("k", "dim", "input_dim", "output_dim")}
        actual = {key: state.config()[key] for key in saved}
        if saved != actual:
            msg = f"{str(source)!r} is inconsistent: its metadata says {saved}, its tensors give {actual}"
            raise ConfigError(msg)
        return state

    def __repr__(self) -> str:
        params = {"abtt": f", k={self.k}", "whiten": f", dim={self.dim}"}.get(self.kind, "")
        fitted = f", fitted_on={self.fitted_on!r}" if self.fitted_on else ""
        return f"Postprocess(kind={self.kind!r}{params}, {self.input_dim} -> {self.output_dim}{fitted})"


def _unresolved_as(recorded: EncoderConfig, wanted: EncoderConfig) -> EncoderConfig:
    """``recorded`` with its layer specs taken from ``wanted`` wherever either side is unresolved
    (``"auto"`` against a tuple cannot be compared without the model); resolved tuples are compared."""

    def unresolved(a: object, b: object) -> bool:
        return not (isinstance(a, tuple) and isinstance(b, tuple))

    if unresolved(recorded.layers, wanted.layers):
        recorded = recorded.replace(layers=wanted.layers)
    if len(recorded.fusion) == len(wanted.fusion):
        parts = tuple(
            dataclasses.replace(mine, layers=theirs.layers)
            if unresolved(mine.layers, theirs.layers)
            else mine
            for mine, theirs in zip(recorded.fusion, wanted.fusion, strict=True)
        )
        recorded = recorded.replace(fusion=parts)
    return recorded


def load_postprocess(reference: str, config: EncoderConfig | None = None) -> Postprocess:
    """Load the fitted state ``reference`` names (a ``.safetensors`` path or ``"builtin:NAME"``,
    :mod:`valuelens.presets.builtin`).

    When the state records the spec it was fitted for, every field of ``config`` but ``max_length``,
    ``long_text`` and ``query_template`` (:data:`~valuelens.config.STATE_FREE_FIELDS`) must match it. Usage: ``load_postprocess(config.postprocess, encoder.config)``.
    """
    if reference.startswith(FIT_PREFIX):
        msg = (
            f"postprocess={reference!r} is fitted by the encoder when it loads the model "
            "(valuelens.states), not loaded from a file"
        )
        raise ConfigError(msg)
    path = (
        builtin_path(reference[len(BUILTIN_PREFIX) :])
        if reference.startswith(BUILTIN_PREFIX)
        else Path(reference)
    )
    state = Postprocess.load(path)
    fitted_for = state.encoder_config
    if config is not None and fitted_for:
        wanted = config.replace(postprocess=None)
        try:
            recorded = EncoderConfig.from_dict({**fitted_for, "postprocess": None})
        except ConfigError:
            recorded = None
        if recorded is not None:
            differing = [
                item
                for item in _unresolved_as(recorded, wanted).diff(wanted)
                if item.split(":")[0] not in STATE_FREE_FIELDS
            ]
            if differing:
                msg = (
                    f"the post-processing state {reference!r} was fitted for another spec: "
                    + "; ".join(differing)
                    + ". Pass postprocess=None to embed without it, or a state fitted for this spec "
                    "(`valuelens fit ... -o state.safetensors`, then postprocess='state.safetensors')"
                )
                raise ConfigError(msg)
    return state
