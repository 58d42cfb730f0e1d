"""Score combinations of cached raw embeddings (``research/embed_cache.py``) offline: prompt-pass
averages, fusion weights and post-processings fitted on different unlabeled corpora.

Usage::

    python research/score_cache.py /tmp/cache/smollm2 "awva-fe" "awva-fe+awva-pe" "awva-fe|va-fe:0.7" \
        --post none,abtt:2@train,abtt:2@train+fitdocs --sets dev,lee

A combination is ``A+B`` (prompt passes averaged, as a multi-template prompt does) or ``A|B:w``
(fusion: L2-normalized, B scaled by w, concatenated), and ``COMBO~POST`` scores it with its own
post-processing instead of ``--post``; ``A[12-20]`` is the layer band 12-20 of the
per-layer specs ``A-L12`` … ``A-L20`` (mean over the band); a post-processing is ``KIND[:K]@CORPUS[+CORPUS]``
(``K``: the components of ``abtt``, the dimensions ``whiten`` keeps)
fitted on the combination's vectors of those cached sets (never a reported set). Prints Spearman ×100
of the cosine per set (``--mean``: and their mean; ``--bootstrap N``: each row's gain in that mean over
the first row, with a 95% interval from N paired resamples of the pairs). ``--save STATE --spec
SPEC.json`` keeps the fitted state (one combination, one post-processing) for the spec it was computed
with, as ``valuelens fit`` would.
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
    return fuse_arrays([v for v, _ in parts], [w for _, w in parts])


def fuse_arrays(vecs: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """Parts L2-normalized, scaled by their weights and concatenated, as the encoder fuses them."""
    return fuse([torch.from_numpy(v) for v in vecs], weights).numpy()


def fit_post(cache: Path, combo: str, post: str, **extra: object) -> Postprocess | None:
    """The post-processing ``KIND[:K]@CORPUS[+CORPUS]`` fitted on ``combo``'s cached vectors of those
    sets (``None`` for ``"none"``); ``extra`` goes to :meth:`Postprocess.fit` (what a saved state records)."""
    if post == "none":
        return None
    kind_k, _, corpus = post.partition("@")
    kind, _, k = kind_k.partition(":")
    fit_vecs = np.concatenate([combine(cache, combo, c) for c in corpus.split("+")])
    kw = {("dim" if kind == "whiten" else "k"): int(k)} if k else {}  # whiten:N keeps N dims
    fitted_on = f"{len(fit_vecs)} texts of research/embed_cache.py sets {corpus}"
    return Postprocess.fit(fit_vecs, kind=kind, **kw, fitted_on=fitted_on, **extra)


def transform(fitted: Postprocess | None, vec: np.ndarray) -> np.ndarray:
    """``vec`` through a fitted post-processing (unchanged for ``None``)."""
    if fitted is None:
        return vec
    return fitted.transform(torch.from_numpy(vec).float()).double().numpy()


def cosines(vec: np.ndarray, data: dict) -> np.ndarray:
    """The cosine of each scored pair of ``data``."""
    a, b = _unit(vec[data["a"]]), _unit(vec[data["b"]])
    return (a * b).sum(1)


def spearman(cos: np.ndarray, gold: np.ndarray | list[float]) -> float:
    """Spearman ×100 of the cosines against the gold scores."""
    return float(spearmanr(cos, gold).statistic) * 100


def bootstrap_gain(
    rows: list[dict[str, np.ndarray]], sets: dict[str, dict], n: int, seed: int = 0
) -> list[tuple[float, float, float]]:
    """Each row's gain over the first row in the mean Spearman over the sets, with a 95% interval from
    ``n`` paired bootstrap resamples of each set's pairs (the same resample for every row)."""
    rng = np.random.default_rng(seed)
    draws = np.zeros((n, len(rows)))
    for name, data in sets.items():
        gold = np.asarray(data["gold"])
        for i in range(n):
            pick = rng.integers(0, len(gold), len(gold))
            for r, row in enumerate(rows):
                draws[i, r] += spearman(row[name][pick], gold[pick]) / len(sets)
    gains = draws - draws[:, :1]
    point = [float(np.mean([spearman(row[s], sets[s]["gold"]) for s in sets])) for row in rows]
    return [
        (point[r] - point[0], float(np.percentile(gains[:, r], 2.5)), float(np.percentile(gains[:, r], 97.5)))
        for r in range(len(rows))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("cache", type=Path)
    parser.add_argument("combos", nargs="+")
    parser.add_argument("--post", default="none")
    parser.add_argument("--sets", default="dev,lee")
    parser.add_argument("--mean", action="store_true", help="add a column with the mean over the sets")
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=0,
        help="N: each row's gain in the mean over the sets against the first row, with a 95%% paired-bootstrap interval",
    )
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
    mean = ["mean"] if args.mean else []
    print("| combination | post-processing | " + " | ".join([*sets, *mean]) + " |")
    print("|---|---|" + "---:|" * (len(sets) + len(mean)))
    extra = {}  # what a saved state records besides its fitting texts
    if args.save:
        extra = {
            "model": args.model,
            "encoder_config": resolve_config(  # as an Encoder on the model records it
                args.model, EncoderConfig.from_dict(json.loads(args.spec.read_text()))
            ).to_dict(),
        }
    rows: list[tuple[str, dict[str, np.ndarray]]] = []
    for entry in args.combos:
        combo, _, own = entry.partition("~")  # COMBO~POST: this combination with its own post-processing
        for post in [own] if own else args.post.split(","):
            fitted = fit_post(args.cache, combo, post, **extra)
            if args.save and fitted is not None:
                fitted.save(args.save)
            row = {
                name: cosines(transform(fitted, combine(args.cache, combo, name)), data)
                for name, data in sets.items()
            }
            rows.append((f"{combo} ({post})", row))
            scores = [spearman(row[name], data["gold"]) for name, data in sets.items()]
            cells = [f"{x:.2f}" for x in [*scores, *([float(np.mean(scores))] if args.mean else [])]]
            print(f"| {combo} | {post} | " + " | ".join(cells) + " |", flush=True)
    if args.bootstrap and len(rows) > 1:
        gains = bootstrap_gain([r for _, r in rows], sets, args.bootstrap)
        print(
            f"\ngain in the mean over {', '.join(sets)} against {rows[0][0]} ({args.bootstrap} paired resamples):\n"
        )
        print("| combination | gain | 95% interval |\n|---|---:|---|")
        for (label, _), (gain, lo, hi) in zip(rows[1:], gains[1:], strict=True):
            print(f"| {label} | {gain:+.2f} | [{lo:+.2f}, {hi:+.2f}] |")


if __name__ == "__main__":
    main()
