"""Logit Lens of an embedding, before and after EmbedFilter (the EmbedFilter paper's motivating figure).

Usage::

    enc = Encoder.from_pretrained("smollm2-135m", recipe="last-token", prompt="prompteol")
    lens = logit_lens(enc, ["A man is playing a guitar."], tau=2, k=10, frequent=top_tokens(counts, 100))
    lens.before[0], lens.after[0]          # ((token id, logit), ...) top-k, best first
    lens.write(Path("out/lens"), command="valuelens lens ...")

For a residual-space embedding x (recipes ``hs``, ``last-token``, ``wmp``, ``aligned-wva``,
``aligned-va``) the model's own final norm and unembedding W_U decode it:

- before: ``logits = W_U · norm(x)``;
- after: ``logits = W_U · P · norm(x)`` with ``P = V_b V_bᵀ`` the projector onto EmbedFilter's kept band
  ``V_b`` of W_U's right singular vectors. EmbedFilter follows the final norm, as in the official code;
  ``W_U P`` keeps exactly the band's part of W_U, so these are the logits the filtered embedding still
  expresses, read in the full d-dim space.

``norm`` is skipped when the encoder already applied it (``final_norm=True``). Logits are raw (Gemma's
final logit softcapping, a monotone map, would not change the top-k). The "fog" is measured as the share
of the top-k tokens among the ``n`` most frequent tokens of a reference corpus.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from valuelens.embed_filter import EmbedFilter
from valuelens.encoder import Encoder
from valuelens.errors import ConfigError

from .common import figure, layers_label, md_token, token_label, unembedding, write_report

__all__ = ["FREQUENCY_BINS", "LogitLens", "decode_top_k", "logit_lens", "top_tokens"]

#: frequency-rank bins of the plot's right panel: ranks [a, b) of the corpus's token counts
FREQUENCY_BINS: tuple[int, ...] = (0, 10, 100, 1000, 10000)


def top_tokens(counts: np.ndarray, n: int) -> list[int]:
    """The ``n`` most frequent token ids of ``counts`` (ties: lower id first), most frequent first."""
    order = np.lexsort((np.arange(len(counts)), -counts))
    return [int(i) for i in order[:n] if counts[i] > 0]


def decode_top_k(z: Tensor, w_u: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Top-``k`` token ids and logits of ``W_U · z`` for each row of ``z`` ``[n, d]`` (fp32)."""
    logits = z.to(torch.float32) @ w_u.to(z.device, torch.float32).T
    values, ids = logits.topk(k, dim=-1)
    return ids, values


