"""What the analysis tools share: the model's W_U, readable token labels, and writing a report.

Usage::

    w_u = unembedding(encoder.model)             # [vocab, d]: the LM head, tied embeddings, or the checkpoint's
    token_label(tokenizer, 1234)                 # '␣the' (spaces shown); md_token('␣the') -> '`␣the`'
    write_report(Path("out/lens"), markdown, data, plot)   # out/lens.md, out/lens.json, out/lens.png
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from valuelens.embed_filter import load_unembedding, unembedding_weight
from valuelens.errors import ConfigError
from valuelens.extras import require
from valuelens.io import report_path
from valuelens.layers import layers_label
from valuelens.loading import checkpoint_folder

__all__ = ["figure", "layers_label", "md_token", "token_label", "unembedding", "write_report"]


def unembedding(model: nn.Module) -> Tensor:
    """W_U ``[vocab, d]`` fp32 of a loaded model: its LM head or tied input embeddings, else read from
    the checkpoint folder it was loaded from (only the head is loaded), as EmbedFilter does."""
    try:
        weight = unembedding_weight(model)
    except ConfigError:
        weight = load_unembedding(checkpoint_folder(model, "load it from a folder or a bundled model name"))
    return weight.detach().to(torch.float32)


def token_label(tokenizer: Any, token_id: int) -> str:
    """A token as visible text: spaces as ␣, newlines as ↵, tabs as ⇥ (empty decodes: the raw token)."""
    text = tokenizer.decode([int(token_id)])
    if text == "":
        text = str(tokenizer.convert_ids_to_tokens(int(token_id)))
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")


def md_token(label: str) -> str:
    """A token label as a markdown code span that is safe in a table cell (``<``, ``*``, ``|``, backticks)."""
    runs = [len(r) for r in re.findall("`+", label)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if label.startswith("`") or label.endswith("`") else ""
    return f"{fence}{pad}{label.replace('|', chr(92) + '|')}{pad}{fence}"


@contextmanager
def figure(path: Path, **kwargs: Any) -> Iterator[Any]:
    """A matplotlib figure (Agg backend) saved to ``path`` and closed on exit: ``with figure(p) as fig: ...``."""
    matplotlib = require("matplotlib", "eval", "plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(**{"figsize": (7, 3.5), "dpi": 120, **kwargs})
    try:
        yield fig
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)


def write_report(stem: Path, markdown: str, data: dict[str, Any], plot: Callable[[Path], None]) -> list[Path]:
    """Write ``stem.md``, ``stem.json`` and the plot ``stem.png`` (:func:`valuelens.io.report_path`);
    returns the three paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [report_path(stem, ext) for ext in (".md", ".json", ".png")]
    paths[0].write_text(markdown, encoding="utf-8")
    paths[1].write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    plot(paths[2])
    return paths
