"""Which post-processing, fitted on which part of the package's corpus, should the rule for untuned
models carry? Every variant scored on the quick dev data from one embedding pass per model.

Usage::

    python research/untuned_fit.py smollm2-135m --out research/rounds/untuned_fit/smollm2-135m.json

The rule's readout (``preset="untuned"`` without its post-processing) embeds the dev sets and the corpus
once; each variant fits :class:`valuelens.Postprocess` on a part of the corpus (all of it, its sentences
and questions, its passages) and is scored on STS-B dev and SciFact dev (the tune's quick data). The
tune's own fitting texts (STS-B train sentences and SciFact documents) are scored too, as a reference for
what in-domain text buys; they are not a candidate (the package cannot ship benchmark text).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from valuelens import models
from valuelens.architectures import model_key
from valuelens.encoder import Encoder
from valuelens.loading import load_model
from valuelens.postprocess import Postprocess
from valuelens.presets.resolution import resolve
from valuelens.states import FitRequest, fit_corpus
from valuelens.tuning.data import TuneData
from valuelens.tuning.search import Scorer

#: Line ranges of the package corpus (see its layout in valuelens/presets: sentences, questions, passages).
PARTS = {"all": slice(0, 480), "sentences+questions": slice(0, 280), "passages": slice(280, 480)}
POSTS = ("none", "center", "abtt:1", "abtt:2", "abtt:3", "abtt:4")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    data = TuneData.build("quick")
    net, tokenizer = load_model(models.path(args.model))
    key = model_key(net.config.get_text_config())
    config = resolve("untuned", key, {"postprocess": None})
    encoder = Encoder(net, tokenizer, config, name_or_path=args.model)
    corpus, _ = fit_corpus(FitRequest("center", 1))  # the package's corpus, as the first-use fit reads it
    texts = {
        "sts": list(data.sts.texts),
        "queries": list(data.retrieval.queries),
        "docs": list(data.retrieval.docs),
        "corpus": corpus,
        "tune-fit": list(data.fit_texts),
    }
    vec = {name: np.asarray(encoder.encode(items, show_progress=True)) for name, items in texts.items()}
    scorer = Scorer(None, data)  # type: ignore[arg-type]  # scores only
    fits = {
        **{f"corpus {p}": vec["corpus"][s] for p, s in PARTS.items()},
        "tune fitting texts (reference)": vec["tune-fit"],
    }
    rows = []
    for fit_name, fit_vec in fits.items():
        for post in POSTS:
            if post == "none":
                if fit_name != "corpus all":
                    continue
                out = {n: vec[n] for n in ("sts", "queries", "docs")}
            else:
                kind, _, k = post.partition(":")
                state = Postprocess.fit(fit_vec, kind, int(k) if k else 1)  # type: ignore[arg-type]
                out = {n: state.transform(vec[n]) for n in ("sts", "queries", "docs")}
            sts, ret = scorer.sts(out["sts"]), scorer.retrieval(out["queries"], out["docs"])
            rows.append(
                {"fit": fit_name, "post": post, "sts": sts, "retrieval": ret, "balanced": (sts + ret) / 2}
            )
            print(f"| {fit_name} | {post} | {sts:.2f} | {ret:.2f} | {(sts + ret) / 2:.2f} |", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"model": args.model, "rows": rows}, indent=1) + "\n", encoding="utf-8"
        )


if __name__ == "__main__":
    main()