@dataclass(frozen=True)
class LogitLens:
    """The top-k tokens of each text's embedding before and after EmbedFilter.

    ``before[i]`` / ``after[i]``: ``((token id, logit), ...)`` best first. ``frequent``: the reference
    corpus's most frequent token ids (empty when none was given). ``rank_bins``: per frequency-rank bin
    ``[a, b)``, the mean z-scored logit (over the vocabulary, per text) before and after.
    """

    model: str
    recipe: str
    layers: tuple[int, ...]
    prompt: str | None
    tau: float
    band: tuple[int, int]
    hidden_size: int
    texts: tuple[str, ...]
    before: tuple[tuple[tuple[int, float], ...], ...]
    after: tuple[tuple[tuple[int, float], ...], ...]
    labels: dict[int, str]
    frequent: frozenset[int] = frozenset()
    corpus: str | None = None
    rank_bins: tuple[tuple[int, int, float, float], ...] = ()

    @property
    def k(self) -> int:
        return len(self.before[0]) if self.before else 0

    def frequent_share(self, which: str) -> list[float]:
        """Per text, the share of the top-k tokens (``which``: ``"before"`` / ``"after"``) that are frequent."""
        rows = self.before if which == "before" else self.after
        return [sum(t in self.frequent for t, _ in row) / max(len(row), 1) for row in rows]

    def _cell(self, row: Sequence[tuple[int, float]]) -> str:
        return " ".join(
            f"**{md_token(self.labels[t])}**" if t in self.frequent else md_token(self.labels[t])
            for t, _ in row
        )

    def to_markdown(self, command: str) -> str:
        k, (start, stop) = self.k, self.band
        prompt = self.prompt or "none"
        lines = [
            f"```\n{command}\n```",
            "",
            f"Model: {self.model}; recipe {self.recipe}; layers {layers_label(self.layers)}; prompt {prompt}; "
            f"EmbedFilter τ={self.tau:g} keeps singular directions [{start}, {stop}) of {self.hidden_size}.",
        ]
        if self.frequent:
            lines.append(
                f"**Bold**: among the {len(self.frequent)} most frequent tokens of corpus `{self.corpus}`."
            )
        lines += [
            "",
            f"| text | top-{k} before EmbedFilter | top-{k} after | frequent before | after |",
            "|---|---|---|---:|---:|",
        ]
        shares = zip(self.frequent_share("before"), self.frequent_share("after"), strict=True)
        for text, b, a, (sb, sa) in zip(self.texts, self.before, self.after, shares, strict=True):
            shown = (text if len(text) <= 60 else text[:57] + "...").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {shown} | {self._cell(b)} | {self._cell(a)} | {sb:.2f} | {sa:.2f} |")
        if self.frequent:
            mb, ma = np.mean(self.frequent_share("before")), np.mean(self.frequent_share("after"))
            lines += [
                "",
                f"Share of frequent tokens in the top-{k}, mean over {len(self.texts)} texts: "
                f"before {mb:.2f}, after {ma:.2f}.",
            ]
        if self.rank_bins:
            lines += [
                "",
                "| corpus frequency rank | mean z-scored logit before | after |",
                "|---|---:|---:|",
            ]
            lines += [f"| {a}-{b - 1} | {zb:+.3f} | {za:+.3f} |" for a, b, zb, za in self.rank_bins]
        return "\n".join(lines) + "\n"

    def to_dict(self, command: str) -> dict[str, Any]:
        def tokens(row: Sequence[tuple[int, float]]) -> list[dict[str, Any]]:
            return [
                {"id": t, "token": self.labels[t], "logit": v, "frequent": t in self.frequent} for t, v in row
            ]

        shares_b, shares_a = self.frequent_share("before"), self.frequent_share("after")
        return {
            "command": command,
            "model": self.model,
            "recipe": self.recipe,
            "layers": list(self.layers),
            "prompt": self.prompt,
            "tau": self.tau,
            "band": list(self.band),
            "k": self.k,
            "corpus": self.corpus,
            "n_frequent": len(self.frequent),
            "mean_frequent_share_before": float(np.mean(shares_b)) if self.frequent else None,
            "mean_frequent_share_after": float(np.mean(shares_a)) if self.frequent else None,
            "texts": [
                {
                    "text": text,
                    "before": tokens(b),
                    "after": tokens(a),
                    "frequent_share_before": sb,
                    "frequent_share_after": sa,
                }
                for text, b, a, sb, sa in zip(
                    self.texts, self.before, self.after, shares_b, shares_a, strict=True
                )
            ],
            "rank_bins": [
                {"ranks": [a, b], "mean_z_logit_before": zb, "mean_z_logit_after": za}
                for a, b, zb, za in self.rank_bins
            ],
        }

    def plot(self, path: Path) -> None:
        """Left: frequent-token share of each text's top-k, before/after; right: mean z-scored logit per
        corpus frequency-rank bin (the fog: frequent tokens scoring high)."""
        with figure(path, figsize=(9, 3.5)) as fig:
            left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
            x = np.arange(len(self.texts))
            left.bar(x - 0.2, self.frequent_share("before"), 0.4, label="before")
            left.bar(x + 0.2, self.frequent_share("after"), 0.4, label=f"after (τ={self.tau:g})")
            left.set_xticks(x, [f"{i + 1}" for i in x])
            left.set_xlabel("text")
            left.set_ylabel(f"frequent tokens in top-{self.k}")
            left.set_ylim(0, 1)
            left.legend(fontsize=8)
            left.set_title(f"{self.model} · {self.recipe} · prompt {self.prompt or 'none'}", fontsize=9)
            if self.rank_bins:
                labels = [f"{a}-{b - 1}" for a, b, _, _ in self.rank_bins]
                xb = np.arange(len(labels))
                right.plot(xb, [r[2] for r in self.rank_bins], marker="o", label="before")
                right.plot(xb, [r[3] for r in self.rank_bins], marker="o", label="after")
                right.axhline(0, color="grey", lw=0.5)
                right.set_xticks(xb, labels, fontsize=7)
                right.set_xlabel(f"frequency rank in {self.corpus}")
                right.set_ylabel("mean z-scored logit")
                right.legend(fontsize=8)
            else:
                right.set_axis_off()
            for ax in (left, right):
                ax.grid(alpha=0.3)

    def write(self, stem: Path, *, command: str) -> list[Path]:
        """Write ``stem.md``, ``stem.json`` and ``stem.png``."""
        return write_report(stem, self.to_markdown(command), self.to_dict(command), self.plot)


def _rank_bins(
    z_before: Tensor, z_after: Tensor, counts: np.ndarray
) -> tuple[tuple[int, int, float, float], ...]:
    """Mean z-scored logit per frequency-rank bin (ranks by ``counts``, descending; ties by id)."""
    order = torch.from_numpy(np.lexsort((np.arange(len(counts)), -counts)).copy())
    edges = [e for e in FREQUENCY_BINS if e < len(counts)] + [len(counts)]
    out = []
    for a, b in itertools.pairwise(edges):
        ids = order[a:b]
        out.append((a, b, float(z_before[:, ids].mean()), float(z_after[:, ids].mean())))
    return tuple(out)


