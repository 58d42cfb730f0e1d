"""EmbedFilter: project residual-stream embeddings onto the middle band of W_U's right singular vectors.

Usage::

    ef = EmbedFilter.from_model(model_or_path, tau=2)   # SVD of the unembedding matrix, cached
    small = ef.transform(embeddings)                    # [n, d] -> [n, d // tau]
    ef.save("filter/"); ef = EmbedFilter.load("filter/")

From *Your UnEmbedding Matrix is Secretly a Feature Lens*: with W_U = U Σ Vᵀ (singular values sorted
large to small) and k = d // τ, keep V[:, l:l+k] with l = (d - k) // 2 + offset. The top directions
carry the frequent-token "fog", the bottom ones little semantics. The right singular vectors are
computed from the Gram matrix W_Uᵀ W_U (streamed in fp64, then ``eigh``), which matches the SVD at
about twice the speed; signs are arbitrary and cosines do not depend on them.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from valuelens.errors import ConfigError
from valuelens.filter_band import band

CONFIG_NAME = "embed_filter.json"
WEIGHTS_NAME = "embed_filter.safetensors"

# id(weight) -> (weakref to it, its in-place version counter, (Vh, S)); entries die with the tensor
_SPECTRA: dict[int, tuple[weakref.ref[Tensor], int, tuple[Tensor, Tensor]]] = {}
_SPECTRA_LOCK = threading.Lock()


def right_singular_vectors(weight: Tensor, chunk: int = 8192) -> tuple[Tensor, Tensor]:
    """Right singular vectors (rows, large to small) and singular values of ``weight`` ``[V, d]``.

    W_Uᵀ W_U is accumulated in fp64 over row chunks and diagonalized (``eigh``): the same vectors as
    ``torch.linalg.svd`` (the official code's choice, up to sign) at about twice the speed. Returns
    fp32 CPU tensors.
    """
    if weight.dim() != 2:
        msg = f"the unembedding matrix must be 2-D [vocab, hidden], got shape {tuple(weight.shape)}"
        raise ConfigError(msg)
    w = weight.detach()
    d = w.shape[1]
    gram = torch.zeros((d, d), dtype=torch.float64, device=w.device)
    for start in range(0, w.shape[0], chunk):
        block = w[start : start + chunk].to(torch.float64)
        gram += block.T @ block
    eigenvalues, eigenvectors = torch.linalg.eigh(gram.cpu())
    order = torch.argsort(eigenvalues, descending=True)
    singular = eigenvalues[order].clamp_min(0).sqrt()
    return eigenvectors[:, order].T.contiguous().to(torch.float32), singular.to(torch.float32)


def _forget(key: int) -> Callable[[weakref.ref[Tensor]], None]:
    """The weakref callback that drops ``key``'s cache entry when its tensor is freed."""

    def callback(_: weakref.ref[Tensor]) -> None:
        _SPECTRA.pop(key, None)

    return callback


def _spectrum(weight: Tensor) -> tuple[Tensor, Tensor]:
    """The spectrum of ``weight``, computed once per tensor (recomputed if it was modified in place)."""
    # inference tensors keep no version counter (and cannot be changed in place outside inference mode)
    key, version = id(weight), 0 if weight.is_inference() else weight._version
    with _SPECTRA_LOCK:
        entry = _SPECTRA.get(key)
    if entry is not None and entry[0]() is weight and entry[1] == version:
        return entry[2]
    spectrum = right_singular_vectors(weight)
    with _SPECTRA_LOCK:
        _SPECTRA[key] = (weakref.ref(weight, _forget(key)), version, spectrum)
    return spectrum


def unembedding_weight(model: nn.Module) -> Tensor:
    """W_U of a causal LM (``[vocab, hidden]``), tied or not; base models fall back to tied embeddings."""
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if head is not None and getattr(head, "weight", None) is not None:
        return head.weight
    config = getattr(model, "config", None)
    tied = bool(
        getattr(config.get_text_config() if config is not None else None, "tie_word_embeddings", False)
    )
    get_embeddings = getattr(model, "get_input_embeddings", None)
    if tied and callable(get_embeddings):
        return get_embeddings().weight
    msg = (
        f"{type(model).__name__} has no LM head and its embeddings are not tied to one: "
        "pass the model's path (EmbedFilter.from_model(path)) so that only the head is loaded"
    )
    raise ConfigError(msg)


def load_unembedding(path: str | os.PathLike) -> Tensor:
    """Load only W_U from a checkpoint folder (no decoder layers are loaded)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    config = AutoConfig.from_pretrained(path)
    text_config = config.get_text_config()
    text_config.num_hidden_layers = 0
    if getattr(text_config, "layer_types", None) is not None:
        text_config.layer_types = []
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the skipped decoder layers are reported as "unexpected" keys
    try:
        model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=torch.float32)
    finally:
        hf_logging.set_verbosity(previous)
    return unembedding_weight(model).detach()


@dataclass(frozen=True, eq=False)
class EmbedFilter:
    """A fixed linear projection ``x -> x @ P.T`` onto a band of W_U's right singular vectors."""

    projection: Tensor  # [k, d] fp32, rows = kept right singular vectors
    tau: float
    offset: int = 0
    hidden_size: int = 0
    singular_values: Tensor | None = None  # of the kept band, for inspection
    kind: Literal["spectral", "truncation", "random"] = "spectral"
    seed: int | None = None  # of a ``random`` filter

    @classmethod
    def from_weight(cls, weight: Tensor, tau: float = 2, offset: int = 0) -> EmbedFilter:
        """Build from an unembedding matrix ``[vocab, hidden]`` (its spectrum is cached per tensor)."""
        vh, s = _spectrum(weight)
        d = vh.shape[1]
        start, stop = band(d, tau, offset)
        return cls(vh[start:stop].clone(), float(tau), int(offset), d, s[start:stop].clone())

    @classmethod
    def truncation(cls, hidden_size: int, tau: float = 2) -> EmbedFilter:
        """Ablation baseline: keep the first ``d // tau`` coordinates (Matryoshka-style truncation)."""
        start, stop = band(hidden_size, tau)
        return cls(
            torch.eye(hidden_size)[: stop - start].contiguous(),
            float(tau),
            0,
            hidden_size,
            None,
            "truncation",
        )

    @classmethod
    def random_subset(cls, hidden_size: int, tau: float = 2, seed: int = 0) -> EmbedFilter:
        """Ablation baseline: keep ``d // tau`` coordinates chosen at random (seeded)."""
        start, stop = band(hidden_size, tau)
        rows = (
            torch.randperm(hidden_size, generator=torch.Generator().manual_seed(seed))[: stop - start]
            .sort()
            .values
        )
        return cls(
            torch.eye(hidden_size)[rows].contiguous(), float(tau), 0, hidden_size, None, "random", int(seed)
        )

    @classmethod
    def from_model(
        cls, model_or_path: nn.Module | str | os.PathLike, tau: float = 2, offset: int = 0
    ) -> EmbedFilter:
        """Build from a loaded causal LM (or base model with tied embeddings) or a checkpoint path."""
        band(10**6, tau, 0)  # validate tau before any loading
        if isinstance(model_or_path, nn.Module):
            return cls.from_weight(unembedding_weight(model_or_path), tau, offset)
        from valuelens import models

        return cls.from_weight(load_unembedding(models.path(model_or_path)), tau, offset)

    @property
    def dimension(self) -> int:
        """Output dimension (``hidden_size // tau``)."""
        return int(self.projection.shape[0])

    @property
    def band(self) -> tuple[int, int]:
        """The kept range ``[l, r)`` of singular-vector indices (spectral filters only)."""
        if self.kind != "spectral":
            msg = f"a {self.kind!r} EmbedFilter (an ablation baseline) keeps coordinates, not a spectral band"
            raise ConfigError(msg)
        return band(self.hidden_size, self.tau, self.offset)

    @overload
    def transform(self, x: Tensor) -> Tensor: ...
    @overload
    def transform(self, x: np.ndarray) -> np.ndarray: ...

    def transform(self, x: Any) -> Any:
        """Project ``[..., d]`` embeddings to ``[..., k]`` (numpy in → numpy out, tensor in → tensor out)."""
        if isinstance(x, np.ndarray):
            return self.transform(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))).numpy()
        if not isinstance(x, Tensor):
            msg = f"EmbedFilter.transform takes a numpy array or a torch tensor, got {type(x).__name__}"
            raise TypeError(msg)
        if x.shape[-1] != self.hidden_size:
            msg = (
                f"EmbedFilter expects {self.hidden_size}-dim residual-stream embeddings, got {x.shape[-1]}-dim "
                "ones: it applies to residual-space recipes (hs, last-token, wmp, aligned-wva, aligned-va)"
            )
            raise ConfigError(msg)
        p = self.projection.to(device=x.device)
        return (x.to(torch.float32) @ p.T).to(x.dtype if x.is_floating_point() else torch.float32)

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "kind": self.kind,
            "tau": self.tau,
            "offset": self.offset,
            "hidden_size": self.hidden_size,
            "dimension": self.dimension,
        }
        if self.seed is not None:
            config["seed"] = self.seed
        return config

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``embed_filter.json`` and ``embed_filter.safetensors`` into ``directory``."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {"projection": self.projection.contiguous()}
        if self.singular_values is not None:
            tensors["singular_values"] = self.singular_values.contiguous()
        save_file(tensors, str(path / WEIGHTS_NAME))
        (path / CONFIG_NAME).write_text(json.dumps(self.config(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: str | os.PathLike) -> EmbedFilter:
        """Load a filter written by :meth:`save`."""
        path = Path(directory)
        try:
            config = json.loads((path / CONFIG_NAME).read_text(encoding="utf-8"))
            tensors = load_file(str(path / WEIGHTS_NAME))
        except FileNotFoundError as exc:
            msg = f"no saved EmbedFilter in {str(path)!r} (expected {CONFIG_NAME} and {WEIGHTS_NAME})"
            raise ConfigError(msg) from exc
        return cls(
            tensors["projection"],
            float(config["tau"]),
            int(config["offset"]),
            int(config["hidden_size"]),
            tensors.get("singular_values"),
            config.get("kind", "spectral"),
            config.get("seed"),
        )

    def __repr__(self) -> str:
        if self.kind != "spectral":
            seed = "" if self.seed is None else f", seed={self.seed}"
            return f"EmbedFilter(kind={self.kind!r}, tau={self.tau:g}{seed}, {self.hidden_size} -> {self.dimension})"
        start, stop = self.band
        return f"EmbedFilter(tau={self.tau:g}, offset={self.offset}, band=[{start}, {stop}), {self.hidden_size} -> {self.dimension})"
