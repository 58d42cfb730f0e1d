"""A retrieval dev set made from the user's documents alone, for label-free ``valuelens tune --corpus``.

Usage::

    made = pseudo_dev_set(docs, method="cloze", queries=100, distractors=200)
    made.retrieval.queries, made.retrieval.docs, made.report()    # what tune scores candidates on

Two ways to pair a query with the passage it should find:

- ``generate``: the model itself writes one short search query per passage through its chat template
  (greedy, so the same seed and passages give the same queries; cached in a JSON file, so an interrupted
  run resumes where it stopped), the passage its relevant document (InPars / Promptagator / GPL style);
- ``cloze``: the inverse cloze task (Lee et al., 2019): a sentence taken out of its passage is the query,
  the passage without it the relevant document. No model needed: base models get this one.

``auto`` generates when the tokenizer has a chat template and falls back to ``cloze`` (saying so) when
it has none, or when fewer than :data:`MIN_USABLE` of its queries survive the filters. Degenerate pairs are dropped and counted (:data:`DROP_REASONS`): an empty query, one
copied from its passage, one too short or too long. The dev corpus is the pairs' documents plus a seeded
sample of the other documents (the distractors), as the labelled quick run ranks SciFact's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from valuelens.errors import ConfigError

__all__ = [
    "DROP_REASONS",
    "METHODS",
    "MIN_DOCUMENTS",
    "PseudoDevSet",
    "QueryMethod",
    "cloze_pair",
    "drop_reason",
    "pseudo_dev_set",
    "sentences",
]

logger = logging.getLogger(__name__)

QueryMethod = Literal["auto", "generate", "cloze"]
METHODS: tuple[QueryMethod, ...] = ("auto", "generate", "cloze")
#: Fewer distinct documents than this make no dev set worth tuning on.
MIN_DOCUMENTS = 10
#: Query length bounds in words (shorter or longer pairs are dropped).
MIN_QUERY_WORDS, MAX_QUERY_WORDS = 3, 48
#: A generated query whose words all appear, in order, within its passage is a copy when it is this long.
COPY_MIN_WORDS = 6
#: Characters of a passage shown to the model when it writes a query (a long document's opening).
PROMPT_CHARS = 1500
#: Tokens a generated query may take.
MAX_NEW_TOKENS = 32
#: Below this share of usable generated queries, the model cannot write them: inverse cloze instead.
MIN_USABLE = 0.25
#: Why a pair is dropped, in the order the checks run.
DROP_REASONS = (
    "empty",
    "too short",
    "too long",
    "copied from its passage",
    "describes the passage",
    "copies an example",
    "repeats itself",
    "the same for several passages",
    "no sentence to take out",
)
#: The instruction the model answers for each passage (part of the cache key, with :data:`EXAMPLES`).
INSTRUCTION = "Write a question that this passage answers.\n\nPassage: {passage}"
#: Worked examples shown as earlier turns of the chat (small models copy a question inside the
#: instruction; as turns they imitate the form). Far from any benchmark's domain on purpose.
EXAMPLES = (
    (
        "The Great Wall of China was built over many centuries, mostly to protect the northern borders "
        "of the empire against raids by nomadic peoples.",
        "why was the great wall of china built",
    ),
    (
        "The new phone's battery lasts two days because its chip draws less power while the screen is idle.",
        "how long does the new phone battery last",
    ),
)
#: A generated query sharing this share of its distinct words with an example's question copies it.
EXAMPLE_OVERLAP = 0.4
#: A query that talks about the passage rather than asking what it holds.
_ABOUT_PASSAGE = re.compile(r"^(the|this) (passage|text|article)\b", re.IGNORECASE)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+")
_WORD = re.compile(r"\w+", re.UNICODE)
_PREFIX = re.compile(r"^((search )?(query|question)|passage)\s*[:\-]\s*", re.IGNORECASE)


@dataclass(frozen=True)
class PseudoDevSet:
    """Pseudo-queries over a dev corpus: ``query_ids``/``queries``, ``doc_ids``/``docs``, ``qrels`` (each
    query's one relevant document), how they were made and what was dropped."""

    query_ids: tuple[str, ...]
    queries: tuple[str, ...]
    doc_ids: tuple[str, ...]
    docs: tuple[str, ...]
    qrels: dict[str, dict[str, int]]
    method: Literal["generate", "cloze"]
    tried: int
    dropped: dict[str, int] = field(default_factory=dict)
    note: str = ""
    """Why the method differs from the one asked for, if it does."""

    def report(self) -> str:
        """One line: how many pairs were made, kept and dropped (by reason), over how many documents."""
        drops = ", ".join(f"{n} {why}" for why, n in self.dropped.items() if n) or "none"
        line = (
            f"{len(self.queries)} pseudo-queries ({self.method}) of {self.tried} tried "
            f"(dropped: {drops}) over {len(self.docs)} documents"
        )
        return f"{line}; {self.note}" if self.note else line


def words(text: str) -> list[str]:
    """The lower-cased words of ``text`` (Unicode-aware)."""
    return [w.lower() for w in _WORD.findall(text)]


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences (after ``.``, ``!`` or ``?`` before a capital or digit; at line breaks)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def drop_reason(query: str, passage: str, *, generated: bool = False) -> str | None:
    """Why the pair (``query``, ``passage``) is degenerate (one of :data:`DROP_REASONS`), or ``None``;
    ``generated``: a query the model wrote (which may also describe the passage instead of asking)."""
    query_words = words(query)
    if not query_words:
        return "empty"
    if len(query_words) < MIN_QUERY_WORDS:
        return "too short"
    if len(query_words) > MAX_QUERY_WORDS:
        return "too long"
    if len(query_words) >= COPY_MIN_WORDS and " ".join(query_words) in " ".join(words(passage)):
        return "copied from its passage"
    if generated:
        if _ABOUT_PASSAGE.match(query.strip()):
            return "describes the passage"
        mine = set(query_words)
        if any(len(mine & set(words(q))) >= EXAMPLE_OVERLAP * len(mine) for _, q in EXAMPLES):
            return "copies an example"
        grams = list(zip(query_words, query_words[1:], query_words[2:], strict=False))
        if len(grams) != len(set(grams)):
            return "repeats itself"
    return None


def cloze_pair(passage: str, rng: np.random.Generator) -> tuple[str, str] | None:
    """A sentence of ``passage`` (seeded pick among those of a query's length) and the passage without
    it; ``None`` when the passage has fewer than two sentences or none of a query's length."""
    parts = sentences(passage)
    if len(parts) < 2:
        return None
    fits = [i for i, s in enumerate(parts) if MIN_QUERY_WORDS <= len(words(s)) <= MAX_QUERY_WORDS]
    if not fits:
        return None
    pick = fits[int(rng.integers(len(fits)))]
    rest = " ".join(s for i, s in enumerate(parts) if i != pick)
    return parts[pick], rest


def _clean(generated: str) -> str:
    """The query in a generated reply: its first line that is not a preamble (a line ending in ``:``),
    without quotes or a ``Query:`` / ``Passage:`` label."""
    for line in generated.strip().splitlines():
        text = _PREFIX.sub("", line.strip()).strip().strip("\"'`*").strip()
        if text and not text.endswith(":"):
            return text
    return ""


def has_chat_template(tokenizer: Any) -> bool:
    """Whether the tokenizer carries a chat template (the ``generate`` method needs one)."""
    return bool(getattr(tokenizer, "chat_template", None))


def pseudo_dev_set(
    corpus: Sequence[str],
    *,
    method: QueryMethod = "auto",
    queries: int = 100,
    distractors: int = 200,
    seed: int = 0,
    tokenizer: Any = None,
    generator: Callable[[list[str]], list[str]] | None = None,
    cache_file: Path | None = None,
    progress: Any = None,
) -> PseudoDevSet:
    """The dev set for ``corpus`` (distinct non-empty texts, :data:`MIN_DOCUMENTS` at least): up to
    ``queries`` pairs from a seeded sample of its documents, and ``distractors`` other documents.

    ``generator`` writes one reply per prompt (``generate``; :func:`make_generator` builds one from a
    model); ``tokenizer`` formats the prompts with its chat template. ``cache_file`` keeps generated
    queries between runs (keyed by prompt), ``progress`` a tqdm bar advanced per passage.
    """
    if method not in METHODS:
        msg = f"queries method must be one of {', '.join(map(repr, METHODS))}, got {method!r}"
        raise ConfigError(msg)
    texts = list(dict.fromkeys(t.strip() for t in corpus if t and t.strip()))
    if len(texts) < MIN_DOCUMENTS:
        msg = (
            f"the corpus holds {len(texts)} distinct non-empty documents: at least {MIN_DOCUMENTS} are "
            "needed to make a dev set from (give more documents, or labelled data with --dev)"
        )
        raise ConfigError(msg)
    chosen: Literal["generate", "cloze"] = "cloze"
    note = ""
    if method in ("auto", "generate"):
        if tokenizer is not None and has_chat_template(tokenizer) and generator is not None:
            chosen = "generate"
        else:
            note = "the model has no chat template: inverse cloze instead of generated queries"
            if method == "generate":
                logger.warning("%s", note)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(texts))
    # a query per passage for up to ``queries`` passages; the cloze task skips passages of one sentence,
    # so it looks at up to twice as many
    budget = queries if chosen == "generate" else min(len(order), 2 * queries)
    candidates = [int(i) for i in order[:budget]]
    dropped = dict.fromkeys(DROP_REASONS, 0)
    pairs: list[tuple[int, str, str]] = []  # (document index, query, relevant document text)
    if chosen == "generate" and generator is not None:
        replies = _generate([texts[i] for i in candidates], tokenizer, generator, cache_file, progress)
        cleaned = [_clean(reply) for reply in replies]
        counts = Counter(" ".join(words(q)) for q in cleaned)
        for i, query in zip(candidates, cleaned, strict=True):
            why = drop_reason(query, texts[i], generated=True)
            if why is None and counts[" ".join(words(query))] > 1:
                why = "the same for several passages"
            if why is None:
                pairs.append((i, query, texts[i]))
            else:
                dropped[why] += 1
        tried = len(candidates)
        if len(pairs) < MIN_USABLE * tried:
            note = (
                f"the model's own queries were unusable ({tried - len(pairs)} of {tried} dropped: "
                + ", ".join(f"{n} {why}" for why, n in dropped.items() if n)
                + "): inverse cloze instead"
            )
            logger.warning("%s", note)
            chosen, pairs, dropped = "cloze", [], dict.fromkeys(DROP_REASONS, 0)
            candidates = [int(i) for i in order[: min(len(order), 2 * queries)]]
    if chosen == "cloze":
        tried = 0
        for i in candidates:
            if len(pairs) >= queries:
                break
            tried += 1
            if progress is not None:
                progress.update(1)
            pair = cloze_pair(texts[i], rng)
            if pair is None:
                dropped["no sentence to take out"] += 1
                continue
            why = drop_reason(*pair)
            if why is None:
                pairs.append((i, pair[0], pair[1]))
            else:
                dropped[why] += 1
    if not pairs:
        msg = (
            f"no usable pseudo-query could be made from the corpus ({tried} tried; dropped: "
            f"{ {k: v for k, v in dropped.items() if v} }); give longer documents or labelled data with --dev"
        )
        raise ConfigError(msg)
    used = {i for i, _, _ in pairs}
    others = [int(i) for i in order if int(i) not in used]
    kept_others = sorted(others[:distractors])
    doc_ids = [f"d{i}" for i, _, _ in pairs] + [f"d{i}" for i in kept_others]
    docs = [doc for _, _, doc in pairs] + [texts[i] for i in kept_others]
    query_ids = [f"q{n}" for n in range(len(pairs))]
    qrels = {q: {f"d{i}": 1} for q, (i, _, _) in zip(query_ids, pairs, strict=True)}
    return PseudoDevSet(
        tuple(query_ids),
        tuple(query for _, query, _ in pairs),
        tuple(doc_ids),
        tuple(docs),
        qrels,
        chosen,
        tried,
        {k: v for k, v in dropped.items() if v},
        note,
    )


