"""Score combinations of cached raw embeddings (``tools/embed_cache.py``) offline: prompt-pass
averages, fusion weights and post-processings fitted on different unlabeled corpora.

Usage::

    python tools/score_cache.py /tmp/cache/smollm2 "awva-fe" "awva-fe+awva-pe" "awva-fe|va-fe:0.7" \
        --post none,abtt:2@train,abtt:2@train+fitdocs --sets dev,lee

A combination is ``A+B`` (prompt passes averaged, as a multi-template prompt does) or ``A|B:w``
(fusion: L2-normalized, B scaled by w, concatenated); ``A[12-20]`` is the layer band 12-20 of the
per-layer specs ``A-L12`` … ``A-L20`` (mean over the band); a post-processing is ``KIND[:K]@CORPUS[+CORPUS]``
fitted on the combination's vectors of those cached sets (never a reported set). Prints Spearman ×100
of the cosine per set. ``--save STATE --spec SPEC.json`` keeps the fitted state (one combination,
one post-processing) for the spec it was computed with, as ``valuelens fit`` would.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from valuelens import EncoderConfig
from valuelens.loading import resolve_config
from valuelens.postprocess import Postprocess
from valuelens.readout import fuse


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def load(cache: Path, name: str, set_name: str) -> np.ndarray:
    """One cached spec's vectors; ``NAME[A-B]`` is the mean of the per-layer specs ``NAME-LA`` … ``NAME-LB``
    (the recipe's layer mean over that band, as ``layers="A-B"`` computes it)."""
    band = re.fullmatch(r"(.+)\[(\d+)-(\d+)\]", name)
    if band is None:
        return np.load(cache / f"{name}.{set_name}.npy").astype(np.float64)
    stem, lo, hi = band.group(1), int(band.group(2)), int(band.group(3))
    return np.mean([np.load(cache / f"{stem}-L{i}.{set_name}.npy") for i in range(lo, hi + 1)], axis=0)


def combine(cache: Path, combo: str, set_name: str) -> np.ndarray:
    """The vectors of ``combo`` on ``set_name``."""
    parts = []
    for fused in combo.split("|"):
        name, _, weight = fused.partition(":")
        passes = [load(cache, n, set_name) for n in name.split("+")]
        vec = passes[0] if len(passes) == 1 else np.mean([_unit(p) for p in passes], axis=0)
        parts.append((vec, float(weight) if weight else 1.0))
    if len(parts) == 1:
        return parts[0][0]
    fused = fuse([torch.from_numpy(v) for v, _ in parts], [w for _, w in parts])  # as the encoder fuses
    return fused.numpy()


def score(vec: np.ndarray, data: dict) -> float:
    a, b = _unit(vec[data["a"]]), _unit(vec[data["b"]])
    return float(spearmanr((a * b).sum(1), data["gold"]).statistic) * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("cache", type=Path)
    parser.add_argument("combos", nargs="+")
    parser.add_argument("--post", default="none")
    parser.add_argument("--sets", default="dev,lee")
    parser.add_argument(
        "--save",
        type=Path,
        default=None,
        help="with one combination and one post-processing: save the fitted state here",
    )
    parser.add_argument(
        "--spec", type=Path, default=None, help="with --save: the EncoderConfig JSON it is for"
    )
    parser.add_argument("--model", default=None, help="with --save: the model name recorded in the state")
    args = parser.parse_args()
    if args.save and (len(args.combos) != 1 or "," in args.post or args.post == "none" or not args.spec):
        raise SystemExit("--save needs one combination, one post-processing and --spec")
    sets = {s: json.loads((args.cache / f"{s}.json").read_text()) for s in args.sets.split(",")}
    print("| combination | post-processing | " + " | ".join(sets) + " |")
    print("|---|---|" + "---:|" * len(sets))
    for combo in args.combos:
        for post in args.post.split(","):
            fitted = None
            if post != "none":
                kind_k, _, corpus = post.partition("@")
                kind, _, k = kind_k.partition(":")
                fit_vecs = np.concatenate([combine(args.cache, combo, c) for c in corpus.split("+")])
                kw = {"k": int(k)} if k else {}
                extra = {}
                if args.save:
                    extra = {
                        "fitted_on": f"{len(fit_vecs)} texts of tools/embed_cache.py sets {corpus}",
                        "model": args.model,
                        "encoder_config": resolve_config(  # as an Encoder on the model records it
                            args.model, EncoderConfig.from_dict(json.loads(args.spec.read_text()))
                        ).to_dict(),
                    }
                fitted = Postprocess.fit(fit_vecs, kind=kind, **kw, **extra)
                if args.save:
                    fitted.save(args.save)
            cells = []
            for name, data in sets.items():
                vec = combine(args.cache, combo, name)
                if fitted is not None:
                    vec = fitted.transform(torch.from_numpy(vec).float()).double().numpy()
                cells.append(f"{score(vec, data):.2f}")
            print(f"| {combo} | {post} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
