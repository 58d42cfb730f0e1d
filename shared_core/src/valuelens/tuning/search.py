"""The offline search of ``valuelens tune``: candidates built from the layer cache and scored on dev data.

Usage::

    scorer = Scorer(cache, data, objective="balanced", embed_filters={2.0: ef})
    rows = search(scorer, prompts, families, n_layers)        # every candidate scored, best first
    rows[0].candidate.fields()                                 # the EncoderConfig fields it stands for

Stages (each scored on STS-B dev Spearman and SciFact dev nDCG@10, combined by the objective):

1. every contiguous layer band (at least :data:`MIN_BAND` layers) of every family under every prompt;
2. EmbedFilter (τ in ``taus``) on each residual family's best band;
3. fusion: each prompt's best few readouts with another family's best part (EmbedFilter on a residual
   part too) at weights :data:`FUSION_WEIGHTS`, read in the same forward pass;
4. post-processing (:data:`POSTPROCESS`) fitted on the unlabeled fitting texts, for the best candidates;
5. a query side: the best few candidates with the queries under another prompt (the documents, and
   everything else, unchanged, so both land in one space);
6. a lexical part (no forward pass): the best few candidates with each kind the run tries (BM25,
   :mod:`valuelens.bm25`; the input-embedding tf-idf, :mod:`valuelens.lexical`) joined at the document
   and query weights :data:`LEXICAL_WEIGHTS`.

A candidate's vectors are computed from the cache as the encoder computes them for its spec (band mean,
EmbedFilter, :func:`valuelens.readout.fuse`, :class:`valuelens.Postprocess`), so the winner's spec
reproduces its dev scores (``valuelens tune`` checks that with the real encoder).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr

from valuelens.bm25 import BM25Lens
from valuelens.config import EncoderConfig
from valuelens.embed_filter import EmbedFilter
from valuelens.errors import ConfigError
from valuelens.evaluation.metrics import ndcg_at_k
from valuelens.lexical import LexicalLens
from valuelens.postprocess import Postprocess
from valuelens.readout import fuse
from valuelens.tuning.cache import Family, LayerCache
from valuelens.tuning.data import OBJECTIVES, Objective, TuneData

__all__ = [
    "CHOSEN_FIELDS",
    "FUSION_WEIGHTS",
    "LEXICAL_WEIGHTS",
    "MIN_BAND",
    "POSTPROCESS",
    "Candidate",
    "Part",
    "Row",
    "Scorer",
    "search",
]

#: The fewest layers a band holds (a single layer is noisy, and the bundled bands hold 3 to 16).
MIN_BAND = 2
#: The weights a fused part is tried at (the main part has weight 1).
FUSION_WEIGHTS = (0.3, 0.5, 0.7, 1.0)
#: The post-processings tried on the best candidates (``KIND`` or ``KIND:K``).
POSTPROCESS = ("none", "center", "abtt:1", "abtt:2", "abtt:4")
#: The lexical part's ``(lexical, lexical_query)`` pairs tried: one weight for both sides, or a small
#: document weight (document–document similarity stays the model's) with a large query weight.
LEXICAL_WEIGHTS: tuple[tuple[float, float], ...] = (
    *((w, w) for w in (0.1, 0.2, 0.4, 0.6)),
    *((d, q) for d in (0.02, 0.05, 0.1, 0.2) for q in (0.5, 0.8, 0.9, 0.95)),
)


@dataclass(frozen=True)
class Part:
    """One readout of a candidate: a family over layers ``lo..hi``, optionally under EmbedFilter τ."""

    family: Family
    lo: int
    hi: int
    embed_filter: float | None = None

    def label(self) -> str:
        ef = f"+ef{self.embed_filter:g}" if self.embed_filter else ""
        return f"{self.family.name}[{self.lo}-{self.hi}]{ef}"


@dataclass(frozen=True)
class Candidate:
    """A spec under test: a prompt, a main part, an optional fused part with its weight, a post-processing."""

    prompt: str | None
    main: Part
    fused: Part | None = None
    weight: float = 1.0
    post: str = "none"
    query_template: str | None = None
    """Queries' own prompt (the query side of a retrieval preset); ``None``: queries as documents."""
    lexical: float | None = None
    """The lexical part's document weight (``None``: no lexical part)."""
    lexical_query: float | None = None
    """The lexical part's query weight (``None``: ``lexical``'s)."""
    lexical_kind: str = "bm25"
    """The lexical part's kind (``EncoderConfig.lexical_kind``; its other fields at their defaults)."""

    def label(self) -> str:
        text = self.main.label()
        if self.fused is not None:
            text += f" | {self.fused.label()}:{self.weight:g}"
        if self.post != "none":
            text += f" ~{self.post}"
        if self.lexical is not None:
            query = "" if self.lexical_query is None else f"/{self.lexical_query:g}"
            kind = "" if self.lexical_kind == "bm25" else f"({self.lexical_kind})"
            text += f" +lex{kind}{self.lexical:g}{query}"
        return text if self.query_template is None else f"{text} q:{self.query_template!r}"

    @classmethod
    def from_config(cls, config: EncoderConfig, families: Sequence[Family]) -> Candidate | None:
        """The candidate a resolved spec (:attr:`valuelens.Encoder.config`) stands for, its post-processing
        and token limit aside (``post`` is ``"none"``: the spec's own state is applied apart), or ``None``
        where the spec reads what no candidate does (another family, a band with gaps, two fused parts,
        Token Prepending, ...): the inverse of :meth:`fields`, checked by a round trip through it.

        Usage: ``Candidate.from_config(encoder.config, FAMILIES)``.
        """

        def part(recipe: str, drop_prefix: bool, layers: Any, tau: float | None) -> Part | None:
            family = next((f for f in families if f.recipe == recipe and f.drop_prefix == drop_prefix), None)
            if family is None or not isinstance(layers, tuple) or not layers:
                return None
            if layers != tuple(range(layers[0], layers[-1] + 1)):
                return None
            return Part(family, layers[0], layers[-1], tau)

        main = part(config.recipe, config.drop_prefix, config.layers, config.embed_filter)
        if main is None or len(config.fusion) > 1:
            return None
        fused, weight = None, 1.0
        if config.fusion:
            spec = config.fusion[0]
            fused = part(spec.recipe, False, spec.layers, spec.embed_filter)
            if fused is None:
                return None
            weight = spec.weight
        candidate = cls(
            config.prompt,
            main,
            fused,
            weight,
            query_template=config.query_template,
            lexical=config.lexical,
            lexical_query=config.lexical_query,
            lexical_kind=config.lexical_kind,
        )
        try:
            again = EncoderConfig.from_dict(candidate.fields())
        except ValueError:
            return None
        return candidate if again == config.replace(postprocess=None, max_length=None) else None

    def fields(self) -> dict[str, Any]:
        """The :class:`~valuelens.EncoderConfig` fields it stands for (``postprocess`` left out)."""
        main = self.main
        spec: dict[str, Any] = {
            "recipe": main.family.recipe,
            "layers": list(range(main.lo, main.hi + 1)),
            "prompt": self.prompt,
        }
        if main.embed_filter:
            spec["embed_filter"] = main.embed_filter
        if main.family.drop_prefix:
            spec["drop_prefix"] = True
        if self.fused is not None:
            part: dict[str, Any] = {
                "recipe": self.fused.family.recipe,
                "layers": list(range(self.fused.lo, self.fused.hi + 1)),
                "weight": self.weight,
            }
            if self.fused.embed_filter:
                part["embed_filter"] = self.fused.embed_filter
            spec["fusion"] = [part]
        if self.query_template is not None:
            spec["query_template"] = self.query_template
        if self.lexical is not None:
            spec["lexical"] = self.lexical
            if self.lexical_query is not None:
                spec["lexical_query"] = self.lexical_query
            spec["lexical_kind"] = self.lexical_kind
        return spec