def _prompt(tokenizer: Any, passage: str) -> str:
    """The chat for one passage: :data:`EXAMPLES` as earlier turns, then the passage (its opening
    :data:`PROMPT_CHARS` characters)."""
    text = passage if len(passage) <= PROMPT_CHARS else passage[:PROMPT_CHARS].rsplit(" ", 1)[0] + " ..."
    messages: list[dict[str, str]] = []
    for example, question in EXAMPLES:
        messages += [
            {"role": "user", "content": INSTRUCTION.format(passage=example)},
            {"role": "assistant", "content": question},
        ]
    messages.append({"role": "user", "content": INSTRUCTION.format(passage=text)})
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def _generate(
    passages: list[str],
    tokenizer: Any,
    generator: Callable[[list[str]], list[str]],
    cache_file: Path | None,
    progress: Any,
    batch_size: int = 8,
) -> list[str]:
    """One reply per passage: from ``cache_file`` where it holds the prompt's, else generated in batches
    and written back after each batch (an interrupted run resumes)."""
    prompts = [_prompt(tokenizer, p) for p in passages]
    keys = [hashlib.sha256(p.encode("utf-8")).hexdigest()[:24] for p in prompts]
    cached: dict[str, str] = {}
    if cache_file is not None and cache_file.is_file():
        try:
            cached = dict(json.loads(cache_file.read_text(encoding="utf-8")))
        except (ValueError, OSError):
            logger.warning("pseudo-query cache %s is unreadable: generating again", cache_file)
    todo = [n for n, k in enumerate(keys) if k not in cached]
    if progress is not None:
        progress.update(len(prompts) - len(todo))
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        for n, reply in zip(batch, generator([prompts[n] for n in batch]), strict=True):
            cached[keys[n]] = reply
        if cache_file is not None:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            partial = cache_file.with_suffix(".part")
            partial.write_text(json.dumps(cached), encoding="utf-8")
            partial.replace(cache_file)
        if progress is not None:
            progress.update(len(batch))
    return [cached[k] for k in keys]


def make_generator(
    path: str | Path, tokenizer: Any, *, device: str | None = None
) -> Callable[[list[str]], list[str]]:
    """Greedy generation of :data:`MAX_NEW_TOKENS` tokens per prompt by the causal LM at ``path`` (its
    LM head loaded beside the backbone tune reads; left-padded batches)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    if device:
        model.to(device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def generate(prompts: list[str]) -> list[str]:
        side = tokenizer.padding_side
        tokenizer.padding_side = "left"
        try:
            batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            tokenizer.padding_side = side
        batch = {k: v.to(model.device) for k, v in batch.items()}
        with torch.inference_mode():
            out = model.generate(
                **batch, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=pad, num_beams=1
            )
        new = out[:, batch["input_ids"].shape[1] :]
        return [str(t) for t in tokenizer.batch_decode(new, skip_special_tokens=True)]

    return generate
