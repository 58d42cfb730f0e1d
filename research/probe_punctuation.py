"""Probe: does normalizing a text's final punctuation do what all-but-the-top's first component does?

Usage::

    OMP_NUM_THREADS=1 python research/probe_punctuation.py /tmp/cache/smol devall,train,lee strip,period

Embeds the texts of cached sets (``research/embed_cache.py``) with SmolLM2's round-6 specs after each
normalization (``strip``: trailing ``.!?`` removed; ``period``: a period added where no ``.!?`` ends the
text) and writes ``CACHE/NAME-MODE.SET.npy`` next to the originals, for ``research/score_cache.py``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from valuelens import Encoder, EncoderConfig, encode_many, models
from valuelens.loading import load_model
from valuelens.presets import FUTUREEOL_SENTENCE

SPECS = {
    "awva-fesent-dp": {"recipe": "aligned-wva", "prompt": FUTUREEOL_SENTENCE, "drop_prefix": True},
    "va-fesent": {"recipe": "va", "prompt": FUTUREEOL_SENTENCE},
}
MODES: dict[str, Callable[[str], str]] = {
    "strip": lambda t: re.sub(r"[\s.!?]+$", "", t.strip()) or t.strip(),
    "period": lambda t: t.strip() if t.strip()[-1:] in ".!?" else t.strip() + ".",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("cache", type=Path)
    parser.add_argument("sets")
    parser.add_argument("modes")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, tokenizer = load_model(models.path("smollm2-135m"), device="cpu")
    encoders = {
        name: Encoder(model, tokenizer, EncoderConfig.from_dict(spec), name_or_path="smollm2-135m")
        for name, spec in SPECS.items()
    }
    for set_name in args.sets.split(","):
        texts = json.loads((args.cache / f"{set_name}.json").read_text())["texts"]
        for mode in args.modes.split(","):
            changed = [MODES[mode](t) for t in texts]
            vectors = encode_many(list(encoders.values()), changed, batch_size=32)
            for name, vec in zip(encoders, vectors, strict=True):
                np.save(args.cache / f"{name}-{mode}.{set_name}.npy", np.asarray(vec, dtype=np.float32))
            print(f"{set_name} {mode}: {len(texts)} texts", flush=True)


if __name__ == "__main__":
    main()
