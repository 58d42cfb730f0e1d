"""Does a lexical part read from the model's own input embeddings close the retrieval gap?

SciFact is a lexical task: with SmolLM2's tokenizer, BM25 scores nDCG@10 74.0 on the carved dev split
(100 queries over the 1104-document dev corpus of ``valuelens tune --distractors 1000``) where the
``best`` preset scores 65.5. This script tests a dense stand-in for that signal that needs no forward
pass, the *lexical lens*:

- token codes: the rows of the model's input embedding matrix, centred on their mean and whitened
  (eigenvalues floored at ``valuelens.lexical.FLOOR`` times the largest), so that distinct tokens are close to orthogonal
  while the model's own near-synonyms stay close;
- a text's vector: the sum over its distinct tokens (the text alone: no prompt, no special tokens) of
  ``(1 + log tf) * idf * code``, L2-normalized; ``idf = log((N + 1) / (df + 0.5))`` counted on a fitting
  corpus of N unlabeled texts, or, with no corpus, ``-log p(token)`` under the model's next-token
  distribution averaged over a few neutral contexts (``prior``);
- fused with a preset: the two unit vectors concatenated with weights ``sqrt(1 - w)`` and ``sqrt(w)``,
  so cosine = ``(1 - w) cos(preset) + w cos(lexical)``.

Dev (default): the lens alone for each IDF source, and (``--fuse``, one forward pass of the preset over
the dev texts, kept in ``--vectors``) the fusion at several weights on SciFact dev nDCG@10, STS-B dev
Spearman and their mean (tune's balanced objective). ``--test``: the lens alone on SciFact's 200 test
queries over the full corpus and on STS-B test (no forward pass); with ``--fuse``, the preset, the
preset fused with the lens at ``--weight`` (fixed on dev beforehand) and all-MiniLM-L6-v2 on STS-B test
and on a test corpus cut as tune cuts the dev one (the test queries' relevant documents and
``--distractors`` others), or with ``--full`` the full corpus (2.6 hours under SmolLM2's ``best`` on 2
cores; 33 minutes of forward passes under gemma's on 2026-12-05).

Usage::

    python research/lexical_lens.py smollm2-135m --fuse --vectors /tmp/lex/smol-dev.npz --out research/rounds/lexical_lens/smollm2-135m-dev.json
    python research/lexical_lens.py smollm2-135m --test --fuse --weight 0.6 --vectors /tmp/lex/smol-test.npz --out research/rounds/lexical_lens/smollm2-135m-test.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr
from transformers import AutoModelForCausalLM, AutoTokenizer

from valuelens import Encoder
from valuelens.evaluation.metrics import cosine_similarity_matrix, rank_documents, retrieval_scores
from valuelens.evaluation.reference import reference_model
from valuelens.evaluation.tasks import PairData, RetrievalData, load_task
from valuelens.lexical import LexicalLens as ValueLensLexical, LexicalState
from valuelens.models import path as model_path
from valuelens.tuning.data import TuneData, _sample

WEIGHTS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0)
PRIOR_CONTEXTS = ("\n", ".", "The", " ", ",")


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    return x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-12)


class LexicalLens:
    """The product's lexical part (:mod:`valuelens.lexical`) with this round's idf choices:
    ``LexicalLens(path).fit(texts).encode(texts)``, or ``.fit_prior()`` for the model's own prior."""

    def __init__(self, path: Path) -> None:
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.embeddings = self.model.get_input_embeddings().weight.detach().float()
        self.state = LexicalState.fit(self.embeddings, self.tok, [])  # a flat idf until one is fitted

    def fit(self, texts: Sequence[str]) -> LexicalLens:
        """IDF counted on these unlabeled texts."""
        self.state = LexicalState.fit(self.embeddings, self.tok, texts)
        return self

    def fit_prior(self) -> LexicalLens:
        """IDF from the model alone: ``-log p(token)`` averaged over neutral one-token contexts."""
        with torch.no_grad():
            logps = []
            for ctx in PRIOR_CONTEXTS:
                x = self.tok(ctx, return_tensors="pt")["input_ids"]
                logps.append(torch.log_softmax(self.model(x).logits[0, -1].float(), -1))
            mean = torch.logsumexp(torch.stack(logps), 0) - math.log(len(logps))
        idf = (-mean)[: len(self.embeddings)].float()
        self.state = dataclasses.replace(self.state, idf=idf)
        return self

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return ValueLensLexical(self.embeddings, self.tok, self.state).encode(texts).numpy()


