"""The benchmark rows: what runs in each, how it is measured, the ratios and the targets.

Usage::

    settings = Settings(model="smollm2-135m", texts=96)
    report = run_suite(settings, ["bare", "bare-truncated", "va"])   # a fresh process per row on CPU
    print(to_markdown(report))

Every row embeds the same texts (:func:`bench.texts.length_mix`) after one warm-up batch, and
reports texts/s, tokens/s (the real tokens the model reads, prompts and passes included) and peak
memory (:mod:`bench.measure`), with its speed and peak as ratios to row 1 (the bare forward over all
layers) and row 2 (the bare forward truncated to the deepest layer VA selects). On CPU each row
runs in a fresh process (``python -m bench --one-row KEY ...``), so its peak RSS is its own; on CUDA
(or with ``in_process=True``) all rows share one process and one loaded model, and the peak is
``torch.cuda.max_memory_allocated`` (or the RSS mark, reset per row) from the row's start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import os
import platform
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from bench.child import run_child
from bench.measure import MemoryMeter, synchronize
from bench.shapes import build_random_model, random_tokenizer, random_unembedding, shape_config
from bench.texts import length_mix

__all__ = [
    "ROWS",
    "Context",
    "Row",
    "Settings",
    "measure_row",
    "run_suite",
    "select_rows",
    "to_markdown",
]


class Skip(Exception):
    """A row that cannot run here (its host framework is missing, or it needs a checkpoint folder)."""


@dataclass(frozen=True)
class Settings:
    """The options every row of one run shares (``python -m bench --help`` describes them)."""

    model: str | None = None
    random_init: str | None = None
    texts: int = 96
    source: str = "mix"
    seed: int = 0
    batch_size: int = 32
    max_tokens_per_batch: str = "default"
    dtype: str | None = None
    device: str | None = None
    max_length: int = 512
    repeats: int = 1
    threads: int | None = None

    def argv(self) -> list[str]:
        """The command-line options that rebuild these settings in a child process."""
        args = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                args += ["--" + f.name.replace("_", "-"), str(value)]
        return args


@dataclass
class Prepared:
    """A row ready to measure: ``run(texts)`` embeds, ``tokens`` is what the model reads for all texts."""

    run: Callable[[Sequence[str]], Any] | None
    tokens: int
    layers: str
    note: str = ""
    reset: Callable[[], None] | None = None  # before each timed run
    after: Callable[[float], dict[str, Any]] | None = None  # extra fields, given the timed seconds
    close: Callable[[], None] | None = None


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    group: str
    build: Callable[[Context], Prepared] = field(repr=False)


# --------------------------------------------------------------------------------------------
# The context: texts, model, tokenizer, encoders
# --------------------------------------------------------------------------------------------


class Context:
    """What the rows of one run share: settings, texts, the model source and (in process) one model."""

    def __init__(self, settings: Settings, *, shared: bool) -> None:
        from valuelens import models
        from valuelens.loading import load_config, resolve_dtype

        self.settings = settings
        self.shared = shared
        self.device = torch.device(settings.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.texts = length_mix(settings.texts, seed=settings.seed, source=settings.source)  # type: ignore[arg-type]
        self.random = settings.random_init is not None
        if self.random:
            self.path = None
            self.hf_config = shape_config(settings.random_init or "")
        else:
            self.path = models.path(settings.model)
            self.hf_config = load_config(self.path)
        self.text_config = self.hf_config.get_text_config()
        self.n_layers = int(self.text_config.num_hidden_layers)
        dtype = resolve_dtype(settings.dtype)
        if dtype is None and (self.device.type == "cpu" or self.random):
            dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        self.dtype = dtype  # None: the checkpoint's own (CUDA)
        self._tokenizer: Any = None
        self._full: Any = None

    # ------------------------------------------------------------------ layers and batching
    def recipe_layers(self, recipe: str) -> tuple[int, ...]:
        """What ``layers="auto"`` selects for ``recipe`` on this model."""
        from valuelens.layers import default_layers, resolve_layers
        from valuelens.recipes import get_recipe

        tc = self.text_config
        auto = default_layers(get_recipe(recipe), tc.model_type, self.n_layers, tc.hidden_size)
        return tuple(resolve_layers("auto", self.n_layers, auto=auto))

    @property
    def truncated_depth(self) -> int:
        """Layers the bare truncated forward keeps: up to the deepest one VA selects."""
        return max(self.recipe_layers("va")) + 1

    def token_budget(self) -> int | None:
        """``max_tokens_per_batch`` of this run as a number (``"default"``: ``Encoder.encode``'s own
        default, ``"auto"`` resolved for this device), the plan the bare rows batch by too."""
        from valuelens import Encoder

        value: Any = self.settings.max_tokens_per_batch
        if value == "default":
            value = inspect.signature(Encoder.encode).parameters["max_tokens_per_batch"].default
        if isinstance(value, str) and value.lower() == "none":
            return None
        if isinstance(value, str) and value.lower() == "auto":
            from valuelens.inputs import token_budget

            return token_budget("auto", self.device.type)
        return None if value is None else int(value)

    def budget_label(self) -> str:
        """How the run's budget was chosen, for the report (``"auto (2048)"``, ``"none"``, ``"4096"``)."""
        from valuelens import Encoder

        value: Any = self.settings.max_tokens_per_batch
        if value == "default":
            value = inspect.signature(Encoder.encode).parameters["max_tokens_per_batch"].default
        budget = self.token_budget()
        return f"{value} ({budget})" if isinstance(value, str) and value.lower() == "auto" else str(budget)

    def encode_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"batch_size": self.settings.batch_size}
        if self.settings.max_tokens_per_batch != "default":
            value = self.settings.max_tokens_per_batch
            kwargs["max_tokens_per_batch"] = value.lower() if value.lower() == "auto" else self.token_budget()
        return kwargs

    # ------------------------------------------------------------------ model and tokenizer
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            if self.random:
                self._tokenizer = random_tokenizer(self.texts, int(self.text_config.vocab_size))
            else:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(self.path)
        return self._tokenizer

    def backbone(self, keep: int | None = None, *, attn: str | None = None) -> Any:
        """The backbone with ``keep`` layers (all by default); in process, the one shared full model."""
        if self.shared:
            if self._full is None:
                self._full = self._load(None, None)
            return self._full
        return self._load(keep, attn)

    def _load(self, keep: int | None, attn: str | None) -> Any:
        kwargs = {"attn_implementation": attn} if attn else {}
        if self.random:
            assert self.dtype is not None
            return build_random_model(
                self.settings.random_init or "",
                dtype=self.dtype,
                device=self.device,
                layers=keep,
                seed=self.settings.seed,
                **kwargs,
            )
        from valuelens.loading import load_model

        model, tokenizer = load_model(
            self.path, keep_layers=keep, device=self.device, dtype=self.dtype, **kwargs
        )
        if self._tokenizer is None:
            self._tokenizer = tokenizer
        return model

    def encoder(self, **spec: Any) -> Any:
        """A ``valuelens.Encoder`` for ``spec``: loaded with its own layers (a fresh process per row),
        or over the shared model / a random one (its EmbedFilter then from the random W_U)."""
        from valuelens import EmbedFilter, Encoder

        spec.setdefault("max_length", self.settings.max_length)
        if not self.random and not self.shared:
            return Encoder.from_pretrained(self.path, device=self.device, dtype=self.dtype, **spec)
        model = self.backbone()
        tau = spec.pop("embed_filter", None)
        prebuilt = None
        if tau is not None:
            prebuilt = EmbedFilter.from_weight(random_unembedding(model), tau=tau) if self.random else tau
        return Encoder(model, self.tokenizer(), embed_filter=prebuilt, **spec)

    def sentence_transformer(self, pooling: Callable[[int], Any]) -> Any:
        """``SentenceTransformer(modules=[Transformer(path), pooling(dim)])`` on this model."""
        _need_folder(self)
        try:
            from sentence_transformers.base.modules import Transformer

            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise Skip(f"sentence-transformers is not importable ({exc})") from None
        model_kwargs = {"dtype": self.dtype if self.dtype is not None else "auto"}
        transformer = Transformer(
            self.path, model_kwargs=model_kwargs, max_seq_length=self.settings.max_length
        )
        module = pooling(int(self.text_config.hidden_size))
        return SentenceTransformer(modules=[transformer, module], device=str(self.device))


