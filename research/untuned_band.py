"""Would choosing the rule's layer band per model close the untuned rule's gap to the tuned presets?

Usage::

    python research/untuned_band.py /tmp/runs/tune-smollm2-135m /tmp/runs/tune-gemma3-270m /tmp/runs/qwen-tune-1500 \
        --grids research/rounds/untuned_band/grids --signals research/rounds/untuned_band/segments \
        --out research/rounds/untuned_band/table.md

Each folder is written by ``valuelens tune MODEL -o DIR --keep-cache`` (a quick run, or a run over all
STS-B dev pairs: the folder's ``data`` says which, and the dev data is rebuilt to match). From the cache,
with everything but the band as the rule has it (:data:`valuelens.presets.table.UNTUNED`: AlignedWVA under
FutureEOL "of this sentence", fused with VA over the same band at 0.5, all-but-the-top with 2 components,
the lexical part at 0.2 / 0.95), the script scores

- the rule's band (70-100 % of the depth),
- every contiguous band of at least two layers (the *oracle* band: the best one chosen on dev, with
  labels; an upper bound on what any per-model choice of band can give this rule),
- the bands a label-free signal picks: segment matching (the Value Aggregation paper's Fig. 2,
  ``valuelens segments``) on the package's own corpus, read from ``--signals DIR/MODEL.json``,

next to the model's tuned objective. All-but-the-top is fitted on the tune's fitting texts (in-domain), as
``valuelens tune`` fits it, not on the package's corpus as the rule is at first use: the differences
between bands are what this measures, not the rule's absolute score (docs/tuning.md has that).

``--fit-parts FILE`` also writes which part of the fitting texts the in-domain all-but-the-top owes its
lead over the package's corpus to: the rule's band, its all-but-the-top fitted on the tune's fitting
texts, on their STS-B train sentences alone, on their SciFact documents alone, on the package's corpus
(as at first use; embedded by the rule's real encoder, nothing fitted) and on the package's corpus with
the tune's documents added.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
from default_rule import (
    FAMILY,  # research/ on sys.path as a script
    Model as CacheModel,
)

from valuelens import models
from valuelens.config import EncoderConfig
from valuelens.encoder import Encoder
from valuelens.layers import resolve_layers
from valuelens.loading import load_model
from valuelens.postprocess import Postprocess
from valuelens.presets.table import UNTUNED
from valuelens.states import corpus_texts
from valuelens.tuning import data as tune_data
from valuelens.tuning.cache import FAMILIES
from valuelens.tuning.search import MIN_BAND, Candidate, Part


def rule_band(n: int) -> tuple[int, int]:
    """The rule's band (``UNTUNED["layers"]``) on a model of ``n`` layers, as the encoder resolves it."""
    layers = resolve_layers(UNTUNED["layers"], n)
    return layers[0], layers[-1]


