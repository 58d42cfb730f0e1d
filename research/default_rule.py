"""Leave one model out: a default spec rule for untuned models, derived from two models' tuning caches and
scored on the third's dev data.

Usage::

    python research/default_rule.py /tmp/tuned-smol /tmp/tuned-gemma /tmp/tuned-qwen
    python research/default_rule.py /tmp/tuned-smol /tmp/tuned-gemma /tmp/tuned-qwen --query-sides

Each argument is a folder written by ``valuelens tune MODEL -o DIR --keep-cache`` (quick mode). A rule is
a spec in relative terms: the main readout family over a band of relative depth, optionally fused with
another family's relative band at a weight, then a post-processing kind. For each left-out model the rule
with the best mean *relative* objective (objective / that model's tuned objective) on the other two is
applied to it and scored from its cache; the table compares it with the model's tuned objective and with
the generic spec's nearest rule (AlignedWVA over the 50-85 % band, no fusion, no post-processing).
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from valuelens.embed_filter import EmbedFilter
from valuelens.presets.folder import PresetFolder
from valuelens.tuning.cache import FAMILIES, LayerCache
from valuelens.tuning.data import TuneData
from valuelens.tuning.search import Candidate, Part, Scorer

FAMILY = {f.name: f for f in FAMILIES}
#: relative bands (start, end) as fractions of the depth, end inclusive
MAIN_BANDS = [(lo / 10, hi / 10) for lo in (4, 5, 6, 7) for hi in (8, 9, 10)]
FUSED = [None, ("hs", 0.0, 0.07), ("va", 0.7, 1.0), ("aligned-va", 0.7, 1.0)]
WEIGHTS = (0.5, 1.0)
POSTS = ("none", "center", "abtt:2")
#: the query side: queries under the documents' prompt (None) or under one of these (``--query-sides``;
#: a tune cache holds the queries under every prompt of ``valuelens.tuning.QUERY_TEMPLATES``)
QUERY_SIDES = ("futureeol", "prompteol")


@dataclass(frozen=True)
class Rule:
    main: str
    band: tuple[float, float]
    fused: tuple[str, float, float] | None
    weight: float
    post: str
    query: str | None = None

    def label(self) -> str:
        text = f"{self.main}[{self.band[0]:.2f}-{self.band[1]:.2f}]"
        if self.fused:
            text += f" | {self.fused[0]}[{self.fused[1]:.2f}-{self.fused[2]:.2f}]:{self.weight:g}"
        return f"{text} ~{self.post}" + ("" if self.query is None else f" q:{self.query}")


def _layers(lo: float, hi: float, n: int) -> tuple[int, int]:
    a = min(n - 2, round(lo * (n - 1)))
    b = max(a + 1, min(n - 1, round(hi * (n - 1))))
    return a, b


class Model:
    def __init__(self, folder: Path) -> None:
        self.folder = PresetFolder.read(folder)
        data = TuneData.build(self.folder.info.get("mode", "quick"), objective=self.folder.objective)
        cache = LayerCache.open(
            folder / "cache",
            data,
            model_name=self.folder.model,
            model_key=self.folder.model_key,
            max_length=512,
        )
        self.n = self.folder.model_key[1]
        from valuelens import models

        ef = EmbedFilter.from_model(models.path(self.folder.model), tau=2.0)
        self.scorer = Scorer(cache, data, embed_filters={2.0: ef})
        self.prompt = self.folder.spec["prompt"]
        self.tuned = float(self.folder.info["dev"]["objective"])

    def score(self, rule: Rule) -> float:
        main = Part(FAMILY[rule.main], *_layers(*rule.band, self.n))
        fused = None
        if rule.fused:
            name, lo, hi = rule.fused
            fused = Part(FAMILY[name], *_layers(lo, hi, self.n), 2.0 if name == "aligned-va" else None)
        candidate = Candidate(self.prompt, main, fused, rule.weight, rule.post, query_template=rule.query)
        row = self.scorer.score(candidate, "rule")
        return float("nan") if row is None else row.objective


def rules(query_sides: bool = False) -> list[Rule]:
    out = []
    queries = (None, *QUERY_SIDES) if query_sides else (None,)
    for main, band, fused, post, query in itertools.product(
        ("aligned-wva-dp", "aligned-wva"), MAIN_BANDS, FUSED, POSTS, queries
    ):
        for weight in WEIGHTS if fused else (1.0,):
            out.append(Rule(main, band, fused, weight, post, query))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("folders", nargs=3, type=Path)
    parser.add_argument(
        "--query-sides",
        action="store_true",
        help="also try queries under FutureEOL and PromptEOL (caches from a tune with the query-side stage)",
    )
    args = parser.parse_args()
    models = [Model(f) for f in args.folders]
    candidates = rules(args.query_sides)
    table = {(m.folder.model, r): m.score(r) for m in models for r in candidates}
    generic = Rule("aligned-wva", (0.5, 0.85), None, 1.0, "none")
    print(
        "| left out | rule (from the other two) | its dev objective | tuned | gap | generic (50-85 %, no post) |"
    )
    print("|---|---|---:|---:|---:|---:|")
    chosen = {}
    for out in models:
        rest = [m for m in models if m is not out]
        best = max(candidates, key=lambda r: sum(table[(m.folder.model, r)] / m.tuned for m in rest))
        chosen[out.folder.model] = best.label()
        got = table[(out.folder.model, best)]
        print(
            f"| {out.folder.model} | `{best.label()}` | {got:.2f} | {out.tuned:.2f} | {got - out.tuned:+.2f} | "
            f"{out.score(generic):.2f} |"
        )
    overall = max(candidates, key=lambda r: sum(table[(m.folder.model, r)] / m.tuned for m in models))
    print(
        f"\nfrom all three: `{overall.label()}`: "
        + ", ".join(f"{m.folder.model} {table[(m.folder.model, overall)]:.2f}" for m in models)
    )
    print(json.dumps({"lomo": chosen, "all": overall.label()}))


if __name__ == "__main__":
    main()
