"""Score two cached combinations, each under its own post-processing, fused at several weights.

``research/score_cache.py`` fuses first and post-processes the concatenation; here each part is
post-processed apart before the fusion.

Usage::

    python research/fuse_posted.py /tmp/cache/smol-ef "awva-fesent-dp|va-fesent:0.3~abtt:4@train" \
        "awva-fesent-dp|ava-fesent-ef2:0.3~center@train" --weights 0,0.5,1,1.5,2 --sets devall,lee

Each part is ``COMBO~POST`` in ``score_cache.py``'s grammar (``~none`` or no ``~``: raw), its
post-processing fitted on that combination's vectors of the named cached sets. The two are L2-normalized,
the second scaled by the weight and concatenated, as an ``EncoderConfig`` fusion would be (weight 0: the
first part alone). Prints Spearman ×100 of the cosine per set.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from score_cache import (  # research/ on sys.path as a script
    combine,
    cosines,
    fit_post,
    fuse_arrays,
    spearman,
    transform,
)


def scores(cache: Path, first: str, second: str, weights: list[float], sets: list[str]) -> list[list[float]]:
    """Spearman ×100 per weight (rows) and set (columns) of ``first`` fused with ``second``."""
    parts = []
    for entry in (first, second):
        combo, _, post = entry.partition("~")
        parts.append((combo, fit_post(cache, combo, post or "none")))
    data = {s: json.loads((cache / f"{s}.json").read_text()) for s in sets}
    vecs = {s: [transform(fitted, combine(cache, combo, s)) for combo, fitted in parts] for s in sets}
    table = []
    for w in weights:
        row = []
        for s in sets:
            a, b = vecs[s]
            v = a if w == 0 else fuse_arrays([a, b], [1.0, w])
            row.append(spearman(cosines(v, data[s]), data[s]["gold"]))
        table.append(row)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("cache", type=Path)
    parser.add_argument("first", help="COMBO~POST")
    parser.add_argument("second", help="COMBO~POST, fused in at each weight")
    parser.add_argument("--weights", default="0,0.5,1")
    parser.add_argument("--sets", default="devall,lee")
    args = parser.parse_args()
    weights = [float(w) for w in args.weights.split(",")]
    sets = args.sets.split(",")
    print(f"first: {args.first}; second: {args.second}\n")
    print("| weight of the second | " + " | ".join(sets) + " |\n|---:|" + "---:|" * len(sets))
    for w, row in zip(weights, scores(args.cache, args.first, args.second, weights, sets), strict=True):
        print(f"| {w:g} | " + " | ".join(f"{x:.2f}" for x in row) + " |")


if __name__ == "__main__":
    main()