#: The spec fields a tuning run chooses (what :meth:`Candidate.fields` writes, plus the fitted state);
#: ``valuelens tune`` takes :data:`valuelens.tuning.command.FIXED_FIELDS` as given and leaves the rest at
#: their defaults.
CHOSEN_FIELDS = (
    "recipe",
    "layers",
    "prompt",
    "embed_filter",
    "drop_prefix",
    "fusion",
    "query_template",
    "lexical",
    "lexical_query",
    "lexical_kind",
    "postprocess",
)


@dataclass(frozen=True)
class Row:
    """A candidate's dev scores (×100) and the objective's value."""

    candidate: Candidate
    stage: str
    sts: float
    retrieval: float
    objective: float
    extra: dict[str, Any] = field(default_factory=dict)


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norm > 0, norm, 1.0)


class Scorer:
    """Vectors of candidates from the cache, and their dev scores."""

    SETS = ("sts", "queries", "docs")

    def __init__(
        self,
        cache: LayerCache,
        data: TuneData,
        *,
        objective: Objective = "balanced",
        embed_filters: dict[float, EmbedFilter] | None = None,
        lexical: Mapping[str, LexicalLens | BM25Lens] | None = None,
    ) -> None:
        if objective not in OBJECTIVES:
            msg = f"objective must be one of {', '.join(map(repr, OBJECTIVES))}, got {objective!r}"
            raise ValueError(msg)
        self.cache = cache
        self.data = data
        self.objective = objective
        self.embed_filters = embed_filters or {}
        self.lenses = dict(lexical or {})
        """The lexical parts tried, by kind (the lexical stage runs when there are some)."""
        self.lexical: dict[tuple[str, str], np.ndarray] = {}
        """Each kind's lexical vectors of each set (queries read on the query side)."""
        texts = {name: items for name, items in data.sets().items() if name in self.SETS}
        for kind, lens in self.lenses.items():
            for name, items in texts.items():
                side = "query" if name == "queries" else "document"
                self.lexical[kind, name] = lens.encode(list(items), side).cpu().numpy()
        self._prefix: dict[tuple[str | None, str, str], np.ndarray] = {}
        ret = data.retrieval
        self._relevance = [ret.qrels.get(q, {}) for q in ret.query_ids]
        self._gold = np.asarray(data.sts.gold)
        self._a, self._b = np.asarray(data.sts.a), np.asarray(data.sts.b)

    # ------------------------------------------------------------------ vectors
    def _cumulative(self, prompt: str | None, family: str, set_name: str) -> np.ndarray:
        key = (prompt, family, set_name)
        if key not in self._prefix:
            layers = self.cache.get(prompt, family, set_name).astype(np.float32)
            prefix = np.zeros((layers.shape[0], layers.shape[1] + 1, layers.shape[2]), dtype=np.float32)
            np.cumsum(layers, axis=1, out=prefix[:, 1:])
            self._prefix[key] = prefix
        return self._prefix[key]

    def part_vectors(self, prompt: str | None, part: Part, set_name: str) -> np.ndarray:
        """The part's vectors: the mean over its band, then EmbedFilter."""
        prefix = self._cumulative(prompt, part.family.name, set_name)
        vec = (prefix[:, part.hi + 1] - prefix[:, part.lo]) / (part.hi - part.lo + 1)
        if part.embed_filter:
            vec = self.embed_filters[part.embed_filter].transform(torch.from_numpy(vec)).numpy()
        return vec

    def raw_vectors(self, candidate: Candidate, set_name: str) -> np.ndarray:
        """The candidate's vectors before post-processing (fusion as the encoder fuses); queries under
        the candidate's query prompt when it has one."""
        prompt = candidate.prompt
        if set_name == "queries" and candidate.query_template is not None:
            prompt = candidate.query_template
        main = self.part_vectors(prompt, candidate.main, set_name)
        if candidate.fused is None:
            return main
        other = self.part_vectors(prompt, candidate.fused, set_name)
        fused = fuse([torch.from_numpy(main), torch.from_numpy(other)], [1.0, candidate.weight])
        return fused.numpy()

    def holds(self, candidate: Candidate) -> bool:
        """Whether the cache holds every readout the candidate reads on the dev sets (its prompt, its
        queries' prompt, its parts' families), with its EmbedFilter and lexical part at hand."""
        parts = [p for p in (candidate.main, candidate.fused) if p is not None]
        families = [p.family for p in parts]
        queries = candidate.prompt if candidate.query_template is None else candidate.query_template
        return (
            all(
                self.cache.has(candidate.prompt, families, name)
                for name in ("sts", "docs")
                if name in self.data.sets()
            )
            and ("queries" not in self.data.sets() or self.cache.has(queries, families, "queries"))
            and all(p.embed_filter is None or p.embed_filter in self.embed_filters for p in parts)
            and (candidate.lexical is None or candidate.lexical_kind in self.lenses)
        )

    def fit_post(self, candidate: Candidate, **extra: Any) -> Postprocess | None:
        """The candidate's post-processing fitted on its vectors of the fitting texts."""
        if candidate.post == "none":
            return None
        kind, _, k = candidate.post.partition(":")
        fit = self.raw_vectors(candidate, "fit")
        return Postprocess.fit(fit, kind=kind, **({"k": int(k)} if k else {}), **extra)  # type: ignore[arg-type]

    def vectors(self, candidate: Candidate, set_name: str, post: Postprocess | None = None) -> np.ndarray:
        """The candidate's vectors as its encoder gives them: post-processed, then its lexical part."""
        raw = self.raw_vectors(candidate, set_name)
        vec = raw if post is None else post.transform(raw)
        if candidate.lexical is None:
            return vec
        document = candidate.lexical
        query = document if candidate.lexical_query is None else candidate.lexical_query
        side = "query" if set_name == "queries" else "document"
        lens = self.lenses[candidate.lexical_kind]
        block = torch.from_numpy(self.lexical[candidate.lexical_kind, set_name])
        joined = lens.part(block, side, document, query).join(
            torch.from_numpy(np.ascontiguousarray(vec, dtype=np.float32))
        )
        return joined.numpy()

    # ------------------------------------------------------------------ scores
    @property
    def has_sts(self) -> bool:
        """Whether the dev data holds scored pairs (an empty set scores ``nan``)."""
        return len(self._gold) > 0

    @property
    def has_retrieval(self) -> bool:
        """Whether the dev data holds queries."""
        return len(self._relevance) > 0

    def sts(self, vec: np.ndarray) -> float:
        if not self.has_sts:
            return float("nan")
        unit = _unit(vec.astype(np.float64))
        cos = (unit[self._a] * unit[self._b]).sum(1)
        return float(spearmanr(cos, self._gold).statistic) * 100

    def retrieval(self, queries: np.ndarray, docs: np.ndarray) -> float:
        if not self.has_retrieval:
            return float("nan")
        scores = _unit(queries.astype(np.float32)) @ _unit(docs.astype(np.float32)).T
        ids = self.data.retrieval.doc_ids
        top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        values = [
            ndcg_at_k([ids[j] for j in row], rel, 10) for row, rel in zip(top, self._relevance, strict=True)
        ]
        return float(np.mean(values)) * 100

    def combine(self, sts: float, retrieval: float) -> float:
        """The objective's value; ``balanced`` is the mean of the scores the dev data has."""
        if self.objective == "sts":
            return sts
        if self.objective == "retrieval":
            return retrieval
        present = [x for x in (sts, retrieval) if not np.isnan(x)]
        return sum(present) / len(present) if present else float("nan")

    def score(self, candidate: Candidate, stage: str) -> Row | None:
        """The candidate's row; ``None`` when its post-processing cannot be fitted (too few texts)."""
        try:
            post = self.fit_post(candidate)
        except ConfigError:
            return None
        sts = self.sts(self.vectors(candidate, "sts", post)) if self.has_sts else float("nan")
        ret = float("nan")
        if self.has_retrieval:
            ret = self.retrieval(
                self.vectors(candidate, "queries", post), self.vectors(candidate, "docs", post)
            )
        return Row(candidate, stage, sts, ret, self.combine(sts, ret))


