"""Where the lexical part's idf comes from: counted on the package's corpus, computed from English word
frequencies (:mod:`valuelens.word_frequency`, at several text lengths L), or counted on the tune's
in-domain fitting texts (STS-B train sentences and SciFact documents outside the dev corpus).

The lexical part alone (no forward pass), as the product computes it (:class:`valuelens.lexical.LexicalLens`),
scored on SciFact's carved dev split (100 queries over the 1104-document dev corpus of
``valuelens tune --distractors 1000``) and STS-B dev (600 pairs). Dev data only: L was chosen here.

Usage::

    python research/word_idf.py smollm2-135m --out research/rounds/word_idf/smollm2-135m.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lexical_lens import ndcg, sts

from valuelens import Encoder
from valuelens.lexical import LexicalLens, LexicalState
from valuelens.states import corpus_texts
from valuelens.tuning.data import TuneData
from valuelens.word_frequency import TEXT_TOKENS, source, word_idf

LENGTHS = (10, 30, 100, 200, 300, 1000)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model")
    parser.add_argument("--distractors", type=int, default=1000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    data = TuneData.build("quick", distractors=args.distractors)
    ret, pairs = data.retrieval, data.sts
    enc = Encoder.from_pretrained(args.model, recipe="va")
    embeddings = enc.parts.backbone.get_input_embeddings().weight.detach().float()
    package, package_source = corpus_texts(None, option="lexical_corpus")

    def score(state: LexicalState) -> dict[str, float]:
        lens = LexicalLens(embeddings, enc.tokenizer, state)
        q, d, s = (lens.encode(list(t)).numpy() for t in (ret.queries, ret.docs, pairs.texts))
        r = ndcg(q @ d.T, ret.query_ids, ret.doc_ids, ret.qrels)
        p = sts(s[list(pairs.a)], s[list(pairs.b)], pairs.gold)
        return {
            "scifact_dev_ndcg10": round(r, 2),
            "stsb_dev_spearman": round(p, 2),
            "mean": round((r + p) / 2, 2),
        }

    rows: dict[str, dict] = {}
    counted = LexicalState.fit(embeddings, enc.tokenizer, package)
    rows[f"counted on {package_source}"] = score(counted)
    start = time.perf_counter()
    words = word_idf(enc.tokenizer, embeddings.shape[0])
    seconds = round(time.perf_counter() - start, 1)
    for length in LENGTHS:
        idf = torch.from_numpy(word_idf(enc.tokenizer, embeddings.shape[0], text_tokens=length))
        state = LexicalState(
            counted.mean, counted.whitening, torch.where(idf.isnan(), counted.idf, idf).float()
        )
        default = " (the default)" if length == TEXT_TOKENS else ""
        rows[f"{source()}, L={length}{default}"] = score(state)
    rows[f"counted on the tune's fitting texts ({data.fit_source})"] = score(
        LexicalState.fit(embeddings, enc.tokenizer, data.fit_texts)
    )
    out = {
        "model": args.model,
        "queries": len(ret.queries),
        "documents": len(ret.docs),
        "sts_pairs": len(pairs.gold),
        "tokens_reached_by_words": int((~np.isnan(words)).sum()),
        "vocabulary_rows": int(embeddings.shape[0]),
        "word_idf_seconds": seconds,
        "lexical_part_alone": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