def signal_bands(recall: list[float], n: int) -> dict[str, tuple[int, int]]:
    """Bands a label-free per-layer signal picks (R@1 of segment matching per layer), fixed before
    looking at dev scores: in the top half of the depth, the best window of 2, 3 and 4 layers by mean
    R@1; and from the best layer of the top half to the last layer."""
    top = range(n // 2, n)
    out = {}
    for width in (2, 3, 4):
        lo = max((lo for lo in top if lo + width <= n), key=lambda lo: np.mean(recall[lo : lo + width]))
        out[f"segments: best {width}-layer window"] = (lo, lo + width - 1)
    best = max(top, key=lambda i: recall[i])
    out["segments: best layer to the last"] = (min(best, n - MIN_BAND), n - 1)
    return out


class Model(CacheModel):
    """A tune folder's cache, scored with the rule's choices (:class:`default_rule.Model`)."""

    def rule(self, lo: int, hi: int) -> Candidate:
        """The rule's candidate over layers ``lo..hi`` (main and fused part alike)."""
        fused = UNTUNED["fusion"][0]
        return Candidate(
            UNTUNED["prompt"],
            Part(FAMILY["aligned-wva"], lo, hi),
            Part(FAMILY[fused["recipe"]], lo, hi),
            fused["weight"],
            "abtt:2",
            lexical=UNTUNED["lexical"],
            lexical_query=UNTUNED["lexical_query"],
        )

    def score(self, candidate: Candidate) -> tuple[float, float, float]:
        row = self.scorer.score(candidate, "band")
        assert row is not None
        return row.sts, row.retrieval, row.objective

    def fit_parts(self) -> list[tuple[str, float, float, float]]:
        """The rule (its band) with all-but-the-top fitted on each part of the fitting texts (module
        docstring): ``(fitted on, STS-B dev, SciFact dev nDCG@10, balanced)``."""
        candidate = replace(self.rule(*rule_band(self.n)), post="none")
        fit = self.scorer.raw_vectors(candidate, "fit")
        n_sentences = tune_data.SIZES[self.folder.info.get("mode", "quick")]["fit_sentences"]
        net, tokenizer = load_model(models.path(self.folder.model))
        raw = {k: v for k, v in UNTUNED.items() if k not in ("postprocess", "lexical", "lexical_query")}
        encoder = Encoder(net, tokenizer, EncoderConfig.from_dict(raw))
        texts, _ = corpus_texts(None, option="the package's corpus")
        package = np.asarray(encoder.encode(texts))
        parts = {
            f"the tune's fitting texts ({len(fit)})": fit,
            f"their STS-B train sentences ({n_sentences})": fit[:n_sentences],
            f"their SciFact documents ({len(fit) - n_sentences})": fit[n_sentences:],
            f"the package's corpus ({len(package)}; the default)": package,
            "the package's corpus and the tune's documents": np.concatenate([package, fit[n_sentences:]]),
        }
        rows = []
        for label, vectors in parts.items():
            post = Postprocess.fit(vectors, kind="abtt", k=2)
            sts = self.scorer.sts(self.scorer.vectors(candidate, "sts", post))
            queries = self.scorer.vectors(candidate, "queries", post)
            ret = self.scorer.retrieval(queries, self.scorer.vectors(candidate, "docs", post))
            rows.append((label, sts, ret, self.scorer.combine(sts, ret)))
        return rows

    def path(self, start: Candidate) -> list[tuple[str, Candidate]]:
        """From ``start`` (the rule) to the tuned candidate, one element of the tuned spec at a time."""
        spec = dict(self.folder.spec)
        reference = spec.pop("postprocess", None)
        tuned = Candidate.from_config(EncoderConfig.from_dict(spec), FAMILIES)
        assert tuned is not None and tuned.fused is not None, spec
        main, fused = tuned.main, tuned.fused
        post = "none"
        if reference:  # the kind the tune fitted, read from its saved state
            state = Postprocess.load(self.folder.path / reference)
            post = state.kind if state.kind != "abtt" else f"abtt:{state.k}"
        steps = [
            (
                "tuned main part (its band for both parts)",
                replace(start, main=main, fused=replace(start.fused, lo=main.lo, hi=main.hi)),
            ),
        ]
        steps.append(
            ("+ tuned fused part and weight", replace(steps[-1][1], fused=fused, weight=tuned.weight))
        )
        steps.append(("+ tuned post-processing", replace(steps[-1][1], post=post)))
        steps.append(("+ tuned query side", replace(steps[-1][1], query_template=tuned.query_template)))
        steps.append(
            (
                "+ tuned lexical weights (= tuned)",
                replace(steps[-1][1], lexical=tuned.lexical, lexical_query=tuned.lexical_query),
            )
        )
        return steps


def _cell(text: str) -> str:
    """``text`` inside a Markdown table cell (its pipes escaped)."""
    return text.replace("|", "\\|")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--signals", type=Path, help="DIR with MODEL.json from `valuelens segments`")
    parser.add_argument("--out", type=Path, help="the table, as Markdown")
    parser.add_argument("--grids", type=Path, help="DIR for MODEL.json: every band's dev scores")
    parser.add_argument("--fit-parts", type=Path, help="FILE: the rule fitted on each part (Markdown)")
    args = parser.parse_args()
    fit_lines = [
        "| model | all-but-the-top (2) fitted on | STS-B dev | SciFact dev nDCG@10 | balanced | gap to tuned |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines = [
        "| model | band | layers | STS-B dev | SciFact dev nDCG@10 | balanced | gap to tuned |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for folder in args.folders:
        model = Model(folder)
        n = model.n
        bands = {"rule (70-100 %)": rule_band(n)}
        saved = None if args.grids is None else args.grids / f"{model.folder.model}.json"
        if saved is not None and saved.is_file():  # scored before: read, not rescored
            grid = {tuple(r["layers"]): tuple(r["scores"]) for r in json.loads(saved.read_text())["bands"]}
        else:
            grid = {
                (lo, hi): model.score(model.rule(lo, hi))
                for lo in range(n)
                for hi in range(lo + MIN_BAND - 1, n)
            }
        if args.grids is not None:  # every band's scores, for other signals later without a rescoring
            args.grids.mkdir(parents=True, exist_ok=True)
            rows = [{"layers": [lo, hi], "scores": list(s)} for (lo, hi), s in grid.items()]
            record = {"model": model.folder.model, "tuned": model.tuned, "pairs": model.pairs, "bands": rows}
            (args.grids / f"{model.folder.model}.json").write_text(json.dumps(record) + "\n")
        oracle = max(grid, key=lambda b: grid[b][2])
        bands["oracle (best on dev, labels)"] = oracle
        if args.signals is not None:
            signal = json.loads((args.signals / f"{model.folder.model}.json").read_text())
            bands.update(signal_bands(signal["recall"]["va"]["1"], n))
        name = f"{model.folder.model} ({model.pairs} STS pairs)"
        for label, band in bands.items():
            sts, ret, obj = grid[band]
            lines.append(
                f"| {name} | {label} | {band[0]}-{band[1]} | {sts:.2f} | {ret:.2f} | {obj:.2f} | "
                f"{obj - model.tuned:+.2f} |"
            )
            name = ""
        for label, candidate in model.path(model.rule(*rule_band(n))):
            sts, ret, obj = model.score(candidate)
            lines.append(
                f"| | rule, then {label} | `{_cell(candidate.label())}` | {sts:.2f} | {ret:.2f} | {obj:.2f} | "
                f"{obj - model.tuned:+.2f} |"
            )
        lines.append(f"| | tuned `best` (its report) | | | | {model.tuned:.2f} | |")
        print("\n".join(lines[-len(bands) - 6 :]), flush=True)
        if args.fit_parts is not None:
            name = f"{model.folder.model} ({model.pairs} STS pairs)"
            for label, sts, ret, obj in model.fit_parts():
                fit_lines.append(
                    f"| {name} | {label} | {sts:.2f} | {ret:.2f} | {obj:.2f} | {obj - model.tuned:+.2f} |"
                )
                name = ""
            print("\n".join(fit_lines[-5:]), flush=True)
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table)
    if args.fit_parts is not None:
        args.fit_parts.parent.mkdir(parents=True, exist_ok=True)
        args.fit_parts.write_text("\n".join(fit_lines) + "\n")


if __name__ == "__main__":
    main()
