"""Helpers of the reliability suite: one tiny model reached through the core and each adapter.

``surface`` runs a test through ``valuelens.Encoder`` and the three adapters alike: each
:class:`Surface` embeds a list (``embed``), one text (``embed_one``), and both asynchronously where the
host has async methods, and knows the ``nn.Module`` whose hooks must be counted.
"""

from __future__ import annotations

import asyncio
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from valuelens import Encoder
from valuelens.capture import is_instrumented

SURFACES = ["core", "sentence-transformers", "langchain", "llama-index"]


def hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def rss_mib() -> float:
    """Resident memory of this process in MiB (``/proc/self/statm``; ``ru_maxrss`` elsewhere)."""
    statm = Path("/proc/self/statm")
    if statm.exists():
        return int(statm.read_text().split()[1]) * resource.getpagesize() / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


@dataclass
class Surface:
    """One way in: ``embed(list) -> [n, d]``, ``embed_one(str) -> [d]``, optional async twins."""

    name: str
    module: torch.nn.Module  # what holds the hooks
    backbone: torch.nn.Module  # what ``is_instrumented`` is asked about
    embed: Callable[[Any], np.ndarray]
    embed_one: Callable[[Any], np.ndarray]
    aembed: Callable[[Any], Any] | None = None
    aembed_one: Callable[[Any], Any] | None = None
    accepts_bare_string: bool = True  # whether ``embed("text")`` gives one vector (else TypeError)

    def clean(self) -> bool:
        return hook_count(self.module) == 0 and not is_instrumented(self.backbone)


def _arr(vectors: Any) -> np.ndarray:
    return np.asarray(vectors, dtype=np.float32)


def build_surface(name: str, encoder: Encoder, model_dir: str, *, batch_size: int = 32) -> Surface:
    if name == "core":
        return Surface(
            name,
            encoder.model,
            encoder.model,
            lambda texts: encoder.encode(texts, batch_size=batch_size),
            lambda text: encoder.encode(text),
        )
    if name == "sentence-transformers":
        from sentence_transformers.base.modules import Transformer

        from sentence_transformers import SentenceTransformer
        from valuelens_sentence_transformers import ValuePooling

        st = SentenceTransformer(
            modules=[Transformer(model_dir), ValuePooling(recipe="va", layers="all")], device="cpu"
        )
        return Surface(
            name,
            st,
            st[0].model,
            lambda texts: st.encode(texts, batch_size=batch_size),
            lambda text: st.encode(text),
        )
    if name == "langchain":
        from langchain_valuelens import ValueLensEmbeddings

        lc = ValueLensEmbeddings(model=encoder, batch_size=batch_size, normalize=False)

        async def aembed(texts):
            return _arr(await lc.aembed_documents(texts))

        async def aembed_one(text):
            return _arr(await lc.aembed_query(text))

        return Surface(
            name,
            encoder.model,
            encoder.model,
            lambda texts: _arr(lc.embed_documents(texts)).reshape(-1, encoder.dimension),
            lambda text: _arr(lc.embed_query(text)),
            aembed,
            aembed_one,
            accepts_bare_string=False,
        )
    if name == "llama-index":
        from llama_index.embeddings.valuelens import ValueLensEmbedding

        li = ValueLensEmbedding(
            encoder=encoder,
            embed_batch_size=batch_size,
            batch_size=batch_size,
            normalize=False,
            num_workers=4,
        )

        async def aembed(texts):
            return _arr(await li.aget_text_embedding_batch(texts))

        async def aembed_one(text):
            return _arr(await li.aget_query_embedding(text))

        return Surface(
            name,
            encoder.model,
            encoder.model,
            lambda texts: _arr(li.get_text_embedding_batch(texts)).reshape(-1, encoder.dimension),
            lambda text: _arr(li.get_query_embedding(text)),
            aembed,
            aembed_one,
            accepts_bare_string=False,
        )
    raise ValueError(name)


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)
