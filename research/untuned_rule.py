"""The rule for untuned models (``preset="untuned"``, what ``preset="best"`` gives a model without an
entry) against the generic spec and the model's ``best`` (on a bundled model, the preset ``valuelens
tune`` chose), on the dev data ``valuelens tune`` scores on (quick mode), each embedded by the real encoder.

Usage::

    python research/untuned_rule.py smollm2-135m --tuned-folder /tmp/runs/tune-smollm2-135m
    python research/untuned_rule.py qwen2.5-coder-0.5b --presets '' --in-domain /tmp/fit-texts.jsonl

The rule itself was derived leave-one-model-out from the tuning caches (``research/default_rule.py``:
the same rule came out for every left-out model). Here it runs as users get it: layers from the relative
band, all-but-the-top fitted at first use on the package's own corpus (not the tuning's fitting texts).
``--tuned-folder DIR`` also scores a folder ``valuelens tune`` wrote (on a bundled model, ``best`` is
already its tuned preset: the bundled folders are those runs).
``--in-domain FILE`` adds ``untuned`` with its all-but-the-top fitted on the quick mode's fitting texts, as
a user's own texts give it (``postprocess="fit:abtt:2@FILE"``; FILE is written first).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from valuelens import models
from valuelens.architectures import model_key
from valuelens.loading import load_model
from valuelens.tuning import dev_scores
from valuelens.tuning.data import TuneData
from valuelens.tuning.search import Scorer


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("model", choices=sorted(models.MODELS))
    parser.add_argument("--tuned-folder", type=Path, help="also score a preset folder `valuelens tune` wrote")
    parser.add_argument("--presets", default="generic,untuned,best", help="comma-separated; '' for none")
    parser.add_argument(
        "--in-domain",
        type=Path,
        metavar="FILE",
        help="also score `untuned` with its all-but-the-top fitted on the tune's fitting texts (written to FILE)",
    )
    args = parser.parse_args()
    data = TuneData.build("quick")
    net, tokenizer = load_model(models.path(args.model))
    key = model_key(net.config.get_text_config())
    rows: list[tuple[str, str, dict]] = [(p, p, {}) for p in args.presets.split(",") if p]
    if args.in_domain is not None:  # the fitting texts as a user's own texts: postprocess="fit:abtt:2@FILE"
        args.in_domain.write_text("".join(json.dumps({"text": t}) + "\n" for t in data.fit_texts))
        fit = {"postprocess": f"fit:abtt:2@{args.in_domain}"}
        rows.append(("untuned, fitted on the tune's fitting texts", "untuned", fit))
    if args.tuned_folder is not None:
        rows.append(("tuned", str(args.tuned_folder), {}))
    scorer = Scorer(None, data)  # type: ignore[arg-type]  # scores only: no cache is read
    print(
        f"| {args.model} preset | STS-B dev ({len(data.sts.gold)} pairs) | SciFact dev nDCG@10 | balanced | s |"
    )
    print("|---|---:|---:|---:|---:|")
    results = {}
    for label, preset, overrides in rows:
        tick = time.perf_counter()
        row = dev_scores(preset, args.model, net, tokenizer, scorer, key, None, overrides)
        results[label] = {k: round(row[k], 2) for k in ("sts", "retrieval", "objective")}
        print(
            f"| {label} | {row['sts']:.2f} | {row['retrieval']:.2f} | {row['objective']:.2f} | "
            f"{time.perf_counter() - tick:.0f} |",
            flush=True,
        )
    print(json.dumps({args.model: results}))


if __name__ == "__main__":
    main()
