"""The rule for untuned models (``preset="untuned"``, what ``preset="best"`` gives a model without an
entry) against the generic spec, the hand-tuned ``best`` and the model's tuned preset, on the dev data
``valuelens tune`` scores on (quick mode), each embedded by the real encoder.

Usage::

    python research/untuned_rule.py smollm2-135m --tuned-folder /tmp/tuned/smollm2
    python research/untuned_rule.py qwen2.5-coder-0.5b --presets '' --in-domain /tmp/fit-texts.jsonl

The rule itself was derived leave-one-model-out from the tuning caches (``research/default_rule.py``:
the same rule came out for every left-out model). Here it runs as users get it: layers from the relative
band, all-but-the-top fitted at first use on the package's own corpus (not the tuning's fitting texts).
``--tuned-folder`` is written first when absent: the model's tuned spec from docs/tuning.md (:data:`TUNED`)
with its post-processing fitted on the quick mode's fitting texts, as ``valuelens tune`` fits it.
``--in-domain FILE`` adds ``untuned`` with its all-but-the-top fitted on those fitting texts instead, as
a user's own texts give it (``postprocess="fit:abtt:2@FILE"``; FILE is written first).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from valuelens import models
from valuelens.architectures import model_key
from valuelens.config import EncoderConfig
from valuelens.encoder import Encoder
from valuelens.fitting import fit_texts
from valuelens.loading import load_model
from valuelens.presets.folder import PresetFolder
from valuelens.presets.table import FUTUREEOL_SENTENCE
from valuelens.tuning import STATE_FILE, dev_scores
from valuelens.tuning.data import TuneData
from valuelens.tuning.search import Scorer

#: The quick-mode winners of `valuelens tune --objective balanced` (docs/tuning.md), with their post-processing.
TUNED: dict[str, tuple[dict, int]] = {
    "smollm2-135m": (
        {
            "recipe": "aligned-wva",
            "layers": "21-29",
            "drop_prefix": True,
            "prompt": FUTUREEOL_SENTENCE,
            "fusion": [{"recipe": "hs", "layers": "0-1", "weight": 1.0}],
        },
        4,
    ),
    "gemma3-270m": (
        {
            "recipe": "aligned-wva",
            "layers": "11-12",
            "drop_prefix": True,
            "embed_filter": 2.0,
            "prompt": FUTUREEOL_SENTENCE,
            "fusion": [{"recipe": "va", "layers": "11-12", "weight": 1.0}],
        },
        4,
    ),
    "qwen2.5-coder-0.5b": (
        {
            "recipe": "aligned-wva",
            "layers": "20-23",
            "drop_prefix": True,
            "prompt": FUTUREEOL_SENTENCE,
            "query_template": "futureeol",
            "fusion": [{"recipe": "aligned-va", "layers": "20-22", "weight": 1.0, "embed_filter": 2.0}],
        },
        4,
    ),
}


def write_tuned(name: str, folder: Path, net: object, tokenizer: object, data: TuneData) -> None:
    """The model's tuned preset folder, its all-but-the-top fitted on the quick fitting texts."""
    fields, k = TUNED[name]
    key = model_key(net.config.get_text_config())  # type: ignore[attr-defined]
    encoder = Encoder(net, tokenizer, EncoderConfig.from_dict(fields), name_or_path=name)  # type: ignore[arg-type]
    state = fit_texts(encoder, list(data.fit_texts), "abtt", k, fitted_on=data.fit_source)
    folder.mkdir(parents=True, exist_ok=True)
    state.save(folder / STATE_FILE)
    spec = {**fields, "postprocess": STATE_FILE}
    PresetFolder(folder.resolve(), name, key, spec, "balanced", {"mode": "quick"}).write()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("model", choices=sorted(TUNED))
    parser.add_argument("--tuned-folder", type=Path, help="also score the tuned preset (written when absent)")
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
        if not (args.tuned_folder / "preset.json").is_file():
            write_tuned(args.model, args.tuned_folder, net, tokenizer, data)
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
        results[label] = {k: round(v, 2) for k, v in row.items() if k != "spec"}
        print(
            f"| {label} | {row['sts']:.2f} | {row['retrieval']:.2f} | {row['objective']:.2f} | "
            f"{time.perf_counter() - tick:.0f} |",
            flush=True,
        )
    print(json.dumps({args.model: results}))


if __name__ == "__main__":
    main()
