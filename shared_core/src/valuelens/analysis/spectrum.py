"""The EmbedFilter paper's "average token" and Logit Spectroscopy: which singular directions of W_U write
the frequent tokens.

Usage::

    counts = token_counts(tokenizer, load_corpus("all"), vocab_size=w_u.shape[0])
    spec = logit_spectroscopy(w_u, counts, tau=2, labels=lambda t: token_label(tokenizer, t))
    spec.delta_logprob[:5], spec.regions()["head"], spec.edges_carry_frequent
    spec.write(Path("out/spectrum"), command="valuelens spectrum ...")

Definitions (W_U ``[V, d]`` = U Σ Vᵀ, singular values σ_1 ≥ … ≥ σ_d, right singular vectors v_i):

- token distribution with add-one smoothing: ``p̂_t = (c_t + 1) / (Σ c + V)`` from the token counts c of
  real text;
- the average token ``ĥ = W_U⁺ (log p̂ − mean_t log p̂)`` (the paper's ``log(p̂)·W_U⁺``, with log p̂
  centred because logits are defined up to a constant; ``center=False`` gives the literal formula, in
  which the top direction absorbs the constant −mean log p̂ ≈ 12 nats); W_U⁺ = V Σ⁻¹ Uᵀ, directions with
  σ_i ≤ 1e-6 σ_1 left out: the post-norm hidden state whose logits best match log p̂ in least squares;
- its coefficient on direction i, ``c_i = v_iᵀ ĥ``; removing it changes the logits by ``−c_i W_U v_i``;
- ``π(h) = mean_{t ∈ T} log softmax(W_U h)_t`` over T, the ``n_top`` (100) most frequent tokens of the
  corpus: the frequent tokens' mean log-probability;
- **Logit Spectroscopy**: ``Δπ^(i) = π(ĥ) − π(ĥ − c_i v_i)``, the drop in the frequent tokens' mean
  log-probability when direction i is removed from ĥ. Positive: direction i writes frequent tokens.
  ``delta_logit`` holds the same drop for the mean raw logit, ``c_i · mean_{t∈T} (W_U v_i)_t`` (not
  shift-invariant, so reported but not plotted).

The directions are sorted by descending singular value (index 0 = largest); EmbedFilter(τ) keeps the
middle band :func:`valuelens.embed_filter.band`. The paper finds Δπ large at both edges and small in
the band.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from valuelens.embed_filter import EmbedFilter, band
from valuelens.errors import ConfigError

from .common import figure, md_token, write_report
from .lens import top_tokens

__all__ = ["RCOND", "Spectrum", "average_token", "delta_pi", "log_frequencies", "logit_spectroscopy"]

#: singular values at or below RCOND × the largest count as zero in W_U⁺
RCOND = 1e-6
#: share of the directions at each edge reported as "head" (largest σ) and "tail" (smallest σ)
EDGE = 0.1


def log_frequencies(counts: np.ndarray, *, center: bool = False) -> Tensor:
    """``log p̂`` with add-one smoothing, fp64 ``[V]``: ``log((c + 1) / (Σ c + V))``; ``center`` subtracts
    its mean over the vocabulary."""
    c = torch.as_tensor(np.asarray(counts), dtype=torch.float64)
    logp = torch.log((c + 1) / (c.sum() + c.numel()))
    return logp - logp.mean() if center else logp


def _spectrum(w_u: Tensor) -> tuple[Tensor, Tensor]:
    """Right singular vectors (rows, σ descending) and singular values of W_U (cached per tensor)."""
    full = EmbedFilter.from_weight(w_u, tau=1)
    assert full.singular_values is not None
    return full.projection, full.singular_values


def average_token(w_u: Tensor, counts: np.ndarray, *, center: bool = True) -> Tensor:
    """The average token ``ĥ = W_U⁺ log p̂`` fp64 ``[d]``, log p̂ centred unless ``center=False``
    (see the module docstring)."""
    if w_u.dim() != 2 or len(counts) != w_u.shape[0]:
        msg = f"counts must have one entry per row of W_U {tuple(w_u.shape)}, got {len(counts)}"
        raise ConfigError(msg)
    vh, s = _spectrum(w_u)
    return _coefficients(w_u, vh, s, log_frequencies(counts, center=center)) @ vh.to(torch.float64)


def _coefficients(w_u: Tensor, vh: Tensor, s: Tensor, logp: Tensor) -> Tensor:
    """``c = Vᵀ ĥ`` fp64 ``[d]``: ``c_i = v_iᵀ W_Uᵀ log p̂ / σ_i²`` (0 where σ_i ≤ RCOND σ_1)."""
    g = w_u.to(torch.float64).T @ logp  # W_Uᵀ log p̂  [d]
    s64 = s.to(torch.float64)
    keep = s64 > RCOND * s64.max()
    return torch.where(keep, (vh.to(torch.float64) @ g) / s64.clamp_min(1e-300) ** 2, 0.0)


@dataclass(frozen=True)
class Spectrum:
    """Logit Spectroscopy of one model's W_U on one corpus (see the module docstring)."""

    model: str
    corpus: str
    n_texts: int
    n_tokens: int
    tau: float
    offset: int
    singular_values: tuple[float, ...]
    coefficients: tuple[float, ...]
    delta_logprob: tuple[float, ...]
    delta_logit: tuple[float, ...]
    n_top: int
    frequent: tuple[str, ...]  # labels of the 20 most frequent tokens
    fit: float  # Pearson correlation of W_U ĥ with log p̂ over the vocabulary
    average_top: tuple[str, ...]  # top-10 tokens of W_U ĥ
    average_top_filtered: tuple[str, ...]  # top-10 tokens of W_U P ĥ
    center: bool = True

    @property
    def hidden_size(self) -> int:
        return len(self.singular_values)

    @property
    def band(self) -> tuple[int, int]:
        """EmbedFilter's kept band ``[start, stop)`` for ``tau`` and ``offset``."""
        return band(self.hidden_size, self.tau, self.offset)

    def region_bounds(self) -> dict[str, tuple[int, int]]:
        """Index ranges: ``head`` (top 10 % of σ), ``middle`` (between), ``tail`` (bottom 10 %), ``band``."""
        d = self.hidden_size
        edge = max(1, math.ceil(EDGE * d))
        return {"head": (0, edge), "middle": (edge, d - edge), "tail": (d - edge, d), "band": self.band}

    def regions(self) -> dict[str, dict[str, float]]:
        """Per region of :meth:`region_bounds`: ``mean`` and ``median`` Δπ, and ``top_share``, the share of
        the top 10 % directions by Δπ that fall in it (a region holding x % of the directions expects x %)."""
        values = np.asarray(self.delta_logprob)
        d = len(values)
        top = np.argsort(-values, kind="stable")[: max(1, math.ceil(EDGE * d))]
        return {
            name: {
                "mean": float(values[a:b].mean()),
                "median": float(np.median(values[a:b])),
                "top_share": float(((top >= a) & (top < b)).mean()),
                "size_share": (b - a) / d,
            }
            for name, (a, b) in self.region_bounds().items()
        }

    @property
    def edges_carry_frequent(self) -> bool:
        """The paper's finding: both edges' mean Δπ above the kept band's, and positive."""
        r = self.regions()
        return min(r["head"]["mean"], r["tail"]["mean"]) > max(r["band"]["mean"], 0.0)

    def top_directions(self, n: int = 10) -> list[tuple[int, float]]:
        """The ``n`` directions with the largest Δπ: ``(index, Δπ)``."""
        order = np.argsort(-np.asarray(self.delta_logprob), kind="stable")[:n]
        return [(int(i), self.delta_logprob[i]) for i in order]

    def to_markdown(self, command: str) -> str:
        lo, hi = self.band
        bounds, stats = self.region_bounds(), self.regions()
        centred = "centred" if self.center else "not centred"
        lines = [
            f"```\n{command}\n```",
            "",
            f"Model: {self.model}; W_U {self.hidden_size} singular directions; corpus `{self.corpus}` "
            f"({self.n_texts} texts, {self.n_tokens} tokens); T = the {self.n_top} most frequent tokens; "
            f"log p̂ {centred}; EmbedFilter τ={self.tau:g} keeps [{lo}, {hi}).",
            "",
            f"Most frequent tokens: {' '.join(map(md_token, self.frequent))}",
            "",
            f"Average token ĥ: corr(W_U ĥ, log p̂) = {self.fit:.3f}; top-10 of W_U ĥ: "
            f"{' '.join(map(md_token, self.average_top))}; after EmbedFilter (W_U P ĥ): "
            f"{' '.join(map(md_token, self.average_top_filtered))}",
            "",
            "| region | directions | mean Δπ (nats) | median Δπ | share of the top-10 % Δπ directions |",
            "|---|---|---:|---:|---:|",
        ]
        names = {
            "head": "head (largest 10 % of σ)",
            "middle": "middle 80 %",
            "tail": "tail (smallest 10 % of σ)",
            "band": f"EmbedFilter band (τ={self.tau:g})",
        }
        for key, (a, b) in bounds.items():
            s = stats[key]
            lines.append(
                f"| {names[key]} | [{a}, {b}) | {s['mean']:+.4f} | {s['median']:+.4f} | "
                f"{s['top_share']:.2f} (expected {s['size_share']:.2f}) |"
            )
        verdict = "yes" if self.edges_carry_frequent else "no"
        lines += [
            "",
            f"Both edges carry frequent tokens (head and tail mean Δπ above the band's, and positive): "
            f"**{verdict}**.",
            "",
            "| rank | direction | σ | Δπ (nats) | region |",
            "|---:|---:|---:|---:|---|",
        ]
        for rank, (i, value) in enumerate(self.top_directions(), start=1):
            region = next(k for k in ("head", "tail", "middle") if bounds[k][0] <= i < bounds[k][1])
            kept = " (kept by EmbedFilter)" if lo <= i < hi else ""
            lines.append(f"| {rank} | {i} | {self.singular_values[i]:.3f} | {value:+.4f} | {region}{kept} |")
        return "\n".join(lines) + "\n"

    def to_dict(self, command: str) -> dict[str, Any]:
        return {
            "command": command,
            "model": self.model,
            "corpus": self.corpus,
            "n_texts": self.n_texts,
            "n_tokens": self.n_tokens,
            "n_top": self.n_top,
            "center": self.center,
            "tau": self.tau,
            "offset": self.offset,
            "band": list(self.band),
            "regions": {k: list(v) for k, v in self.region_bounds().items()},
            "region_stats": self.regions(),
            "edges_carry_frequent": self.edges_carry_frequent,
            "fit_pearson": self.fit,
            "frequent_tokens": list(self.frequent),
            "average_token_top10": list(self.average_top),
            "average_token_top10_filtered": list(self.average_top_filtered),
            "top_directions": [[i, v] for i, v in self.top_directions()],
            "singular_values": list(self.singular_values),
            "coefficients": list(self.coefficients),
            "delta_logprob": list(self.delta_logprob),
            "delta_logit": list(self.delta_logit),
        }

    def plot(self, path: Path) -> None:
        """Δπ against the singular index (σ descending, symlog scale), each region's mean as a step,
        EmbedFilter's band shaded, σ on a second axis."""
        values = np.asarray(self.delta_logprob)
        index = np.arange(len(values))
        lo, hi = self.band
        bounds, stats = self.region_bounds(), self.regions()
        with figure(path, figsize=(8, 3.8)) as fig:
            ax = fig.subplots()
            ax.plot(index, values, ".", ms=2, color="tab:blue", label="Δπ per direction")
            for i, key in enumerate(("head", "middle", "tail")):
                a, b = bounds[key]
                label = "region mean" if i == 0 else None
                ax.hlines(stats[key]["mean"], a, b - 1, color="tab:red", lw=2, label=label)
            ax.axvspan(
                lo - 0.5, hi - 0.5, alpha=0.12, color="tab:green", label=f"EmbedFilter band τ={self.tau:g}"
            )
            ax.axhline(0, color="grey", lw=0.5)
            small = float(np.median(np.abs(values))) if values.size else 0.0
            ax.set_yscale("symlog", linthresh=10 ** math.floor(math.log10(max(small, 1e-9))))
            ax.set_xlabel("singular direction (σ descending)")
            ax.set_ylabel(f"Δπ (nats): top-{self.n_top} mean log-prob drop")
            ax.set_title(
                f"{self.model} · Logit Spectroscopy of the average token · {self.corpus}", fontsize=9
            )
            twin = ax.twinx()
            twin.plot(index, self.singular_values, color="grey", lw=0.8, ls="--")
            twin.set_yscale("log")
            twin.set_ylabel("σ (dashed)", color="grey")
            ax.legend(fontsize=7, loc="upper center")
            ax.grid(alpha=0.3)

    def write(self, stem: Path, *, command: str) -> list[Path]:
        """Write ``stem.md``, ``stem.json`` and ``stem.png``."""
        return write_report(stem, self.to_markdown(command), self.to_dict(command), self.plot)


