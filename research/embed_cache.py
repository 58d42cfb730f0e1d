"""Embed the tuning and report sets once per spec and keep the raw vectors, to score combinations offline.

Usage::

    OMP_NUM_THREADS=1 python research/embed_cache.py --model smollm2-135m --specs specs.json --out /tmp/cache/smollm2 \
        --sets dev,train,lee,fitdocs [--sets test]

``specs.json`` maps a name to an ``EncoderConfig`` dict without ``postprocess`` (the raw vectors are
what a post-processing is fitted on). Specs that share a forward pass run together
(:func:`valuelens.encode_many`). Each set is written as ``OUT/NAME.SET.npy`` (float32, un-normalized)
with ``OUT/SET.json`` holding the texts (and, for STS sets, the pair indices and gold scores).

Sets: ``dev`` (a seeded 600-pair sample of STS-B dev, the one ``research/tune_presets.py`` uses),
``devall`` (all 1500 STS-B dev pairs),
``train`` (2000 seeded STS-B train sentences, unlabeled), ``trainall`` (every distinct STS-B train
sentence, unlabeled), ``test`` (all STS-B test pairs),
``lee`` (the 50 Lee documents and the pair scores), ``fitdocs`` (unlabeled text that is not a
reported set: 400 seeded Banking77 train queries, 400 Emotion train texts and 400 SciFact abstracts).

STS sets that are **not** among the benchmark sets (never used to choose a setting; their licences do not all allow
redistribution, so they are read from a checkout of the public repository ``brmson/dataset-sts``, commit
``e1d3375f5b3bc24f21aa4e46f96eb379e9fc1081``, passed as ``--external DIR``): ``sts12`` … ``sts16`` (the
SemEval test files of that year with a gold score; STS12 there lacks MSRvid) and ``sickr`` (SICK
relatedness, its test file); each a seeded sample of 600 pairs (:data:`EXTERNAL_PAIRS`).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np
import torch
from tune_presets import stsb_pairs, train_sentences  # research/ is on sys.path when run as a script

from valuelens import Encoder, EncoderConfig, encode_many, models
from valuelens.evaluation.tasks import find_set, read_jsonl
from valuelens.loading import load_model


def _jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _sample(items: list, n: int, seed: int = 0) -> list:
    if n >= len(items):
        return items
    keep = sorted(np.random.default_rng(seed).choice(len(items), n, replace=False))
    return [items[i] for i in keep]


def _pairs_set(rows: list[tuple[str, str, float]]) -> dict:
    """Scored pairs as a set: the distinct texts in pair order, each pair's two indices and gold score."""
    texts = list(dict.fromkeys(t for a, b, _ in rows for t in (a, b)))
    index = {t: i for i, t in enumerate(texts)}
    return {
        "texts": texts,
        "a": [index[a] for a, _, _ in rows],
        "b": [index[b] for _, b, _ in rows],
        "gold": [float(g) for _, _, g in rows],
    }


def _sts(split: str, limit: int | None) -> dict:
    s1, s2, gold = stsb_pairs(split, limit)  # the sample research/tune_presets.py scores
    return _pairs_set(list(zip(s1, s2, gold.tolist(), strict=True)))


#: pairs sampled (seeded) from each external STS set
EXTERNAL_PAIRS = 600
EXTERNAL_SETS = ("sts12", "sts13", "sts14", "sts15", "sts16", "sickr")


def external_set(name: str, root: Path) -> dict:
    """One STS set of the ``brmson/dataset-sts`` checkout at ``root`` (see the module docstring)."""
    rows: list[tuple[str, str, float]] = []
    if name == "sickr":
        lines = (root / "data/sts/sick2014/SICK_test_annotated.txt").read_text(encoding="utf-8").splitlines()
        for line in lines[1:]:  # pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment
            fields = line.split("\t")
            rows.append((fields[1], fields[2], float(fields[3])))
        return _pairs_set(_sample(rows, EXTERNAL_PAIRS))
    year = "20" + name.removeprefix("sts")
    files = sorted((root / "data/sts/semeval-sts" / year).glob("*.test.tsv"))
    if not files:
        msg = f"no {year} STS test files under {root}/data/sts/semeval-sts/{year}: pass a checkout of brmson/dataset-sts"
        raise SystemExit(msg)
    for file in files:  # score, sentence 1, sentence 2; pairs without a gold score are left out
        for line in file.read_text(encoding="utf-8").splitlines():
            fields = line.split("\t")
            if len(fields) == 3 and fields[0].strip():
                rows.append((fields[1], fields[2], float(fields[0])))
    return _pairs_set(_sample(rows, EXTERNAL_PAIRS))


def build_set(name: str, external: Path | None = None) -> dict:
    """The texts (and pairs) of one named set."""
    if name in EXTERNAL_SETS:
        if external is None:
            msg = f"set {name!r} is read from a checkout of brmson/dataset-sts: pass --external DIR"
            raise SystemExit(msg)
        return external_set(name, external)
    if name == "dev":
        return _sts("dev", 600)
    if name == "devall":
        return _sts("dev", None)
    if name == "test":
        return _sts("test", None)
    if name == "train":
        return {"texts": train_sentences(2000)}
    if name == "trainall":
        return {"texts": train_sentences(None)}
    if name == "lee":
        docs = _jsonl(find_set("lee") / "docs.jsonl")
        pairs = _jsonl(find_set("lee") / "test.jsonl")
        ids = {d["id"]: i for i, d in enumerate(docs)}
        return {
            "texts": [d["text"] for d in docs],
            "a": [ids[p["id1"]] for p in pairs],
            "b": [ids[p["id2"]] for p in pairs],
            "gold": [p["score"] for p in pairs],
        }
    if name == "fitdocs":
        banking = [r["text"] for r in _jsonl(find_set("banking77") / "train.jsonl")]
        emotion = [r["text"] for r in _jsonl(find_set("emotion") / "train.jsonl")]
        corpus = list(read_jsonl(find_set("scifact") / "corpus.jsonl"))
        abstracts = [(d.get("title", "") + " " + d["text"]).strip() for d in corpus]
        texts = _sample(banking, 400) + _sample(emotion, 400) + _sample(abstracts, 400)
        return {"texts": list(dict.fromkeys(texts))}
    msg = f"unknown set {name!r}"
    raise SystemExit(msg)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--specs", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--sets", default="dev,train,lee,fitdocs")
    parser.add_argument("--external", type=Path, default=None, help="a checkout of brmson/dataset-sts")
    args = parser.parse_args()
    torch.manual_seed(0)
    specs = json.loads(Path(args.specs).read_text())
    model, tokenizer = load_model(models.path(args.model), device="cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    for set_name in args.sets.split(","):
        data = build_set(set_name, args.external)
        (args.out / f"{set_name}.json").write_text(json.dumps(data))
        todo = [n for n in specs if not (args.out / f"{n}.{set_name}.npy").exists()]
        if not todo:
            continue
        encoders = [
            Encoder(model, tokenizer, EncoderConfig.from_dict(specs[n]), name_or_path=args.model)
            for n in todo
        ]
        vectors = encode_many(encoders, data["texts"], batch_size=32, show_progress=True)
        for name, vec in zip(todo, vectors, strict=True):
            np.save(args.out / f"{name}.{set_name}.npy", np.asarray(vec, dtype=np.float32))
        print(f"{set_name}: {len(data['texts'])} texts, specs {todo}", flush=True)


if __name__ == "__main__":
    main()
