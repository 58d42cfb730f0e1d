"""The spec of an embedding: everything that defines it besides the model, in one frozen object.

Usage::

    config = EncoderConfig(recipe="aligned-wva", prompt="futureeol", embed_filter=2)
    EncoderConfig.from_dict(config.to_dict()) == config         # JSON-safe round trip
    config.diff(EncoderConfig(recipe="va"))                     # ["recipe: 'aligned-wva' != 'va'", ...]

Device and dtype are load options (:func:`valuelens.loading.load_model`), not part of the spec: the
same spec gives the same embeddings on any device. Every adapter's settings are these fields, with
these names and defaults (:data:`FIELDS`).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from valuelens.errors import ConfigError, SpaceMismatchError
from valuelens.filter_band import band
from valuelens.layers import (
    NAMED_SPECS,
    LayerSpec,
    default_layers,
    prepend_default,
    resolve_layers,
    validate_spec,
)
from valuelens.presets.builtin import FitRequest
from valuelens.prompts import resolve_prompt
from valuelens.recipes import LAST_ATTENTION_RECIPES, Recipe, get_recipe

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "FIELDS",
    "LEXICAL_LANGUAGES",
    "STATE_FREE_FIELDS",
    "Combine",
    "EncoderConfig",
    "FusionPart",
    "LexicalKind",
    "LongText",
    "field_descriptions",
    "space_message",
]

#: Token limit per text (prompt included) when ``max_length`` is ``None``.
DEFAULT_MAX_LENGTH = 512
Combine = Literal["mean", "normalized-mean"]
LongText = Literal["truncate", "chunk"]
#: The fields a fitted post-processing state does not depend on (how much of a long text is read, the
#: queries' own prompt, the lexical part joined after the post-processing): it serves every value of them.
STATE_FREE_FIELDS: tuple[str, ...] = (
    "max_length",
    "long_text",
    "query_template",
    "lexical",
    "lexical_query",
    "lexical_corpus",
    "lexical_kind",
    "lexical_dim",
    "lexical_k1",
    "lexical_b",
    "lexical_language",
)
#: The lexical part's kinds: ``bm25`` (words, BM25 weights, hashed: :mod:`valuelens.bm25`) and ``embeddings``
#: (subword tf-idf read through the model's input embeddings: :mod:`valuelens.lexical`).
LexicalKind = Literal["bm25", "embeddings"]
#: The languages of the BM25 part's analysis (a Snowball stemmer each; stop words for English).
LEXICAL_LANGUAGES: tuple[str, ...] = tuple(
    [
        "arabic",
        "armenian",
        "basque",
        "catalan",
        "czech",
        "danish",
        "dutch",
        "english",
        "esperanto",
        "estonian",
        "finnish",
        "french",
        "german",
        "greek",
        "hindi",
        "hungarian",
        "indonesian",
        "irish",
        "italian",
        "lithuanian",
        "nepali",
        "norwegian",
        "porter",
        "portuguese",
        "romanian",
        "russian",
        "serbian",
        "spanish",
        "swedish",
        "tamil",
        "turkish",
        "yiddish",
    ]
)


def space_message(recipe: Recipe) -> str:
    """Why EmbedFilter cannot follow ``recipe``, and which recipes it can follow."""
    return (
        f"EmbedFilter projects residual-stream embeddings, but recipe {recipe.name!r} produces "
        f"{recipe.space}-space vectors. Use a residual-space recipe: 'aligned-va' maps the value "
        "vectors through W_O into the residual stream (VA + EmbedFilter), or 'aligned-wva', 'hs', "
        "'last-token', 'wmp'."
    )


def _normalize_layers(value: Any, name: str) -> Any:
    """A layer spec in its stored form: a list becomes a tuple, a named spec its lower-case name."""
    if isinstance(value, list):
        value = tuple(value)
    if isinstance(value, str) and value.strip().lower() in NAMED_SPECS:
        value = value.strip().lower()
    try:
        validate_spec(value)
    except ConfigError as exc:
        msg = f"{name}: {exc}"
        raise ConfigError(msg) from None
    return value


def _check_number(value: Any, name: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        msg = f"{name} must be a finite number, got {value!r}"
        raise ConfigError(msg)
    if positive and value <= 0:
        msg = f"{name} must be > 0, got {value!r}"
        raise ConfigError(msg)
    return float(value)


@dataclass(frozen=True)
class FusionPart:
    """One more recipe read in the same forward pass and concatenated to the embedding (score fusion).

    Usage: ``EncoderConfig(recipe="aligned-wva", prompt="futureeol", fusion=[FusionPart("va", weight=0.5)])``.

    Each part's vector is L2-normalized and scaled by ``weight`` (the main recipe's by 1), so the cosine
    of two fused embeddings is the ``weight²``-weighted mean of the parts' cosines.
    """

    recipe: str
    layers: LayerSpec = "auto"
    weight: float = 1.0
    embed_filter: float | None = None

    def __post_init__(self) -> None:
        recipe = get_recipe(self.recipe)
        object.__setattr__(self, "recipe", recipe.name)
        object.__setattr__(
            self, "layers", _normalize_layers(self.layers, f"fusion part {recipe.name!r} layers")
        )
        object.__setattr__(self, "weight", _check_number(self.weight, "fusion weight", positive=True))
        if self.embed_filter is not None:
            band(10**6, self.embed_filter, 0)
            if not recipe.residual:
                raise SpaceMismatchError(space_message(recipe))
            object.__setattr__(self, "embed_filter", float(self.embed_filter))

    @classmethod
    def coerce(cls, value: Any) -> FusionPart:
        """A part from a :class:`FusionPart`, a mapping of its fields, or a recipe name."""
        if isinstance(value, FusionPart):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - {f.name for f in dataclasses.fields(cls)})
            if unknown:
                msg = f"unknown fusion field(s) {', '.join(map(repr, unknown))}: use recipe, layers, weight, embed_filter"
                raise ConfigError(msg)
            if "recipe" not in value:
                msg = f"a fusion part needs a recipe, got {dict(value)!r}"
                raise ConfigError(msg)
            return cls(**value)
        msg = f"a fusion part is a recipe name, a mapping or a FusionPart, got {type(value).__name__}"
        raise ConfigError(msg)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if isinstance(self.layers, tuple):
            data["layers"] = list(self.layers)
        return data


@dataclass(frozen=True)
class EncoderConfig:
    """Everything that defines an embedding besides the model; validated once, at construction.

    Usage: ``EncoderConfig(recipe="aligned-wva", prompt="futureeol", embed_filter=2)``.

    Values are stored normalized: recipe aliases become canonical names, a prompt name its canonical
    spelling, a list of layers a tuple. ``layers="auto"`` stays symbolic until a model resolves it
    (:meth:`valuelens.Encoder.config` holds the resolved tuple).
    """

    recipe: str = "va"
    """The valuelens recipe (``"va"``, ``"aligned-wva"``, ``"hs"``, ... see ``valuelens.RECIPES``)."""
    layers: LayerSpec = "auto"
    """Decoder layers: ``"auto"``, ``"all"``, ``"half"``, ``"last"``, ``"band"``, an int, a list, ``"20-27"``."""
    prompt: str | None = None
    """``None``, a prompt name (``"prompteol"``, ``"futureeol"``, ``"echo"``, ``"metaeol"``) or a ``{text}`` template."""
    query_template: str | None = None
    """The prompt (a name or a ``{text}`` template) search queries are embedded under instead of ``prompt``
    (``Encoder.encode_query``, LangChain ``embed_query``, LlamaIndex query embeddings); everything else is
    shared, so queries and documents land in one space. ``None``: queries are embedded as documents."""
    embed_filter: float | None = None
    """EmbedFilter ratio τ (``2`` keeps the middle half of W_U's spectrum); residual-space recipes only."""
    embed_filter_offset: int = 0
    """Shift of the EmbedFilter band (the paper shifted it for Mistral)."""
    max_length: int | None = None
    """Token limit per text, prompt included (longer texts are cut, the prompt kept, unless
    ``long_text="chunk"``); ``None``: 512."""
    long_text: LongText = "truncate"
    """What happens to a text longer than ``max_length``: ``"truncate"`` cuts the text (the prompt kept,
    with a ``TruncationWarning``); ``"chunk"`` embeds overlapping windows of its text tokens (each under the
    prompt) and averages their vectors, weighted by their text tokens (:mod:`valuelens.chunking`)."""
    combine: Combine = "mean"
    """How per-layer vectors are combined: plain ``"mean"``, or ``"normalized-mean"`` (each layer L2-normalized first)."""
    final_norm: bool = False
    """Apply the model's final norm to hidden states (``hs``, ``last-token``, ``wmp`` only)."""
    prepend_layers: LayerSpec | None = None
    """Token Prepending (Fu et al., 2025): a placeholder token is put before the text, and at the input
    of these layers its state is replaced by the last token's (``"1-4"``, ``"auto"``); ``None``: off."""
    contrast_layer: int | None = None
    """Contrastive Prompting (Cheng et al., 2025): at this layer the last token's head outputs become
    ``contrast_scale * (z - z_aux)``, ``z_aux`` from ``contrast_prompt`` run up to it; ``None``: off."""
    contrast_scale: float = 0.5
    """The coefficient of Contrastive Prompting's ``z - z_aux``."""
    contrast_prompt: str = "irrelevant"
    """The auxiliary prompt of Contrastive Prompting: a prompt name or a ``{text}`` template."""
    fusion: tuple[FusionPart, ...] = ()
    """More recipes read in the same forward pass, concatenated after L2 normalization with weights."""
    postprocess: str | None = None
    """A fitted :class:`valuelens.Postprocess` applied last: a ``.safetensors`` file, ``"builtin:NAME"``, or
    ``"fit:KIND[:K][@FILE]"`` (fitted when the encoder loads the model, on the package's corpus or FILE,
    any file or folder of texts, and cached per model: :mod:`valuelens.states`)."""
    drop_prefix: bool = False
    """Last-token attention recipes (``wva``, ``aligned-wva``, ``wva-lt``): the last token attends from
    the pooled text on. The keys before it (a BOS and the prompt's head, whose values are the same for
    every text) are dropped and its attention renormalized over the text and the prompt's tail."""
    lexical: float | None = None
    """The documents' weight w (0 < w < 1) of a lexical part joined after the post-processing, read from the
    text with no forward pass (``lexical_kind``); ``None``: off. With ``bm25`` a query–document score is
    (1−q)·cos(model) + q·BM25/BM25max(query) (q: ``lexical_query``) in any cosine store, and w only sets how
    much the documents' block weighs in document–document cosines (little: their BM25 blocks are nearly
    orthogonal); with ``embeddings`` cosine = (1−w)·cos(model) + w·cos(lexical) between documents."""
    lexical_query: float | None = None
    """The lexical weight of search queries (0 < q < 1; ``None``: ``lexical``'s): the hybrid's weight on the
    lexical score. With a small ``lexical`` and a large ``lexical_query``, query–document ranking gets the
    lexical signal while document–document similarity stays the model's (docs/lexical.md)."""
    lexical_corpus: str | None = None
    """Unlabeled texts the lexical part's idf is counted on (a file or folder, read as ``valuelens embed``
    reads its input: ``.txt`` one text per line, ``.jsonl``/``.csv``/``.parquet`` a ``text`` field), or a saved lexical state (``.safetensors``, what a saved sentence-transformers model
    carries); ``None``: English word frequencies (the package's corpus for the tokens no English word
    reaches). Fitted once per model and cached (:mod:`valuelens.states`)."""
    lexical_kind: LexicalKind = "bm25"
    """The lexical part: ``"bm25"`` (the text's words, lower-cased, stop words out, stemmed; BM25 weights
    hashed into ``lexical_dim`` coordinates and a padding one, so that a cosine store ranks by the hybrid
    score: :mod:`valuelens.bm25`), or ``"embeddings"`` (its subword tokens read through the model's whitened
    input embeddings, tf-idf weighted: :mod:`valuelens.lexical`)."""
    lexical_dim: int = 8192
    """``bm25``: the coordinates term weights are hashed into (signed, 8 per term); more, fewer collisions
    (8192: the smallest D within 0.5 nDCG@10 of unhashed BM25 on SciFact dev; docs/lexical.md)."""
    lexical_k1: float = 1.5
    """``bm25``: term-frequency saturation k1 (chosen on SciFact dev; bm25s' default)."""
    lexical_b: float = 0.75
    """``bm25``: document-length normalization b, 0 to 1."""
    lexical_language: str = "english"
    """``bm25``: the language of the analysis (its Snowball stemmer; stop words for English)."""

    def __post_init__(self) -> None:
        recipe = get_recipe(self.recipe)
        object.__setattr__(self, "recipe", recipe.name)
        object.__setattr__(self, "layers", _normalize_layers(self.layers, "layers"))
        prompt = resolve_prompt(self.prompt)
        object.__setattr__(self, "prompt", None if prompt is None else prompt.spec)
        try:
            query_template = resolve_prompt(self.query_template)
        except ConfigError as exc:
            msg = f"query_template: {exc}"
            raise ConfigError(msg) from None
        object.__setattr__(self, "query_template", None if query_template is None else query_template.spec)
        if self.embed_filter is not None:
            band(10**6, self.embed_filter, 0)  # τ's range; the band is checked against the model later
            if not recipe.residual:
                raise SpaceMismatchError(space_message(recipe))
            object.__setattr__(self, "embed_filter", float(self.embed_filter))
        if isinstance(self.embed_filter_offset, bool) or not isinstance(self.embed_filter_offset, int):
            msg = f"embed_filter_offset must be an int, got {self.embed_filter_offset!r}"
            raise ConfigError(msg)
        if self.max_length is not None and (
            isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 1
        ):
            msg = f"max_length must be a positive int or None, got {self.max_length!r}"
            raise ConfigError(msg)
        if self.long_text not in get_args(LongText):
            msg = (
                f"long_text must be one of {', '.join(map(repr, get_args(LongText)))}, got {self.long_text!r}: "
                "'truncate' cuts a text longer than max_length, 'chunk' embeds it in overlapping windows"
            )
            raise ConfigError(msg)
        if self.combine not in get_args(Combine):
            msg = f"combine must be one of {', '.join(map(repr, get_args(Combine)))}, got {self.combine!r}"
            raise ConfigError(msg)
        if not isinstance(self.final_norm, bool):
            msg = f"final_norm must be a bool, got {self.final_norm!r}"
            raise ConfigError(msg)
        if self.final_norm and recipe.signal != "hidden":
            msg = (
                f"final_norm=True applies to hidden-state recipes (hs, last-token, wmp), not {recipe.name!r}"
            )
            raise ConfigError(msg)
        if not isinstance(self.drop_prefix, bool):
            msg = f"drop_prefix must be a bool, got {self.drop_prefix!r}"
            raise ConfigError(msg)
        if self.drop_prefix and recipe.name not in LAST_ATTENTION_RECIPES:
            msg = (
                "drop_prefix=True applies to the recipes that read the last token's attention "
                f"({', '.join(sorted(LAST_ATTENTION_RECIPES))}), not {recipe.name!r}"
            )
            raise ConfigError(msg)
        self._check_additions()

    def _check_additions(self) -> None:
        """Validate and normalize Token Prepending, Contrastive Prompting, fusion and post-processing."""
        if self.prepend_layers is not None:
            object.__setattr__(
                self, "prepend_layers", _normalize_layers(self.prepend_layers, "prepend_layers")
            )
        if self.contrast_layer is not None and (
            isinstance(self.contrast_layer, bool) or not isinstance(self.contrast_layer, int)
        ):
            msg = f"contrast_layer must be an int (a decoder layer) or None, got {self.contrast_layer!r}"
            raise ConfigError(msg)
        object.__setattr__(self, "contrast_scale", _check_number(self.contrast_scale, "contrast_scale"))
        aux = resolve_prompt(self.contrast_prompt)
        if aux is None or aux.passes != 1:
            msg = f"contrast_prompt must be one template (a name or a '{{text}}' template), got {self.contrast_prompt!r}"
            raise ConfigError(msg)
        object.__setattr__(self, "contrast_prompt", aux.spec)
        fusion: Any = self.fusion
        if fusion is None or isinstance(fusion, (str, Mapping, FusionPart)):
            fusion = () if fusion is None else (fusion,)
        if not isinstance(fusion, (list, tuple)):
            msg = f"fusion must be a list of parts (recipe names, mappings or FusionPart), got {fusion!r}"
            raise ConfigError(msg)
        object.__setattr__(self, "fusion", tuple(FusionPart.coerce(part) for part in fusion))
        if self.postprocess is not None and (not isinstance(self.postprocess, str) or not self.postprocess):
            msg = (
                "postprocess must be a path to a fitted state (.safetensors), 'builtin:NAME' or "
                f"'fit:KIND[:K][@FILE]' (fitted at first use), got {self.postprocess!r}"
            )
            raise ConfigError(msg)
        if isinstance(self.postprocess, str):
            FitRequest.parse(self.postprocess)  # a malformed fit: reference fails here, before any load
        self._check_lexical()

    def _check_lexical(self) -> None:
        """Validate the lexical part's weights and corpus."""
        for name in ("lexical", "lexical_query"):
            value = getattr(self, name)
            if value is None:
                continue
            number = _check_number(value, name)
            if not 0 < number < 1:
                msg = (
                    f"{name} must be a weight between 0 and 1 (exclusive), got {value!r}: the lexical part "
                    "gets w and the model's part 1 - w of the cosine; None turns it off"
                )
                raise ConfigError(msg)
            object.__setattr__(self, name, number)
        if self.lexical is None:
            for name in ("lexical_query", "lexical_corpus"):
                if getattr(self, name) is not None:
                    msg = f"{name} needs a lexical part: set lexical= (its weight for documents) too"
                    raise ConfigError(msg)
        if self.lexical_corpus is not None and (
            not isinstance(self.lexical_corpus, str) or not self.lexical_corpus.strip()
        ):
            msg = f"lexical_corpus must be a path to a text file or None, got {self.lexical_corpus!r}"
            raise ConfigError(msg)
        if self.lexical_kind not in get_args(LexicalKind):
            msg = f"lexical_kind must be one of {', '.join(map(repr, get_args(LexicalKind)))}, got {self.lexical_kind!r}"
            raise ConfigError(msg)
        dim = self.lexical_dim
        if isinstance(dim, bool) or not isinstance(dim, int) or not 16 <= dim <= 1 << 20:
            msg = f"lexical_dim must be an int from 16 to {1 << 20}, got {dim!r}"
            raise ConfigError(msg)
        object.__setattr__(self, "lexical_k1", _check_number(self.lexical_k1, "lexical_k1"))
        object.__setattr__(self, "lexical_b", _check_number(self.lexical_b, "lexical_b"))
        if self.lexical_k1 < 0 or not 0 <= self.lexical_b <= 1:
            msg = f"lexical_k1 must be >= 0 and lexical_b from 0 to 1, got {self.lexical_k1!r} and {self.lexical_b!r}"
            raise ConfigError(msg)
        if self.lexical_language not in LEXICAL_LANGUAGES:
            msg = (
                f"lexical_language must be one of {', '.join(LEXICAL_LANGUAGES)} (a Snowball stemmer each), "
                f"got {self.lexical_language!r}"
            )
            raise ConfigError(msg)

    # ------------------------------------------------------------------ resolution
    def resolved(self, model_type: str, n_layers: int, hidden_size: int) -> EncoderConfig:
        """This spec with every layer spec (``layers``, fusion parts, ``prepend_layers``) resolved to a
        tuple for a model, and ``contrast_layer`` checked against it.

        Usage: ``config.resolved("llama", 30, 576).layers`` → ``(21, 22, 23)``.
        """

        def resolve(recipe: str, spec: LayerSpec) -> tuple[int, ...]:
            auto = default_layers(get_recipe(recipe), model_type, n_layers, hidden_size)
            return resolve_layers(spec, n_layers, auto=auto)

        changes: dict[str, Any] = {"layers": resolve(self.recipe, self.layers)}
        if self.fusion:
            changes["fusion"] = [
                dataclasses.replace(part, layers=resolve(part.recipe, part.layers)) for part in self.fusion
            ]
        if self.prepend_layers is not None:
            changes["prepend_layers"] = resolve_layers(
                self.prepend_layers, n_layers, auto=prepend_default(n_layers)
            )
        resolved = self.replace(**changes)
        if self.contrast_layer is not None:
            deepest = resolved.deepest_layer
            layer = self.contrast_layer + n_layers if self.contrast_layer < 0 else self.contrast_layer
            if not 0 <= layer <= deepest:
                msg = (
                    f"contrast_layer={self.contrast_layer} must be a layer at or before the deepest one read "
                    f"({deepest}) on this {n_layers}-layer model"
                )
                raise ConfigError(msg)
            if layer != self.contrast_layer:
                resolved = resolved.replace(contrast_layer=layer)
        return resolved

    @property
    def deepest_layer(self) -> int:
        """The deepest layer any recipe of a resolved spec reads (the forward ends after it)."""
        specs = [self.layers, *(part.layers for part in self.fusion)]
        if not all(isinstance(spec, tuple) for spec in specs):
            msg = "deepest_layer needs resolved layers (EncoderConfig.resolved)"
            raise ConfigError(msg)
        return max(max(spec) for spec in specs if isinstance(spec, tuple))

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-safe values (a layer tuple becomes a list)."""
        data = dataclasses.asdict(self)
        for name in ("layers", "prepend_layers"):
            if isinstance(data[name], tuple):
                data[name] = list(data[name])
        data["fusion"] = [part.to_dict() for part in self.fusion]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EncoderConfig:
        """Build from :meth:`to_dict` output (or any subset of the fields); unknown keys raise."""
        if not isinstance(data, Mapping):
            msg = f"an EncoderConfig is built from a mapping of its fields, got {type(data).__name__}"
            raise ConfigError(msg)
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            msg = f"unknown EncoderConfig field(s) {', '.join(map(repr, unknown))}: choose from {', '.join(FIELDS)}"
            raise ConfigError(msg)
        return cls(**data)

    def replace(self, **changes: Any) -> EncoderConfig:
        """A copy with ``changes`` applied (validated again)."""
        return EncoderConfig.from_dict({**self.to_dict(), **changes})

    @property
    def effective_max_length(self) -> int:
        """``max_length`` with ``None`` read as the default (512)."""
        return DEFAULT_MAX_LENGTH if self.max_length is None else self.max_length

    def diff(self, other: EncoderConfig) -> list[str]:
        """The fields on which ``other`` differs, as ``"field: mine != theirs"`` strings.

        ``max_length=None`` equals the default it stands for. Usage: ``if a.diff(b): ...``.
        """
        found = []
        for name in FIELDS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if name == "max_length":
                same = self.effective_max_length == other.effective_max_length
            else:
                same = mine == theirs
            if not same:
                found.append(f"{name}: {mine!r} != {theirs!r}")
        return found


@functools.cache
def field_descriptions() -> dict[str, str]:
    """Each :class:`valuelens.EncoderConfig` field's description: its attribute docstring in ``config.py``
    (the one place it is written), as Markdown-style text. Empty if the source cannot be read.

    Usage: ``field_descriptions()["recipe"]`` → ``'The valuelens recipe (`"va"`, ...'``.
    """
    try:
        tree = ast.parse(inspect.getsource(sys.modules[__name__]))
    except (OSError, TypeError):  # no source (a frozen application): fields without descriptions
        return {}
    body = next(
        node.body for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "EncoderConfig"
    )
    found = {}
    for field, doc in itertools.pairwise(body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant)
            and isinstance(doc.value.value, str)
        ):
            text = " ".join(doc.value.value.split()).replace("``", "`")
            found[field.target.id] = re.sub(r":\w+:`", "`", text)
    return found


#: The spec's field names, in declaration order (what every adapter exposes).
FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(EncoderConfig))
