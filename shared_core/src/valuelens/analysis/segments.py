"""The Value Aggregation paper's segment-matching test (its Fig. 2): does a text's first part retrieve its
second part, layer by layer, with value vectors (VA) against hidden states (HS)?

Usage::

    probe = load_probe("smollm2-135m")                       # all layers loaded
    result = segment_matching(probe, load_corpus("lee"), limit=200, seed=0)
    result.recall["va"][1]                                    # recall@1 per layer
    result.write(Path("out/segments"), command="valuelens segments lee")

Each text (cut to ``max_length`` tokens, kept if it has at least ``min_tokens``) is split at a token
position drawn uniformly from ``[⌈n/4⌉, ⌊3n/4⌋]`` (``numpy.random.default_rng(seed)``, after the seeded
choice of ``limit`` texts); prefix and suffix are decoded back to text. Both are embedded with each
recipe at every selected layer in one forward pass per batch (one capture with one plan per recipe;
the per-layer vectors are the capture's ``layer_vectors()``, mean-pooled over all real tokens, as
``Encoder(recipe=r, layers=(i,))`` gives them). Recall@k: the share of prefixes whose own suffix is
among the k suffixes of highest cosine (a tie with the right suffix counts for it); chance is k/n.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from valuelens.encoder import Encoder
from valuelens.errors import ConfigError
from valuelens.layers import LayerSpec
from valuelens.readout import through_out_proj

from .common import figure, write_report

__all__ = ["SegmentMatching", "layer_vectors", "recall_at_k", "segment_matching", "split_texts"]

KS: tuple[int, ...] = (1, 5, 10)


def split_texts(
    tokenizer: Any,
    texts: Sequence[str],
    *,
    seed: int = 0,
    limit: int | None = None,
    max_length: int = 256,
    min_tokens: int = 16,
) -> tuple[list[int], list[str], list[str]]:
    """Choose up to ``limit`` texts with at least ``min_tokens`` tokens (seeded) and split each at a
    random token between 1/4 and 3/4 of its first ``max_length`` tokens.

    Returns the chosen text indices (in input order), the prefixes and the suffixes.
    """
    if min_tokens < 4:
        msg = f"min_tokens must be >= 4 (each half needs a token), got {min_tokens!r}"
        raise ConfigError(msg)
    ids = [row[:max_length] for row in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
    eligible = [i for i, row in enumerate(ids) if len(row) >= min_tokens]
    rng = np.random.default_rng(seed)
    if limit is not None and limit < len(eligible):
        eligible = sorted(int(i) for i in rng.choice(eligible, size=limit, replace=False))
    if len(eligible) < 2:
        msg = (
            f"segment matching needs at least 2 texts with >= {min_tokens} tokens, found {len(eligible)}: "
            "use a corpus of longer texts (lee, scifact) or lower --min-tokens"
        )
        raise ConfigError(msg)
    prefixes, suffixes = [], []
    for i in eligible:
        n = len(ids[i])
        cut = int(rng.integers(math.ceil(n / 4), math.floor(3 * n / 4) + 1))
        prefixes.append(tokenizer.decode(ids[i][:cut]).strip())
        suffixes.append(tokenizer.decode(ids[i][cut:]).strip())
    return eligible, prefixes, suffixes


def recall_at_k(queries: Tensor, keys: Tensor, ks: Sequence[int] = KS) -> dict[int, float]:
    """Recall@k of retrieving ``keys[i]`` for ``queries[i]`` among all keys by cosine."""
    q = torch.nn.functional.normalize(queries.to(torch.float64), dim=-1)
    k_ = torch.nn.functional.normalize(keys.to(torch.float64), dim=-1)
    sims = q @ k_.T
    rank = (sims > sims.diagonal().unsqueeze(1)).sum(dim=1)  # keys strictly better than the right one
    return {k: float((rank < k).to(torch.float64).mean()) for k in ks}


def layer_vectors(
    probe: Encoder,
    texts: Sequence[str],
    recipes: Sequence[str],
    layers: Sequence[int],
    *,
    batch_size: int = 16,
    max_length: int | None = None,
    progress: Any = None,
) -> dict[str, Tensor]:
    """Per-layer mean-pooled vectors of ``texts`` for each recipe: ``{recipe: [len(layers), n, F]}`` fp32
    (CPU), all from one forward per batch through ``probe``'s model (one capture plan per recipe).

    ``aligned-va`` vectors go through each layer's W_O, as ``Encoder(recipe="aligned-va", layers=(i,))``."""
    encoders = [
        Encoder(probe.model, probe.tokenizer, recipe=r, layers=list(layers), max_length=max_length)
        for r in dict.fromkeys(recipes)
    ]
    for enc in encoders:
        if enc.recipe.pool != "mean":
            msg = f"segment matching compares mean-pooled recipes (va, hs, aligned-va, ...), not {enc.recipe.name!r}"
            raise ConfigError(msg)
    lead = encoders[0]
    reader, runner = lead.reader, lead.runner
    tokenized, _ = reader.tokenize(texts)
    order = sorted(range(len(texts)), key=lambda i: -len(tokenized[i].ids))
    out = {enc.recipe.name: torch.empty((len(layers), len(texts), enc.readout.dimension)) for enc in encoders}
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = reader.collate([tokenized[i] for i in chunk])
            inputs = runner.model_inputs(batch, runner.device)
            readouts = [enc.readout for enc in encoders]
            with runner.capture(inputs["attention_mask"], batch, readouts) as session:
                runner.parts.backbone(**inputs)
            rows = torch.tensor(chunk)
            for enc, capture in zip(encoders, session.captures, strict=True):
                for j, (layer, vectors) in enumerate(zip(layers, capture.layer_vectors(), strict=True)):
                    if enc.recipe.project_out:
                        vectors = through_out_proj(lead.parts, layer, vectors)
                    out[enc.recipe.name][j, rows] = vectors.float().cpu()
            if progress is not None:
                progress.update(len(chunk))
    return out