def preset_vectors(
    args: argparse.Namespace, texts: dict[str, Sequence[str]]
) -> tuple[dict[str, np.ndarray], float]:
    """The preset's unit vectors of each set (queries under its query side), raw ones kept in
    ``--vectors`` and its own post-processing applied after; and the seconds embedding took in this run."""
    # the model's part alone (a preset with a lexical part of its own has it left out here)
    enc = Encoder.from_pretrained(args.model, preset=args.preset, lexical=None, lexical_query=None)
    own = enc.postprocess
    enc.postprocess = None  # raw vectors in the file; the query side shares it (made after this line)
    saved = dict(np.load(args.vectors)) if args.vectors and args.vectors.is_file() else {}
    start = time.perf_counter()
    for name, items in texts.items():
        if name not in saved:
            embed = enc.encode_query if name == "queries" else enc.encode
            saved[name] = np.asarray(embed(list(items), show_progress=True))
            if args.vectors:
                np.savez(args.vectors, **saved)
    seconds = round(time.perf_counter() - start, 1)
    post = own.transform if own is not None else (lambda x: x)
    return {name: unit(post(saved[name])) for name in texts}, seconds


def ndcg(sim: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str], qrels: dict) -> float:
    rankings = rank_documents(sim, list(doc_ids), top_k=1000)
    return 100 * retrieval_scores(dict(zip(query_ids, rankings, strict=True)), qrels)["ndcg_at_10"]


def sts(a: np.ndarray, b: np.ndarray, gold: Sequence[float]) -> float:
    return 100 * float(spearmanr(np.sum(a * b, axis=1), gold)[0])


def dev(args: argparse.Namespace, lens: LexicalLens) -> dict:
    data = TuneData.build("quick", distractors=args.distractors)
    ret, pairs = data.retrieval, data.sts
    lens_sources = {
        f"fit texts ({data.fit_source})": lambda: lens.fit(data.fit_texts),
        f"the {len(ret.docs)} dev corpus documents": lambda: lens.fit(ret.docs),
        "the model's prior (no corpus)": lens.fit_prior,
    }
    out: dict = {"model": args.model, "queries": len(ret.queries), "documents": len(ret.docs)}
    out["sts_pairs"] = len(pairs.gold)
    lex: dict[str, dict[str, np.ndarray]] = {}
    alone = {}
    for name, fit in lens_sources.items():
        fit()
        sets = {
            "queries": lens.encode(ret.queries),
            "docs": lens.encode(ret.docs),
            "sts": lens.encode(pairs.texts),
        }
        lex[name] = sets
        alone[name] = {
            "scifact_dev_ndcg10": ndcg(
                sets["queries"] @ sets["docs"].T, ret.query_ids, ret.doc_ids, ret.qrels
            ),
            "stsb_dev_spearman": sts(sets["sts"][list(pairs.a)], sets["sts"][list(pairs.b)], pairs.gold),
        }
    out["lens_alone"] = alone
    if not args.fuse:
        return out
    texts = {"queries": ret.queries, "docs": ret.docs, "sts": pairs.texts}
    pre, seconds = preset_vectors(args, texts)
    out["preset_forward_seconds_this_run"] = seconds
    fused = {}
    for name, sets in lex.items():
        rows = {}
        for w in WEIGHTS:
            r = ndcg(
                (1 - w) * pre["queries"] @ pre["docs"].T + w * sets["queries"] @ sets["docs"].T,
                ret.query_ids,
                ret.doc_ids,
                ret.qrels,
            )
            a, b = list(pairs.a), list(pairs.b)
            cat = np.concatenate([math.sqrt(1 - w) * pre["sts"], math.sqrt(w) * sets["sts"]], axis=1)
            s = sts(cat[a], cat[b], pairs.gold)
            rows[str(w)] = {
                "scifact_dev_ndcg10": round(r, 2),
                "stsb_dev_spearman": round(s, 2),
                "balanced": round((r + s) / 2, 2),
            }
        fused[name] = rows
    out[f"fused_with_{args.preset}"] = fused
    return out


def load_test_sets() -> tuple[RetrievalData, PairData]:
    """SciFact's and STS-B's test splits."""
    ret = load_task("scifact").load("test")
    assert isinstance(ret, RetrievalData)
    stsb = load_task("stsb").load("test")
    assert isinstance(stsb, PairData)
    return ret, stsb


def scifact_test_corpus(ret: RetrievalData, full: bool, distractors: int) -> list[str]:
    """SciFact test document ids: the full corpus, or one cut as tune cuts the dev one (the test queries'
    relevant documents and ``distractors`` seeded others), in corpus order."""
    doc_ids = list(ret.corpus)
    if full:
        return doc_ids
    relevant = {d for q in ret.qrels.values() for d, r in q.items() if r > 0 and d in ret.corpus}
    kept = set(_sample([d for d in doc_ids if d not in relevant], distractors)) | relevant
    return [d for d in doc_ids if d in kept]


