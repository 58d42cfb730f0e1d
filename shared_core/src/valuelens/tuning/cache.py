"""One forward pass per text and prompt captures every candidate readout at every layer, kept on disk.

Usage::

    cache = LayerCache.open("out/cache", data, model_name="smollm2-135m")
    cache.fill(model, tokenizer, prompts, FAMILIES, progress=bar)     # resumable: done parts are skipped
    cache.get(prompt, "va", "sts")                                    # float16 [n_texts, n_layers, dim]

A readout family (:data:`FAMILIES`) is a recipe (with or without ``drop_prefix``) read at every decoder
layer of the model (:class:`LayerwiseReadout`): its per-layer vectors side by side instead of their
mean, so that any layer band is scored offline as the mean over the band, which is what the recipe
computes for ``layers=[lo, ..., hi]`` (``combine="mean"``). The batching, tokenization (prompt,
truncation at ``max_length``) and capture are the encoder's own (:func:`valuelens.batching.run_batches`).
The files are ``CACHE/PROMPT_ID/SET.FAMILY.npy`` (float16 where the values fit, else float32) plus
``meta.json``. A cache made for another model (or token limit) is cleared; a set whose texts changed is
recomputed alone, so runs of one model with other objectives or corpora share a cache (``--cache DIR``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from valuelens.architectures import ModelParts
from valuelens.batching import run_batches
from valuelens.encoder import Encoder
from valuelens.readout import Readout, through_out_proj
from valuelens.recipes import get_recipe
from valuelens.tuning.data import TuneData

__all__ = ["FAMILIES", "Family", "LayerCache", "LayerwiseReadout", "prompt_id"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Family:
    """A readout read at every layer: a recipe, with or without ``drop_prefix``."""

    name: str
    recipe: str
    drop_prefix: bool = False

    @property
    def residual(self) -> bool:
        """Whether its vectors live in the residual stream (EmbedFilter applies)."""
        return get_recipe(self.recipe).residual

    @property
    def reads_last_attention(self) -> bool:
        return get_recipe(self.recipe).reads_last_attention


#: The recipe families a tuning run scores (AlignedWVA with and without ``drop_prefix``, VA, AlignedVA,
#: the hidden-state mean and the last token).
FAMILIES: tuple[Family, ...] = (
    Family("aligned-wva", "aligned-wva"),
    Family("aligned-wva-dp", "aligned-wva", drop_prefix=True),
    Family("va", "va"),
    Family("aligned-va", "aligned-va"),
    Family("hs", "hs"),
    Family("last-token", "last-token"),
)


@dataclass(frozen=True, eq=False)
class LayerwiseReadout(Readout):
    """A readout whose vector is every layer's vector side by side (``[B, layers * dim]``), each after
    the recipe's own per-layer step (W_O for ``aligned-va``), before the layer mean."""

    @classmethod
    def of(cls, readout: Readout) -> LayerwiseReadout:
        fields = {f.name: getattr(readout, f.name) for f in dataclasses.fields(readout)}
        fields["dimension"] = readout.dimension * len(readout.plan.layers)
        return cls(**fields)

    def finish(self, per_layer: Sequence[Tensor], parts: ModelParts) -> Tensor:
        vectors = list(per_layer)
        if self.project_out:
            vectors = [
                through_out_proj(parts, layer, v) for layer, v in zip(self.plan.layers, vectors, strict=True)
            ]
        return torch.cat([v.float() for v in vectors], dim=-1)


def prompt_id(prompt: str | None) -> str:
    """A short file-safe name for a prompt (``none`` for no prompt)."""
    if prompt is None:
        return "none"
    return "p" + hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:10]


