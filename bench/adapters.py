"""Adapter overhead measured in one process: the adapters and ``Encoder.encode`` take turns on one model.

Usage::

    python -m bench.adapters --model smollm2-135m --texts 48 --rounds 3

The suite's adapter rows (``python -m bench --rows adapters``) each load their own model in a
fresh process, so on a machine shared with other jobs their ratios carry the load's swings. Here
one ``Encoder`` (recipe ``va``) serves every variant, the variants run in turn for ``--rounds``
rounds over the same texts, and each variant's median time is compared with the median of the
call it wraps:

- ``langchain``: ``ValueLensEmbeddings(model=encoder).embed_documents`` against ``encoder.encode``;
- ``llamaindex``: ``ValueLensEmbedding(encoder=encoder).get_text_embedding_batch`` (LlamaIndex cuts
  the list into chunks of ``embed_batch_size``, 256 by default, before the adapter sees it) against
  ``encoder.encode``; the same with ``embed_batch_size=32`` (the old default: each chunk is sorted
  and packed on its own) and with ``embed_batch_size=len(texts)`` (one chunk);
- ``st-va``: ``SentenceTransformer([Transformer(path), ValuePooling("va")]).encode`` against
  ``encoder.encode(..., max_tokens_per_batch=None)`` (sentence-transformers batches by a fixed size).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from bench.suite import Context, Settings, Skip, cpu_threads


def variants(ctx: Context) -> dict[str, tuple[str, Callable[[list[str]], Any]]]:
    """name → (the baseline it is compared with, the call); adapters that cannot load are left out."""
    encoder = ctx.encoder(recipe="va")
    bs = ctx.settings.batch_size
    found: dict[str, tuple[str, Callable[[list[str]], Any]]] = {
        "encode": ("encode", lambda t: encoder.encode(t, batch_size=bs)),
        "encode-fixed": (
            "encode-fixed",
            lambda t: encoder.encode(t, batch_size=bs, max_tokens_per_batch=None),
        ),
    }
    try:
        from langchain_valuelens import ValueLensEmbeddings

        lc = ValueLensEmbeddings(model=encoder, batch_size=bs)
        found["langchain"] = ("encode", lc.embed_documents)
    except ImportError:
        pass
    try:
        from llama_index.embeddings.valuelens import ValueLensEmbedding

        li = ValueLensEmbedding(encoder=encoder, batch_size=bs)  # embed_batch_size: the default
        found["llamaindex"] = ("encode", li.get_text_embedding_batch)
        small = ValueLensEmbedding(encoder=encoder, batch_size=bs, embed_batch_size=bs)
        found[f"llamaindex-chunks-of-{bs}"] = ("encode", small.get_text_embedding_batch)
        whole = ValueLensEmbedding(encoder=encoder, batch_size=bs, embed_batch_size=min(len(ctx.texts), 2048))
        found["llamaindex-one-chunk"] = ("encode-one-call", whole.get_text_embedding_batch)
        found["encode-one-call"] = (
            "encode-one-call",
            lambda t: encoder.encode(t, batch_size=min(len(t), 2048)),
        )
    except ImportError:
        pass
    if not ctx.random:
        try:
            from valuelens_sentence_transformers import ValuePooling

            try:
                st = ctx.sentence_transformer(lambda dim: ValuePooling(recipe="va"))
                found["st-va"] = (
                    "encode-fixed",
                    lambda t: st.encode(t, batch_size=bs, show_progress_bar=False, convert_to_numpy=True),
                )
            except Skip:
                pass
        except ImportError:
            pass
    return found


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.adapters", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--model", default=None)
    parser.add_argument("--texts", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    from valuelens import TruncationWarning

    hf_logging.set_verbosity_error()
    settings = Settings(model=args.model, texts=args.texts, batch_size=args.batch_size, threads=args.threads)
    ctx = Context(settings, shared=False)
    times: dict[str, list[float]] = {}
    with cpu_threads(args.threads), warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        calls = variants(ctx)
        for _, call in calls.values():  # warm-up
            call(ctx.texts[: args.batch_size])
        for _ in range(args.rounds):
            for name, (_, call) in calls.items():
                start = time.perf_counter()
                call(list(ctx.texts))
                times.setdefault(name, []).append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"model {args.model or 'smollm2-135m'}; {len(ctx.texts)} mixed texts; {args.rounds} rounds, variants in "
        f"turn in one process, one Encoder (va); median seconds\n"
    )
    print("| variant | compared with | median s | all runs s | overhead |\n|---|---|---:|---|---:|")
    for name, (base, _) in calls.items():
        overhead = medians[name] / medians[base] - 1
        runs = ", ".join(f"{t:.2f}" for t in times[name])
        shown = f"{100 * overhead:+.1f} %" if name != base else ""
        print(f"| {name} | {base} | {medians[name]:.2f} | {runs} | {shown} |")
    return {"medians": medians, "times": times}


if __name__ == "__main__":
    main()