@dataclass(frozen=True)
class SegmentMatching:
    """Recall@k of prefix → suffix retrieval per layer and recipe: ``recall[recipe][k][j]`` is layer
    ``layers[j]``."""

    model: str
    corpus: str
    n_texts: int
    seed: int
    max_length: int
    layers: tuple[int, ...]
    n_layers: int  # of the model
    recall: Mapping[str, Mapping[int, tuple[float, ...]]]

    @property
    def recipes(self) -> list[str]:
        return list(self.recall)

    @property
    def ks(self) -> list[int]:
        return list(next(iter(self.recall.values())))

    def middle(self) -> list[int]:
        """Positions (into ``layers``) of the middle third of the model's depth."""
        lo, hi = self.n_layers / 3, 2 * self.n_layers / 3
        return [j for j, layer in enumerate(self.layers) if lo <= layer < hi]

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per recipe: the best layer by recall@1 and its recall, and the mean recall@1 of the middle third."""
        out: dict[str, dict[str, Any]] = {}
        middle = self.middle()
        for recipe, by_k in self.recall.items():
            r1 = np.asarray(by_k[self.ks[0]])
            best = int(np.argmax(r1))
            out[recipe] = {
                "best_layer": self.layers[best],
                "best_recall": float(r1[best]),
                "middle_mean_recall": float(r1[middle].mean()) if middle else None,
                "all_layer_mean_recall": float(r1.mean()),
            }
        return out

    def wins(self, a: str, b: str) -> int:
        """Layers where recipe ``a``'s recall@1 beats ``b``'s."""
        k = self.ks[0]
        return sum(x > y for x, y in zip(self.recall[a][k], self.recall[b][k], strict=True))

    def to_markdown(self, command: str) -> str:
        heads = [f"{r.upper()} R@{k}" for r in self.recipes for k in self.ks]
        lines = [
            f"```\n{command}\n```",
            "",
            f"Model: {self.model}; corpus `{self.corpus}`: {self.n_texts} texts (seed {self.seed}, at most "
            f"{self.max_length} tokens each); chance R@k = k/{self.n_texts}.",
            "",
            "| layer | " + " | ".join(heads) + " |",
            "|---:|" + "---:|" * len(heads),
        ]
        for j, layer in enumerate(self.layers):
            cells = [f"{self.recall[r][k][j]:.3f}" for r in self.recipes for k in self.ks]
            lines.append(f"| {layer} | " + " | ".join(cells) + " |")
        k1 = self.ks[0]
        lines += [
            "",
            f"| recipe | best layer (R@{k1}) | best R@{k1} | mean R@{k1}, middle third | mean, all layers |",
        ]
        lines += ["|---|---:|---:|---:|---:|"]
        for recipe, s in self.summary().items():
            mid = "n/a" if s["middle_mean_recall"] is None else f"{s['middle_mean_recall']:.3f}"
            lines.append(
                f"| {recipe} | {s['best_layer']} | {s['best_recall']:.3f} | {mid} | {s['all_layer_mean_recall']:.3f} |"
            )
        if "va" in self.recall and "hs" in self.recall:
            lines += [
                "",
                f"VA beats HS at R@{k1} on {self.wins('va', 'hs')} of {len(self.layers)} layers "
                f"({sum(1 for j in self.middle() if self.recall['va'][k1][j] > self.recall['hs'][k1][j])} "
                f"of the {len(self.middle())} middle-third layers).",
            ]
        return "\n".join(lines) + "\n"

    def to_dict(self, command: str) -> dict[str, Any]:
        return {
            "command": command,
            "model": self.model,
            "corpus": self.corpus,
            "n_texts": self.n_texts,
            "seed": self.seed,
            "max_length": self.max_length,
            "layers": list(self.layers),
            "recall": {r: {str(k): list(v) for k, v in by_k.items()} for r, by_k in self.recall.items()},
            "summary": self.summary(),
        }

    def plot(self, path: Path) -> None:
        """Recall@1 (solid) and recall@10 (dashed) by layer for each recipe; chance dotted."""
        from matplotlib.ticker import MaxNLocator

        with figure(path) as fig:
            ax = fig.subplots()
            shown = dict.fromkeys((self.ks[0], self.ks[-1]))  # R@1 and R@10 (once if equal)
            for n, recipe in enumerate(self.recipes):
                for k, style in zip(shown, ("-", "--"), strict=False):
                    ax.plot(
                        self.layers,
                        self.recall[recipe][k],
                        style,
                        marker="o",
                        ms=3,
                        color=f"C{n}",
                        label=f"{recipe.upper()} R@{k}",
                    )
            ax.axhline(1 / self.n_texts, color="grey", ls=":", lw=0.8, label="chance R@1")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("layer")
            ax.set_ylabel("recall")
            ax.set_ylim(0, 1.02)
            ax.set_title(
                f"{self.model} · segment matching · {self.corpus} ({self.n_texts} texts)", fontsize=9
            )
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)

    def write(self, stem: Path, *, command: str) -> list[Path]:
        """Write ``stem.md``, ``stem.json`` and ``stem.png``."""
        return write_report(stem, self.to_markdown(command), self.to_dict(command), self.plot)


def segment_matching(
    probe: Encoder,
    texts: Sequence[str],
    *,
    recipes: Sequence[str] = ("va", "hs"),
    layers: LayerSpec = "all",
    limit: int | None = 200,
    seed: int = 0,
    max_length: int = 256,
    min_tokens: int = 16,
    batch_size: int = 16,
    ks: Sequence[int] = KS,
    corpus: str = "",
    show_progress: bool = False,
) -> SegmentMatching:
    """Split ``texts``, embed prefixes and suffixes per layer, and score recall@k (module docstring).

    ``probe`` holds the model (load it with every needed layer, e.g. ``load_probe``); ``layers`` is any
    layer spec (``"all"``, ``"8-14"``, ...) resolved against it.
    """
    from tqdm.auto import tqdm

    from valuelens.layers import resolve_layers

    chosen = resolve_layers(layers, probe.parts.n_layers)
    _, prefixes, suffixes = split_texts(
        probe.tokenizer, texts, seed=seed, limit=limit, max_length=max_length, min_tokens=min_tokens
    )
    n = len(prefixes)
    # the halves re-tokenize to about their share of max_length tokens; leave room for BOS and merges
    with tqdm(total=2 * n, desc="segments", unit="text", disable=not show_progress) as bar:
        vectors = layer_vectors(
            probe,
            prefixes + suffixes,
            recipes,
            chosen,
            batch_size=batch_size,
            max_length=max_length + 16,
            progress=bar,
        )
    recall: dict[str, dict[int, tuple[float, ...]]] = {}
    for recipe, per_layer in vectors.items():
        scores = [recall_at_k(per_layer[j, :n], per_layer[j, n:], ks) for j in range(len(chosen))]
        recall[recipe] = {k: tuple(s[k] for s in scores) for k in ks}
    return SegmentMatching(
        model=probe.name_or_path,
        corpus=corpus,
        n_texts=n,
        seed=seed,
        max_length=max_length,
        layers=chosen,
        n_layers=probe.parts.n_layers,
        recall=recall,
    )
