"""How the lexical part weights a text's tokens: the tf form, the idf's power, a BM25-style length
normalisation, and the whitening floor, scored against the full SciFact corpus.

The lexical part (:mod:`valuelens.lexical`) sums a text's whitened token codes with the weights
``(1 + log tf) · idf`` and scales the sum to unit length. BM25 saturates tf instead
(``tf·(k1+1) / (tf + k1·(1 − b + b·len/avglen))``) and counts idf once per query–document match, where
a cosine between two tf-idf vectors counts it twice. This script scores variants of the lexical part
alone (no forward pass, seconds per variant) with the product's fitted state (word-frequency idf,
:func:`valuelens.lexical.lexical_lens`'s default) on dev data only:

- SciFact's carved dev split (100 queries) over the **full corpus** (5183 documents: what the issue's
  target is measured over; the dev queries' relevant documents are in it, no test query is read) and
  over tune's quick-mode dev corpus (304 documents);
- STS-B dev (600 seeded pairs, tune's quick set).

A reference row scores the same weights on exact sparse vectors (one dimension per vocabulary row), what
the hidden-size codes compress.

Usage::

    python research/lexical_weighting.py smollm2-135m --out research/rounds/lexical_weighting/smollm2-135m.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from scipy import sparse
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lexical_lens import ndcg, sts

from valuelens import Encoder
from valuelens.lexical import FLOOR, LexicalState, token_ids
from valuelens.states import lexical_lens
from valuelens.tuning.data import TuneData

#: A token weighting: (counts of the text's distinct tokens, the text's length, their idf) -> weights.
Weighting = Callable[[Tensor, int, Tensor], Tensor]


def log_tf(power: float = 1.0) -> Weighting:
    return lambda counts, length, idf: (1 + counts.log()) * idf.pow(power)


def bm25(k1: float, b: float, avglen: float, power: float = 1.0) -> Weighting:
    def weigh(counts: Tensor, length: int, idf: Tensor) -> Tensor:
        norm = k1 * (1 - b + b * length / avglen)
        return counts * (k1 + 1) / (counts + norm) * idf.pow(power)

    return weigh


def whitening(embeddings: Tensor, floor: float) -> tuple[Tensor, Tensor]:
    """The rows' mean and the whitening at ``floor`` (as :meth:`LexicalState.fit` computes it)."""
    block = embeddings.double()
    mean = block.mean(0)
    values, vectors = torch.linalg.eigh(block.T @ block / len(block) - torch.outer(mean, mean))
    values = values.clamp(min=0.0)
    return mean.float(), ((vectors * (values + floor * values.max()).rsqrt()) @ vectors.T).float()


def encode(
    embeddings: Tensor, ids: list[list[int]], idf: Tensor, mean: Tensor, white: Tensor, weigh: Weighting
) -> Tensor:
    out = torch.zeros(len(ids), embeddings.shape[1])
    for i, row in enumerate(ids):
        if not row:
            continue
        tokens, counts = torch.tensor(row).unique(return_counts=True)
        w = weigh(counts.float(), len(row), idf[tokens])
        out[i] = w @ embeddings[tokens] - w.sum() * mean
    return torch.nn.functional.normalize(out @ white, dim=-1)


def sparse_tf_idf(ids: list[list[int]], idf: Tensor, weigh: Weighting) -> sparse.csr_matrix:
    """The same weights on one dimension per vocabulary row (no codes: what the codes compress), unit rows."""
    rows, cols, values = [], [], []
    for i, row in enumerate(ids):
        if not row:
            continue
        tokens, counts = torch.tensor(row).unique(return_counts=True)
        w = weigh(counts.float(), len(row), idf[tokens])
        rows += [i] * len(tokens)
        cols += tokens.tolist()
        values += (w / w.norm()).tolist()
    return sparse.csr_matrix((values, (rows, cols)), shape=(len(ids), len(idf)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    quick = TuneData.build("quick")
    full = TuneData.build("quick", distractors=10**6)
    enc = Encoder.from_pretrained(args.model, recipe="va", lexical=0.5)
    state: LexicalState = lexical_lens(enc.model, enc.tokenizer).state
    embeddings = enc.parts.backbone.get_input_embeddings().weight.detach().float()
    tok = enc.tokenizer
    ids = {
        "queries": token_ids(tok, full.retrieval.queries),
        "docs": token_ids(tok, full.retrieval.docs),
        "sts": token_ids(tok, quick.sts.texts),
    }
    avglen = sum(map(len, ids["docs"])) / len(ids["docs"])
    quick_docs = [full.retrieval.doc_ids.index(d) for d in quick.retrieval.doc_ids]
    ret, pairs = full.retrieval, quick.sts

    def score(weigh: Weighting, floor: float = FLOOR, exact: bool = False) -> dict[str, float]:
        mean, white = (state.mean, state.whitening) if floor == FLOOR else whitening(embeddings, floor)
        if exact:
            q, d, s = (sparse_tf_idf(ids[k], state.idf, weigh) for k in ids)
            sim = (q @ d.T).toarray()
            s = s.toarray()
        else:
            q, d, s = (encode(embeddings, ids[k], state.idf, mean, white, weigh).numpy() for k in ids)
            sim = q @ d.T
        full_r = ndcg(sim, ret.query_ids, ret.doc_ids, ret.qrels)
        quick_r = ndcg(sim[:, quick_docs], ret.query_ids, quick.retrieval.doc_ids, ret.qrels)
        p = sts(s[list(pairs.a)], s[list(pairs.b)], pairs.gold)
        return {
            "scifact_dev_full_ndcg10": round(full_r, 2),
            "scifact_dev_quick_ndcg10": round(quick_r, 2),
            "stsb_dev_spearman": round(p, 2),
            "full_mean": round((full_r + p) / 2, 2),
        }

    variants: dict[str, Callable[[], dict[str, float]]] = {
        "(1 + log tf) · idf (the product)": lambda: score(log_tf()),
        "(1 + log tf) · idf, exact sparse vectors (one dimension per token)": lambda: score(
            log_tf(), exact=True
        ),
        **{f"(1 + log tf) · idf^{p}": (lambda p=p: score(log_tf(p))) for p in (0.5, 0.75, 1.25, 1.5)},
        **{
            f"bm25 k1={k1} b={b} · idf": (lambda k1=k1, b=b: score(bm25(k1, b, avglen)))
            for k1 in (0.9, 1.2, 2.0)
            for b in (0.0, 0.4, 0.75)
        },
        **{f"floor {f:g}": (lambda f=f: score(log_tf(), f)) for f in (3e-4, 3e-3, 1e-2)},
    }
    rows = {}
    for name, run in variants.items():
        rows[name] = run()
        print(name, rows[name], flush=True)
    out = {
        "model": args.model,
        "queries": len(ret.queries),
        "full_corpus_documents": len(ret.docs),
        "quick_corpus_documents": len(quick.retrieval.docs),
        "sts_pairs": len(pairs.gold),
        "mean_document_tokens": round(avglen, 1),
        "lexical_part_alone": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
