"""The layer sweep (``valuelens sweep``): the score of every single layer (the Value Aggregation paper's
Fig. 3) and of every contiguous band of layers, from one forward pass per batch; its report and plot.

Usage::

    sweeper = LayerSweeper(load_probe("smollm2-135m"), ["va", "hs"])
    for sweep in sweeper.run(load_task("stsb"), split="dev", min_width=3):
        print(sweep.to_markdown(command="valuelens sweep stsb"))
        sweep.write(sweep_stem(Path("out/sweep"), sweep.recipe, 2), command="valuelens sweep stsb")

A band's vector is the mean of its layers' vectors. The per-model ``layers="auto"`` defaults in
:mod:`valuelens.layers` are the best bands this sweep found on STS-B dev; ``run(..., propose=True)``
(``valuelens sweep --propose``) adds the best band as a ready ``layers=`` value and the
``AUTO_LAYERS`` entry for a new model to the report (``sweep.proposed_layers``, ``sweep.auto_entry()``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from valuelens import Encoder
from valuelens.batching import SharedEncoding
from valuelens.io import report_path

from .runner import evaluate
from .tasks import Task

__all__ = ["LayerSweep", "LayerSweeper", "plot_layer_curve", "sweep_stem"]


@dataclass(frozen=True)
class LayerSweep:
    """One recipe's per-layer scores and contiguous-band scores on one task split.

    Usage: ``sweep.best`` (the best band ``(first, last)``), ``sweep.bands[(0, 5)]``, ``sweep.write(stem,
    command=...)``
    """

    model: str
    recipe: str
    prompt: str | None
    task: str
    split: str
    metric: str
    per_layer: Sequence[float]
    bands: Mapping[tuple[int, int], float]
    min_width: int
    #: the model's ``(model_type, n_layers, hidden_size)``: its key in :data:`valuelens.presets.AUTO_LAYERS`
    model_key: tuple[str, int, int] | None = None
    #: add the proposed ``layers=`` value and ``AUTO_LAYERS`` entry to the report
    propose: bool = False

    @property
    def best(self) -> tuple[int, int]:
        """The highest-scoring band (the first of equals, in ``bands`` order)."""
        return max(self.bands, key=self.bands.__getitem__)

    @property
    def proposed_layers(self) -> str:
        """The best band as a ``layers=`` value: ``"8-14"`` (one layer: ``"8"``)."""
        a, b = self.best
        return f"{a}-{b}" if b > a else str(a)

    def auto_entry(self) -> str:
        """The line to add to :data:`valuelens.presets.AUTO_LAYERS` that makes the best band this recipe's
        ``layers="auto"`` on this model (``"*"`` would make it every recipe's)."""
        a, b = self.best
        key = self.model_key if self.model_key is not None else ("MODEL_TYPE", 0, 0)
        return f"{key!r}: {{{self.recipe!r}: tuple(range({a}, {b + 1}))}},"

    def to_markdown(self, command: str) -> str:
        """The command, the per-layer table, the best band and the all-layer score."""
        best, n = self.best, len(self.per_layer)
        lines = [
            f"```\n{command}\n```",
            "",
            f"Model: {self.model}; recipe {self.recipe}; prompt {self.prompt}; {self.task}/{self.split}",
            "",
            "| layer | score |",
            "|---:|---:|",
        ]
        lines += [f"| {i} | {100 * s:.2f} |" for i, s in enumerate(self.per_layer)]
        lines += [
            "",
            f"Best band (width >= {self.min_width}): layers {best[0]}-{best[1]}: {100 * self.bands[best]:.2f}",
            f"All layers: {100 * self.bands.get((0, n - 1), float('nan')):.2f}",
        ]
        if self.propose:
            lines += [
                "",
                f"Proposed `layers=` for {self.recipe} on this model: `{self.proposed_layers}` "
                f"(`valuelens embed ... --recipe {self.recipe} --layers {self.proposed_layers}`).",
                "To make it the `auto` default, add to `AUTO_LAYERS` in `valuelens/presets/bands.py` (docs/analysis.md):",
                "",
                f"```python\n{self.auto_entry()}\n```",
            ]
        return "\n".join(lines) + "\n"

    def to_dict(self, command: str) -> dict[str, Any]:
        """JSON-ready: the per-layer scores, the best band and every band's score (keys ``"a-b"``)."""
        best = self.best
        data: dict[str, Any] = {
            "command": command,
            "model": self.model,
            "recipe": self.recipe,
            "prompt": self.prompt,
            "per_layer": list(self.per_layer),
            "best_band": list(best),
            "best_band_score": self.bands[best],
            "bands": {f"{a}-{b}": s for (a, b), s in self.bands.items()},
        }
        if self.propose:
            data["proposed_layers"] = self.proposed_layers
            data["model_key"] = list(self.model_key) if self.model_key is not None else None
            data["auto_layers_entry"] = self.auto_entry()
        return data

    def write(self, stem: Path, *, command: str) -> None:
        """Write ``stem.md``, ``stem.json`` and the curve ``stem.png``."""
        stem.parent.mkdir(parents=True, exist_ok=True)
        report_path(stem, ".md").write_text(self.to_markdown(command), encoding="utf-8")
        report_path(stem, ".json").write_text(
            json.dumps(self.to_dict(command), indent=2) + "\n", encoding="utf-8"
        )
        prompt = f" · {self.prompt}" if self.prompt else ""
        title = f"{self.model} · {self.recipe}{prompt} · {self.task}/{self.split}"
        plot_layer_curve(
            report_path(stem, ".png"), self.per_layer, self.best, title=title, metric=self.metric
        )


class LayerSweeper:
    """Single-layer encoders of each recipe over one loaded model, sharing forward passes.

    Usage: ``for sweep in LayerSweeper(probe, ["va"], prompt="prompteol").run(task, split="dev"): ...``
    """

    def __init__(self, probe: Encoder, recipes: Sequence[str], *, prompt: str | None = None) -> None:
        self.model = probe.name_or_path
        self.recipes = list(recipes)
        self.prompt = prompt
        self.n_layers = probe.parts.n_layers
        self.model_key = probe.parts.model_key
        self._shared = SharedEncoding(
            [
                Encoder(probe.model, probe.tokenizer, recipe=recipe, layers=[i], prompt=prompt)
                for recipe in self.recipes
                for i in range(self.n_layers)
            ]
        )

    def run(
        self,
        task: Task,
        *,
        split: str = "dev",
        limit: int | None = None,
        min_width: int = 3,
        batch_size: int = 32,
        propose: bool = False,
    ) -> Iterator[LayerSweep]:
        """Each recipe's sweep in turn: every layer, then every band at least ``min_width`` layers wide;
        ``propose`` adds the best band as a ``layers=`` value and an ``AUTO_LAYERS`` entry to the report."""
        n = self.n_layers
        for k, recipe in enumerate(self.recipes):
            offset = k * n
            per_layer = [
                evaluate(
                    self._shared.view(offset + i),
                    task,
                    split=split,
                    batch_size=batch_size,
                    show_progress=k == 0 and i == 0,
                    limit=limit,
                ).main_score
                for i in range(n)
            ]
            bands = {
                (a, b): evaluate(
                    _BandView(self._shared, range(offset + a, offset + b + 1)), task, split=split, limit=limit
                ).main_score
                for a in range(n)
                for b in range(a + min_width - 1, n)
            }
            yield LayerSweep(
                model=self.model,
                recipe=recipe,
                prompt=self.prompt,
                task=task.name,
                split=split,
                metric=task.main_metric,
                per_layer=per_layer,
                bands=bands,
                min_width=min_width,
                model_key=self.model_key,
                propose=propose,
            )


class _BandView:
    """The mean of several single-layer views: a band's vectors, read from the shared cache."""

    def __init__(self, shared: SharedEncoding, indices: range) -> None:
        self.views = [shared.view(i) for i in indices]

    def encode(self, texts: list[str], *, batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return np.mean([v.encode(texts, batch_size=batch_size) for v in self.views], axis=0)


def sweep_stem(out: Path, recipe: str, n_recipes: int) -> Path:
    """The report stem of ``recipe``'s sweep: ``out`` for a single recipe, else ``out-RECIPE``.

    Usage: ``sweep_stem(Path("out/sweep.md"), "va", 2)`` is ``out/sweep-va``.
    """
    base = report_path(out, "")
    return base if n_recipes == 1 else base.with_name(f"{base.name}-{recipe}")


def plot_layer_curve(
    path: Path, per_layer: Sequence[float], best: tuple[int, int], *, title: str, metric: str
) -> None:
    """Save the per-layer score curve (×100) with the best band shaded, as a PNG.

    Usage: ``plot_layer_curve(Path("curve.png"), [0.5, 0.7, 0.6], (1, 2), title="va", metric="cosine_spearman")``
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=120)
    ax.plot(range(len(per_layer)), [100 * s for s in per_layer], marker="o", ms=3)
    ax.axvspan(best[0] - 0.5, best[1] + 0.5, alpha=0.15, label=f"best band {best[0]}-{best[1]}")
    ax.set_xlabel("layer")
    ax.set_ylabel(f"{metric} x100")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