def delta_pi(
    w_u: Tensor,
    counts: np.ndarray,
    *,
    n_top: int = 100,
    center: bool = True,
    chunk: int = 64,
    progress: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Δπ (log-prob) and Δ mean logit of every direction, the coefficients c and ĥ (all fp64).

    Usage: ``dlp, dlogit, c, h = delta_pi(w_u, counts)``; index i is the i-th largest singular value.
    """
    from tqdm.auto import tqdm

    vh, s = _spectrum(w_u)
    c = _coefficients(w_u, vh, s, log_frequencies(counts, center=center))
    h = c @ vh.to(torch.float64)
    top = torch.tensor(top_tokens(np.asarray(counts), n_top), dtype=torch.long)
    if len(top) == 0:
        msg = "the corpus has no tokens: nothing is frequent"
        raise ConfigError(msg)
    w = w_u.to(torch.float32)
    logits = (w.to(torch.float64) @ h).unsqueeze(1)  # [V, 1]
    base = (logits[top, 0] - torch.logsumexp(logits[:, 0], dim=0)).mean()
    d = vh.shape[0]
    d_logprob = torch.empty(d, dtype=torch.float64)
    d_logit = torch.empty(d, dtype=torch.float64)
    for start in tqdm(range(0, d, chunk), desc="spectroscopy", unit="chunk", disable=not progress):
        rows = slice(start, min(start + chunk, d))
        change = (w @ vh[rows].T).to(torch.float64) * c[rows]  # c_i W_U v_i  [V, n]
        shifted = logits - change
        pi = (shifted[top] - torch.logsumexp(shifted, dim=0)).mean(dim=0)
        d_logprob[rows] = base - pi
        d_logit[rows] = change[top].mean(dim=0)
    return d_logprob, d_logit, c, h


def logit_spectroscopy(
    w_u: Tensor,
    counts: np.ndarray,
    *,
    tau: float = 2,
    offset: int = 0,
    n_top: int = 100,
    center: bool = True,
    model: str = "",
    corpus: str = "",
    n_texts: int = 0,
    labels: Callable[[int], str] = str,
    progress: bool = False,
) -> Spectrum:
    """Logit Spectroscopy of ``w_u`` ``[V, d]`` on token ``counts`` ``[V]`` (see the module docstring).

    ``labels`` turns token ids into readable strings for the report (e.g. ``token_label`` with the
    model's tokenizer).
    """
    counts = np.asarray(counts)
    if w_u.dim() != 2 or len(counts) != w_u.shape[0]:
        msg = f"counts must have one entry per row of W_U {tuple(w_u.shape)}, got {len(counts)}"
        raise ConfigError(msg)
    band(w_u.shape[1], tau, offset)  # validate before the work
    d_logprob, d_logit, c, h = delta_pi(w_u, counts, n_top=n_top, center=center, progress=progress)
    s = _spectrum(w_u)[1]
    logp = log_frequencies(counts)
    w64 = w_u.to(torch.float64)
    fitted = w64 @ h
    fit = float(torch.corrcoef(torch.stack([fitted, logp]))[0, 1])
    ef = EmbedFilter.from_weight(w_u, tau=tau, offset=offset)
    p = ef.projection.to(torch.float64)
    filtered = w64 @ (p.T @ (p @ h))
    return Spectrum(
        model=model,
        corpus=corpus,
        n_texts=n_texts,
        n_tokens=int(counts.sum()),
        tau=float(tau),
        offset=int(offset),
        singular_values=tuple(float(v) for v in s.tolist()),
        coefficients=tuple(c.tolist()),
        delta_logprob=tuple(d_logprob.tolist()),
        delta_logit=tuple(d_logit.tolist()),
        n_top=n_top,
        frequent=tuple(labels(t) for t in top_tokens(counts, 20)),
        fit=fit,
        average_top=_top_labels(fitted, labels),
        average_top_filtered=_top_labels(filtered, labels),
        center=center,
    )


def _top_labels(logits: Tensor, labels: Callable[[int], str], k: int = 10) -> tuple[str, ...]:
    return tuple(labels(int(t)) for t in logits.topk(k).indices.tolist())