# --------------------------------------------------------------------------------------------
# Row builders
# --------------------------------------------------------------------------------------------


def _need_folder(ctx: Context) -> None:
    if ctx.random:
        raise Skip("sentence-transformers loads a checkpoint folder; a randomly initialised model has none")


def _span(layers: Sequence[int]) -> str:
    layers = list(layers)
    if len(layers) > 2 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}–{layers[-1]}"
    return ",".join(map(str, layers))


def _bare_tokens(ctx: Context) -> int:
    from valuelens.tokenization import tokenize

    items, _ = tokenize(ctx.tokenizer(), ctx.texts, prompt=None, max_length=ctx.settings.max_length)
    return sum(len(item.ids) for item in items)


def _encoder_tokens(encoder: Any, texts: Sequence[str]) -> int:
    return sum(
        len(item.ids)
        for i in range(encoder.reader.passes)
        for item in encoder.reader.tokenize(texts, template_index=i)[0]
    )


def _bare_run(
    ctx: Context, model: Any, *, reduce: Callable[[Any, torch.Tensor], Any] | None = None, **extra: Any
) -> Callable[[Sequence[str]], None]:
    """Tokenize, sort by length, batch as the Encoder does, and run ``model`` with no hooks."""
    from valuelens.batching import plan_batches
    from valuelens.tokenization import collate, tokenize

    tok = ctx.tokenizer()
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    side = "left" if getattr(tok, "padding_side", "right") == "left" else "right"
    positions = "position_ids" in inspect.signature(model.forward).parameters
    budget = ctx.token_budget()

    def run(texts: Sequence[str]) -> None:
        items, _ = tokenize(tok, texts, prompt=None, max_length=ctx.settings.max_length)
        lengths = [len(item.ids) for item in items]
        order = sorted(range(len(items)), key=lambda i: -lengths[i])
        with torch.inference_mode():
            for chunk in plan_batches(order, lengths, ctx.settings.batch_size, budget):
                batch = collate([items[i] for i in chunk], pad_id=pad, padding_side=side)
                inputs = {
                    "input_ids": batch.input_ids.to(ctx.device),
                    "attention_mask": batch.attention_mask.to(ctx.device),
                }
                if positions:
                    inputs["position_ids"] = batch.position_ids.to(ctx.device)
                out = model(**inputs, use_cache=False, **extra)
                if reduce is not None:
                    reduce(out, inputs["attention_mask"])

    return run


