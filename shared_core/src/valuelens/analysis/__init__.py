"""The papers' analysis tools: Logit Lens of embeddings, Logit Spectroscopy of W_U, segment matching.

Usage::

    from valuelens.analysis import load_corpus, logit_lens, logit_spectroscopy, segment_matching

    lens = logit_lens(encoder, ["A man is playing a guitar."], tau=2)          # top-k before/after EmbedFilter
    spec = logit_spectroscopy(w_u, token_counts(tok, load_corpus("all"), w_u.shape[0]))   # Δπ per direction
    seg = segment_matching(probe, load_corpus("lee"), limit=200)               # recall@k per layer, VA vs HS

Each result has ``to_markdown(command)``, ``to_dict(command)``, ``plot(path)`` and ``write(stem, command=)``
(``stem.md``/``.json``/``.png``). The command line is ``valuelens lens | spectrum | segments``
(:mod:`valuelens.analysis.commands`); the formulas are in docs/analysis.md.
"""

from __future__ import annotations

from .common import layers_label, token_label, unembedding
from .corpus import CORPORA, load_corpus, token_counts
from .lens import LogitLens, decode_top_k, logit_lens, top_tokens
from .segments import SegmentMatching, layer_vectors, recall_at_k, segment_matching, split_texts
from .spectrum import Spectrum, average_token, delta_pi, log_frequencies, logit_spectroscopy

__all__ = [
    "CORPORA",
    "LogitLens",
    "SegmentMatching",
    "Spectrum",
    "average_token",
    "decode_top_k",
    "delta_pi",
    "layer_vectors",
    "layers_label",
    "load_corpus",
    "log_frequencies",
    "logit_lens",
    "logit_spectroscopy",
    "recall_at_k",
    "segment_matching",
    "split_texts",
    "token_counts",
    "token_label",
    "top_tokens",
    "unembedding",
]
