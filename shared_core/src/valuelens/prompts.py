"""Prompt templates: PromptEOL, FutureEOL, Echo, MetaEOL, Pretended CoT, Knowledge, and custom templates.

Usage: ``resolve_prompt("prompteol").render("A cat.")`` → ``'This sentence: "A cat." means in one word:"'``.

A template holds the placeholder ``{text}`` once or more; the *pooled copy* is the last occurrence,
so ``"echo"`` (``{text} {text}``) pools over the second copy. Recipes that average over tokens pool
only over the tokens of that copy (prompt tokens are excluded); last-token recipes read the last token
of the whole prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

from valuelens.errors import ConfigError

PLACEHOLDER = "{text}"

#: Named prompts (wording of the Value Aggregation paper; Echo as in the design notes).
_PCOT = 'After thinking step by step , this sentence : "{text}" means in one word:"'
_KNOWLEDGE = (
    "The essence of a sentence is often captured by its main subjects and actions, while descriptive "
    'terms provide additional but less central details. With this in mind , this sentence : "{text}" '
    'means in one word:"'
)
#: The in-context demonstration of Jiang et al. (2023, "Scaling Sentence Embeddings with LLMs").
_DEMO_SENTENCE, _DEMO_WORD = "A jockey riding a horse.", "Equestrian"

NAMED_PROMPTS: dict[str, tuple[str, ...]] = {
    "prompteol": ('This sentence: "{text}" means in one word:"',),
    "futureeol": ('Forecasting the subsequent tokens: "{text}" in one word:"',),
    "echo": ("{text} {text}",),
    # Zhang et al. (2024), code ZBWpro/PretCoTandKE: Pretended Chain of Thought and Knowledge Enhancement
    "pcot": (_PCOT,),
    "knowledge": (_KNOWLEDGE,),
    "ck": (_KNOWLEDGE, _PCOT),  # both, one pass each, averaged
    # PromptEOL / FutureEOL after one in-context demonstration
    "prompteol-icl": (
        f'This sentence : "{_DEMO_SENTENCE}" means in one word:"{_DEMO_WORD}". '
        'This sentence : "{text}" means in one word:"',
    ),
    "futureeol-icl": (
        f'Forecasting the subsequent tokens: "{_DEMO_SENTENCE}" in one word:"{_DEMO_WORD}". '
        'Forecasting the subsequent tokens: "{text}" in one word:"',
    ),
    # the auxiliary prompt of Contrastive Prompting (Cheng et al., 2025, code zifengcheng/CP)
    "irrelevant": ('The irrelevant information of this sentence : "{text}" means in one word:"',),
    # MetaEOL (Lei et al., 2024): eight meta-task prompts, one pass each, embeddings averaged.
    "metaeol": (
        "In this task, you're presented with a text excerpt. Your task is to categorize the excerpt into a "
        "broad category such as 'Education', 'Technology', 'Health', 'Business', 'Environment', 'Politics', "
        "or 'Culture'. These categories help in organizing content for better accessibility and targeting. "
        'For this task, this sentence : "{text}" should be classified under one general category in one word:"',
        "In this task, you're given a statement and you need to determine whether it's presenting an "
        "'Opinion' or a 'Fact'. This distinction is vital for information verification, educational purposes, "
        'and content analysis. For this task, this sentence : "{text}" discriminates between opinion and fact '
        'in one word:"',
        "In this task, you're given a review from an online platform. Your task is to generate a rating for "
        "the product based on the review on a scale of 1-5, where 1 means 'extremely negative' and 5 means "
        '\'extremely positive\'. For this task, this sentence : "{text}" reflects the sentiment in one word:"',
        "In this task, you're reading a personal diary entry. Your task is to identify the predominant emotion "
        'expressed, such as joy, sadness, anger, fear, or love. For this task, this sentence : "{text}" '
        'conveys the emotion in one word:"',
        "In this task, you're presented with two sentences. Your task is to assess whether the sentences "
        "convey the same meaning. Use 'identical', 'similar', 'different', or 'unrelated' to describe the "
        'relationship. To enhance the performance of this task, this sentence : "{text}" means in one word:"',
        "In this task, you're given a sentence and a phrase. Your task is to determine if the phrase can be a "
        "contextual synonym within the given sentence. Options include 'yes', 'no', or 'partially'. To enhance "
        'the performance of this task, this sentence : "{text}" means in one word:"',
        "In this task, you're examining a news article. Your task is to extract the most critical fact from "
        'the article. For this task, this sentence : "{text}" encapsulates the key fact in one word:"',
        "In this task, you're reviewing a scientific abstract. Your task is to identify the main entities "
        "(e.g., proteins, diseases) and their relations (e.g., causes, treats). For this task, this sentence : "
        '"{text}" highlights the primary entity or relation in one word:"',
    ),
}


@dataclass(frozen=True)
class Prompt:
    """One or more templates; several templates mean one pass each, embeddings averaged (MetaEOL).

    Usage: ``Prompt("custom", ("Query: {text}",)).render("hi", 0)`` → ``'Query: hi'``.
    """

    name: str
    templates: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.templates:
            msg = f"prompt {self.name!r} has no template"
            raise ConfigError(msg)
        for template in self.templates:
            if PLACEHOLDER not in template:
                msg = f"prompt template {template!r} has no {PLACEHOLDER!r} placeholder for the text"
                raise ConfigError(msg)

    @property
    def passes(self) -> int:
        """Forward passes per text (8 for MetaEOL)."""
        return len(self.templates)

    def render(self, text: str, index: int = 0) -> tuple[str, int, int]:
        """Fill template ``index`` with ``text``; return ``(prompted, start, end)`` of the pooled copy."""
        template = self.templates[index]
        head, _, tail = template.rpartition(PLACEHOLDER)
        head = head.replace(PLACEHOLDER, text)
        start = len(head)
        return head + text + tail, start, start + len(text)

    @property
    def spec(self) -> str:
        """The string that recreates this prompt with :func:`resolve_prompt` (name or template)."""
        return self.name if self.name in NAMED_PROMPTS else self.templates[0]


def resolve_prompt(spec: str | Prompt | None) -> Prompt | None:
    """Turn ``None``, a prompt name or a custom template containing ``{text}`` into a :class:`Prompt`."""
    if spec is None or isinstance(spec, Prompt):
        return spec
    if not isinstance(spec, str):
        msg = f"prompt must be None, a name or a template string, got {type(spec).__name__}"
        raise ConfigError(msg)
    key = spec.strip().lower()
    if key in NAMED_PROMPTS:
        return Prompt(key, NAMED_PROMPTS[key])
    if PLACEHOLDER in spec:
        return Prompt("custom", (spec,))
    choices = ", ".join(repr(name) for name in NAMED_PROMPTS)
    msg = (
        f"unknown prompt {spec!r}: use None, one of {choices}, "
        f"or a custom template containing {PLACEHOLDER!r}"
    )
    raise ConfigError(msg)