class LayerCache:
    """The on-disk cache of a tuning run (see the module docstring)."""

    def __init__(self, root: Path, meta: dict[str, Any]) -> None:
        self.root = root
        self.meta = meta
        self._memory: dict[tuple[str, str, str], np.ndarray] = {}

    @classmethod
    def open(
        cls, root: str | Path, data: TuneData, *, model_name: str, model_key: Sequence[Any], max_length: int
    ) -> LayerCache:
        """The cache at ``root`` for this data and model: one made for another model is cleared, and the
        sets whose texts changed are dropped (each with a log line)."""
        root = Path(root)
        sets = data.fingerprints()
        meta: dict[str, Any] = {
            "model": model_name,
            "model_key": list(model_key),
            "max_length": max_length,
            "sets": sets,
        }
        file = root / "meta.json"
        if file.is_file():
            try:
                old = json.loads(file.read_text(encoding="utf-8"))
            except ValueError:
                old = {}
            same_model = isinstance(old, dict) and all(old.get(k) == meta[k] for k in meta if k != "sets")
            old_sets = old.get("sets") if same_model else None
            if not isinstance(old_sets, dict):
                logger.warning(
                    "clearing the tuning cache %s: it was made for another model (or by an older valuelens)",
                    root,
                )
                shutil.rmtree(root)
            else:
                for name, digest in sets.items():
                    if old_sets.get(name) != digest:
                        stale = list(root.glob(f"*/{name}.*.npy"))
                        if stale:
                            logger.warning(
                                "the tuning cache %s holds other %s texts: recomputing them", root, name
                            )
                        for path in stale:
                            path.unlink()
        root.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(meta) + "\n", encoding="utf-8")
        return cls(root, meta)

    def _file(self, prompt: str | None, family: str, set_name: str) -> Path:
        return self.root / prompt_id(prompt) / f"{set_name}.{family}.npy"

    def has(self, prompt: str | None, families: Sequence[Family], set_name: str) -> bool:
        return all(self._file(prompt, f.name, set_name).is_file() for f in families)

    def get(self, prompt: str | None, family: str, set_name: str) -> np.ndarray:
        """The cached vectors ``[n, n_layers, dim]`` (float16) of one family on one set."""
        key = (prompt_id(prompt), family, set_name)
        if key not in self._memory:
            self._memory[key] = np.load(self._file(prompt, family, set_name), allow_pickle=False)
        return self._memory[key]

    def fill(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        prompts: Sequence[str | None],
        families: Sequence[Family],
        sets: Mapping[str, Sequence[str]],
        *,
        max_length: int,
        batch_size: int = 32,
        max_tokens_per_batch: int | None = 2048,
        progress: tqdm | None = None,
    ) -> None:
        """Run every (prompt, set) not cached yet: one forward per batch for all ``families``."""
        for prompt in prompts:
            usable = [f for f in families if prompt is not None or not f.reads_last_attention]
            encoders = [
                Encoder(
                    model,
                    tokenizer,
                    recipe=f.recipe,
                    layers="all",
                    prompt=prompt,
                    drop_prefix=f.drop_prefix,
                    max_length=max_length,
                )
                for f in usable
            ]
            readouts = [LayerwiseReadout.of(e.readout) for e in encoders]
            n_layers = len(encoders[0].layers)
            for set_name, texts in sets.items():
                if self.has(prompt, usable, set_name):
                    if progress is not None:
                        progress.update(len(texts))
                    continue
                with torch.inference_mode():
                    results, _ = run_batches(
                        encoders[0].reader,
                        encoders[0].runner,
                        list(texts),
                        readouts,
                        batch_size=batch_size,
                        max_tokens_per_batch=max_tokens_per_batch,
                        progress=progress,
                    )
                folder = self.root / prompt_id(prompt)
                folder.mkdir(parents=True, exist_ok=True)
                for family, result in zip(usable, results, strict=True):
                    array = result.cpu().numpy().reshape(len(texts), n_layers, -1)
                    if np.isfinite(array).all() and np.abs(array).max(initial=0.0) < 6e4:
                        array = array.astype(np.float16)  # half the disk and memory; float32 past its range
                    target = self._file(prompt, family.name, set_name)
                    partial = target.with_suffix(".partial.npy")  # an interrupted write leaves no bad file
                    np.save(partial, array)
                    partial.replace(target)
