"""The lexical part on the rule for untuned models: which ``(lexical, lexical_query)`` pair to add to
:data:`valuelens.presets.table.UNTUNED`, chosen leave-one-model-out on the dev data of a quick tune.

Usage::

    python research/untuned_lexical.py embed smollm2-135m --out research/rounds/untuned_lexical --vectors /tmp/ul/smollm2-135m.npz
    python research/untuned_lexical.py choose research/rounds/untuned_lexical

``embed`` embeds the dev data once with the rule's model part, as users get it (the real encoder,
all-but-the-top fitted at first use on the package's corpus), reads the texts' lexical vectors with the
default idf (English word frequencies, as a preset without ``lexical_corpus`` gets them), and scores every pair of
``valuelens tune``'s lexical stage (:data:`valuelens.tuning.search.LEXICAL_WEIGHTS`) and no lexical part;
it writes ``OUT/MODEL.json``. ``choose`` picks, for each left-out model, the pair with the best mean dev
objective on the other two, and prints what it gives the left-out model next to its best pair, then the
pair best on all the models (what the rule ships).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from valuelens import models
from valuelens.config import EncoderConfig
from valuelens.encoder import Encoder
from valuelens.lexical import LexicalPart
from valuelens.loading import load_model
from valuelens.presets.table import UNTUNED
from valuelens.states import lexical_lens
from valuelens.tuning.data import TuneData
from valuelens.tuning.search import LEXICAL_WEIGHTS, Scorer

NONE = "none"
LEXICAL_FIELDS = ("lexical", "lexical_query", "lexical_corpus")


def pair_name(doc: float, query: float) -> str:
    return f"{doc:g}/{query:g}"


def embed(model: str, out: Path, vectors: Path | None) -> None:
    """Score the rule's model part with every lexical pair on the quick dev data; write ``OUT/MODEL.json``."""
    data = TuneData.build("quick")
    net, tokenizer = load_model(models.path(model))
    fields = {k: v for k, v in UNTUNED.items() if k not in LEXICAL_FIELDS}
    encoder = Encoder(net, tokenizer, EncoderConfig.from_dict(fields), name_or_path=model)
    texts = {"sts": data.sts.texts, "queries": data.retrieval.queries, "docs": data.retrieval.docs}
    # the rule's model part, kept in --vectors: a rescoring (another idf) needs no forward pass
    dense = dict(np.load(vectors)) if vectors is not None and vectors.is_file() else {}
    if set(dense) != set(texts):
        dense = {name: np.asarray(encoder.encode(list(items))) for name, items in texts.items()}
        if vectors is not None:
            np.savez(vectors, **dense)
    lens = lexical_lens(encoder.model, encoder.tokenizer)
    lexical = {name: lens.encode(list(items)).cpu() for name, items in texts.items()}
    scorer = Scorer(None, data)  # type: ignore[arg-type]  # scores only: no cache is read
    rows = {}
    for doc, query in [(None, None), *LEXICAL_WEIGHTS]:
        vec = {}
        for name, value in dense.items():
            weight = query if name == "queries" else doc
            if weight is None:
                vec[name] = value
            else:
                vec[name] = LexicalPart(lexical[name], weight).join(torch.from_numpy(value)).numpy()
        sts = scorer.sts(vec["sts"])
        ret = scorer.retrieval(vec["queries"], vec["docs"])
        label = NONE if doc is None else pair_name(doc, query)  # type: ignore[arg-type]
        rows[label] = {
            "sts": round(sts, 2),
            "retrieval": round(ret, 2),
            "objective": round(scorer.combine(sts, ret), 2),
        }
        print(label, rows[label], flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{model}.json").write_text(
        json.dumps({"model": model, "spec": fields, "rows": rows}, indent=1) + "\n"
    )


def choose(folder: Path) -> None:
    """Leave one model out: the pair best on the other two models, applied to the left-out one."""
    runs = {r["model"]: r["rows"] for r in (json.loads(p.read_text()) for p in sorted(folder.glob("*.json")))}
    pairs = [pair_name(d, q) for d, q in LEXICAL_WEIGHTS]
    print(
        "| left-out model | pair chosen on the other two | no lexical part | with the pair | its own best pair |"
    )
    print("|---|---|---:|---:|---:|")
    for left, rows in runs.items():
        others = [r for m, r in runs.items() if m != left]
        chosen = max(pairs, key=lambda p: np.mean([r[p]["objective"] for r in others]))
        own = max(pairs, key=lambda p: rows[p]["objective"])
        print(
            f"| {left} | {chosen} | {rows[NONE]['objective']:.2f} | {rows[chosen]['objective']:.2f} "
            f"(STS-B {rows[chosen]['sts']:.2f}, SciFact {rows[chosen]['retrieval']:.2f}) | "
            f"{own}: {rows[own]['objective']:.2f} |"
        )
    best = max(pairs, key=lambda p: np.mean([r[p]["objective"] for r in runs.values()]))
    scores = ", ".join(f"{m} {r[best]['objective']:.2f}" for m, r in runs.items())
    print(f"\nthe pair best on all {len(runs)} models (the rule's): {best} ({scores})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("embed")
    run.add_argument("model", choices=models.available())
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--vectors", type=Path, help="an .npz keeping the model part's vectors")
    pick = sub.add_parser("choose")
    pick.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.command == "embed":
        embed(args.model, args.out, args.vectors)
    else:
        choose(args.folder)


if __name__ == "__main__":
    main()