@contextlib.contextmanager
def _truncated(model: Any, keep: int) -> Iterator[Any]:
    """``model`` with only its first ``keep`` layers, restored on exit (shares the weights)."""
    from valuelens.architectures import locate
    from valuelens.loading import prune_layers

    parts = locate(model)
    config = parts.backbone.config.get_text_config()
    saved = list(parts.layers[keep:])
    n, types = config.num_hidden_layers, getattr(config, "layer_types", None)
    prune_layers(parts, keep)
    try:
        yield model
    finally:
        parts.layers.extend(saved)
        config.num_hidden_layers = n
        if types is not None:
            config.layer_types = types


def build_bare(ctx: Context) -> Prepared:
    model = ctx.backbone()
    return Prepared(_bare_run(ctx, model), _bare_tokens(ctx), f"0–{ctx.n_layers - 1}")


def build_bare_truncated(ctx: Context) -> Prepared:
    keep = ctx.truncated_depth
    layers = f"0–{keep - 1}"
    if not ctx.shared:
        return Prepared(_bare_run(ctx, ctx.backbone(keep)), _bare_tokens(ctx), layers)
    model = ctx.backbone()
    inner = _bare_run(ctx, model)

    def run(texts: Sequence[str]) -> None:
        with _truncated(model, keep):
            inner(texts)

    return Prepared(run, _bare_tokens(ctx), layers, note="the shared model, cut while it runs")


def build_st_mean(ctx: Context) -> Prepared:
    _need_folder(ctx)
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:
        try:
            from sentence_transformers.models import Pooling
        except ImportError as exc:
            raise Skip(f"sentence-transformers is not importable ({exc})") from None
    st = ctx.sentence_transformer(lambda dim: Pooling(dim, "mean"))
    bs = ctx.settings.batch_size

    def run(texts: Sequence[str]) -> None:
        st.encode(list(texts), batch_size=bs, show_progress_bar=False, convert_to_numpy=True)

    return Prepared(run, _bare_tokens(ctx), f"0–{ctx.n_layers - 1}", note="ST's fixed batches")


