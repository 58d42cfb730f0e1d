"""Classification accuracy of a preset's vectors rescaled to several coordinate RMS values.

Usage::

    OMP_NUM_THREADS=1 python research/scale_check.py --model gemma3-270m --presets best,sts \
        --tasks banking77,emotion --rms 0.0117,0.3,1,3

Embeds each task's seeded sample (``--limit``, the one ``valuelens eval TASK:LIMIT`` scores) once per
preset, multiplies every vector by one number so that the root-mean-square coordinate over the sample
is each ``--rms`` value (cosines unchanged), and prints mteb's logistic-regression accuracy for each.
It shows how much a linear classifier with its usual regularisation (``C=1``) depends on the output
scale; research/rounds/README.md, round 5.
"""

from __future__ import annotations

import argparse

import numpy as np

from valuelens import Encoder, encode_many, models
from valuelens.evaluation.metrics import classification_scores
from valuelens.evaluation.runner import classification_inputs
from valuelens.evaluation.tasks import load_task
from valuelens.loading import load_model
from valuelens.presets.resolution import preset_config


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--presets", default="best,sts")
    parser.add_argument("--tasks", default="banking77,emotion")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--rms", default="0.3,1,3")
    args = parser.parse_args()
    targets = [float(r) for r in args.rms.split(",")]
    model, tokenizer = load_model(models.path(args.model), device="cpu")
    names = args.presets.split(",")
    encoders = [
        Encoder(model, tokenizer, preset_config(n, args.model), name_or_path=args.model) for n in names
    ]
    print("| task | preset | norm as output | " + " | ".join(f"RMS {r:g}" for r in targets) + " |")
    print("|---|---|---:|" + "---:|" * len(targets))
    for task in args.tasks.split(","):
        data = load_task(task).load("test", limit=args.limit)
        texts, train_labels, experiments = classification_inputs(data)  # what valuelens eval embeds
        n = len(train_labels)
        outputs = encode_many(encoders, texts, batch_size=32, show_progress=True)
        for name, out in zip(names, outputs, strict=True):
            vec = np.asarray(out, dtype=np.float64)
            rms = float(np.sqrt((vec**2).mean()))
            cells = []
            for target in targets:
                scaled = vec * (target / rms)
                scores = classification_scores(
                    scaled[:n], train_labels, scaled[n:], data.test.labels, experiments=experiments
                )
                cells.append(f"{100 * scores['accuracy']:.1f}")
            norm = float(np.linalg.norm(vec, axis=1).mean())
            print(f"| {task} | {name} | {norm:.2f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