def _bands(n_layers: int) -> list[tuple[int, int]]:
    return [(lo, hi) for lo in range(n_layers) for hi in range(lo + MIN_BAND - 1, n_layers)]


def _fusable(main: Family, part: Family) -> bool:
    """Whether ``part`` may be fused to ``main`` in one spec (one ``drop_prefix`` for the whole spec)."""
    if part.recipe == main.recipe:
        return False
    if part.drop_prefix:  # the spec's drop_prefix would have to be on, which only a last-attention main takes
        return main.drop_prefix
    return not (main.drop_prefix and part.reads_last_attention)


def search(
    scorer: Scorer,
    prompts: Sequence[str | None],
    families: Sequence[Family],
    n_layers: int,
    *,
    taus: Sequence[float] = (2.0,),
    query_templates: Sequence[str | None] = (),
    n_mains: int = 3,
    n_post: int = 6,
    progress: Any = None,
) -> list[Row]:
    """Score every stage's candidates (module docstring); returns all rows, best objective first.
    ``query_templates``: the prompts the queries were also cached under (the query-side stage)."""
    rows: list[Row] = []
    best_part: dict[tuple[str | None, str], list[Row]] = {}
    for prompt in prompts:
        for family in families:
            if prompt is None and family.reads_last_attention:
                continue
            found = _scored(
                scorer, [Candidate(prompt, Part(family, lo, hi)) for lo, hi in _bands(n_layers)], "band"
            )
            rows += found
            best = found[0]
            variants = [best]
            if family.residual:
                for tau in taus:
                    main = replace(best.candidate.main, embed_filter=tau)
                    found = _scored(scorer, [replace(best.candidate, main=main)], "embed_filter")
                    rows += found
                    variants += found
            best_part[(prompt, family.name)] = sorted(variants, key=lambda r: -r.objective)
            if progress is not None:
                progress.update(1)
    for prompt in prompts:
        entries = [rs for (p, _), rs in best_part.items() if p == prompt]
        singles = sorted((r for rs in entries for r in rs), key=lambda r: -r.objective)
        for main_row in singles[:n_mains]:
            main = main_row.candidate.main
            for rs in entries:
                for part_row in rs:
                    part = part_row.candidate.main
                    if not _fusable(main.family, part.family):
                        continue
                    fused = [Candidate(prompt, main, part, weight) for weight in FUSION_WEIGHTS]
                    rows += _scored(scorer, fused, "fusion")
    rows.sort(key=lambda r: -r.objective)
    seen: set[Candidate] = set()
    leaders = []
    for row in rows:
        if row.candidate not in seen:
            seen.add(row.candidate)
            leaders.append(row)
        if len(leaders) == n_post:
            break
    posted = [replace(row.candidate, post=post) for row, post in itertools.product(leaders, POSTPROCESS[1:])]
    rows += _scored(scorer, posted, "postprocess")
    rows.sort(key=lambda r: -r.objective)
    # STS pairs are symmetric: a query side and a lexical part's weights change retrieval alone
    if scorer.objective != "sts" and scorer.has_retrieval:
        finalists = list(dict.fromkeys(row.candidate for row in rows))[:n_mains]
        sides = [replace(c, query_template=q) for c in finalists for q in query_templates if q != c.prompt]
        rows += _scored(scorer, sides, "query_side")
        rows.sort(key=lambda r: -r.objective)
    if scorer.lenses and scorer.objective != "sts" and scorer.has_retrieval:
        finalists = list(dict.fromkeys(row.candidate for row in rows))[:n_mains]
        lexical = [
            replace(c, lexical=d, lexical_query=None if q == d else q, lexical_kind=kind)
            for c in finalists
            for kind in scorer.lenses
            for d, q in LEXICAL_WEIGHTS
        ]
        rows += _scored(scorer, lexical, "lexical")
        rows.sort(key=lambda r: -r.objective)
    return rows


def _scored(scorer: Scorer, candidates: Sequence[Candidate], stage: str) -> list[Row]:
    """The rows of the candidates that could be scored, best objective first."""
    rows = [row for row in (scorer.score(c, stage) for c in candidates) if row is not None]
    return sorted(rows, key=lambda r: -r.objective)