def _mean_every_layer(out: Any, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.unsqueeze(-1).to(torch.float32)
    return torch.stack([(h.float() * weights).sum(1) / weights.sum(1) for h in out.hidden_states[1:]]).mean(0)


def _last_token_attention(out: Any, mask: torch.Tensor) -> list[torch.Tensor]:
    last = mask.sum(1) - 1
    rows = torch.arange(mask.shape[0], device=mask.device)
    return [a[rows, :, last].float().mean(1) for a in out.attentions]


def build_hidden_states(ctx: Context) -> Prepared:
    run = _bare_run(ctx, ctx.backbone(), reduce=_mean_every_layer, output_hidden_states=True)
    return Prepared(
        run, _bare_tokens(ctx), f"0–{ctx.n_layers - 1}", note="every layer kept, then mean-pooled"
    )


def build_eager_attentions(ctx: Context) -> Prepared:
    model = ctx.backbone(attn="eager")
    close = None
    if ctx.shared:
        previous = model.config._attn_implementation
        model.set_attn_implementation("eager")

        def close() -> None:
            model.set_attn_implementation(previous)

    run = _bare_run(ctx, model, reduce=_last_token_attention, output_attentions=True)
    return Prepared(
        run, _bare_tokens(ctx), f"0–{ctx.n_layers - 1}", note="every layer's N×N probabilities", close=close
    )


def _encoder_row(**spec: Any) -> Callable[[Context], Prepared]:
    def build(ctx: Context) -> Prepared:
        encoder = ctx.encoder(**spec)
        kwargs = ctx.encode_kwargs()

        def run(texts: Sequence[str]) -> None:
            encoder.encode(list(texts), **kwargs)

        return Prepared(run, _encoder_tokens(encoder, ctx.texts), _span(encoder.layers))

    return build


def build_prompteol_ef(ctx: Context) -> Prepared:
    """PromptEOL + EmbedFilter; also times the filter's transform inside the encode."""
    encoder = ctx.encoder(recipe="last-token", prompt="prompteol", embed_filter=2)
    embed_filter = encoder.embed_filter
    transform = embed_filter.transform
    spent = [0.0]

    def timed_transform(x: Any) -> Any:
        synchronize(ctx.device)
        start = time.perf_counter()
        y = transform(x)
        synchronize(ctx.device)
        spent[0] += time.perf_counter() - start
        return y

    object.__setattr__(
        embed_filter, "transform", timed_transform
    )  # a timer around the frozen filter's method
    kwargs = ctx.encode_kwargs()

    def run(texts: Sequence[str]) -> None:
        encoder.encode(list(texts), **kwargs)

    def reset() -> None:
        spent[0] = 0.0

    def after(seconds: float) -> dict[str, Any]:
        return {"transform_s": round(spent[0], 6), "transform_share": spent[0] / seconds}

    return Prepared(
        run,
        _encoder_tokens(encoder, ctx.texts),
        _span(encoder.layers),
        note=repr(embed_filter),
        reset=reset,
        after=after,
    )


def build_st_va(ctx: Context) -> Prepared:
    _need_folder(ctx)
    try:
        from valuelens_sentence_transformers import ValuePooling
    except ImportError as exc:
        raise Skip(f"valuelens_sentence_transformers is not importable ({exc})") from None
    st = ctx.sentence_transformer(lambda dim: ValuePooling(recipe="va"))
    encoder = st[1].encoder
    bs = ctx.settings.batch_size

    def run(texts: Sequence[str]) -> None:
        st.encode(list(texts), batch_size=bs, show_progress_bar=False, convert_to_numpy=True)

    return Prepared(
        run, _encoder_tokens(encoder, ctx.texts), _span(encoder.layers), note="ST's fixed batches"
    )


def build_va_fixed(ctx: Context) -> Prepared:
    """Encoder VA in fixed, length-sorted batches of ``--batch-size`` (no token budget): the batches
    sentence-transformers makes, so the reference for ValuePooling's overhead."""
    encoder = ctx.encoder(recipe="va")
    bs = ctx.settings.batch_size

    def run(texts: Sequence[str]) -> None:
        encoder.encode(list(texts), batch_size=bs, max_tokens_per_batch=None)

    return Prepared(run, _encoder_tokens(encoder, ctx.texts), _span(encoder.layers), note="no token budget")


def build_langchain_va(ctx: Context) -> Prepared:
    try:
        from langchain_valuelens import ValueLensEmbeddings
    except ImportError as exc:
        raise Skip(f"langchain_valuelens is not importable ({exc})") from None
    encoder = ctx.encoder(recipe="va")
    embeddings = ValueLensEmbeddings(model=encoder, batch_size=ctx.settings.batch_size)

    def run(texts: Sequence[str]) -> None:
        embeddings.embed_documents(list(texts))

    return Prepared(run, _encoder_tokens(encoder, ctx.texts), _span(encoder.layers))


def build_llamaindex_va(ctx: Context) -> Prepared:
    try:
        from llama_index.embeddings.valuelens import ValueLensEmbedding
    except ImportError as exc:
        raise Skip(f"llama_index.embeddings.valuelens is not importable ({exc})") from None
    encoder = ctx.encoder(recipe="va")
    embeddings = ValueLensEmbedding(encoder=encoder, batch_size=ctx.settings.batch_size)

    def run(texts: Sequence[str]) -> None:
        embeddings.get_text_embedding_batch(list(texts))

    return Prepared(
        run,
        _encoder_tokens(encoder, ctx.texts),
        _span(encoder.layers),
        note="LlamaIndex's chunks of embed_batch_size (256 by default)",
    )


def build_ef_fit(ctx: Context) -> Prepared:
    """EmbedFilter fit: W_U loaded, its spectrum the first time and again (the per-tensor cache), and a
    saved filter loaded back."""
    from valuelens import EmbedFilter

    def after(_: float) -> dict[str, Any]:
        start = time.perf_counter()
        if ctx.random:
            weight = random_unembedding(ctx.backbone()).clone()  # a new tensor: no cached spectrum
        else:
            from valuelens.embed_filter import load_unembedding

            weight = load_unembedding(ctx.path)
        synchronize(ctx.device)
        load_s = time.perf_counter() - start
        times = []
        for _ in range(2):
            start = time.perf_counter()
            embed_filter = EmbedFilter.from_weight(weight, tau=2)
            synchronize(ctx.device)
            times.append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory() as folder:
            embed_filter.save(folder)
            start = time.perf_counter()
            EmbedFilter.load(folder)
            saved_s = time.perf_counter() - start
        return {
            "unembedding": list(weight.shape),
            "load_unembedding_s": round(load_s, 3),
            "fit_first_s": round(times[0], 3),
            "fit_cached_s": round(times[1], 6),
            "load_saved_s": round(saved_s, 4),
        }

    return Prepared(None, 0, "", note="τ=2", after=after)


def _batching_row(batch_size: int, budget: int | None) -> Callable[[Context], Prepared]:
    def build(ctx: Context) -> Prepared:
        encoder = ctx.encoder(recipe="va")

        def run(texts: Sequence[str]) -> None:
            encoder.encode(list(texts), batch_size=batch_size, max_tokens_per_batch=budget)

        return Prepared(run, _encoder_tokens(encoder, ctx.texts), _span(encoder.layers))

    return build


ROWS: dict[str, Row] = {
    row.key: row
    for row in [
        Row("bare", "bare AutoModel forward, all layers, no hooks", "reference", build_bare),
        Row(
            "bare-truncated",
            "bare forward truncated to VA's deepest layer",
            "reference",
            build_bare_truncated,
        ),
        Row("st-mean", "sentence-transformers mean Pooling", "reference", build_st_mean),
        Row("hidden-states", "output_hidden_states=True + mean", "naive", build_hidden_states),
        Row("eager-attentions", "eager attention, output_attentions=True", "naive", build_eager_attentions),
        Row("va", "valuelens VA (Encoder)", "valuelens", _encoder_row(recipe="va")),
        Row("wva-lt", "valuelens WVA(LT)", "valuelens", _encoder_row(recipe="wva-lt")),
        Row(
            "aligned-wva",
            "valuelens AlignedWVA(FutureEOL)",
            "valuelens",
            _encoder_row(recipe="aligned-wva", prompt="futureeol"),
        ),
        Row("hs", "valuelens HS", "valuelens", _encoder_row(recipe="hs")),
        Row("prompteol-ef", "valuelens PromptEOL + EmbedFilter τ=2", "valuelens", build_prompteol_ef),
        Row("va-fixed", "valuelens VA (Encoder), fixed batches as ST makes", "adapters", build_va_fixed),
        Row("st-va", "VA via ST ValuePooling", "adapters", build_st_va),
        Row("langchain-va", "VA via LangChain ValueLensEmbeddings", "adapters", build_langchain_va),
        Row("llamaindex-va", "VA via LlamaIndex ValueLensEmbedding", "adapters", build_llamaindex_va),
        Row(
            "metaeol",
            "MetaEOL (last token, 8 prompts)",
            "baselines",
            _encoder_row(recipe="last-token", prompt="metaeol"),
        ),
        Row("echo", "Echo (HS, text twice)", "baselines", _encoder_row(recipe="hs", prompt="echo")),
        Row("ef-fit", "EmbedFilter fit (τ=2)", "embed-filter", build_ef_fit),
    ]
}

#: the token-budget comparison: fixed batches against budgets (``batch-N``, ``budget-T[-bsN]``)
BATCHING_ROWS = ["batch-8", "batch-32", "budget-1024", "budget-2048", "budget-4096", "budget-2048-bs64"]
_BATCHING = re.compile(r"^(?:batch-(\d+)|budget-(\d+)(?:-bs(\d+))?)$")


def get_row(key: str, batch_size: int = 32) -> Row:
    """The row ``key`` (a name of :data:`ROWS` or a batching row such as ``budget-2048-bs64``)."""
    if key in ROWS:
        return ROWS[key]
    match = _BATCHING.match(key)
    if match is None:
        msg = f"unknown row {key!r}: choose from {', '.join([*ROWS, *BATCHING_ROWS])} or a group ({', '.join(GROUPS)})"
        raise ValueError(msg)
    fixed, budget, bs = match.groups()
    if fixed:
        return Row(key, f"VA, fixed batches of {fixed}", "batching", _batching_row(int(fixed), None))
    size = int(bs or batch_size)
    return Row(
        key,
        f"VA, batch_size={size}, max_tokens_per_batch={budget}",
        "batching",
        _batching_row(size, int(budget)),
    )


GROUPS = ["all", "reference", "naive", "valuelens", "adapters", "baselines", "embed-filter", "batching"]


def select_rows(spec: str) -> list[str]:
    """Row keys from ``--rows`` (keys and groups, comma-separated; ``all`` is every row but batching).
    Rows 1 and 2 are added when another non-batching row is chosen: every ratio needs them."""
    keys: list[str] = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        if item == "all":
            keys += list(ROWS)
        elif item == "batching":
            keys += BATCHING_ROWS
        elif item in GROUPS:
            keys += [k for k, row in ROWS.items() if row.group == item]
        else:
            get_row(item)
            keys.append(item)
    if any(k in ROWS for k in keys):
        keys = ["bare", "bare-truncated", *keys]
    return list(dict.fromkeys(keys))


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def measure_row(ctx: Context, key: str) -> dict[str, Any]:
    """Build and measure one row in this process (see the module docstring)."""
    from valuelens import TruncationWarning

    row = get_row(key, ctx.settings.batch_size)
    result: dict[str, Any] = {"key": key, "label": row.label, "group": row.group}
    try:
        prepared = row.build(ctx)
    except Skip as exc:
        return {**result, "status": "skipped", "note": str(exc)}
    result.update(status="ok", layers=prepared.layers, note=prepared.note)
    if prepared.run is not None:
        gc.collect()
        meter = MemoryMeter(ctx.device)
        warmup = ctx.texts[: ctx.settings.batch_size] if len(ctx.texts) > 1 else []
        best, last = float("inf"), 0.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TruncationWarning)  # long abstracts are cut at max_length
            if warmup:
                prepared.run(warmup)
                synchronize(ctx.device)
            for _ in range(max(1, ctx.settings.repeats)):
                if prepared.reset is not None:
                    prepared.reset()
                start = time.perf_counter()
                prepared.run(ctx.texts)
                synchronize(ctx.device)
                last = time.perf_counter() - start
                best = min(best, last)
        result.update(
            seconds=round(best, 4),
            texts=len(ctx.texts),
            tokens=prepared.tokens,
            texts_per_s=len(ctx.texts) / best,
            tokens_per_s=prepared.tokens / best,
            **meter.read(),
        )
        if prepared.after is not None:
            result.update(prepared.after(last))
    elif prepared.after is not None:
        result.update(prepared.after(0.0))
    if prepared.close is not None:
        prepared.close()
    return result


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _in_child(settings: Settings, key: str) -> dict[str, Any]:
    """Measure ``key`` in a fresh ``python -m bench --one-row`` process."""
    result = run_child(["-m", "bench", *settings.argv(), "--one-row", key])
    if "failed" not in result:
        return result
    row = get_row(key, settings.batch_size)
    return {"key": key, "label": row.label, "group": row.group, "status": "failed", "note": result["failed"]}


