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

from typing import TYPE_CHECKING

from valuelens.lazy import lazy_exports

#: Each public name and the module that defines it (loaded on first use: :mod:`valuelens.lazy`).
_EXPORTS: dict[str, str] = {
    "CORPORA": "valuelens.analysis.corpus",
    "LogitLens": "valuelens.analysis.lens",
    "SegmentMatching": "valuelens.analysis.segments",
    "Spectrum": "valuelens.analysis.spectrum",
    "average_token": "valuelens.analysis.spectrum",
    "decode_top_k": "valuelens.analysis.lens",
    "delta_pi": "valuelens.analysis.spectrum",
    "layer_vectors": "valuelens.analysis.segments",
    "layers_label": "valuelens.analysis.common",
    "load_corpus": "valuelens.analysis.corpus",
    "log_frequencies": "valuelens.analysis.spectrum",
    "logit_lens": "valuelens.analysis.lens",
    "logit_spectroscopy": "valuelens.analysis.spectrum",
    "recall_at_k": "valuelens.analysis.segments",
    "segment_matching": "valuelens.analysis.segments",
    "split_texts": "valuelens.analysis.segments",
    "token_counts": "valuelens.analysis.corpus",
    "token_label": "valuelens.analysis.common",
    "top_tokens": "valuelens.analysis.lens",
    "unembedding": "valuelens.analysis.common",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers see: the same names, imported eagerly
    from valuelens.analysis.common import (
        layers_label as layers_label,
        token_label as token_label,
        unembedding as unembedding,
    )
    from valuelens.analysis.corpus import (
        CORPORA as CORPORA,
        load_corpus as load_corpus,
        token_counts as token_counts,
    )
    from valuelens.analysis.lens import (
        LogitLens as LogitLens,
        decode_top_k as decode_top_k,
        logit_lens as logit_lens,
        top_tokens as top_tokens,
    )
    from valuelens.analysis.segments import (
        SegmentMatching as SegmentMatching,
        layer_vectors as layer_vectors,
        recall_at_k as recall_at_k,
        segment_matching as segment_matching,
        split_texts as split_texts,
    )
    from valuelens.analysis.spectrum import (
        Spectrum as Spectrum,
        average_token as average_token,
        delta_pi as delta_pi,
        log_frequencies as log_frequencies,
        logit_spectroscopy as logit_spectroscopy,
    )
