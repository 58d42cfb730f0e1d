"""Leave one model out: a default spec rule for untuned models, derived from two models' tuning caches and
scored on the third's dev data.

Usage::

    python research/default_rule.py /tmp/tuned-smol /tmp/tuned-gemma /tmp/tuned-qwen
    python research/default_rule.py /tmp/tuned-smol /tmp/tuned-gemma /tmp/tuned-qwen --query-sides
    python research/default_rule.py /tmp/tuned-smol /tmp/tuned-gemma /tmp/tuned-qwen --lexical

Each argument is a folder written by ``valuelens tune MODEL -o DIR --keep-cache`` (quick mode). A rule is
a spec in relative terms: the main readout family over a band of relative depth, optionally fused with
another family's relative band at a weight, then a post-processing kind. For each left-out model the rule
with the best mean *relative* objective (objective / that model's tuned objective) on the other two is
applied to it and scored from its cache; the table compares it with the model's tuned objective and with
the generic spec's nearest rule (AlignedWVA over the 50-85 % band, no fusion, no post-processing).

``--lexical`` searches near the shipped rule instead, with what the tuned presets have since gained: the
rule's band (70-100 %), with or without ``drop_prefix``, VA fused at 0.5 or 1 (or nothing), centering or
all-but-the-top with 2 or 4 components, the three query sides, and every lexical pair of ``valuelens
tune``'s lexical stage (or none). A folder's dev data is rebuilt as its run read it (all STS-B dev pairs
when its ``data`` says so).
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from valuelens import models
from valuelens.config import EncoderConfig
from valuelens.embed_filter import EmbedFilter
from valuelens.encoder import Encoder
from valuelens.loading import load_model
from valuelens.presets.folder import PresetFolder
from valuelens.presets.table import UNTUNED
from valuelens.states import lexical_lens
from valuelens.tuning import data as tune_data
from valuelens.tuning.cache import FAMILIES, LayerCache
from valuelens.tuning.data import TuneData
from valuelens.tuning.search import LEXICAL_WEIGHTS, Candidate, Part, Scorer

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
    lexical: tuple[float, float] | None = None

    def label(self) -> str:
        text = f"{self.main}[{self.band[0]:.2f}-{self.band[1]:.2f}]"
        if self.fused:
            text += f" | {self.fused[0]}[{self.fused[1]:.2f}-{self.fused[2]:.2f}]:{self.weight:g}"
        text += f" ~{self.post}" + (
            "" if self.lexical is None else f" +lex{self.lexical[0]:g}/{self.lexical[1]:g}"
        )
        return text + ("" if self.query is None else f" q:{self.query}")


def _layers(lo: float, hi: float, n: int) -> tuple[int, int]:
    a = min(n - 2, round(lo * (n - 1)))
    b = max(a + 1, min(n - 1, round(hi * (n - 1))))
    return a, b


class Model:
    def __init__(self, folder: Path) -> None:
        self.folder = PresetFolder.read(folder)
        mode = self.folder.info.get("mode", "quick")
        pairs = self.folder.info.get("data", {}).get("sts_pairs")
        saved = dict(tune_data.SIZES[mode])
        if pairs and pairs != saved["sts_pairs"]:  # a run over more STS-B dev pairs than the mode reads
            tune_data.SIZES[mode]["sts_pairs"] = None
        try:
            data = TuneData.build(mode, objective=self.folder.objective)
        finally:
            tune_data.SIZES[mode].update(saved)
        cache = LayerCache.open(
            folder / "cache",
            data,
            model_name=self.folder.model,
            model_key=self.folder.model_key,
            max_length=512,
        )
        self.n = self.folder.model_key[1]
        path = models.path(self.folder.model)
        ef = EmbedFilter.from_model(path, tau=2.0)
        net, tokenizer = load_model(path)  # the lexical part's lens, as the rule's encoder reads it
        fields = {k: v for k, v in UNTUNED.items() if k != "postprocess"}
        encoder = Encoder(net, tokenizer, EncoderConfig.from_dict(fields), name_or_path=self.folder.model)
        self.scorer = Scorer(
            cache,
            data,
            embed_filters={2.0: ef},
            lexical={"embeddings": lexical_lens(encoder.model, encoder.tokenizer)},
        )
        self.prompt = self.folder.spec["prompt"]
        self.tuned = float(self.folder.info["dev"]["objective"])
        self.pairs = len(data.sts.gold)

    def score(self, rule: Rule) -> float:
        main = Part(FAMILY[rule.main], *_layers(*rule.band, self.n))
        fused = None
        if rule.fused:
            name, lo, hi = rule.fused
            fused = Part(FAMILY[name], *_layers(lo, hi, self.n), 2.0 if name == "aligned-va" else None)
        lexical = rule.lexical or (None, None)
        candidate = Candidate(
            self.prompt,
            main,
            fused,
            rule.weight,
            rule.post,
            query_template=rule.query,
            lexical=lexical[0],
            lexical_query=lexical[1],
        )
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


def near_rules() -> list[Rule]:
    """``--lexical``: the shipped rule's band, with every other choice open (see the module docstring)."""
    out = []
    fusions = [(None, 1.0), (("va", 0.7, 1.0), 0.5), (("va", 0.7, 1.0), 1.0)]
    for main, (fused, weight), post, query, lexical in itertools.product(
        ("aligned-wva-dp", "aligned-wva"),
        fusions,
        ("center", "abtt:2", "abtt:4"),
        (None, *QUERY_SIDES),
        (None, *LEXICAL_WEIGHTS),
    ):
        out.append(Rule(main, (0.7, 1.0), fused, weight, post, query, lexical))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("folders", nargs=3, type=Path)
    parser.add_argument(
        "--query-sides",
        action="store_true",
        help="also try queries under FutureEOL and PromptEOL (caches from a tune with the query-side stage)",
    )
    parser.add_argument(
        "--lexical", action="store_true", help="search near the shipped rule, lexical part included"
    )
    args = parser.parse_args()
    models = [Model(f) for f in args.folders]
    candidates = near_rules() if args.lexical else rules(args.query_sides)
    table = {(m.folder.model, r): m.score(r) for m in models for r in candidates}
    generic = Rule("aligned-wva", (0.5, 0.85), None, 1.0, "none")
    if args.lexical:  # the shipped rule (presets.table.UNTUNED) is the reference instead
        generic = Rule("aligned-wva", (0.7, 1.0), ("va", 0.7, 1.0), 0.5, "abtt:2", None, (0.2, 0.95))
    print(
        "| left out | rule (from the other two) | its dev objective | tuned | gap | generic (50-85 %, no post) |"
        if not args.lexical
        else "| left out | rule (from the other two) | its dev objective | tuned | gap | the shipped rule |"
    )
    print("|---|---|---:|---:|---:|---:|")
    chosen = {}
    for out in models:
        rest = [m for m in models if m is not out]
        best = max(candidates, key=lambda r: sum(table[(m.folder.model, r)] / m.tuned for m in rest))
        chosen[out.folder.model] = best.label()
        cell = best.label().replace("|", "\\|")  # inside a Markdown table
        got = table[(out.folder.model, best)]
        print(
            f"| {out.folder.model} | `{cell}` | {got:.2f} | {out.tuned:.2f} | {got - out.tuned:+.2f} | "
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