def run_suite(
    settings: Settings,
    keys: Sequence[str],
    *,
    in_process: bool | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    done: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Measure ``keys`` on the same texts; returns ``{"meta", "rows", "targets"}`` with the ratios.
    Rows in ``done`` (measured earlier in a run cut short, same settings) are kept, not measured again."""
    ctx = Context(settings, shared=True)  # texts and layers; a model is loaded only in process
    if in_process is None:
        in_process = ctx.device.type != "cpu"
    load_start = _load_average()
    kept = {r["key"]: r for r in done if r.get("status") in ("ok", "skipped")}
    with cpu_threads(settings.threads):
        fresh = _run_rows(ctx, settings, [k for k in keys if k not in kept], in_process, progress)
    measured = {r["key"]: r for r in fresh}
    rows = [kept.get(k) or measured[k] for k in keys]
    add_ratios(rows)
    meta = {**_meta(ctx, in_process), "load_average": {"start": load_start, "end": _load_average()}}
    if kept:
        meta["resumed_rows"] = sorted(kept)
    return {"meta": meta, "rows": rows, "targets": targets(rows, ctx)}


def _load_average() -> float | None:
    """The 1-minute load average (other jobs on the machine show here), ``None`` where unknown."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


@contextlib.contextmanager
def cpu_threads(threads: int | None) -> Iterator[None]:
    """torch's CPU threads set to ``threads`` (unchanged for ``None``) while the rows run."""
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _run_rows(
    ctx: Context,
    settings: Settings,
    keys: Sequence[str],
    in_process: bool,
    progress: Callable[[dict[str, Any]], None] | None,
) -> list[dict[str, Any]]:
    rows = []
    for key in keys:
        if in_process:
            try:
                result = measure_row(ctx, key)
            except Exception as exc:  # one failing row (e.g. out of memory) leaves the others
                row = get_row(key, settings.batch_size)
                result = {
                    "key": key,
                    "label": row.label,
                    "group": row.group,
                    "status": "failed",
                    "note": _first_line(exc),
                }
            gc.collect()
            if ctx.device.type == "cuda":
                torch.cuda.empty_cache()
        else:
            result = _in_child(settings, key)
        rows.append(result)
        if progress is not None:
            progress(result)
    return rows


def _meta(ctx: Context, in_process: bool) -> dict[str, Any]:
    import transformers

    from valuelens import __version__
    from valuelens.models import DEFAULT_MODEL

    n_abstracts = sum(len(t) > 400 for t in ctx.texts)
    return {
        "model": f"random {ctx.settings.random_init}"
        if ctx.random
        else (ctx.settings.model or DEFAULT_MODEL),
        "model_type": ctx.text_config.model_type,
        "n_layers": ctx.n_layers,
        "hidden_size": int(ctx.text_config.hidden_size),
        "va_layers": list(ctx.recipe_layers("va")),
        "texts": len(ctx.texts),
        "texts_over_400_chars": n_abstracts,
        "source": ctx.settings.source,
        "batch_size": ctx.settings.batch_size,
        "max_tokens_per_batch": ctx.budget_label(),
        "max_length": ctx.settings.max_length,
        "dtype": str(ctx.dtype).removeprefix("torch.") if ctx.dtype is not None else "checkpoint",
        "device": str(ctx.device),
        "device_name": torch.cuda.get_device_name(ctx.device)
        if ctx.device.type == "cuda"
        else platform.processor() or platform.machine(),
        "cpu_threads": ctx.settings.threads or torch.get_num_threads(),
        "isolation": "one process" if in_process else "a fresh process per row",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "versions": {
            "valuelens": __version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "settings": dataclasses.asdict(ctx.settings),
    }


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Each measured row's speed and peak as ratios to rows 1 and 2 (and batching rows to ``batch-32``)."""
    by_key = {r["key"]: r for r in rows if r.get("status") == "ok" and "texts_per_s" in r}
    for base_key, suffix in (("bare", "bare"), ("bare-truncated", "truncated"), ("batch-32", "batch32")):
        base = by_key.get(base_key)
        if base is None:
            continue
        for r in by_key.values():
            if suffix == "batch32" and r["group"] != "batching":
                continue
            r[f"x_{suffix}"] = r["texts_per_s"] / base["texts_per_s"]
            if suffix != "batch32":
                r[f"peak_x_{suffix}"] = r["peak_mib"] / base["peak_mib"]


def targets(rows: list[dict[str, Any]], ctx: Context) -> list[dict[str, Any]]:
    """The issue's targets that this run's rows can check, each with its measured ratio."""
    by_key = {r["key"]: r for r in rows if r.get("status") == "ok"}
    found: list[dict[str, Any]] = []

    def add(name: str, value: float | None, target: str, ok: bool | None, note: str = "") -> None:
        found.append({"target": name, "value": value, "goal": target, "met": ok, "note": note})

    def speed(a: str, b: str) -> float | None:
        if a in by_key and b in by_key and "texts_per_s" in by_key[a] and "texts_per_s" in by_key[b]:
            return by_key[a]["texts_per_s"] / by_key[b]["texts_per_s"]
        return None

    v = speed("va", "bare-truncated")
    if v is not None:
        add("VA speed ÷ bare truncated", v, "≥ 0.95", v >= 0.95)
    v = speed("va", "st-mean")
    if v is not None:
        early = max(ctx.recipe_layers("va")) < ctx.n_layers - 1
        add(
            "VA speed ÷ ST mean pooling",
            v,
            "≥ 1.0" if early else "(VA reads the last layer)",
            v >= 1.0 if early else None,
        )
    if "va" in by_key and "bare-truncated" in by_key:
        v = by_key["va"]["peak_mib"] / by_key["bare-truncated"]["peak_mib"]
        add("VA peak memory ÷ bare truncated", v, "≤ 1.05", v <= 1.05)
    v = speed("aligned-wva", "metaeol")
    if v is not None:
        add("AlignedWVA(FutureEOL) speed ÷ MetaEOL", v, "≥ 6", v >= 6)
    for key in ("st-va", "langchain-va", "llamaindex-va"):
        # ValuePooling runs in sentence-transformers' fixed batches: compared with the Encoder in the same
        base = "va-fixed" if key == "st-va" and "va-fixed" in by_key else "va"
        v = speed(key, base)
        if v is not None:
            overhead = 1 - v
            add(f"adapter overhead: {key} vs Encoder {base}", overhead, "≤ 3 %", overhead <= 0.03)
    if "prompteol-ef" in by_key and "transform_share" in by_key["prompteol-ef"]:
        v = by_key["prompteol-ef"]["transform_share"]
        add("EmbedFilter transform ÷ encode time", v, "< 1 %", v < 0.01)
    if "ef-fit" in by_key:
        v = by_key["ef-fit"]["fit_first_s"]
        shape = "×".join(map(str, by_key["ef-fit"]["unembedding"]))
        add(f"EmbedFilter fit, {shape} head (s)", v, "< 10 s on GPU (152k×4096)", None)
    for key in ("budget-1024", "budget-2048", "budget-4096", "budget-2048-bs64", "batch-8"):
        v = speed(key, "batch-32")
        if v is not None:
            add(f"{key} speed ÷ fixed batch 32", v, "(measured)", None)
    return found


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return ""
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def to_markdown(report: dict[str, Any], command: str | None = None) -> str:
    """The report as markdown: the settings, the rows with their ratios, the batching and EmbedFilter
    tables and the targets."""
    meta, rows = report["meta"], report["rows"]
    lines = []
    if command:
        lines += ["```", command, "```", ""]
    lines.append(
        f"model {meta['model']} ({meta['model_type']}, {meta['n_layers']} layers, VA layers "
        f"{_span(meta['va_layers'])}); {meta['texts']} texts ({meta['source']}: {meta['texts_over_400_chars']} "
        f"over 400 characters); batch_size {meta['batch_size']}, max_tokens_per_batch "
        f"{meta['max_tokens_per_batch']}; {meta['dtype']} on {meta['device']} ({meta['device_name']}, "
        f"{meta['cpu_threads']} threads; load average {meta['load_average']['start']} → {meta['load_average']['end']}); {meta['isolation']}; {meta['date']}; torch {meta['versions']['torch']}, "
        f"transformers {meta['versions']['transformers']}"
    )
    if meta.get("resumed_rows"):
        lines.append(
            f"(rows {', '.join(meta['resumed_rows'])} measured by an earlier, interrupted run of the same command)"
        )
    lines.append("")
    main = [r for r in rows if r["group"] not in ("batching", "embed-filter")]
    if main:
        lines += [
            "| # | row | layers | texts/s | tokens/s | × bare | × truncated | peak MiB | extra MiB | peak × bare | peak × truncated |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        number = {"reference": "1–3", "naive": "4", "valuelens": "5", "adapters": "5", "baselines": "6"}
        for r in main:
            num = {"bare": "1", "bare-truncated": "2", "st-mean": "3"}.get(
                r["key"], number.get(r["group"], "")
            )
            if r["status"] != "ok":
                lines.append(
                    f"| {num} | {r['label']} (`{r['key']}`) | {r['status']}: {r['note']} | | | | | | | | |"
                )
                continue
            lines.append(
                f"| {num} | {r['label']} (`{r['key']}`) | {r['layers']} | {r['texts_per_s']:.2f} | "
                f"{r['tokens_per_s']:.0f} | {_f(r.get('x_bare'))} | {_f(r.get('x_truncated'))} | "
                f"{r['peak_mib']:.0f} | {r['extra_mib']:.0f} | {_f(r.get('peak_x_bare'))} | "
                f"{_f(r.get('peak_x_truncated'))} |"
            )
        lines.append("")
    batching = [r for r in rows if r["group"] == "batching"]
    if batching:
        lines += [
            "| batching (VA) | seconds | texts/s | tokens/s | × fixed batch 32 | peak MiB |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in batching:
            if r["status"] != "ok":
                lines.append(f"| {r['label']} | {r['status']}: {r['note']} | | | | |")
                continue
            lines.append(
                f"| {r['label']} | {r['seconds']:.1f} | {r['texts_per_s']:.2f} | {r['tokens_per_s']:.0f} | "
                f"{_f(r.get('x_batch32'))} | {r['peak_mib']:.0f} |"
            )
        lines.append("")
    for r in rows:
        if r["key"] == "ef-fit" and r["status"] == "ok":
            lines += [
                "| EmbedFilter τ=2 | W_U | load W_U s | fit, first s | fit, cached s | load saved filter s |",
                "|---|---|---:|---:|---:|---:|",
                f"| {meta['model']} | {'×'.join(map(str, r['unembedding']))} | {r['load_unembedding_s']:.2f} | "
                f"{r['fit_first_s']:.2f} | {r['fit_cached_s']:.5f} | {r['load_saved_s']:.4f} |",
                "",
            ]
        if r["key"] == "prompteol-ef" and r["status"] == "ok":
            lines += [
                f"EmbedFilter transform inside `prompteol-ef`: {r['transform_s'] * 1000:.2f} ms of "
                f"{r['seconds']:.2f} s ({100 * r['transform_share']:.3f} %)",
                "",
            ]
    if report["targets"]:
        lines += ["| target | measured | goal | met |", "|---|---:|---|---|"]
        for t in report["targets"]:
            value = t["value"]
            shown = (
                f"{100 * value:.2f} %"
                if "overhead" in t["target"] or "transform" in t["target"]
                else _f(value)
            )
            met = {True: "yes", False: "**no**", None: ""}[t["met"]]
            lines.append(f"| {t['target']} | {shown} | {t['goal']} | {met} |")
        lines.append("")
    return "\n".join(lines)