def _zscore(logits: Tensor) -> Tensor:
    return (logits - logits.mean(-1, keepdim=True)) / logits.std(-1, keepdim=True).clamp_min(1e-12)


def logit_lens(
    encoder: Encoder,
    texts: Sequence[str],
    *,
    tau: float = 2,
    offset: int = 0,
    k: int = 10,
    w_u: Tensor | None = None,
    counts: np.ndarray | None = None,
    n_frequent: int = 100,
    corpus: str | None = None,
    batch_size: int = 32,
    show_progress: bool = False,
) -> LogitLens:
    """Decode ``encoder``'s embeddings of ``texts`` through the model's final norm and W_U, before and after
    EmbedFilter(``tau``, ``offset``) (see the module docstring).

    ``encoder`` must give residual-space embeddings without EmbedFilter (the filter is applied here).
    ``w_u`` defaults to the model's own (:func:`~valuelens.analysis.common.unembedding`). ``counts``
    (token counts of a reference ``corpus``, :func:`~valuelens.analysis.corpus.token_counts`) marks the
    ``n_frequent`` most frequent tokens and fills the frequency-rank bins.
    """
    recipe = encoder.recipe
    if not recipe.residual:
        msg = (
            f"the Logit Lens decodes residual-stream embeddings, but recipe {recipe.name!r} gives "
            f"{recipe.space}-space vectors: use hs, last-token, wmp, aligned-wva or aligned-va"
        )
        raise ConfigError(msg)
    if encoder.embed_filter is not None:
        msg = "build the Encoder without embed_filter: logit_lens applies EmbedFilter itself (tau=)"
        raise ConfigError(msg)
    parts = encoder.parts
    if encoder.dimension != parts.hidden_size:
        msg = f"the embedding has {encoder.dimension} dims, not the model's {parts.hidden_size} (fusion?)"
        raise ConfigError(msg)
    if not k >= 1:
        msg = f"k must be >= 1, got {k!r}"
        raise ConfigError(msg)
    weight = unembedding(encoder.model) if w_u is None else w_u.detach().to(torch.float32)
    x = encoder.encode(
        list(texts), batch_size=batch_size, convert_to_tensor=True, show_progress=show_progress
    )
    assert isinstance(x, Tensor)
    z = normed(encoder, x).cpu()
    ef = EmbedFilter.from_weight(weight, tau=tau, offset=offset)
    z_after = (z @ ef.projection.T) @ ef.projection
    weight = weight.cpu()
    ids_b, val_b = decode_top_k(z, weight, k)
    ids_a, val_a = decode_top_k(z_after, weight, k)
    frequent: Collection[int] = top_tokens(counts, n_frequent) if counts is not None else ()
    rank_bins: tuple[tuple[int, int, float, float], ...] = ()
    if counts is not None:
        if len(counts) != weight.shape[0]:
            msg = f"counts has {len(counts)} entries, W_U {weight.shape[0]} rows"
            raise ConfigError(msg)
        rank_bins = _rank_bins(_zscore(z @ weight.T), _zscore(z_after @ weight.T), counts)
    shown = {int(t) for t in torch.cat([ids_b.flatten(), ids_a.flatten()]).tolist()}
    return LogitLens(
        model=encoder.name_or_path,
        recipe=recipe.name,
        layers=encoder.layers,
        prompt=encoder.config.prompt if isinstance(encoder.config.prompt, str) else None,
        tau=float(tau),
        band=ef.band,
        hidden_size=parts.hidden_size,
        texts=tuple(texts),
        before=_rows(ids_b, val_b),
        after=_rows(ids_a, val_a),
        labels={t: token_label(encoder.tokenizer, t) for t in sorted(shown)},
        frequent=frozenset(frequent),
        corpus=corpus,
        rank_bins=rank_bins,
    )


def normed(encoder: Encoder, x: Tensor) -> Tensor:
    """``x`` through the model's final norm (fp32 out), unless the encoder already applied it."""
    norm = encoder.parts.final_norm
    if encoder.config.final_norm or norm is None:
        return x.to(torch.float32)
    weight = next(norm.parameters(), None)
    dtype = weight.dtype if weight is not None else x.dtype
    device = weight.device if weight is not None else x.device
    with torch.inference_mode():
        return norm(x.to(device=device, dtype=dtype)).to(torch.float32)


def _rows(ids: Tensor, values: Tensor) -> tuple[tuple[tuple[int, float], ...], ...]:
    return tuple(
        tuple((int(t), float(v)) for t, v in zip(row_ids, row_values, strict=True))
        for row_ids, row_values in zip(ids.tolist(), values.tolist(), strict=True)
    )