def sts_texts_and_pairs(stsb: PairData) -> tuple[list[str], list[int], list[int]]:
    """STS-B's distinct texts (each embedded once) and each pair's two indices into them."""
    texts = list(dict.fromkeys([*stsb.texts1, *stsb.texts2]))
    index = {t: i for i, t in enumerate(texts)}
    return texts, [index[t] for t in stsb.texts1], [index[t] for t in stsb.texts2]


def test(args: argparse.Namespace, lens: LexicalLens) -> dict:
    ret, stsb = load_test_sets()
    doc_ids = list(ret.corpus)
    docs = [ret.corpus[d] for d in doc_ids]
    qids = list(ret.queries)
    queries = [ret.queries[i] for i in qids]
    dev_data = TuneData.build("quick")
    out: dict = {
        "model": args.model,
        "queries": len(qids),
        "documents": len(docs),
        "sts_pairs": len(stsb.scores),
    }
    alone = {}
    for name, fit in {
        f"fit texts ({dev_data.fit_source})": lambda: lens.fit(dev_data.fit_texts),
        "the full corpus's documents (unlabeled; what an index holds)": lambda: lens.fit(docs),
        "the model's prior (no corpus)": lens.fit_prior,
    }.items():
        fit()
        q, d = lens.encode(queries), lens.encode(docs)
        a, b = lens.encode(list(stsb.texts1)), lens.encode(list(stsb.texts2))
        alone[name] = {
            "scifact_test_ndcg10": round(ndcg(cosine_similarity_matrix(q, d), qids, doc_ids, ret.qrels), 2),
            "stsb_test_spearman": round(sts(a, b, stsb.scores), 2),
        }
    out["lens_alone_full_corpus"] = alone
    if not args.fuse:
        return out
    # The fusion on a test corpus cut as tune cuts the dev one: the test queries' relevant documents and
    # --distractors others (seeded), the lens fitted on the dev-side fit texts, the weight fixed beforehand.
    sub_ids = scifact_test_corpus(ret, args.full, args.distractors)
    sub_docs = [ret.corpus[d] for d in sub_ids]
    sts_texts, a, b = sts_texts_and_pairs(stsb)
    pre, seconds = preset_vectors(args, {"queries": queries, "docs": sub_docs, "sts": sts_texts})
    lens.fit(dev_data.fit_texts)
    lex = {"queries": lens.encode(queries), "docs": lens.encode(sub_docs), "sts": lens.encode(sts_texts)}
    mini = reference_model()
    ref = {
        "queries": unit(mini.encode(queries)),
        "docs": unit(mini.encode(sub_docs)),
        "sts": unit(mini.encode(sts_texts)),
    }
    w = args.weight
    cat = {k: np.concatenate([math.sqrt(1 - w) * pre[k], math.sqrt(w) * lex[k]], axis=1) for k in pre}
    rows = {}
    for name, vecs in {
        args.preset: pre,
        f"{args.preset} + lens (w={w})": cat,
        "all-MiniLM-L6-v2": ref,
    }.items():
        rows[name] = {
            "scifact_test_ndcg10": round(ndcg(vecs["queries"] @ vecs["docs"].T, qids, sub_ids, ret.qrels), 2),
            "stsb_test_spearman": round(sts(vecs["sts"][a], vecs["sts"][b], stsb.scores), 2),
        }
    out["fused_full_corpus" if args.full else "fused_cut_corpus"] = {
        "documents": len(sub_ids),
        "preset_forward_seconds_this_run": seconds,
        "rows": rows,
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--preset", default="best")
    parser.add_argument("--distractors", type=int, default=1000)
    parser.add_argument("--fuse", action="store_true", help="also fuse with the preset (one forward pass)")
    parser.add_argument("--vectors", type=Path, help="keep (and reuse) the preset's dev vectors in this .npz")
    parser.add_argument("--test", action="store_true", help="the test splits (with --fuse: on a cut corpus)")
    parser.add_argument(
        "--full", action="store_true", help="--test --fuse: over the full corpus, not a cut one"
    )
    parser.add_argument(
        "--weight", type=float, default=0.6, help="--test --fuse: the lens's weight, fixed on dev"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lens = LexicalLens(Path(model_path(args.model)))
    out = test(args, lens) if args.test else dev(args, lens)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
